"""`realm-evaluate`: exact match, reader accuracy and answer recall@1/5/20 per dataset, with the evidence kept.

Exact match uses the standard normalisation (CuratedTrec answers are regular expressions);
recall@k is the fraction of questions with an answer string in one of the top-k retrieved
blocks; reader accuracy is the exact match among the questions with an answer in the blocks
the reader read (the top `num_read`), which tells a reader that cannot read from a retriever
that found nothing to read. Every prediction is written to `<root>/predictions/<dataset>.parquet` with its
retrieved block ids and p(z|x) (each file's size and sha256 recorded in `predictions/manifest.json`),
and the per-dataset table is published to the Prefect UI.
Answering shows its progress on stderr (`realm.model.progress`).
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from realm.flows.caching import cached_in_run
from realm.flows.demo import evaluation_qa_paths
from realm.schemas.run_layout import RunLayout
from realm.flows.params import EvaluateParams, RunParams


@task(name="realm-evaluate-qa", cache_policy=NO_CACHE)
def evaluate_qa(
    output: str, model_preset: str, qa_files: list[str], params: EvaluateParams, device: str | None,
    checkpoint: str, index_path: str, bert_dir: str | None = None,
) -> dict[str, dict]:
    from realm.model.qa.answering import Answerer
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.progress import ProgressBar
    from realm.model.qa.qa_data import read_qa_file
    from realm.model.qa.scoring import RECALL_AT, score_predictions
    from realm.model.publish import record_files
    from realm.schemas import PREDICTIONS, write_table

    logger = get_run_logger()
    layout = RunLayout.at(output)
    answerer = Answerer.from_checkpoint(
        checkpoint, index_path, layout.blocks, ModelConfig.preset(model_preset, bert_dir=bert_dir), device=select_device(device)
    )
    examples = [example for path in qa_files for example in read_qa_file(path)]
    logger.info("answering %d questions from %s", len(examples), ", ".join(qa_files))
    with ProgressBar("answering", len(examples), "questions") as bar:
        predictions = answerer.answer(
            [e.question for e in examples], num_read=params.num_read, num_retrieve=max(params.num_retrieve, *RECALL_AT),
            progress=bar.advance,
        )
    metrics, rows = score_predictions(examples, predictions, params.num_read)
    for dataset, dataset_rows in rows.items():
        path = Path(write_table(str(layout.predictions_file(dataset)), dataset_rows, PREDICTIONS))
        record_files(path.parent, [path.name])  # `realm compare` checks them
        logger.info("%s: EM %.3f, reader accuracy %s, recall@5 %.3f over %d questions -> %s", dataset,
                    metrics[dataset]["em"], share_text(metrics[dataset]["reader_accuracy"]), metrics[dataset]["recall_at_5"],
                    metrics[dataset]["n"], path)
    return metrics


def _publish(metrics: dict[str, dict], predictions: RunLayout) -> None:
    """The metrics table and a sample of each dataset's predictions (read back from the run, so
    a cached evaluation publishes them to its own flow run too)."""
    from realm.schemas import PREDICTIONS, read_table

    rows = {d: read_table(str(predictions.predictions_file(d)), PREDICTIONS).slice(0, 5).to_pylist() for d in metrics}
    create_table_artifact(
        key="realm-eval-metrics",
        table=[{"dataset": d, **{k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()}} for d, m in metrics.items()],
        description="exact match and answer recall@k per dataset",
    )
    lines = ["## Open-QA evaluation", "",
             "| dataset | n | EM | reader accuracy (n) | recall@1 | recall@5 | recall@20 |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {d} | {m['n']} | {m['em']:.3f} | {share_text(m['reader_accuracy'])} ({m['n_answer_read']}) "
              f"| {m['recall_at_1']:.3f} | {m['recall_at_5']:.3f} | {m['recall_at_20']:.3f} |"
              for d, m in metrics.items()]
    lines += ["", "### Sample predictions", "", "| dataset | question | prediction | gold | EM |", "|---|---|---|---|---|"]
    for dataset_rows in rows.values():
        lines += [f"| {r['dataset']} | {r['question']} | {r['prediction']} | {' / '.join(r['answers'][:3])} | {'yes' if r['exact_match'] else 'no'} |"
                  for r in dataset_rows]
    create_markdown_artifact(key="realm-eval-em", markdown="\n".join(lines), description="Open-QA exact match")


def question_files(params: EvaluateParams) -> list[str]:
    """The question files evaluated: those named, else the demo set and the shipped held-out tenths."""
    return params.qa or evaluation_qa_paths()


def share_text(value: float | None) -> str:
    """A share to three places, or "-" where it is undefined (reader accuracy with no answer read)."""
    return "-" if value is None else f"{value:.3f}"


@flow(name="realm-evaluate")
def evaluate(run: RunParams = RunParams(), params: EvaluateParams = EvaluateParams(),
             checkpoint: str | None = None, index_path: str | None = None, corpus: str | None = None) -> dict[str, dict]:
    """Evaluate the run's fine-tuned checkpoint (its best validated one, or `checkpoint`) on
    `params.qa`; with `corpus`, over that corpus indexed for the run (`realm index`), its
    predictions under `corpora/<corpus>/predictions/`."""
    from realm.model.index.block_store import tagged_entities
    from realm.model.qa.trained_run import TrainedRun

    trained = TrainedRun.at(run.output, checkpoint, index_path, run.model_preset, corpus)
    layout = RunLayout.at(run.output)
    answered = layout.corpus(corpus) if corpus else layout
    qa_files = question_files(params)
    # Answering is deterministic: the same questions, checkpoint, index, blocks and code (all of
    # realm's: the reader and answering code the task calls) give the same predictions, so a
    # reproduction resumed does not answer every row's again.
    reads = [*qa_files, trained.checkpoint, trained.index, answered.blocks, tagged_entities(answered.blocks)]
    stage = cached_in_run(evaluate_qa, layout, reads=reads, writes=[answered.predictions], code="realm")
    metrics = stage(
        str(answered.root), trained.model_preset, qa_files, params, run.device, str(trained.checkpoint), str(trained.index),
        trained.bert_dir,
    )
    _publish(metrics, answered)
    return metrics
