"""The corpus-preparation stage as a Prefect task: launches the Beam pipeline through its `run(argv)`."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact

from realm.flows.caching import cached_in_run
from realm.schemas.run_layout import RunLayout
from realm.flows.params import PrepareParams, RunParams


@task(name="realm-prepare-corpus")
def prepare_corpus(output: str, params: PrepareParams, seed: int) -> dict[str, dict[str, int]]:
    """Run `realm.pipelines.prepare` (Beam) and publish its per-stage counts."""
    from realm.pipelines import prepare

    argv = ["--corpus", params.corpus, "--output", output, "--seed", str(seed)]
    if params.input:
        argv += ["--input", params.input]
    if params.limit is not None:
        argv += ["--limit", str(params.limit)]
    get_run_logger().info("running Beam pipeline: prepare %s", " ".join(argv + params.beam_args))
    counts = prepare.run(argv + params.beam_args)
    create_table_artifact(
        key="realm-prepare-counts",
        table=[{"stage": s, "counter": n, "count": v} for s, names in counts.items() for n, v in names.items()],
        description=f"Beam counters of the corpus preparation under {output}",
    )
    return counts


@flow(name="realm-prepare")
def realm_prepare(run: RunParams = RunParams(), params: PrepareParams = PrepareParams()) -> dict:
    """Build blocks, pre-training and ICT examples (skipped when already built with these inputs)."""
    layout = RunLayout.at(run.output)
    return cached_in_run(prepare_corpus, layout)(str(layout.root), params, run.seed)
