"""Live per-stage counts while a pipeline runs locally: elements each stage has read, written
and dead-lettered, with the elapsed time, on one status line on stderr.

Beam's local runner runs the whole pipeline inside `pipeline.run()`, and with its worker
processes (`multi_processing`) the counting happens outside the launching process: Beam's
counters are readable only once the run is over. So `StageTaps` adds a counting ParDo to each
stage's input, outputs and dead letters; each DoFn instance keeps its running count in a small
file of a local directory (replaced whole at every bundle's end, and every second within a
long bundle), and `showing_stage_progress` sums the files every two seconds onto a
`realm.model.progress.StatusLine`. They count elements processed so far, a retried bundle's
included; the table at the end holds Beam's committed counters.

Only the local runner gets taps: a Dataflow worker cannot write to the launching machine's
disk, and Dataflow's monitoring page shows every step's element counts already.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from realm.model.progress import StatusLine, format_duration
from realm.pipelines.dead_letters import DEAD_LETTER

POLL_EVERY_S = 2.0
FLUSH_EVERY_S = 1.0
# What a stage's counts are, in the order they are shown.
KINDS = ("in", "out", "dead")
# Runners whose workers run on the launching machine, named as `--runner` may name them
# (any case, "Runner" optional, as Beam's create_runner reads it).
LOCAL_RUNNERS = {"direct", "switchingdirect", "bundlebaseddirect", "fnapi", "testdirect"}


def runs_locally(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner or "DirectRunner"  # Beam's default
    return runner.lower().removesuffix("runner") in LOCAL_RUNNERS


class _CountElementsFn(beam.DoFn):
    """Counts the elements it sees into `<directory>/<stage>.<kind>.<instance>`, passing them
    on when `passthrough`."""

    def __init__(self, directory: str, stage: str, kind: str, passthrough: bool):
        self.directory, self.stage, self.kind, self.passthrough = directory, stage, kind, passthrough

    def setup(self):
        name = f"{self.stage}.{self.kind}.{uuid.uuid4().hex}"
        self.path = os.path.join(self.directory, name)
        self.partial = os.path.join(self.directory, f".{name}")  # hidden: the reader skips it
        self.count, self.flushed_at = 0, time.monotonic()

    def process(self, element):
        self.count += 1
        if time.monotonic() - self.flushed_at >= FLUSH_EVERY_S:
            self._flush()
        if self.passthrough:
            yield element

    def finish_bundle(self):
        self._flush()

    def _flush(self) -> None:
        with open(self.partial, "w", encoding="ascii") as handle:
            handle.write(str(self.count))
        os.replace(self.partial, self.path)
        self.flushed_at = time.monotonic()


class StageTaps:
    """Counting taps on a pipeline's stages, writing under `directory`; with None (a runner
    that is not local) they add nothing and the pipeline is exactly what was built."""

    def __init__(self, directory: str | None):
        self.directory = directory

    def entering(self, stage: str, elements: beam.PCollection) -> beam.PCollection:
        """`elements`, counted as `stage`'s input as the stage reads them: apply the stage to
        what this returns."""
        if self.directory is None:
            return elements
        return elements | f"Count{_camel(stage)}In" >> beam.ParDo(
            _CountElementsFn(self.directory, stage, "in", passthrough=True)
        )

    def leaving(self, stage: str, outputs: dict[str, beam.PCollection]) -> None:
        """Count a stage's outputs: its dead letters as dead-lettered, any other as written."""
        if self.directory is None:
            return
        for name, elements in outputs.items():
            kind = "dead" if name == DEAD_LETTER else "out"
            elements | f"Count{_camel(stage)}{_camel(name)}" >> beam.ParDo(
                _CountElementsFn(self.directory, stage, kind, passthrough=False)
            )


def read_stage_counts(directory: str) -> dict[str, dict[str, int]]:
    """{stage: {kind: count}} summed over the taps' files so far."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
    for name in os.listdir(directory):
        if not name.startswith("."):
            stage, kind, _ = name.split(".")
            with open(os.path.join(directory, name), encoding="ascii") as handle:
                counts[stage][kind] += int(handle.read())
    return dict(counts)


def format_stage_counts(name: str, elapsed_s: float, counts: dict[str, dict[str, int]], stage_order: list[str]) -> str:
    """`prepare 0m42s | read 1,200 out, 3 dead | chunk 1,200 in, 4,512 out`: the stages that
    have counted anything, in `stage_order` (others after it), their zero counts left out."""
    stages = [s for s in stage_order if s in counts] + sorted(set(counts) - set(stage_order))
    shown = [(stage, ", ".join(f"{counts[stage][k]:,} {k}" for k in KINDS if counts[stage][k])) for stage in stages]
    return " | ".join([f"{name} {format_duration(elapsed_s)}", *(f"{stage} {text}" for stage, text in shown if text)])


@contextlib.contextmanager
def showing_stage_progress(
    name: str, directory: str | None, stage_order: list[str], line: StatusLine | None = None
) -> Iterator[None]:
    """While the block runs, the taps' counts under `directory` on `line` (default: stderr)
    every POLL_EVERY_S, and the final counts when it ends; nothing when `directory` is None."""
    if directory is None:
        yield
        return
    line = line or StatusLine()
    started = line.clock()

    def text() -> str:
        return format_stage_counts(name, line.clock() - started, read_stage_counts(directory), stage_order)

    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_EVERY_S):
            line.update(text())

    poller = threading.Thread(target=poll, name=f"realm-{name}-progress", daemon=True)
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join()
        line.close(text())


def _camel(name: str) -> str:
    return name.title().replace("_", "").replace("-", "")
