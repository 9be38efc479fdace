"""`realm-evaluate`: exact match, reader accuracy and answer recall@1/5/20 per dataset, with the evidence kept.

Exact match uses the standard normalisation (CuratedTrec answers are regular expressions);
recall@k is the fraction of questions with an answer string in one of the top-k retrieved
blocks; reader accuracy is the exact match among the questions with an answer in the blocks
the reader read (the top `num_read`), which tells a reader that cannot read from a retriever
that found nothing to read. Every prediction is written to `<root>/predictions/<dataset>.parquet` with its
retrieved block ids and p(z|x) (each file's size and sha256 recorded in `predictions/manifest.json`),
and the per-dataset table is published to the Prefect UI.
Answering shows its progress on stderr (`realm.model.progress`).

How far the answers' probabilities can be trusted is measured from the predictions written,
so another calibrator or minimum confidence answers nothing again: the expected calibration
error (10 equal-width bins) of the probability as the reader gives it and as the run's
calibrator maps it (`realm.model.qa.calibration`), with their reliability diagram, and the
risk-coverage curve (`realm.model.qa.risk_coverage`): the exact match of the most confident
answers against their share of the questions, and under `min_confidence` the share answered
and their exact match. Both figures go to `reports/evaluation_*.png` and the evaluation's
markdown artifact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from realm.flows.caching import cached_in_run
from realm.flows.demo import evaluation_qa_paths
from realm.flows.reporting import image_markdown, reliability_diagram, risk_coverage_plot
from realm.model.qa.calibration import Calibrator, expected_calibration_error
from realm.model.qa.risk_coverage import (
    REPORTED_COVERAGES, exact_match_at_coverage, risk_coverage_curve, selective_exact_match,
)
from realm.schemas.run_layout import RunLayout
from realm.flows.params import EvaluateParams, RunParams


@task(name="realm-evaluate-qa", cache_policy=NO_CACHE)
def evaluate_qa(
    output: str, model_preset: str, qa_files: list[str], num_read: int, num_retrieve: int, device: str | None,
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
            [e.question for e in examples], num_read=num_read, num_retrieve=max(num_retrieve, *RECALL_AT),
            progress=bar.advance,
        )
    metrics, rows = score_predictions(examples, predictions, num_read)
    for dataset, dataset_rows in rows.items():
        path = Path(write_table(str(layout.predictions_file(dataset)), dataset_rows, PREDICTIONS))
        record_files(path.parent, [path.name])  # `realm compare` checks them
        logger.info("%s: EM %.3f, reader accuracy %s, recall@5 %.3f over %d questions -> %s", dataset,
                    metrics[dataset]["em"], share_text(metrics[dataset]["reader_accuracy"]), metrics[dataset]["recall_at_5"],
                    metrics[dataset]["n"], path)
    return metrics


@dataclass(frozen=True)
class Scored:
    """One dataset's answers as its PREDICTIONS rows hold them: each answer's probability as the
    reader gives it and as shown (mapped by the run's calibrator, where it has one), and whether it is right."""

    raw: list[float]
    shown: list[float]
    correct: list[bool]

    @classmethod
    def of(cls, rows: list[dict], calibrator: Calibrator | None) -> Scored:
        raw = [math.exp(r["score"]) for r in rows]
        shown = raw if calibrator is None else calibrator.apply_all(raw).tolist()
        return cls(raw, shown, [r["exact_match"] for r in rows])


def confidence_metrics(scored: Scored, calibrated: bool, min_confidence: float) -> dict:
    """How far one dataset's probabilities can be trusted (module docstring)."""
    coverage, em_answered = selective_exact_match(scored.shown, scored.correct, min_confidence)
    return {
        "calibrated": calibrated,
        "ece": expected_calibration_error(scored.shown, scored.correct),
        "ece_uncalibrated": expected_calibration_error(scored.raw, scored.correct),
        "min_confidence": min_confidence, "coverage": coverage, "em_answered": em_answered,
        "em_at_coverage": {f"{c:g}": exact_match_at_coverage(scored.shown, scored.correct, c) for c in REPORTED_COVERAGES},
    }


def _confidence_report(scored: dict[str, Scored], metrics: dict[str, dict], calibrated: bool, reports: Path) -> list[str]:
    """The markdown of the calibration and risk-coverage sections, their PNGs written under `reports`."""
    if len(scored) > 1:  # every dataset's questions pooled, as one more row
        every = scored.values()
        scored = scored | {"all": Scored([p for s in every for p in s.raw], [p for s in every for p in s.shown],
                                         [c for s in every for c in s.correct])}
    reports.mkdir(parents=True, exist_ok=True)
    reliability = reports / "evaluation_reliability.png"
    reliability.write_bytes(reliability_diagram({
        name: {"uncalibrated": (s.raw, s.correct)} | ({"calibrated": (s.shown, s.correct)} if calibrated else {})
        for name, s in scored.items()
    }))
    risk_coverage = reports / "evaluation_risk_coverage.png"
    risk_coverage.write_bytes(
        risk_coverage_plot({name: risk_coverage_curve(s.shown, s.correct) for name, s in scored.items()})
    )

    shown = "calibrated by the run's calibrator" if calibrated else "the reader's own (no calibrator for this checkpoint)"
    lines = ["", "### Calibration", "",
             f"Expected calibration error over 10 equal-width bins; the probabilities shown are {shown}.", "",
             "| dataset | n | ECE uncalibrated | ECE shown |", "|---|---|---|---|"]
    lines += [f"| {name} | {len(s.correct)} | {expected_calibration_error(s.raw, s.correct):.3f} "
              f"| {expected_calibration_error(s.shown, s.correct):.3f} |" for name, s in scored.items()]
    min_confidence = next(iter(metrics.values()))["min_confidence"]
    lines += ["", image_markdown("reliability diagram", reliability), "", "### Risk-coverage", "",
              "Exact match of the answers given when only the most confident share of the questions is answered, and "
              f"the share answered at p >= {min_confidence:g} with their exact match.", "",
              "| dataset | " + " | ".join(f"EM at {c:.0%}" for c in REPORTED_COVERAGES) + " | answered | EM of those |",
              "|---|" + "---|" * (len(REPORTED_COVERAGES) + 2)]
    lines += [f"| {dataset} | " + " | ".join(f"{m['em_at_coverage'][f'{c:g}']:.3f}" for c in REPORTED_COVERAGES)
              + f" | {m['coverage']:.3f} | {share_text(m['em_answered'])} |" for dataset, m in metrics.items()]
    return lines + ["", image_markdown("risk-coverage", risk_coverage)]


def _publish(metrics: dict[str, dict], rows: dict[str, list[dict]], scored: dict[str, Scored], calibrated: bool,
             reports: Path) -> None:
    """The metrics table, the calibration and risk-coverage sections and a sample of each
    dataset's predictions (from `rows`, read back from the run, so a cached evaluation
    publishes them to its own flow run too)."""
    create_table_artifact(
        key="realm-eval-metrics",
        table=[{"dataset": d, **{k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()
                                 if k != "em_at_coverage"}} for d, m in metrics.items()],
        description="exact match, answer recall@k and calibration per dataset",
    )
    lines = ["## Open-QA evaluation", "",
             "| dataset | n | EM | reader accuracy (n) | recall@1 | recall@5 | recall@20 |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {d} | {m['n']} | {m['em']:.3f} | {share_text(m['reader_accuracy'])} ({m['n_answer_read']}) "
              f"| {m['recall_at_1']:.3f} | {m['recall_at_5']:.3f} | {m['recall_at_20']:.3f} |"
              for d, m in metrics.items()]
    lines += _confidence_report(scored, metrics, calibrated, reports)
    lines += ["", "### Sample predictions", "", "| dataset | question | prediction | gold | EM |", "|---|---|---|---|---|"]
    for dataset_rows in rows.values():
        lines += [f"| {r['dataset']} | {r['question']} | {r['prediction']} | {' / '.join(r['answers'][:3])} | {'yes' if r['exact_match'] else 'no'} |"
                  for r in dataset_rows[:5]]
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
    predictions under `corpora/<corpus>/predictions/`. Each dataset's metrics carry the
    calibration and risk-coverage measures of `confidence_metrics`."""
    from realm.model.index.block_store import tagged_entities
    from realm.model.qa.calibration import run_calibrator
    from realm.model.qa.trained_run import TrainedRun
    from realm.schemas import PREDICTIONS, read_table

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
        str(answered.root), trained.model_preset, qa_files, params.num_read, params.num_retrieve, run.device,
        str(trained.checkpoint), str(trained.index), trained.bert_dir,
    )
    calibrator = run_calibrator(layout.root, trained.checkpoint)
    rows = {d: read_table(str(answered.predictions_file(d)), PREDICTIONS).to_pylist() for d in metrics}
    scored = {d: Scored.of(dataset_rows, calibrator) for d, dataset_rows in rows.items()}
    for dataset, m in metrics.items():
        m.update(confidence_metrics(scored[dataset], calibrator is not None, params.min_confidence))
    _publish(metrics, rows, scored, calibrator is not None, answered.reports)
    return metrics
