"""`realm-finetune-openqa`: train the query tower and the span reader on Open-QA pairs, index fixed.

Starts from the run's latest pre-training checkpoint (or any checkpoint with a query tower,
e.g. ICT's for the ORQA baseline; `reader_init` names another checkpoint whose encoder starts
the reader, for the ablations) and reads the top 5 blocks of the fixed index published by
pre-training, or with `retriever="bm25"` of a BM25 index over the blocks, built once per run
(the BERT-Baseline: only the reader trains). Training files: JSONL `{"question", "answers"}` (regex answers with
`"answer_type": "regex"`), NQ-open JSONL, WebQuestions JSON, CuratedTrec TSV. At the end, the
questions held out for validation calibrate the kept checkpoint's answer probabilities
(`realm.flows.calibrate`).
"""

from __future__ import annotations

from functools import partial

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from realm.flows.calibrate import calibrate
from realm.flows.caching import cached_in_run
from realm.flows.demo import training_qa_paths
from realm.schemas.leftovers import remove_leftovers
from realm.model.networks.presets import record_model_preset
from realm.schemas.run_layout import RunLayout
from realm.flows.params import FinetuneParams, RunParams
from realm.flows.reporting import TrainingReporter


@task(name="realm-train-finetune")
def train_finetune_stage(
    output: str, model_preset: str, params: FinetuneParams, seed: int, device: str | None,
    init_checkpoint: str | None, index_path: str, reader_init: str | None = None,
) -> dict:
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.qa.qa_data import read_qa_file
    from realm.model.training.distributed import lead, world_from_environment
    from realm.model.training.stage_settings import FinetuneConfig
    from realm.model.training.train_finetune import FinetuneTrainer

    layout = RunLayout.at(output)
    files = params.qa_train or training_qa_paths()
    examples = [example for path in files for example in read_qa_file(path)]
    world = world_from_environment()
    get_run_logger().info(
        "fine-tuning on %d questions from %s (index %s) on %d process(es)", len(examples), ", ".join(files), index_path,
        world.size,
    )
    with layout.training_lock():
        # Under torchrun the other ranks build the same trainer and train beside this one.
        trainer = lead(world, partial(
            FinetuneTrainer, examples, layout.blocks, index_path, init_checkpoint, layout.checkpoints("finetune"),
            ModelConfig.preset(model_preset, bert_dir=layout.bert_dir()), FinetuneConfig(**params.model_dump(include=set(FinetuneConfig.model_fields))),
            device=select_device(device), reader_init=reader_init, seed=seed,
        ))
        reporter = TrainingReporter("finetune", layout.reports, trainer.step)
        result = trainer.run(reporter)
    reporter.publish_curves()
    get_run_logger().info(
        "fine-tuned %d steps on %d questions with an answer among their candidates (%d without, left out; %d held out "
        "for validation); best validation exact match %s -> %s",
        result["step"], result["training_questions"], result["without_answer_in_candidates"],
        result["validation_questions"], result["best_validation_em"], result["checkpoint"],
    )
    return {**result, "index": index_path, "init_checkpoint": init_checkpoint, "reader_init": reader_init}


@task(name="realm-build-bm25-index", cache_policy=NO_CACHE)
def build_bm25_index(output: str) -> str:
    """The run's published BM25 index over its blocks, built now if it has none (or if the
    blocks were prepared again since: its block count differs)."""
    import time

    import pyarrow.parquet as pq

    from realm.model.index.bm25 import Bm25Index
    from realm.model.index.mips import latest_published
    from realm.model.publish import read_manifest
    from realm.schemas.io import parquet_files

    layout = RunLayout.at(output)
    published = latest_published(layout.bm25)
    blocks = sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(layout.blocks))
    if published is not None and read_manifest(published)["count"] == blocks:
        return str(published)
    started = time.perf_counter()
    index = Bm25Index.from_blocks(layout.blocks)
    path = index.save(layout.bm25)
    get_run_logger().info("BM25 index over %d blocks in %.1f s -> %s", index.count, time.perf_counter() - started, path)
    return str(path)


@flow(name="realm-finetune-openqa")
def finetune_openqa(
    run: RunParams = RunParams(),
    params: FinetuneParams = FinetuneParams(),
    init_checkpoint: str | None = None,
    index_path: str | None = None,
    reader_init: str | None = None,
) -> dict:
    """Defaults: the run's latest pre-training checkpoint and its newest published index (a
    BM25 run needs no checkpoint: its reader starts from `reader_init` or the warm start)."""
    from realm.model.index.mips import latest_published
    from realm.model.networks.checkpoint import latest_checkpoint
    from realm.model.training.finetune_start import WARM_START

    layout = RunLayout.at(run.output)
    remove_leftovers(layout.root)
    record_model_preset(layout, run.model_preset, bert_dir=run.bert_dir)
    if params.retriever == "bm25":
        index_path = index_path or build_bm25_index(str(layout.root))
    else:
        init_checkpoint = init_checkpoint or required(
            latest_checkpoint(layout.checkpoints("pretrain")), "pre-training checkpoint"
        )
        index_path = index_path or required(latest_published(layout.index), "published index")
    reads = [*(params.qa_train or training_qa_paths()), layout.blocks, layout.block_entities, init_checkpoint, index_path]
    reads += [reader_init] if reader_init != WARM_START else []
    stage = cached_in_run(train_finetune_stage, layout, reads=reads, writes=[layout.checkpoints("finetune")])
    result = stage(
        str(layout.root), run.model_preset, params, run.seed, run.device,
        None if init_checkpoint is None else str(init_checkpoint), str(index_path), reader_init,
    )
    return {**result, "calibration": calibrate(run, params.qa_train, result["checkpoint"], str(index_path))}


def required(found, what: str) -> str:
    """`found` as a string; a clear error naming `what` the run lacks when it is None."""
    if found is None:
        raise FileNotFoundError(f"no {what} found in the run; run the earlier stages first or pass its path")
    return str(found)
