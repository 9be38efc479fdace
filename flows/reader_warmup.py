"""`realm-reader-warmup`: the reader learns to select spans from the corpus itself before Open QA.

Cloze questions from the run's salient-span sentences (`realm.model.training.cloze_questions`: the span
becomes a wh-word, the sentence's own blocks are never retrieved) train the query tower and
the span reader exactly as Open-QA fine-tuning does, over the run's fixed index; fine-tuning
then starts from both. Checkpoints under `<root>/checkpoints/warmup/`; with `questions=0` the
stage is skipped and fine-tuning starts from pre-training's checkpoint.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task

from realm.flows.caching import cached_in_run
from realm.schemas.leftovers import remove_leftovers
from realm.model.networks.presets import record_model_preset
from realm.schemas.run_layout import RunLayout
from realm.flows.params import ReaderWarmupParams, RunParams
from realm.flows.reporting import TrainingReporter


@task(name="realm-train-reader-warmup")
def train_reader_warmup_stage(
    output: str, model_preset: str, params: ReaderWarmupParams, seed: int, device: str | None,
    init_checkpoint: str, index_path: str,
) -> dict:
    from realm.model.training.cloze_questions import cloze_questions
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.training.train_finetune import FinetuneTrainer

    layout = RunLayout.at(output)
    questions = cloze_questions(layout.pretrain_examples, params.questions, seed, params.max_question_wordpieces)
    get_run_logger().info("reader warm-up on %d cloze questions from %s", len(questions), layout.pretrain_examples)
    with layout.training_lock():
        trainer = FinetuneTrainer(
            questions, layout.blocks, index_path, init_checkpoint, layout.checkpoints("warmup"),
            ModelConfig.preset(model_preset, bert_dir=layout.bert_dir()), params, device=select_device(device), seed=seed,
        )
        reporter = TrainingReporter("warmup", layout.reports, trainer.step)
        result = trainer.run(reporter)
    reporter.publish_curves()
    get_run_logger().info(
        "reader warm-up: %d steps on %d cloze questions with an answer among their candidates (%d without); "
        "best validation exact match %s -> %s",
        result["step"], result["training_questions"], result["without_answer_in_candidates"],
        result["best_validation_em"], result["checkpoint"],
    )
    return {**result, "index": index_path, "init_checkpoint": init_checkpoint}


@flow(name="realm-reader-warmup")
def reader_warmup(
    run: RunParams = RunParams(),
    params: ReaderWarmupParams = ReaderWarmupParams(),
    init_checkpoint: str | None = None,
    index_path: str | None = None,
) -> dict:
    """Defaults: the run's latest pre-training checkpoint and its newest published index.
    Returns the stage's result; its `checkpoint` is None when `params.questions` is 0."""
    from realm.flows.finetune_openqa import required
    from realm.model.networks.checkpoint import latest_checkpoint
    from realm.model.index.mips import latest_published

    if params.questions == 0:
        get_run_logger().info("reader warm-up: 0 questions, skipped")
        return {"checkpoint": None, "step": 0}
    layout = RunLayout.at(run.output)
    remove_leftovers(layout.root)
    record_model_preset(layout, run.model_preset, bert_dir=run.bert_dir)
    init_checkpoint = init_checkpoint or required(latest_checkpoint(layout.checkpoints("pretrain")), "pre-training checkpoint")
    index_path = index_path or required(latest_published(layout.index), "published index")
    stage = cached_in_run(
        train_reader_warmup_stage, layout,
        reads=[layout.pretrain_examples, layout.blocks, layout.block_entities, init_checkpoint, index_path],
        writes=[layout.checkpoints("warmup")],
    )
    return stage(str(layout.root), run.model_preset, params, run.seed, run.device, str(init_checkpoint), str(index_path))
