"""Training checkpoints `checkpoints/<step>/`: one `save_pretrained` directory per component,
plus optimizer, scheduler, step and RNG state for exact resume, published by rename with a
manifest (`realm.model.publish`). `latest_checkpoint` and `best_checkpoint` return the newest
checkpoint whose files match its manifest, so a run whose newest checkpoint was damaged
resumes from the one before it.

Paths a checkpoint records (`paths`: the index it trains against, the checkpoint its stage
started from) are stored relative to the checkpoint's own directory and resolved against it
on read, so a run folder copied or moved elsewhere names what is inside the copy. A stage's
`inputs` (what it was trained on, `realm.model.training.stage_inputs`) go into the manifest,
where they are read without loading the training state.

Resume order matters: `load_components` builds the models from the checkpoint, the caller
builds its optimizer/scheduler over them exactly as before, then `restore_training_state`
loads their state and the RNG streams (python, numpy, torch, CUDA), so the next step draws
the same dropout masks and batches an uninterrupted run would have.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from realm.model.networks.config import load_pretrained, set_transformers_verbosity_error
from realm.model.networks.encoder import KnowledgeAugmentedEncoder
from realm.model.publish import MANIFEST_FILE, latest_verified, publish, read_manifest, staging_dir
from realm.model.networks.reader import Reader
from realm.model.networks.retriever import Embedder

TRAINING_STATE_FILE = "training_state.pt"
# Under a checkpoint root, where a validated run publishes its best checkpoint.
BEST_DIR = "best"
# Where a checkpoint's `extra` keeps a moving average of the weights
# (`realm.model.training.weight_average`): such a checkpoint's components are the trained
# weights, and the average is what its run validated and published in best/.
WEIGHT_AVERAGE_EXTRA = "weight_average"

COMPONENT_CLASSES: dict[str, type[PreTrainedModel]] = {
    "query_embedder": Embedder,
    "doc_embedder": Embedder,
    "encoder": KnowledgeAugmentedEncoder,
    "reader": Reader,
}


# A recorded path: one path, a list of them, or None.
RecordedPath = str | os.PathLike | list[str | os.PathLike] | None


@dataclass
class TrainingState:
    step: int
    extra: dict = field(default_factory=dict)  # the caller's own resumable state (data position, ...)
    paths: dict[str, RecordedPath] = field(default_factory=dict)  # `save_checkpoint`'s, resolved


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    components: Mapping[str, PreTrainedModel],
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    extra: dict | None = None,
    keep: int | None = None,
    uses: Iterable[str | os.PathLike | None] = (),
    paths: Mapping[str, RecordedPath] | None = None,
    inputs: dict | None = None,
) -> Path:
    """Publish `<root>/<step>/` atomically; `components` maps names in COMPONENT_CLASSES to
    models. `keep`: the newest checkpoints to keep (None: all); `uses`: published step
    directories this checkpoint depends on (its index, the checkpoint its stage started
    from; None entries are skipped), kept whatever their age (`realm.model.publish.prune`).
    `paths` are stored relative to `<root>/<step>/` (`checkpoint_paths` resolves them);
    `inputs`, plain JSON, go into the manifest (`checkpoint_inputs`)."""
    unknown = set(components) - set(COMPONENT_CLASSES)
    if unknown:
        raise ValueError(f"unknown components {sorted(unknown)}; expected some of {list(COMPONENT_CLASSES)}")
    staging = staging_dir(root, step)
    for name, model in components.items():
        model.save_pretrained(staging / name)
    state = {
        "step": step,
        "components": list(components),  # load order = save order, so optimizer param order matches
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": _capture_rng(),
        "extra": extra or {},
        "paths": {name: _relative(value, Path(root) / str(step)) for name, value in (paths or {}).items()},
    }
    torch.save(state, staging / TRAINING_STATE_FILE)
    metadata = None if inputs is None else {"inputs": inputs}
    return publish(staging, root, step, keep, uses=[path for path in uses if path is not None], metadata=metadata)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest `<root>/<step>/` whose files match its manifest, or None; staging dirs never
    count, and a damaged newer one is skipped with a warning naming the file. A checkpoint
    written before manifests existed counts when it holds its training state (written last)."""
    return latest_verified(root, legacy_marker=TRAINING_STATE_FILE)


def best_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint a validated run publishes: its best one (`<root>/best/<step>/`), else its newest."""
    return latest_checkpoint(Path(root) / BEST_DIR) or latest_checkpoint(root)


def load_components(path: str | os.PathLike, device: torch.device | None = None) -> dict[str, PreTrainedModel]:
    """Every component saved in checkpoint `path`, by name (quietly: transformers' load
    warnings and progress bars are not a user's business)."""
    set_transformers_verbosity_error()
    path = Path(path)
    names = torch.load(path / TRAINING_STATE_FILE, weights_only=True)["components"]
    components = {name: load_pretrained(COMPONENT_CLASSES[name], path / name) for name in names}
    return {name: model.to(device) for name, model in components.items()} if device else components


def checkpoint_extra(path: str | os.PathLike) -> dict:
    """The caller's `extra` state saved with checkpoint `path` (no models or optimizer loaded)."""
    return torch.load(Path(path) / TRAINING_STATE_FILE, weights_only=True)["extra"]


def checkpoint_paths(path: str | os.PathLike) -> dict[str, RecordedPath]:
    """The `paths` saved with checkpoint `path`, resolved against where it is now ({} for a
    checkpoint written before paths were recorded)."""
    state = torch.load(Path(path) / TRAINING_STATE_FILE, weights_only=True)
    return _resolved(state.get("paths", {}), path)


def checkpoint_inputs(path: str | os.PathLike) -> dict | None:
    """The `inputs` checkpoint `path` records in its manifest (None: it records none)."""
    if not (Path(path) / MANIFEST_FILE).is_file():
        return None
    return read_manifest(path).get("inputs")


def restore_training_state(
    path: str | os.PathLike,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> TrainingState:
    """Load optimizer/scheduler state and the RNG streams saved with checkpoint `path`."""
    state = torch.load(Path(path) / TRAINING_STATE_FILE, weights_only=True)
    for name, target in (("optimizer", optimizer), ("scheduler", scheduler)):
        if target is not None:
            if state[name] is None:
                raise ValueError(f"{path}: checkpoint holds no {name} state")
            try:
                target.load_state_dict(state[name])
            except ValueError as error:  # e.g. parameter groups of another size
                raise ValueError(
                    f"{path}: its {name} state does not fit this run's model ({error}); was it saved by another "
                    "model preset or an older realm? Resume with the settings it was saved with, or start a new run root"
                ) from error
    _restore_rng(state["rng"])
    return TrainingState(step=state["step"], extra=state["extra"], paths=_resolved(state.get("paths", {}), path))


def _relative(value: RecordedPath, directory: Path) -> RecordedPath:
    if value is None:
        return None
    if isinstance(value, list):
        return [_relative(item, directory) for item in value]
    return os.path.relpath(os.path.abspath(value), os.path.abspath(directory))


def _resolved(paths: dict[str, RecordedPath], directory: str | os.PathLike) -> dict[str, RecordedPath]:
    def resolve(value: RecordedPath) -> RecordedPath:
        if value is None:
            return None
        if isinstance(value, list):
            return [resolve(item) for item in value]
        return os.path.normpath(os.path.join(os.path.abspath(directory), value))

    return {name: resolve(value) for name, value in paths.items()}


def _capture_rng() -> dict:
    # Stored as tensors and plain values so the file loads with weights_only=True.
    version, mt_state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": [version, list(mt_state), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached_gaussian],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _restore_rng(rng: dict) -> None:
    version, mt_state, gauss = rng["python"]
    random.setstate((version, tuple(mt_state), gauss))
    kind, keys, pos, has_gauss, cached_gaussian = rng["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
