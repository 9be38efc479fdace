"""`realm-calibrate`: fit the map from the reader's answer probability to the chance the answer
is right (`realm.model.qa.calibration`) on the questions fine-tuning held out for validation,
and keep it with the run (`<root>/calibration/calibrator.json`) for the checkpoint that answers.

Fine-tuning's flow runs it at its end; a run fine-tuned before calibration existed gets one with

    realm calibrate --run runs/demo

The questions are those fine-tuning held out (`is_validation_question`, at the fraction its
checkpoint records) from the files it was fine-tuned on: the checkpoint records their digest,
and other files are refused. They are answered as `realm evaluate` answers, reading as many
blocks as fine-tuning did. Their reliability diagram, before and after, goes to
`reports/calibration_reliability.png` and a markdown artifact.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from realm.flows.caching import cached_in_run
from realm.flows.demo import training_qa_paths
from realm.flows.params import RunParams
from realm.flows.reporting import image_markdown, reliability_diagram
from realm.schemas.run_layout import RunLayout

RELIABILITY_PNG = "calibration_reliability.png"


def validation_slice(examples: list, checkpoint: str) -> tuple[list, int]:
    """(the questions of `examples` fine-tuning held out, the blocks it read per question) for
    `checkpoint`; ValueError when it records other questions than `examples`."""
    from realm.model.networks.checkpoint import checkpoint_inputs
    from realm.model.training.stage_settings import FinetuneConfig
    from realm.model.training.train_finetune import is_validation_question, questions_digest

    inputs = checkpoint_inputs(checkpoint) or {"data": {}, "settings": {}}
    recorded = inputs["data"].get("questions")
    if recorded is not None and recorded != questions_digest(examples):
        raise ValueError(
            f"{checkpoint} was fine-tuned on other questions: name the files it was fine-tuned on, in their order "
            "(realm calibrate --qa FILE ...); only the questions it held out may calibrate it"
        )
    defaults = FinetuneConfig()
    fraction = inputs["settings"].get("validation_fraction", defaults.validation_fraction)
    num_read = inputs["settings"].get("num_read", defaults.num_read)
    return [e for e in examples if is_validation_question(e.question, fraction)], num_read


@task(name="realm-fit-calibration", cache_policy=NO_CACHE)
def fit_calibration(
    output: str, model_preset: str, qa_files: list[str], checkpoint: str, index_path: str, bert_dir: str | None,
    device: str | None,
) -> dict:
    """The calibrator record written for `checkpoint` ({} where no question was held out)."""
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.progress import ProgressBar
    from realm.model.qa.answer_metrics import exact_match
    from realm.model.qa.answering import Answerer
    from realm.model.qa.calibration import Calibrator, calibration_record, save_calibration
    from realm.model.qa.qa_data import read_qa_file

    logger = get_run_logger()
    layout = RunLayout.at(output)
    validation, num_read = validation_slice([e for path in qa_files for e in read_qa_file(path)], checkpoint)
    if not validation:
        logger.warning("no question of %s was held out for validation: answer probabilities stay uncalibrated",
                       ", ".join(qa_files))
        return {}
    answerer = Answerer.from_checkpoint(
        checkpoint, index_path, layout.blocks, ModelConfig.preset(model_preset, bert_dir=bert_dir), device=select_device(device)
    )
    with ProgressBar("calibrating", len(validation), "questions") as bar:
        predictions = answerer.answer([e.question for e in validation], num_read=num_read, num_retrieve=num_read,
                                      progress=bar.advance)
    probabilities = [p.probability for p in predictions]  # the reader's own: the Answerer has no calibrator
    correct = [exact_match(p.answer, e.answers, e.answer_type) for p, e in zip(predictions, validation)]
    calibrator = Calibrator.fit(probabilities, correct)
    record = calibration_record(calibrator, layout.root, checkpoint, num_read, probabilities, correct)
    path = save_calibration(layout.root, record)
    layout.reports.mkdir(parents=True, exist_ok=True)
    (layout.reports / RELIABILITY_PNG).write_bytes(reliability_diagram({"validation": {
        "uncalibrated": (probabilities, correct), "calibrated": (calibrator.apply_all(probabilities).tolist(), correct),
    }}))
    logger.info(
        "calibrated on %d validation questions (EM %.3f): ECE %.3f -> %.3f; p' = sigmoid(%.3f logit p %+.3f) -> %s",
        record["questions"], record["exact_match"], record["ece_before"], record["ece_after"], record["slope"],
        record["bias"], path,
    )
    return record


@flow(name="realm-calibrate")
def calibrate(
    run: RunParams = RunParams(), qa_train: list[str] | None = None, checkpoint: str | None = None,
    index_path: str | None = None,
) -> dict:
    """Calibrate the run's fine-tuned checkpoint (its best validated one, or `checkpoint`) on the
    validation questions of `qa_train` (default: the shipped training sets); returns the
    calibrator record ({} where no question was held out)."""
    from realm.model.index.block_store import tagged_entities
    from realm.model.qa.trained_run import TrainedRun

    trained = TrainedRun.at(run.output, checkpoint, index_path, run.model_preset)
    layout = RunLayout.at(run.output)
    files = qa_train or training_qa_paths()
    reads = [*files, trained.checkpoint, trained.index, layout.blocks, tagged_entities(layout.blocks)]
    stage = cached_in_run(fit_calibration, layout, reads=reads, writes=[layout.calibration], code="realm")
    record = stage(
        str(layout.root), trained.model_preset, files, str(trained.checkpoint), str(trained.index), trained.bert_dir,
        run.device,
    )
    png = layout.reports / RELIABILITY_PNG
    if record:
        create_markdown_artifact(
            key="realm-calibration",
            markdown="\n".join([
                "## Answer probabilities calibrated", "",
                f"Fitted on the {record['questions']} questions fine-tuning held out (EM {record['exact_match']:.3f}), "
                f"for `{record['checkpoint']}`: p' = sigmoid({record['slope']:.3f} logit p {record['bias']:+.3f}).", "",
                "| ECE (10 equal-width bins) | uncalibrated | calibrated |", "|---|---|---|",
                f"| validation questions (fitted on) | {record['ece_before']:.3f} | {record['ece_after']:.3f} |", "",
                image_markdown("reliability on the validation questions", png) if png.is_file() else "",
            ]),
            description="answer probability calibration",
        )
    return record
