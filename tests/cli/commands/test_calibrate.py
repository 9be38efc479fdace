import json
import math

import pytest
from prefect.testing.utilities import prefect_test_harness

from realm.cli.main import main
from realm.model.networks.checkpoint import load_components, save_checkpoint
from realm.model.networks.config import ModelConfig
from realm.model.qa.answer_metrics import exact_match
from realm.model.qa.answering import Answerer
from realm.model.qa.calibration import Calibrator, expected_calibration_error
from realm.model.qa.qa_data import read_qa_file
from realm.model.qa.trained_run import TrainedRun
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.training.train_finetune import is_validation_question
from realm.schemas import PREDICTIONS, read_table
from tests.cli.refusal import refused

FRACTION = FinetuneConfig().validation_fraction  # the trained_run's checkpoint records no settings


def _question_file(tmp_path) -> str:
    """Questions about the test corpus, enough that a few fall in fine-tuning's validation share."""
    subjects = [("the capital of France", "Paris"), ("the river flowing north into the Mediterranean", "the Nile"),
                ("the highest mountain above sea level", "Mount Everest"), ("the author of the first algorithm", "Ada Lovelace")]
    rows = [{"question": f"What is {subject}? ({n})", "answers": [answer], "dataset": "mine"}
            for n in range(30) for subject, answer in subjects]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_calibrate_fits_on_the_held_out_questions_and_ask_and_evaluate_then_show_calibrated_probabilities(
    trained_run, tmp_path, capsys
):
    questions = _question_file(tmp_path)
    validation = [e for e in read_qa_file(questions) if is_validation_question(e.question, FRACTION)]
    assert 3 <= len(validation) < 20
    run = TrainedRun.at(trained_run.root)
    reader_own = Answerer.from_checkpoint(str(run.checkpoint), str(run.index), run.blocks, ModelConfig.preset(run.model_preset))
    predictions = reader_own.answer([e.question for e in validation], num_read=FinetuneConfig().num_read)
    probabilities = [p.probability for p in predictions]
    correct = [exact_match(p.answer, e.answers) for p, e in zip(predictions, validation)]
    expected = Calibrator.fit(probabilities, correct)

    with prefect_test_harness(server_startup_timeout=120):
        assert main(["calibrate", "--run", str(trained_run.root), "--qa", questions, "--json"]) == 0
        record = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert (record["checkpoint"], record["questions"], record["num_read"]) == ("checkpoints/finetune/4", len(validation), 5)
        assert (record["slope"], record["bias"]) == pytest.approx((expected.slope, expected.bias))
        assert record["ece_before"] == pytest.approx(expected_calibration_error(probabilities, correct))
        assert (trained_run.reports / "calibration_reliability.png").read_bytes()[:4] == b"\x89PNG"

        assert main(["evaluate", "--run", str(trained_run.root), "--qa", questions, "--min-confidence", "0.2", "--json"]) == 0
        metrics = json.loads(capsys.readouterr().out.splitlines()[-1])["mine"]
    rows = read_table(str(trained_run.predictions_file("mine")), PREDICTIONS).to_pylist()
    raw = [math.exp(r["score"]) for r in rows]
    shown = expected.apply_all(raw)
    right = [r["exact_match"] for r in rows]
    assert metrics["calibrated"] is True
    assert metrics["ece"] == pytest.approx(expected_calibration_error(shown, right), abs=1e-6)
    assert metrics["ece_uncalibrated"] == pytest.approx(expected_calibration_error(raw, right), abs=1e-6)
    assert metrics["coverage"] == pytest.approx(sum(p >= 0.2 for p in shown) / len(rows), abs=1e-6)
    assert set(metrics["em_at_coverage"]) == {"1", "0.8", "0.6", "0.4", "0.2"}
    assert metrics["em_at_coverage"]["1"] == pytest.approx(metrics["em"])
    for name in ("evaluation_reliability.png", "evaluation_risk_coverage.png"):
        assert (trained_run.reports / name).read_bytes()[:4] == b"\x89PNG"

    assert main(["ask", "--run", str(trained_run.root), validation[0].question]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.endswith(f"(p = {expected.apply(probabilities[0]):.3f})"), line


def test_questions_the_run_was_not_fine_tuned_on_are_refused_before_anything_runs(trained_run, tmp_path, capsys):
    questions = _question_file(tmp_path)
    run = TrainedRun.at(trained_run.root)
    inputs = {"data": {"questions": "0" * 64}, "settings": {"validation_fraction": 0.1, "num_read": 5}, "seed": 0}
    save_checkpoint(trained_run.checkpoints("finetune"), 6, load_components(run.checkpoint),
                    extra={"index_path": str(run.index)}, inputs=inputs)
    refused(["calibrate", "--run", str(trained_run.root), "--qa", questions],
            r"^realm calibrate: .*/checkpoints/finetune/6 was fine-tuned on other questions: name the files", capsys)
    assert not trained_run.calibration.exists()
