"""What every trainer (ICT, pre-training, the reader's warm-up and fine-tuning) does around its
steps: start seeded, from the newest checkpoint under its root or from fresh components;
restore the optimizer, scheduler and RNG streams; step to the end, reporting every `log_every`
steps and checkpointing every `checkpoint_every` (both at the last step); publish checkpoints.

A trainer subclasses `Trainer` and starts in the order the resume handshake of
`realm.model.networks.checkpoint` needs: components first, then the optimizer and scheduler
built over them exactly as in a fresh run, then their state and the RNG streams:

    components = self._start_components(build_fresh, inputs)  # the checkpoint's, else build_fresh()
    optimizer = build_optimizer([...components in a fixed order...], learning_rate)
    state = self._restore(optimizer, build_scheduler(optimizer, ...), total_steps)  # step 0 when fresh

It defines `train_step` (one update; returns `realm.model.progress.Progress.update`'s dict)
and what its checkpoints hold (`_checkpoint_components`, `_checkpoint_extra`,
`_checkpoint_paths`, `_checkpoint_uses`).

On several processes (`realm.model.training.distributed`) every rank starts from the checkpoint
rank 0 picked (after rank 0 alone set aside a stage trained on other inputs) and takes rank 0's
weights; rank 0 alone validates, reports and publishes checkpoints, which hold the plain
modules, so a checkpoint resumes on any number of processes. `follow` is the other ranks' run.

A stage resumes only on the inputs it was trained on (`realm.model.training.stage_inputs`,
recorded in every checkpoint's manifest). When they changed (a new question file, another
starting checkpoint or index, other settings), the stage's checkpoint root is set aside whole,
as `<root>.superseded-<n>` beside it (at the same depth, so the relative paths its manifests
use still hold), a new stage starts in the root, and a warning says which inputs changed.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from transformers import PreTrainedModel

from realm.model.networks.checkpoint import (
    RecordedPath,
    TrainingState,
    checkpoint_inputs,
    latest_checkpoint,
    load_components,
    restore_training_state,
    save_checkpoint,
)
from realm.model.networks.config import set_transformers_verbosity_error
from realm.model.networks.device import select_device
from realm.model.networks.host_memory import reuse_freed_memory
from realm.model.progress import Progress
from realm.model.training.distributed import ONE_PROCESS, World, barrier, broadcast, same_parameters, seed_step
from realm.model.training.stage_inputs import changed_inputs

log = logging.getLogger(__name__)

# A trainer calls this every `log_every` steps with `realm.model.progress.Progress.update`'s dict.
ProgressFn = Callable[[dict], None]


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


def _unused_sibling(path: Path, label: str) -> Path:
    """`<path>.<label>-<n>` for the first n that names nothing yet."""
    for number in itertools.count(1):
        sibling = path.with_name(f"{path.name}.{label}-{number}")
        if not sibling.exists():
            return sibling


class Trainer:
    """Start, resume, the step loop and checkpoints (module docstring); subclasses add the model."""

    def __init__(
        self, checkpoint_root: str | os.PathLike, config: LoopSettings, device: torch.device | None, seed: int,
        world: World = ONE_PROCESS,
    ):
        set_transformers_verbosity_error()
        # Steps allocate and free the same large buffers again and again (gradients,
        # activations): keep them mapped rather than fault fresh pages in on every step.
        reuse_freed_memory()
        self.checkpoint_root, self.config, self.seed = str(checkpoint_root), config, seed
        self.world = world
        self.device = world.device(device or select_device())
        self.resume: ResumePoint | None = None

    def _start_components(
        self, build_fresh: Callable[[], dict[str, PreTrainedModel]], inputs: dict
    ) -> dict[str, PreTrainedModel]:
        """The components to train: the newest checkpoint's if it was trained on `inputs`
        (`stage_inputs`), else `build_fresh()`, called after seeding, so a fresh start is a
        function of the seed."""
        seed_everything(self.seed)
        self.inputs = inputs
        if self.world.leader:
            self._set_aside_a_stage_trained_on_other_inputs()
        checkpoint = broadcast(self.world, latest_checkpoint(self.checkpoint_root) if self.world.leader else None)
        if checkpoint is not None:
            log.info("resuming from %s", checkpoint)
        self.resume = None if checkpoint is None else ResumePoint(checkpoint, load_components(checkpoint, self.device))
        return self.resume.components if self.resume else build_fresh()

    def _set_aside_a_stage_trained_on_other_inputs(self) -> None:
        newest = latest_checkpoint(self.checkpoint_root)
        if newest is None:
            return
        recorded = checkpoint_inputs(newest)
        changes = ["none recorded: an older realm wrote it"] if recorded is None else changed_inputs(recorded, self.inputs, type(self.config))
        if not changes:
            return
        root = Path(self.checkpoint_root)
        aside = _unused_sibling(root, "superseded")
        os.rename(root, aside)
        log.warning(
            "%s was trained on other inputs (%s): a new stage starts there; the previous one is kept in %s",
            root, "; ".join(changes), aside,
        )

    def _restore(
        self, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler, total_steps: int
    ) -> TrainingState:
        """Take `optimizer` and `scheduler` (built over the components), load the resumed
        checkpoint's state into them and restore its RNG streams; call after everything else
        that draws random numbers at start-up. Returns the checkpoint's state (step 0, no
        extra and no paths when fresh)."""
        self.optimizer, self.scheduler, self.total_steps = optimizer, scheduler, total_steps
        state = self.resume.restore(optimizer, scheduler) if self.resume else TrainingState(step=0)
        self.step: int = state.step
        self.last_checkpoint: str | None = str(self.resume.checkpoint) if self.resume else None
        self.meter = Progress(total_steps, start_step=self.step)
        same_parameters(self.world, [p for group in optimizer.param_groups for p in group["params"]])
        return state

    def train_step(self) -> dict:
        """One optimizer step; returns `self.meter.update`'s dict."""
        raise NotImplementedError

    def _checkpoint_components(self) -> dict[str, PreTrainedModel]:
        raise NotImplementedError

    def _checkpoint_extra(self) -> dict:
        """The trainer's own resumable state, saved beside the components."""
        return {}

    def _checkpoint_paths(self) -> Mapping[str, RecordedPath]:
        """Paths the trainer's resumable state names (stored relative to the checkpoint)."""
        return {}

    def _checkpoint_uses(self) -> Iterable[str | None]:
        """Published directories a checkpoint depends on, kept as long as it is (`realm.model.publish.prune`)."""
        return ()

    def save_checkpoint(self) -> str:
        """Publish `<checkpoint_root>/<step>/`: components, optimizer, scheduler, RNG, the
        trainer's own state and the stage's inputs. Rank 0 alone writes."""
        if not self.world.leader:
            return self.last_checkpoint
        published = save_checkpoint(
            self.checkpoint_root, self.step, self._checkpoint_components(), self.optimizer, self.scheduler,
            extra=self._checkpoint_extra(), keep=self.config.keep_checkpoints, uses=self._checkpoint_uses(),
            paths=self._checkpoint_paths(), inputs=self.inputs,
        )
        self.last_checkpoint = str(published)
        return self.last_checkpoint

    def _validate(self) -> dict:
        """What a checkpoint adds to its step's report, computed before it is published
        (fine-tuning answers its validation questions)."""
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
            barrier(self.world)
            if before_step is not None:
                before_step()
            seed_step(self.world, self.seed, self.step)
            metrics = self.train_step()
            last = self.step == self.total_steps
            due = last or self.step % self.config.checkpoint_every == 0
            validated = self._validate() if due and self.world.leader else {}
            # Reported before the checkpoint is published: a process killed between the two
            # redoes the step and reports it again, where the other order lost its report.
            if progress is not None and (last or self.step % self.config.log_every == 0 or validated):
                progress({**metrics, **validated})
            if due:
                self.save_checkpoint()
            if after_step is not None:
                after_step()
        if self.last_checkpoint is None and self.world.leader:
            self._validate()
            self.save_checkpoint()

    def follow(self) -> None:
        """A rank > 0's part in the stage (`distributed.follow`): the same steps, nothing reported or written."""
        self._train(None)
