"""The run roots of a reproduction and the time each of their stages took: every system and
pre-training variant has a root of its own reading the base run's corpus through symbolic
links, and a stage's seconds are recorded the first time it completes."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from realm.flows.params import RunParams

SHARED_ARTIFACTS = ("documents", "blocks", "block_entities", "pretrain_examples", "ict_examples")


def linked_run(root: Path, base: RunParams) -> RunParams:
    """A run root that reads `base`'s prepared corpus through symbolic links, relative ones, so
    the reproduction's folder can be copied or moved whole."""
    root.mkdir(parents=True, exist_ok=True)
    for name in SHARED_ARTIFACTS:
        source, link = Path(base.output) / name, root / name
        if source.exists() and not link.exists():
            os.symlink(os.path.relpath(source.resolve(), root.resolve()), link, target_is_directory=True)
    return base.model_copy(update={"output": str(root)})


class StageTimer:
    """Seconds per stage, kept in a JSON file: recorded the first time a stage completes."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}

    @contextlib.contextmanager
    def __call__(self, stage: str):
        started = time.perf_counter()
        yield
        self.seconds.setdefault(stage, time.perf_counter() - started)
        self.path.write_text(json.dumps(self.seconds, indent=2))

    def total(self, stages: list[str]) -> float:
        return sum(self.seconds.get(stage, 0.0) for stage in stages)
