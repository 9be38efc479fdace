"""`realm-pretrain`: salient-span MLM over retrieved blocks, with the index refreshed asynchronously.

The trainer (`realm.model.training.train_pretrain.PretrainTrainer.run`) runs the loop; every
`refresh_every` steps it saves a snapshot of the doc tower and asks this flow for a refresh:
the `refresh_index` task re-embeds every block with that snapshot and publishes a new MIPS
index (temp dir + rename) while training goes on. `refresh_every` steps after its snapshot,
when the next refresh starts, the trainer swaps the new index in (waiting for it, with a
warning, if it is not published yet: the index of each step never depends on how fast a build
ran) and logs the staleness (steps between snapshot and swap). The flow logs the progress and
the evaluations, draws the curves, publishes the summary and the refreshes as artifacts and
writes the last evaluation's outcome per example to `masked_spans/` (`realm compare` pairs two
runs' on the examples both evaluated). A
killed run restarts from its last checkpoint, the index that checkpoint trained against and
the refresh it had in flight (from the same snapshot); a half-written index is never opened.
With the doc tower frozen (`doc_tower` "frozen") there is nothing to refresh: the run trains
against the index its tower built, and fine-tuning reads that one. With only its projection
learning ("projection"), a refresh projects the blocks' pooled states again
(`realm.model.index.pooled_states`) instead of re-embedding the corpus.

Under torchrun (`realm train pretrain --nproc N`) this flow runs on rank 0 only: it hands the
trainer's recipe to the other ranks (`realm.model.training.distributed.lead`), which train
beside it; the refresh task runs here, on rank 0, every rank embedding its share of the corpus
(`realm.model.training.refresh_shares`), and every rank swaps its index in at the same step.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from realm.schemas.leftovers import remove_leftovers
from realm.model.networks.presets import record_model_preset
from realm.schemas.run_layout import RunLayout
from realm.flows.params import PretrainParams, RunParams
from realm.flows.reporting import TrainingReporter


@task(name="realm-refresh-index", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def refresh_index(
    output: str, model_preset: str, snapshot_dir: str, snapshot_step: int, max_block_wordpieces: int, device: str | None,
    reproject: bool = False, refresh_embedder: str = "in_process", split_across_ranks: bool = False,
) -> dict:
    """Re-embed every block with the doc-tower snapshot (with `reproject`, project the blocks'
    pooled states with its projection; with `refresh_embedder` "pipeline", by the Beam pipeline
    `realm.pipelines.embed`; with `split_across_ranks`, every rank embedding its share,
    `realm.model.training.refresh_shares`) and publish `index/<snapshot_step>/` (and its embeddings).
    Prunes neither: the trainer does once it swaps the index in, as only it knows which index is
    in use."""
    import time

    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.index.rebuild import rebuild_index

    from realm.model.index.pooled_states import reproject_index

    layout = RunLayout.at(output)
    started = time.perf_counter()
    if reproject:
        path = reproject_index(
            str(layout.pooled_states), snapshot_dir, layout.embeddings, layout.index, snapshot_step, None, max_block_wordpieces
        )
    else:
        from functools import partial

        from realm.model.training.distributed import world_from_environment
        from realm.model.training.refresh_shares import embed_on_every_rank, share_embedder
        from realm.pipelines.embed import embed_into

        model_config, on = ModelConfig.preset(model_preset, bert_dir=layout.bert_dir()), select_device(device)
        embed = None
        if refresh_embedder == "pipeline":
            embed = partial(embed_into, run_root=str(layout.root), step=snapshot_step, max_block_wordpieces=max_block_wordpieces)
        elif split_across_ranks:
            shares = share_embedder(layout.blocks, model_config, on, max_block_wordpieces)
            embed = partial(embed_on_every_rank, world_from_environment(), snapshot_dir, snapshot_step, shares)
        path = rebuild_index(
            layout.blocks, snapshot_dir, layout.embeddings, layout.index, snapshot_step, model_config, keep=None,
            device=on, max_block_wordpieces=max_block_wordpieces, embed_into=embed,
        )
    seconds = time.perf_counter() - started
    get_run_logger().info("published index %s (snapshot step %d) in %.1f s", path, snapshot_step, seconds)
    return {"path": str(path), "snapshot_step": snapshot_step, "seconds": seconds}


class _RefreshTaskRun:
    """A submitted `refresh_index` task run, as the trainer's `PendingRefresh`."""

    def __init__(self, future):
        self.future = future

    def done(self) -> bool:
        return self.future.state.is_final()

    def result(self) -> dict:
        return self.future.result()  # raises the task's error once its retries are spent

    def wait(self) -> None:
        self.future.wait()


@flow(name="realm-pretrain")
def realm_pretrain(
    run: RunParams = RunParams(), params: PretrainParams = PretrainParams(), init_retriever: str | None = None
) -> dict:
    """Pre-train from `init_retriever` (default: the run's latest ICT checkpoint)."""
    from realm.model.networks.checkpoint import latest_checkpoint
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from functools import partial

    from realm.model.training.distributed import lead, world_from_environment
    from realm.model.training.pretrain_index import IndexRoots
    from realm.model.training.train_pretrain import HELD_OUT, PretrainHooks, PretrainTrainer

    logger = get_run_logger()
    layout = RunLayout.at(run.output)
    remove_leftovers(layout.root)
    record_model_preset(layout, run.model_preset, bert_dir=run.bert_dir)
    if init_retriever is None and (ict := latest_checkpoint(layout.checkpoints("ict"))) is not None:
        init_retriever = str(ict)

    def refresh(snapshot_dir: str, snapshot_step: int) -> _RefreshTaskRun:
        return _RefreshTaskRun(refresh_index.submit(
            str(layout.root), run.model_preset, snapshot_dir, snapshot_step, params.max_block_wordpieces, run.device,
            params.doc_tower == "projection", params.refresh_embedder, trainer.splits_refreshes,
        ))

    def evaluated(step: int, which: str, evaluation: dict) -> None:
        _log_evaluation(logger, step, which, evaluation)
        if which == HELD_OUT:  # the curves' points; another set at the same step would overwrite them
            reporter.record({"step": step, **evaluation})

    roots = IndexRoots(layout.index, layout.embeddings, str(layout.snapshots), str(layout.pooled_states))
    with layout.training_lock():
        world = world_from_environment()
        trainer = lead(world, partial(
            PretrainTrainer, layout.blocks, layout.pretrain_examples, layout.checkpoints("pretrain"),
            ModelConfig.preset(run.model_preset, bert_dir=layout.bert_dir()), params, init_retriever=init_retriever,
            device=select_device(run.device),
            seed=run.seed,
        ), roots)
        logger.info(
            "pre-training from step %d to %d on %d process(es) (retriever init: %s)", trainer.step, params.steps, world.size,
            init_retriever,
        )
        reporter = TrainingReporter("pretrain", layout.reports, trainer.step, params.steps)
        result = trainer.run(PretrainHooks(reporter, evaluated, refresh), roots)
    reporter.publish_curves(("loss", "retrieval_entropy", "accuracy_with_retrieval", "accuracy_null_only"))
    if result.evaluations:  # none after 0 steps
        _publish_summary(result.evaluations, result.refreshes)
    _write_outcomes(layout, result.outcomes)
    return _flow_result(result)


def _write_outcomes(layout: RunLayout, outcomes: dict[str, list[dict]]) -> None:
    """Replace `masked_spans/` whole with the last evaluation of each set ("held_out",
    "never_trained_on"), one file each, and a manifest of their sizes and sha256 for `realm
    compare`: a set an earlier pre-training evaluated and this one did not is not left behind."""
    import os
    import shutil

    from realm.model.publish import replace_dir, write_manifest
    from realm.schemas import MASKED_SPAN_OUTCOMES, write_table

    staging = layout.root / f".staging-masked_spans-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for which, rows in outcomes.items():
        name = which.replace("-", "_").replace(" ", "_")
        write_table(str(staging / f"{name}.parquet"), rows, MASKED_SPAN_OUTCOMES, atomic=False)
    write_manifest(staging, [], {})
    replace_dir(staging, layout.masked_spans)


def _flow_result(result) -> dict:
    """What the flow returns (plain JSON): checkpoint, index, step, the held-out evaluation's
    keys (none after 0 steps), `untrained` (the never-trained-on evaluation, when asked for) and
    the refreshes."""
    from realm.model.training.train_pretrain import HELD_OUT, NEVER_TRAINED_ON

    summary = {"checkpoint": result.checkpoint, "index": result.index, "step": result.step, **result.evaluations.get(HELD_OUT, {})}
    if NEVER_TRAINED_ON in result.evaluations:
        summary["untrained"] = result.evaluations[NEVER_TRAINED_ON]
    return {**summary, "refreshes": result.refreshes}


def _log_evaluation(logger, step: int, which: str, evaluation: dict) -> None:
    logger.info(
        "step %d: %s masked-span accuracy %.3f with retrieval vs %.3f with the null document alone "
        "(%d examples; right only with retrieval %d, only with the null document %d, paired p %.3g; "
        "the span occurs in a retrieved block for %.3f)",
        step, which, evaluation["accuracy_with_retrieval"], evaluation["accuracy_null_only"], evaluation["examples"],
        evaluation["right_only_with_retrieval"], evaluation["right_only_null"], evaluation["paired_p_value"],
        evaluation["span_in_candidates"],
    )


# (row label, key, format) of the summary table; one column per evaluated set of examples.
SUMMARY_ROWS = [
    ("accuracy with retrieval (top-k marginal)", "accuracy_with_retrieval", ".3f"),
    ("accuracy, null document alone", "accuracy_null_only", ".3f"),
    ("right only with retrieval", "right_only_with_retrieval", "d"),
    ("right only with the null document", "right_only_null", "d"),
    ("paired (McNemar) p", "paired_p_value", ".3g"),
    ("masked span verbatim in a retrieved block (what copying could reach)", "span_in_candidates", ".3f"),
    ("of those, right with retrieval", "span_in_candidates_right_with_retrieval", "d"),
    ("of those, right with the null document alone", "span_in_candidates_right_null_only", "d"),
    ("of those, right reading a block that holds the span (p(y|z,x) alone)", "span_in_candidates_right_reading_that_block", "d"),
    ("examples", "examples", "d"),
]


def _publish_summary(evaluations: dict[str, dict], refreshes: list[dict]) -> None:
    header = "| | " + " | ".join(evaluations) + " |\n|---|" + "---|" * len(evaluations) + "\n"
    rows = "".join(
        f"| {label} | " + " | ".join(format(e[key], spec) for e in evaluations.values()) + " |\n"
        for label, key, spec in SUMMARY_ROWS
    )
    create_markdown_artifact(
        key="realm-pretrain-heldout",
        markdown="## REALM pre-training, masked spans of examples never trained on\n\n" + header + rows,
        description="masked-span accuracy with retrieval vs the null document alone",
    )
    if refreshes:
        create_table_artifact(
            key="realm-pretrain-refreshes",
            table=[{k: r[k] for k in ("snapshot_step", "swapped_at_step", "staleness_steps", "seconds")} for r in refreshes],
            description="asynchronous index refreshes: snapshot step, swap step, staleness, duration",
        )
