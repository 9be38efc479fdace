"""`realm-reader-warmup`: the reader learns to read before Open QA.

With `source="squad"` (the default) the reader reads SQuAD v1.1's human questions, shipped in
`flows/data/squad/` (its licence and sha256 in the README there; the file is checked against
that sha256 each time it is read), each over its own paragraph and the blocks the run's index
retrieves for it, and learns the answers marked in the paragraph and an answer's text in a
retrieved block; the query tower is left as it is. The paragraphs of the drawn questions are
first cut into blocks and tagged by the corpus's own Beam stages (`realm.pipelines.chunk`,
`realm.pipelines.entities`), under `<root>/squad/`, so they read as the corpus's blocks do. With `source="cloze"` the questions are the corpus's
own salient-span sentences (`realm.model.training.cloze_questions`), trained as fine-tuning
trains, the query tower too. Both train with fine-tuning's trainer over the run's fixed index;
fine-tuning then starts from the reader and query tower the warm-up leaves. Checkpoints under
`<root>/checkpoints/warmup/`; with `questions=0` the stage is skipped and fine-tuning starts from
pre-training's checkpoint.

    realm train warmup --output runs/demo --param questions=2400
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import flow, get_run_logger, task

from realm.flows.caching import cached_in_run
from realm.flows.demo import DATA_DIR
from realm.schemas.leftovers import remove_leftovers
from realm.model.networks.presets import record_model_preset
from realm.schemas.run_layout import RunLayout, entities_beside
from realm.flows.params import ReaderWarmupParams, RunParams
from realm.flows.reporting import TrainingReporter

if TYPE_CHECKING:
    from realm.model.training.squad_questions import SquadQuestion

SQUAD_FILE = DATA_DIR / "squad" / "dev-v1.1.json"
# The official SQuAD v1.1 development set's (flows/data/squad/README.md).
SQUAD_SHA256 = "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"
# Where a run keeps the drawn questions' paragraphs as documents, blocks and their entities.
SQUAD_DIR = "squad"


def squad_passages_path(layout: RunLayout) -> str:
    """The `blocks/` artifact of the SQuAD paragraphs, its `block_entities/` beside it."""
    return str(Path(layout.artifact(SQUAD_DIR)) / "blocks")


def drawn_squad_questions(count: int, seed: int) -> list[SquadQuestion]:
    """The shipped SQuAD questions the warm-up reads: `count` drawn by `seed`."""
    from realm.model.training.squad_questions import draw_questions, read_squad

    return draw_questions(read_squad(SQUAD_FILE, SQUAD_SHA256), count, seed)


@task(name="realm-prepare-squad-passages")
def prepare_squad_passages(output: str, questions: int, seed: int, bert_dir: str | None) -> dict[str, dict[str, int]]:
    """The drawn questions' paragraphs as `documents/`, cut into `blocks/` (the corpus's budget,
    its wordpieces from `bert_dir`'s vocabulary) and tagged with their `block_entities/`, by the
    corpus's own Beam stages; returns their counts."""
    from realm.model.training.squad_passages import passage_documents
    from realm.pipelines import chunk, entities
    from realm.schemas import DOCUMENTS, write_table

    root = Path(RunLayout.at(output).artifact(SQUAD_DIR))
    documents = root / "documents"
    write_table(str(documents / "part-0.parquet"), passage_documents(drawn_squad_questions(questions, seed)), DOCUMENTS)
    vocabulary = ["--model_dir", bert_dir] if bert_dir else []
    counts = chunk.run(["--documents", str(documents), "--output", str(root), *vocabulary])
    return counts | entities.run(["--blocks", str(root / "blocks"), "--output", str(root)])


@task(name="realm-train-reader-warmup")
def train_reader_warmup_stage(
    output: str, model_preset: str, params: ReaderWarmupParams, seed: int, device: str | None,
    init_checkpoint: str, index_path: str,
) -> dict:
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.training.cloze_questions import cloze_questions
    from realm.model.training.distributed import lead, world_from_environment
    from realm.model.training.squad_passages import squad_passages
    from realm.model.training.train_finetune import FinetuneTrainer

    layout = RunLayout.at(output)
    model_config = ModelConfig.preset(model_preset, bert_dir=layout.bert_dir())
    logger = get_run_logger()
    if params.source == "squad":
        drawn = drawn_squad_questions(params.questions, seed)
        questions, passages = squad_passages(
            drawn, squad_passages_path(layout), model_config.tokenizer(), model_config.max_span_wordpieces
        )
        logger.info(
            "reader warm-up on %d SQuAD questions over their paragraphs (%d of %d drawn have no marked answer the "
            "reader can select)", len(questions), len(drawn) - len(questions), len(drawn),
        )
    else:
        questions, passages = cloze_questions(layout.pretrain_examples, params.questions, seed, params.max_question_wordpieces), None
        logger.info("reader warm-up on %d cloze questions from %s", len(questions), layout.pretrain_examples)
    world = world_from_environment()
    with layout.training_lock():
        # Under torchrun the other ranks build the same trainer and train beside this one.
        trainer = lead(world, partial(
            FinetuneTrainer, questions, layout.blocks, index_path, init_checkpoint, layout.checkpoints("warmup"),
            model_config, params, device=select_device(device), seed=seed, passages=passages,
        ))
        logger.info("reader warm-up from step %d on %d process(es)", trainer.step, world.size)
        reporter = TrainingReporter("warmup", layout.reports, trainer.step)
        result = trainer.run(reporter)
    reporter.publish_curves()
    logger.info(
        "reader warm-up: %d steps on %d %s questions with an answer among their candidates (%d without); "
        "best validation exact match %s -> %s",
        result["step"], result["training_questions"], params.source, result["without_answer_in_candidates"],
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
    reads = [layout.blocks, layout.block_entities, init_checkpoint, index_path]
    if params.source == "squad":
        passages = squad_passages_path(layout)
        # Keyed on all of realm's code: the paragraphs' documents are made by the model side's code too.
        prepare = cached_in_run(
            prepare_squad_passages, layout, reads=[SQUAD_FILE], writes=[passages, entities_beside(passages)], code="realm",
        )
        prepare(str(layout.root), params.questions, run.seed, layout.bert_dir())
        reads += [SQUAD_FILE, passages, entities_beside(passages)]
    else:
        reads.append(layout.pretrain_examples)
    stage = cached_in_run(train_reader_warmup_stage, layout, reads=reads, writes=[layout.checkpoints("warmup")])
    return stage(str(layout.root), run.model_preset, params, run.seed, run.device, str(init_checkpoint), str(index_path))
