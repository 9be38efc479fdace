"""What every trainer (ICT, pre-training, the reader's warm-up and fine-tuning) does around its
steps: start seeded, from the newest checkpoint under its root or from fresh components;
restore the optimizer, scheduler and RNG streams; step to the end, reporting every `log_every`
steps and checkpointing every `checkpoint_every` (both at the last step); publish checkpoints.

A trainer subclasses `Trainer` and starts in the order the resume handshake of
`realm.model.networks.checkpoint` needs: components first, then the optimizer and scheduler
built over them exactly as in a fresh run, then their state and the RNG streams:

    components = self._start_components(build_fresh)   # the checkpoint's, else build_fresh()
    optimizer = build_optimizer([...components in a fixed order...], learning_rate)
    extra = self._restore(optimizer, build_scheduler(optimizer, ...), total_steps)  # {} when fresh

It defines `train_step` (one update; returns `Progress.update`'s dict) and what its
checkpoints hold (`_checkpoint_components`, `_checkpoint_extra`, `_checkpoint_uses`).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from transformers import PreTrainedModel

from realm.model.networks.checkpoint import (
    TrainingState,
    latest_checkpoint,
    load_components,
    restore_training_state,
    save_checkpoint,
)
from realm.model.networks.config import set_transformers_verbosity_error
from realm.model.networks.device import select_device
from realm.model.training.progress import Progress, ProgressFn

log = logging.getLogger(__name__)


class LoopSettings(Protocol):
    """What `Trainer` reads of a stage's settings (`realm.model.training.stage_settings`)."""

    checkpoint_every: int
    log_every: int
    keep_checkpoints: int


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) before building fresh components."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class ResumePoint:
    """The newest checkpoint under a root, its components loaded (step 2 is `restore`)."""

    checkpoint: Path
    components: dict[str, PreTrainedModel]

    def restore(
        self,
        optimizer: torch.optim.Optimizer | None,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    ) -> TrainingState:
        """Load optimizer/scheduler state and the RNG streams; call after building the
        optimizer and scheduler over `components` (and after anything else that draws random
        numbers at start-up), so the next step draws what an uninterrupted run would have."""
        return restore_training_state(self.checkpoint, optimizer, scheduler)


def latest_resume_point(checkpoint_root: str | os.PathLike, device: torch.device | None = None) -> ResumePoint | None:
    """The newest complete checkpoint under `checkpoint_root` with its components on
    `device`, or None when there is none (a fresh run)."""
    checkpoint = latest_checkpoint(checkpoint_root)
    if checkpoint is None:
        return None
    log.info("resuming from %s", checkpoint)
    return ResumePoint(checkpoint, load_components(checkpoint, device))


class Trainer:
    """Start, resume, the step loop and checkpoints (module docstring); subclasses add the model."""

    def __init__(self, checkpoint_root: str | os.PathLike, config: LoopSettings, device: torch.device | None, seed: int):
        set_transformers_verbosity_error()
        self.checkpoint_root, self.config, self.seed = str(checkpoint_root), config, seed
        self.device = device or select_device()
        self.resume: ResumePoint | None = None

    def _start_components(self, build_fresh: Callable[[], dict[str, PreTrainedModel]]) -> dict[str, PreTrainedModel]:
        """The components to train: the newest checkpoint's, else `build_fresh()`, called after
        seeding, so a fresh start is a function of the seed."""
        seed_everything(self.seed)
        self.resume = latest_resume_point(self.checkpoint_root, self.device)
        return self.resume.components if self.resume else build_fresh()

    def _restore(
        self, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler, total_steps: int
    ) -> dict:
        """Take `optimizer` and `scheduler` (built over the components), load the resumed
        checkpoint's state into them and restore its RNG streams; call after everything else
        that draws random numbers at start-up. Returns the checkpoint's `extra` ({} when fresh)."""
        self.optimizer, self.scheduler, self.total_steps = optimizer, scheduler, total_steps
        state = self.resume.restore(optimizer, scheduler) if self.resume else None
        self.step: int = state.step if state else 0
        self.last_checkpoint: str | None = str(self.resume.checkpoint) if self.resume else None
        self.meter = Progress(total_steps, start_step=self.step)
        return state.extra if state else {}

    def train_step(self) -> dict:
        """One optimizer step; returns `self.meter.update`'s dict."""
        raise NotImplementedError

    def _checkpoint_components(self) -> dict[str, PreTrainedModel]:
        raise NotImplementedError

    def _checkpoint_extra(self) -> dict:
        """The trainer's own resumable state, saved beside the components."""
        return {}

    def _checkpoint_uses(self) -> Iterable[str | None]:
        """Published directories a checkpoint depends on, kept as long as it is (`realm.model.publish.prune`)."""
        return ()

    def save_checkpoint(self) -> str:
        """Publish `<checkpoint_root>/<step>/`: components, optimizer, scheduler, RNG and extra state."""
        published = save_checkpoint(
            self.checkpoint_root, self.step, self._checkpoint_components(), self.optimizer, self.scheduler,
            extra=self._checkpoint_extra(), keep=self.config.keep_checkpoints, uses=self._checkpoint_uses(),
        )
        self.last_checkpoint = str(published)
        return self.last_checkpoint

    def _checkpoint(self) -> dict:
        """Publish a checkpoint; returns what it adds to the step's report (fine-tuning validates)."""
        self.save_checkpoint()
        return {}

    def _train(
        self,
        progress: ProgressFn | None,
        before_step: Callable[[], None] | None = None,
        after_step: Callable[[], None] | None = None,
    ) -> None:
        """Step to `total_steps`: a checkpoint every `checkpoint_every` steps and at the last; a
        report every `log_every` steps, at the last and with whatever a checkpoint added. A
        fresh run with no step to take still publishes its starting components."""
        while self.step < self.total_steps:
            if before_step is not None:
                before_step()
            metrics = self.train_step()
            last = self.step == self.total_steps
            checkpointed = self._checkpoint() if last or self.step % self.config.checkpoint_every == 0 else {}
            if progress is not None and (last or self.step % self.config.log_every == 0 or checkpointed):
                progress({**metrics, **checkpointed})
            if after_step is not None:
                after_step()
        if self.last_checkpoint is None:
            self._checkpoint()
