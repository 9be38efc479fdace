"""`realm-pretrain`: salient-span MLM over retrieved blocks, with the index refreshed asynchronously.

The flow runs the training loop; every `refresh_every` steps it saves a snapshot of the doc
tower and submits `refresh_index`, which re-embeds every block with that snapshot and
publishes a new MIPS index (temp dir + rename) while training goes on. Each step the loop
checks the refresh; once published, the trainer swaps the new index in and the staleness
(steps between snapshot and swap) is logged. A killed run restarts from its last checkpoint
and the newest *published* index; a half-written index is never opened. With the doc tower
frozen (`cached_doc_embeddings`) there is nothing to refresh: the run trains against the
index its tower built, and fine-tuning reads that one.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from realm.schemas.run_layout import RunLayout
from realm.flows.params import PretrainParams, RunParams
from realm.flows.reporting import TrainingReporter


@task(name="realm-refresh-index", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def refresh_index(
    output: str, model_preset: str, snapshot_dir: str, snapshot_step: int, max_block_wordpieces: int, keep: int,
    device: str | None,
) -> dict:
    """Re-embed every block with the doc-tower snapshot and publish `index/<snapshot_step>/`
    (and its embeddings), keeping the newest `keep` of each."""
    import time

    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.index.rebuild import rebuild_index

    layout = RunLayout.at(output)
    started = time.perf_counter()
    path = rebuild_index(
        layout.blocks, snapshot_dir, layout.embeddings, layout.index, snapshot_step,
        ModelConfig.preset(model_preset), keep, device=select_device(device), max_block_wordpieces=max_block_wordpieces,
    )
    seconds = time.perf_counter() - started
    get_run_logger().info("published index %s (snapshot step %d) in %.1f s", path, snapshot_step, seconds)
    return {"path": str(path), "snapshot_step": snapshot_step, "seconds": seconds}


def _load_published(index_path: str):
    from realm.model.index.mips import MipsIndex
    from realm.model.publish import read_manifest

    return MipsIndex.load(index_path), int(read_manifest(index_path)["checkpoint_step"])


@flow(name="realm-pretrain")
def realm_pretrain(
    run: RunParams = RunParams(), params: PretrainParams = PretrainParams(), init_retriever: str | None = None
) -> dict:
    """Pre-train from `init_retriever` (default: the run's latest ICT checkpoint)."""
    from realm.model.networks.checkpoint import latest_checkpoint
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.index.mips import latest_published
    from realm.model.index.refresh import IndexRefreshScheduler
    from realm.model.training.stage_settings import PretrainConfig
    from realm.model.training.train_pretrain import PretrainTrainer, attach_index

    logger = get_run_logger()
    layout = RunLayout.at(run.output)
    layout.record_model_preset(run.model_preset)
    model_config = ModelConfig.preset(run.model_preset)
    if init_retriever is None and (ict := latest_checkpoint(layout.checkpoints("ict"))) is not None:
        init_retriever = str(ict)
    trainer = PretrainTrainer(
        layout.blocks, layout.pretrain_examples, layout.checkpoints("pretrain"), model_config,
        PretrainConfig(**params.model_dump(include=set(PretrainConfig.model_fields))),
        init_retriever=init_retriever, device=select_device(run.device), seed=run.seed,
    )
    logger.info("pre-training from step %d to %d (retriever init: %s)", trainer.step, params.steps, init_retriever)

    def submit_refresh():
        snapshot = trainer.snapshot_doc_tower(str(layout.snapshots / str(trainer.step)))
        return refresh_index.submit(
            str(layout.root), run.model_preset, snapshot, trainer.step, params.max_block_wordpieces,
            params.keep_checkpoints, run.device,
        )

    # On resume: the index the checkpoint was training against, so no step sees another one.
    attached = attach_index(trainer, layout.index, layout.embeddings, str(layout.snapshots))
    logger.info("training against index %s", attached)

    # A frozen doc tower (cached mode) never changes, so re-embedding the corpus with it would
    # rebuild the index in use (`attach_index` gave the one the tower built or, on resume, the
    # one the checkpoint trained against).
    refresh_every = None if params.cached_doc_embeddings else params.refresh_every
    if refresh_every is None:
        logger.info("doc tower frozen (cached_doc_embeddings): the index of step %d stays current", trainer.index_snapshot_step)
    scheduler = IndexRefreshScheduler(
        refresh_every, index_snapshot_step=trainer.index_snapshot_step, last_start_step=trainer.index_snapshot_step
    )
    reporter = TrainingReporter("pretrain", layout.reports, params.steps)
    refreshes: list[dict] = []
    pending = None
    while trainer.step < params.steps:
        if pending is None and scheduler.is_time_to_refresh(trainer.step):
            scheduler.refresh_started(trainer.step)
            pending = submit_refresh()
        if pending is not None and pending.state.is_final():
            if not pending.state.is_completed():
                scheduler.refresh_failed()
                pending.result()  # raises the refresh's error: retries are spent, so fail loudly
            refreshed = pending.result()
            index, snapshot_step = _load_published(refreshed["path"])
            staleness = trainer.swap_index(index, snapshot_step)
            scheduler.refresh_swapped(trainer.step)
            refreshes.append({**refreshed, "swapped_at_step": trainer.step, "staleness_steps": staleness})
            logger.info("swapped in index from step %d at step %d (staleness %d steps)", snapshot_step, trainer.step, staleness)
            pending = None
        metrics = trainer.train_step()
        if trainer.step % params.log_every == 0 or trainer.step == params.steps:
            reporter(metrics)
        if trainer.step % params.checkpoint_every == 0:
            trainer.save_checkpoint()
        if params.eval_every and trainer.step % params.eval_every == 0 and trainer.step < params.steps:
            _log_heldout(logger, reporter, trainer)
    if pending is not None:
        pending.wait()
    checkpoint = trainer.save_checkpoint()

    # Fine-tuning reads a fixed index built by the final doc tower: with the tower frozen, the
    # one in use (a newer one may exist from before a resume with the tower frozen).
    if params.cached_doc_embeddings:
        final = Path(layout.index) / str(trainer.index_snapshot_step)
    else:
        final = latest_published(layout.index)
        if final is None or int(Path(final).name) != trainer.step:
            final = Path(submit_refresh().result()["path"])
    evaluations = {"held-out": _log_heldout(logger, reporter, trainer)}
    if params.untrained_eval_examples:
        untrained = trainer.evaluate_masked_spans(trainer.untrained_rows(params.untrained_eval_examples))
        _log_evaluation(logger, trainer.step, "never-trained-on", untrained)
        evaluations["never trained on"] = untrained
    reporter.publish_curves(("loss", "retrieval_entropy", "accuracy_with_retrieval", "accuracy_null_only"))
    _publish_summary(evaluations, refreshes)
    result = {"checkpoint": str(checkpoint), "index": str(final), "step": trainer.step, **evaluations["held-out"]}
    if "never trained on" in evaluations:
        result["untrained"] = evaluations["never trained on"]
    return {**result, "refreshes": refreshes}


def _log_heldout(logger, reporter: TrainingReporter, trainer) -> dict:
    """Evaluate the held-out masked spans now; logged, and recorded with the step in the metrics file."""
    evaluation = trainer.evaluate_masked_spans()
    _log_evaluation(logger, trainer.step, "held-out", evaluation)
    reporter.record({"step": trainer.step, **evaluation})
    return evaluation


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
