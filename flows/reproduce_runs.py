"""The run roots of a reproduction and the time each of their stages took: every system and
pre-training variant has a root of its own reading the base run's corpus through symbolic
links (a system's is `reproduction_table.system_root`), and a stage's seconds, summed over its
attempts, are recorded the first time it completes."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
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
    """Seconds per stage, kept in a JSON file: recorded the first time a stage completes, as
    the sum of every attempt at it. Stages resume from their checkpoints after a kill, so the
    attempts of a stage that is running are summed into the file every `heartbeat_seconds`
    (under `IN_PROGRESS`), and the next attempt adds to what the killed one had done."""

    IN_PROGRESS = "in_progress"

    def __init__(self, path: Path, heartbeat_seconds: float = 30.0):
        self.path, self.heartbeat_seconds = path, heartbeat_seconds
        recorded = json.loads(path.read_text()) if path.exists() else {}
        self.in_progress: dict[str, float] = recorded.pop(self.IN_PROGRESS, {})
        self.seconds: dict[str, float] = recorded
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, stage: str):
        if stage in self.seconds:  # completed before: a cache hit now, its time already recorded
            yield
            return
        before, started = self.in_progress.get(stage, 0.0), time.perf_counter()

        def elapsed() -> float:
            return before + time.perf_counter() - started

        stop = threading.Event()
        heartbeat = threading.Thread(target=self._beat, args=(stage, elapsed, stop), daemon=True)
        heartbeat.start()
        completed = False
        try:
            yield
            completed = True
        finally:
            stop.set()
            heartbeat.join()
            with self._lock:
                if completed:
                    self.seconds[stage] = elapsed()
                    self.in_progress.pop(stage, None)
                else:
                    self.in_progress[stage] = elapsed()
                self._write()

    def _beat(self, stage: str, elapsed: Callable[[], float], stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat_seconds):
            with self._lock:
                self.in_progress[stage] = elapsed()
                self._write()

    def _write(self) -> None:
        """Whole or not at all: a kill mid-write leaves the previous file."""
        recorded = {**self.seconds, **({self.IN_PROGRESS: self.in_progress} if self.in_progress else {})}
        staging = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        staging.write_text(json.dumps(recorded, indent=2))
        os.replace(staging, self.path)

    def total(self, stages: list[str]) -> float:
        return sum(self.seconds.get(stage, 0.0) for stage in stages)
