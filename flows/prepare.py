"""The corpus-preparation stage as a Prefect task: launches the Beam pipeline through its `run(argv)`.

The stage's cached result keys on the content of every file `--input` matches (an input
edited in place under the same name is prepared again, and the log says which file changed)
and on the code preparation runs (`realm.flows.caching.PREPARE_MODULES`), and holds only while
the prepared artifacts are the ones it wrote."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact

from realm.flows.caching import cached_in_run
from realm.schemas.run_layout import RunLayout
from realm.flows.params import PrepareParams, RunParams


@task(name="realm-prepare-corpus")
def prepare_corpus(output: str, params: PrepareParams, seed: int, bert_dir: str | None = None) -> dict[str, dict[str, int]]:
    """Run `realm.pipelines.prepare` (Beam), its wordpieces cut with `bert_dir`'s vocabulary (None:
    the default's), and publish its per-stage counts."""
    from realm.pipelines import prepare

    argv = ["--corpus", params.corpus, "--output", output, "--seed", str(seed)]
    if bert_dir:
        argv += ["--model_dir", bert_dir]
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


def input_files(pattern: str | None) -> list[str]:
    """The files a path or glob names, as the pipeline matches them (local or gs://), sorted."""
    if not pattern:
        return []
    from apache_beam.io.filesystems import FileSystems

    return sorted(match.path for match in FileSystems.match([pattern])[0].metadata_list)


@flow(name="realm-prepare")
def realm_prepare(run: RunParams = RunParams(), params: PrepareParams = PrepareParams()) -> dict:
    """Build blocks, pre-training and ICT examples (skipped when already built with these inputs)."""
    from realm.pipelines.prepare import OUTPUT_SCHEMAS

    layout = RunLayout.at(run.output)
    stage = cached_in_run(
        prepare_corpus, layout, reads=input_files(params.input), writes=[layout.artifact(name) for name in OUTPUT_SCHEMAS],
        code="prepare",
    )
    return stage(str(layout.root), params, run.seed, run.bert_dir)
