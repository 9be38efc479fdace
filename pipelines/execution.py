"""Running a realm pipeline: local defaults, clean artifact directories, live progress, the run summary.

Without `--runner`, pipelines run on Beam's local runner with 2 worker processes (this
project's default machine). While a local run goes on, each stage's counts so far show on
stderr (`realm.pipelines.progress`). After the run the Beam counters under `realm.<stage>` are
printed as one table and written to `<output>/summary/<name>.json`, so a user sees how many
records each stage kept, skipped and dead-lettered without opening the Parquet files.
Beam's local runner leaves directories in the system temp folder after every pipeline (its
job server's `beam-temp*`, the staged dependencies' `tmp*`); they go to a private folder
instead, removed when the pipeline ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from realm.pipelines.artifacts import write_stage_outputs
from realm.pipelines.dead_letters import METRIC_NAMESPACE_PREFIX
from realm.pipelines.options import RealmOptions, require
from realm.pipelines.progress import StageTaps, runs_locally, showing_stage_progress

LOG = logging.getLogger(__name__)
LOCAL_RUNNER_FLAGS = [
    "--direct_num_workers=2",
    "--direct_running_mode=multi_processing",
    # Local worker processes re-log every unknown (realm) flag and their start-up notices as
    # warnings; errors still come through.
    "--default_sdk_harness_log_level=ERROR",
]


def with_local_defaults(argv: list[str]) -> list[str]:
    """`argv` plus the 2-worker local runner flags unless a runner or worker count was chosen."""
    chosen = any(a.startswith(("--runner", "--direct_num_workers", "--direct_running_mode")) for a in argv)
    return list(argv) if chosen else [*argv, *LOCAL_RUNNER_FLAGS]


def clear_artifact(output: str, name: str, file_prefix: str | None = None) -> None:
    """Delete the shards a previous run left in `<output>/<name>/` (only `file_prefix`-* if given),
    so a re-run with a different shard count never mixes old and new files."""
    pattern = FileSystems.join(output, name, f"{file_prefix}-*" if file_prefix else "*")
    matches = FileSystems.match([pattern])[0].metadata_list
    if matches:
        LOG.info("removing %d old file(s) matching %s", len(matches), pattern)
        FileSystems.delete([m.path for m in matches])


def stage_counters(result) -> dict[str, dict[str, int]]:
    """{stage: {counter: value}} for every `realm.<stage>` counter of a finished pipeline."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for metric in result.metrics().query()["counters"]:
        namespace = metric.key.metric.namespace
        if namespace.startswith(METRIC_NAMESPACE_PREFIX):
            value = metric.committed if metric.committed is not None else metric.attempted
            stage = namespace[len(METRIC_NAMESPACE_PREFIX) :]
            counts[stage][metric.key.metric.name] = counts[stage].get(metric.key.metric.name, 0) + int(value)
    return {stage: dict(sorted(names.items())) for stage, names in counts.items()}


def format_summary(counts: dict[str, dict[str, int]], stage_order: list[str]) -> str:
    stages = [s for s in stage_order if s in counts] + sorted(set(counts) - set(stage_order))
    lines = [f"{'stage':<10} {'counter':<40} {'count':>10}"]
    for stage in stages:
        for name, value in counts[stage].items():
            lines.append(f"{stage:<10} {name:<40} {value:>10}")
    return "\n".join(lines)


@contextlib.contextmanager
def private_temp_folder() -> Iterator[str]:
    """Python's temp folder is a fresh one of its own (yielded) until the block ends, then removed."""
    # Beam makes its folders with tempfile.mkdtemp() and no `dir`, so redirecting the
    # process's default is the one handle; a pipeline run is the only work of its process
    # (the CLI, or the prepare task before any other stage starts).
    folder, previous = tempfile.mkdtemp(prefix="realm-beam-"), tempfile.tempdir
    tempfile.tempdir = folder
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(folder, ignore_errors=True)


def execute(build, argv: list[str], name: str, stage_order: list[str]) -> dict[str, dict[str, int]]:
    """Build with `build(pipeline, taps)` (`realm.pipelines.progress.StageTaps`), run to
    completion showing the stages' progress as `name`; the per-stage counts (`stage_counters`)."""
    with private_temp_folder() as temp_folder:
        options = PipelineOptions(with_local_defaults(argv))
        pipeline = beam.Pipeline(options=options)
        progress_dir = tempfile.mkdtemp(prefix="progress-", dir=temp_folder) if runs_locally(options) else None
        build(pipeline, StageTaps(progress_dir))
        with showing_stage_progress(name, progress_dir, stage_order):
            result = pipeline.run()
            result.wait_until_finish()
        return stage_counters(result)


def summary_file(name: str) -> str:
    """Where a pipeline's counts are saved, relative to its output."""
    return f"summary/{name}.json"


def summary_path(output: str, name: str) -> str:
    return FileSystems.join(output, summary_file(name))


def write_summary(output: str, name: str, counts: dict[str, dict[str, int]]) -> None:
    with FileSystems.create(summary_path(output, name)) as handle:
        handle.write(json.dumps(counts, indent=2, sort_keys=True).encode("utf-8"))


def print_summary(output: str, name: str, counts: dict[str, dict[str, int]], stage_order: list[str]) -> None:
    print(f"realm {name}: per-stage counts (also in {summary_path(output, name)})")
    print(format_summary(counts, stage_order))


def run_pipeline(
    build, argv: list[str], output: str, name: str, stage_order: list[str]
) -> dict[str, dict[str, int]]:
    """Build with `build(pipeline, taps)`, run to completion, save and print the per-stage counts."""
    counts = execute(build, argv, name, stage_order)
    write_summary(output, name, counts)
    print_summary(output, name, counts, stage_order)
    return counts


def run_single_stage(argv, stage: str, required_flags: list[str], output_schemas: dict, build_outputs):
    """Run one stage on its own: `build_outputs(pipeline, options)` returns the stage's outputs
    dict, which is written to `--output` (main artifacts replaced, dead letters as `<stage>-*`)."""
    options = PipelineOptions(argv).view_as(RealmOptions)
    require(options, "output", *required_flags)
    for name in output_schemas:
        clear_artifact(options.output, name)
    clear_artifact(options.output, "dead_letter", stage)

    def build(pipeline, taps):
        outputs = build_outputs(pipeline, options)
        taps.leaving(stage, outputs)
        write_stage_outputs(outputs, options.output, stage, output_schemas)

    return run_pipeline(build, argv, options.output, stage, [stage])
