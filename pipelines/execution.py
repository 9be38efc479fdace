"""Running a realm pipeline: local defaults, live progress, the run summary, a stage on its own.

Without `--runner`, pipelines run on Beam's local runner with 2 worker processes (this
project's default machine). While a local run goes on, each stage's counts so far show on
stderr (`realm.pipelines.progress`). After the run the Beam counters under `realm.<stage>` are
printed as one table and written to `<output>/summary/<name>.json`, so a user sees how many
records each stage kept, skipped and dead-lettered without opening the Parquet files.
Beam's local runner leaves directories in the system temp folder after every pipeline (its
job server's `beam-temp*`, the staged dependencies' `tmp*`); they go to a private folder
instead, removed when the pipeline ends.

A stage run on its own (`python -m realm.pipelines.chunk ...`) builds into a staging directory
and swaps its artifacts in only once it has succeeded (`realm.pipelines.staging`), as
`realm prepare` does: a run that fails leaves its output as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from realm.pipelines.artifacts import artifact_pattern, write_stage_outputs
from realm.pipelines.dead_letters import METRIC_NAMESPACE_PREFIX
from realm.pipelines.options import RealmOptions, require
from realm.pipelines.progress import StageTaps, runs_locally, showing_stage_progress
from realm.pipelines.staging import move_into_place, replace_shards, staged_output, write_manifests
from realm.schemas.leftovers import owner_pid, process_running

# A pipeline's private temp folder: `realm-beam-<random>.tmp-<pid>` (`realm.schemas.leftovers`).
TEMP_PREFIX = "realm-beam-"
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


def require_matches(inputs: list[tuple[str, str | None, str]], output: str) -> None:
    """FileNotFoundError naming the flag and its value for the first of `inputs` (flag, value
    given, the pattern it stands for) whose pattern matches no file, or matches a local directory
    (Beam's local file system lists one as a file, and reading it fails mid-pipeline); None values
    are not checked."""
    for flag, given, pattern in inputs:
        if not given:
            continue
        matched = FileSystems.match([pattern])[0].metadata_list
        if not matched:
            looked_for = "" if pattern == given else f" (looked for {pattern})"
            raise FileNotFoundError(f"{flag} {given}: no file matches it{looked_for}; {output} is unchanged")
        if directory := next((m.path for m in matched if os.path.isdir(m.path)), None):
            raise FileNotFoundError(
                f"{flag} {given}: {directory} is a directory; name its files ({directory.rstrip('/')}/* or "
                f"{directory.rstrip('/')}/**); {output} is unchanged"
            )


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
    """Python's temp folder is a fresh one of its own (yielded) until the block ends, then
    removed; one a killed pipeline left (its process gone) is removed first."""
    default = Path(tempfile.gettempdir())
    for leftover in default.glob(f"{TEMP_PREFIX}*"):
        if (pid := owner_pid(leftover.name)) is not None and not process_running(pid):
            shutil.rmtree(leftover, ignore_errors=True)
    # Beam makes its folders with tempfile.mkdtemp() and no `dir`, so redirecting the
    # process's default is the one handle; a pipeline run is the only work of its process
    # (the CLI, or the prepare task before any other stage starts).
    folder, previous = tempfile.mkdtemp(prefix=TEMP_PREFIX, suffix=f".tmp-{os.getpid()}"), tempfile.tempdir
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


def write_json(path: str, record: dict) -> None:
    """`record` as an indented JSON file at `path`, a local path or a bucket's."""
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(record, indent=2).encode("utf-8"))


def write_summary(output: str, name: str, counts: dict[str, dict[str, int]]) -> None:
    with FileSystems.create(summary_path(output, name)) as handle:
        handle.write(json.dumps(counts, indent=2, sort_keys=True).encode("utf-8"))


def print_summary(
    output: str, name: str, counts: dict[str, dict[str, int]], stage_order: list[str], kept: list[str]
) -> None:
    """The per-stage counts, and which artifacts held the rows built already and were left as they were."""
    print(f"realm {name}: per-stage counts (also in {summary_path(output, name)})")
    print(format_summary(counts, stage_order))
    if kept:
        print(f"realm {name}: {', '.join(kept)} held these rows already, and were left as they were")


def run_single_stage(argv, stage: str, required_flags: list[str], output_schemas: dict, build_outputs):
    """Run one stage on its own: `build_outputs(pipeline, options)` returns the stage's outputs
    dict, written under `--output` once the pipeline has succeeded: each main artifact replaced
    whole, with a manifest, unless it holds the same rows already; the stage's dead letters
    replacing its earlier ones (`dead_letter/<stage>-*`).
    `required_flags` name the input artifacts; one that holds no Parquet file stops the stage first."""
    options = PipelineOptions(argv).view_as(RealmOptions)
    require(options, "output", *required_flags)
    given = {flag: getattr(options, flag) for flag in required_flags}
    require_matches([(f"--{flag}", path, artifact_pattern(path)) for flag, path in given.items()], options.output)
    with staged_output(options.output, stage) as staging:

        def build(pipeline, taps):
            outputs = build_outputs(pipeline, options)
            taps.leaving(stage, outputs)
            write_stage_outputs(outputs, staging, stage, output_schemas)

        counts = execute(build, argv, stage, [stage])
        write_summary(staging, stage, counts)
        write_manifests(staging, list(output_schemas))
        kept = move_into_place(staging, options.output, output_schemas, [summary_file(stage)])
        replace_shards(staging, options.output, "dead_letter", stage)
    print_summary(options.output, stage, counts, [stage], kept)
    return counts
