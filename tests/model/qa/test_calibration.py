import json
import logging
import math

import numpy as np
import pytest

from realm.model.networks.checkpoint import best_checkpoint, load_components, save_checkpoint
from realm.model.networks.config import ModelConfig
from realm.model.qa.answering import Answerer
from realm.model.qa.trained_run import TrainedRun
from realm.model.qa.calibration import (
    Calibrator, calibration_record, expected_calibration_error, reliability_bins, run_calibrator, save_calibration,
)
from realm.schemas import ArtifactError
from realm.schemas.calibration import CALIBRATOR_FILE
from realm.schemas.manifest import IntegrityError


def _smoothed_loss(calibrator: Calibrator, probabilities, correct) -> float:
    """Platt's objective, written out: cross-entropy against (positives + 1) / (positives + 2)
    for a right answer and 1 / (negatives + 2) for a wrong one."""
    positives = sum(correct)
    negatives = len(correct) - positives
    loss = 0.0
    for p, right in zip(probabilities, correct):
        q = calibrator.apply(p)
        target = (positives + 1) / (positives + 2) if right else 1 / (negatives + 2)
        loss -= target * math.log(q) + (1 - target) * math.log(1 - q)
    return loss


def test_ece_weights_each_equal_width_bins_gap_by_its_share_of_questions():
    # bin [0, .1): .05 vs 0; bin [.1, .2): mean .15 vs 1/2; bin [.9, 1]: 1.0 (the last bin holds 1) vs 1
    probabilities, correct = [0.05, 0.1, 0.2 - 1e-9, 1.0], [False, True, False, True]
    assert expected_calibration_error(probabilities, correct) == pytest.approx(0.25 * 0.05 + 0.5 * 0.35 + 0.25 * 0.0)
    bins = reliability_bins(probabilities, correct)
    assert [b.count for b in bins] == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    assert (bins[2].confidence, bins[2].accuracy) == (None, None)
    assert (bins[9].lower, bins[9].upper, bins[9].accuracy) == (0.9, 1.0, 1.0)
    with pytest.raises(ValueError, match="no questions"):
        expected_calibration_error([], [])


def test_the_fitted_map_minimises_platts_smoothed_log_loss():
    rng = np.random.default_rng(0)
    probabilities = rng.uniform(0.05, 0.95, 200).tolist()
    correct = (rng.uniform(size=200) < 0.3).tolist()
    fitted = Calibrator.fit(probabilities, correct)
    best = _smoothed_loss(fitted, probabilities, correct)
    for d_slope in (-0.01, 0.0, 0.01):
        for d_bias in (-0.01, 0.0, 0.01):
            nearby = Calibrator(fitted.slope + d_slope, fitted.bias + d_bias)
            assert _smoothed_loss(nearby, probabilities, correct) >= best - 1e-9


def test_probabilities_drawn_from_a_known_map_recover_it():
    """Answers right with probability sigmoid(0.5 logit p - 1): the fit finds that slope and bias."""
    rng = np.random.default_rng(1)
    probabilities = rng.uniform(0.01, 0.99, 20000)
    truth = Calibrator(0.5, -1.0)
    correct = rng.uniform(size=probabilities.size) < truth.apply_all(probabilities)
    fitted = Calibrator.fit(probabilities.tolist(), correct.tolist())
    assert (fitted.slope, fitted.bias) == pytest.approx((0.5, -1.0), abs=0.05)


def test_a_slice_all_wrong_or_all_alike_still_fits_a_finite_map():
    # All wrong: every target is 1 / (3 + 2), met exactly by a flat map.
    all_wrong = Calibrator.fit([0.9, 0.6, 0.3], [False, False, False])
    assert all_wrong.apply_all([0.9, 0.6, 0.3]) == pytest.approx([0.2] * 3, abs=1e-6)
    alike = Calibrator.fit([0.5] * 4, [True, False, False, False])
    # Every log-odds equal: the map sends 0.5 to the smoothed share right, (1 + 1/3 * 3) / 4 in Platt's targets.
    assert alike.apply(0.5) == pytest.approx((1 * 2 / 3 + 3 * 1 / 5) / 4, abs=1e-6)
    with pytest.raises(ValueError, match="no questions"):
        Calibrator.fit([], [])


def test_the_map_keeps_the_answers_order_and_no_answer_at_zero():
    calibrator = Calibrator(0.6, -1.5)
    mapped = calibrator.apply_all([0.0, 0.01, 0.2, 0.5, 0.9, 1.0])
    assert mapped[0] == 0.0
    assert all(a < b for a, b in zip(mapped[1:], mapped[2:]))
    assert calibrator.apply(0.5) == pytest.approx(1 / (1 + math.exp(1.5)))


def _record(trained_run, checkpoint, calibrator=Calibrator(0.5, -1.0)):
    return calibration_record(calibrator, trained_run.root, checkpoint, 5, [0.2, 0.8, 0.6], [False, True, False])


def test_a_run_answers_with_the_calibrator_fitted_for_its_checkpoint(trained_run, caplog):
    checkpoint = best_checkpoint(trained_run.checkpoints("finetune"))
    record = _record(trained_run, checkpoint)
    assert (record["checkpoint"], record["questions"], record["exact_match"]) == ("checkpoints/finetune/4", 3, 1 / 3)
    assert record["ece_before"] == pytest.approx(expected_calibration_error([0.2, 0.8, 0.6], [False, True, False]))
    path = save_calibration(trained_run.root, record)
    assert path == trained_run.calibration / CALIBRATOR_FILE
    with caplog.at_level(logging.WARNING):
        assert run_calibrator(trained_run.root, checkpoint) == Calibrator(0.5, -1.0)
    assert caplog.records == []

    run = TrainedRun.at(trained_run.root)
    uncalibrated = Answerer.from_checkpoint(
        str(run.checkpoint), str(run.index), run.blocks, ModelConfig.preset(run.model_preset)
    )
    calibrated = Answerer.from_run(trained_run.root)
    question = "Where does the Nile flow?"
    (raw,) = uncalibrated.answer([question])
    (shown,) = calibrated.answer([question])
    assert (shown.answer, shown.score) == (raw.answer, raw.score)
    assert raw.probability == pytest.approx(math.exp(raw.score))
    assert shown.probability == pytest.approx(Calibrator(0.5, -1.0).apply(raw.probability))


def test_a_run_without_a_calibrator_answers_uncalibrated_and_says_so_once(trained_run, caplog):
    with caplog.at_level(logging.WARNING, logger="realm.model.qa.calibration"):
        answerer = Answerer.from_run(trained_run.root)
        answerer.answer(["Where does the Nile flow?", "What is the capital of France?"])
    assert answerer.calibrator is None
    (warning,) = caplog.records
    assert warning.getMessage() == (
        f"{trained_run.root} has no calibrator: answer probabilities are the reader's own, uncalibrated "
        f"(realm calibrate --run {trained_run.root} fits one)"
    )


def test_a_calibrator_fitted_for_another_checkpoint_is_not_used(trained_run, caplog):
    checkpoint = best_checkpoint(trained_run.checkpoints("finetune"))
    save_calibration(trained_run.root, _record(trained_run, checkpoint))
    components = load_components(checkpoint)
    components["reader"].span_output.bias.data += 1.0  # fine-tuned again: other weights
    other = save_checkpoint(trained_run.checkpoints("finetune"), 5, components)
    with caplog.at_level(logging.WARNING, logger="realm.model.qa.calibration"):
        assert run_calibrator(trained_run.root, other) is None
    (warning,) = caplog.records
    assert "was fitted for checkpoints/finetune/4, not for" in warning.getMessage()


def test_a_damaged_or_malformed_calibrator_is_an_error_naming_the_file(trained_run):
    checkpoint = best_checkpoint(trained_run.checkpoints("finetune"))
    path = save_calibration(trained_run.root, _record(trained_run, checkpoint))
    record = json.loads(path.read_text())
    path.write_text(json.dumps(record | {"slope": 0.75}))  # edited by hand: no longer the file its manifest lists
    with pytest.raises(IntegrityError, match=CALIBRATOR_FILE):
        run_calibrator(trained_run.root, checkpoint)
    with pytest.raises(ArtifactError, match=f"{path}: not a calibrator \\('slope' is 'steep', not float or int\\)"):
        save_calibration(trained_run.root, record | {"slope": "steep"})
