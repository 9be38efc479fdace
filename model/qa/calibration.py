"""Calibrated answer probabilities: the chance an answer is exactly right, mapped from the
reader's own probability (the answer's share of the joint softmax over the read blocks' spans,
`realm.model.qa.answering`), fitted on the questions fine-tuning held out for validation and
never on a question evaluated.

The map is Platt scaling of the answer's log-odds, p' = sigmoid(a * logit(p) + b): temperature
scaling (a = 1/T) with a bias. The reader's own p runs far above its exact match wherever the
blocks it read do not hold the answer, a shift a temperature alone cannot undo (it keeps
p = 0.5 where it is). The map keeps the answers' order by p, so a threshold on either picks
the same answers; on the held-out validation questions it had a lower log loss than isotonic
regression and a temperature (docs/measurements.md, "Calibrated answer probabilities"). It is
fitted to Platt's smoothed targets ((positives + 1) / (positives + 2) for a right answer,
1 / (negatives + 2) for a wrong one), so a validation slice all right or all wrong still gives
finite parameters.

The calibrator lives with the run (`<root>/calibration/calibrator.json`, `realm.schemas.calibration`)
and names the checkpoint it was fitted for by its components' hashes: a checkpoint it was not
fitted for answers uncalibrated, saying so once.

ECE, the expected calibration error, is the mean over `ECE_BINS` equal-width bins of the
shown probability of |mean probability - exact match|, weighted by the bin's share of questions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from realm.model.publish import record_files
from realm.schemas.calibration import CALIBRATOR_FILE, read_calibration, write_calibration
from realm.schemas.manifest import read_manifest, verify_step
from realm.schemas.run_layout import RunLayout

log = logging.getLogger(__name__)

ECE_BINS = 10
# Probabilities are clipped this far from 0 and 1 before their log-odds are taken: the reader
# gives p = 0 to a question it read nothing for, and p = 1 in float32 to a sure span.
_EDGE = 1e-7


@dataclass(frozen=True)
class ReliabilityBin:
    lower: float  # the bin's probabilities lie in [lower, upper) ([lower, 1] for the last)
    upper: float
    count: int
    confidence: float | None  # mean probability in the bin (None: an empty bin)
    accuracy: float | None  # exact match in the bin


def reliability_bins(probabilities: Sequence[float], correct: Sequence[bool], bins: int = ECE_BINS) -> list[ReliabilityBin]:
    """Every one of `bins` equal-width bins of [0, 1] with its questions' mean probability and exact match."""
    p = np.asarray(probabilities, dtype=np.float64)
    right = np.asarray(correct, dtype=np.float64)
    index = np.minimum((p * bins).astype(np.int64), bins - 1)  # [questions]
    result = []
    for b in range(bins):
        inside = index == b
        count = int(inside.sum())
        result.append(ReliabilityBin(
            b / bins, (b + 1) / bins, count,
            float(p[inside].mean()) if count else None, float(right[inside].mean()) if count else None,
        ))
    return result


def expected_calibration_error(probabilities: Sequence[float], correct: Sequence[bool], bins: int = ECE_BINS) -> float:
    """ECE over `bins` equal-width bins (module docstring); ValueError for no questions."""
    if len(probabilities) == 0:
        raise ValueError("no questions to measure calibration on")
    return sum(
        b.count / len(probabilities) * abs(b.confidence - b.accuracy)
        for b in reliability_bins(probabilities, correct, bins) if b.count
    )


def answer_log_odds(probabilities: Sequence[float] | np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probabilities, dtype=np.float64), _EDGE, 1 - _EDGE)
    return np.log(p) - np.log1p(-p)


def _smoothed_log_loss(logits: np.ndarray, targets: np.ndarray) -> float:
    # -(t log sigmoid(z) + (1 - t) log(1 - sigmoid(z))), without overflow
    return float(np.sum(targets * np.logaddexp(0, -logits) + (1 - targets) * np.logaddexp(0, logits)))


@dataclass(frozen=True)
class Calibrator:
    """p' = sigmoid(slope * logit(p) + bias)."""

    slope: float
    bias: float

    def apply(self, probability: float) -> float:
        return float(self.apply_all([probability])[0])

    def apply_all(self, probabilities: Sequence[float]) -> np.ndarray:
        """Each probability mapped; 0 (no answer: nothing was read) stays 0."""
        p = np.asarray(probabilities, dtype=np.float64)
        return np.where(p > 0, 1 / (1 + np.exp(-(self.slope * answer_log_odds(p) + self.bias))), 0.0)

    @classmethod
    def fit(cls, probabilities: Sequence[float], correct: Sequence[bool], iterations: int = 100) -> Calibrator:
        """The slope and bias minimising the log loss against Platt's smoothed targets (module
        docstring), by Newton's method with step halving; ValueError for no questions."""
        if len(probabilities) == 0:
            raise ValueError("no questions to fit a calibrator on")
        right = np.asarray(correct, dtype=bool)
        positives = int(right.sum())
        targets = np.where(right, (positives + 1) / (positives + 2), 1 / (len(right) - positives + 2))  # [questions]
        features = np.stack([answer_log_odds(probabilities), np.ones(len(right))], axis=1)  # [questions, 2]
        weights = np.array([1.0, 0.0])  # the identity: p' = p
        loss = _smoothed_log_loss(features @ weights, targets)
        for _ in range(iterations):
            predicted = 1 / (1 + np.exp(-(features @ weights)))
            gradient = features.T @ (predicted - targets)  # [2]
            hessian = features.T @ (features * (predicted * (1 - predicted))[:, None])  # [2, 2]
            # Least squares: every log-odds equal leaves the slope free, and the Hessian singular.
            step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
            scale = 1.0
            while scale > 1e-8:
                candidate = weights - scale * step
                candidate_loss = _smoothed_log_loss(features @ candidate, targets)
                if candidate_loss <= loss:
                    break
                scale /= 2
            else:
                break  # no step lowers the loss: at the minimum, to float precision
            converged = loss - candidate_loss < 1e-12 * max(1.0, loss)
            weights, loss = candidate, candidate_loss
            if converged:
                break
        return cls(float(weights[0]), float(weights[1]))


def checkpoint_components_sha256(checkpoint: str | os.PathLike) -> str:
    """sha256 over the hashes a checkpoint's manifest lists for its components' files (its
    weights and configs, not its training state): what answers, whatever step it was published as."""
    files = read_manifest(checkpoint)["files"]
    components = {name: entry["sha256"] for name, entry in files.items() if "/" in name}
    return hashlib.sha256(json.dumps(components, sort_keys=True).encode()).hexdigest()


def calibration_record(
    calibrator: Calibrator, root: str | os.PathLike, checkpoint: str | os.PathLike, num_read: int,
    probabilities: Sequence[float], correct: Sequence[bool],
) -> dict:
    """The `calibrator.json` record of `calibrator`, fitted for `checkpoint` of the run at `root`
    on the reader's `probabilities` for validation questions answered right or not (`correct`)."""
    return {
        "method": "platt", "slope": calibrator.slope, "bias": calibrator.bias,
        "checkpoint": os.path.relpath(Path(checkpoint).resolve(), RunLayout.at(root).root),
        "components_sha256": checkpoint_components_sha256(checkpoint), "num_read": num_read,
        "questions": len(correct), "exact_match": float(np.mean(correct)), "ece_bins": ECE_BINS,
        "ece_before": expected_calibration_error(probabilities, correct),
        "ece_after": expected_calibration_error(calibrator.apply_all(probabilities), correct),
    }


def save_calibration(root: str | os.PathLike, record: dict) -> Path:
    """Write `record` as the run's calibrator, its size and sha256 in the directory's manifest."""
    directory = RunLayout.at(root).calibration
    path = write_calibration(directory, record)
    record_files(directory, [CALIBRATOR_FILE])
    return path


def run_calibrator(root: str | os.PathLike, checkpoint: str | os.PathLike) -> Calibrator | None:
    """The calibrator the run at `root` holds for `checkpoint`; None, logged once, for a run
    without one (fine-tuned before calibration existed) or with one fitted for another
    checkpoint. A calibrator file that does not match its manifest, or does not parse, is an
    error naming it (`IntegrityError`, `ArtifactError`)."""
    layout = RunLayout.at(root)
    path = layout.calibration / CALIBRATOR_FILE
    if not path.is_file():
        log.warning(
            "%s has no calibrator: answer probabilities are the reader's own, uncalibrated (realm calibrate --run %s fits one)",
            layout.root, layout.root,
        )
        return None
    verify_step(layout.calibration)
    record = read_calibration(path)
    if record["components_sha256"] != checkpoint_components_sha256(checkpoint):
        log.warning(
            "%s was fitted for %s, not for %s, which answers: answer probabilities are uncalibrated "
            "(realm calibrate --run %s fits one for it)", path, record["checkpoint"], checkpoint, layout.root,
        )
        return None
    return Calibrator(record["slope"], record["bias"])
