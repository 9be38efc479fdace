"""Answering only when confident: a caller's minimum confidence turns answers whose
probability is below it into "no answer", and the risk-coverage curve shows what that buys,
the exact match of the answers given against the share of questions answered.

The probability is the one shown (calibrated where the run has a calibrator,
`realm.model.qa.calibration`); calibration keeps the answers' order, so the curve is the same
either way, and only the threshold that picks a share of questions moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Every question answered, whatever its probability, unless a caller asks for a minimum.
MIN_CONFIDENCE = 0.0
# The shares of questions the evaluation report gives the exact match of the most confident at.
REPORTED_COVERAGES = (1.0, 0.8, 0.6, 0.4, 0.2)


def answered(probability: float, min_confidence: float) -> bool:
    """Whether an answer of `probability` is given under `min_confidence` (at least it)."""
    return probability >= min_confidence


def selective_exact_match(
    probabilities: Sequence[float], correct: Sequence[bool], min_confidence: float
) -> tuple[float, float | None]:
    """(share of questions answered, exact match of those answers; None when none is) under `min_confidence`."""
    given = [right for p, right in zip(probabilities, correct, strict=True) if answered(p, min_confidence)]
    return len(given) / len(correct), (sum(given) / len(given) if given else None)


def exact_match_at_coverage(probabilities: Sequence[float], correct: Sequence[bool], coverage: float) -> float:
    """Exact match of the ceil(coverage * n) answers of highest probability (equal
    probabilities in question order), at least one."""
    order = np.argsort(-np.asarray(probabilities, dtype=np.float64), kind="stable")
    kept = order[: max(1, math.ceil(coverage * len(order) - 1e-9))]
    return float(np.asarray(correct, dtype=np.float64)[kept].mean())


def risk_coverage_curve(probabilities: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(coverage, exact match of the answers given) at every threshold that separates the
    answers, from the most confident answer alone to every question answered."""
    p = np.asarray(probabilities, dtype=np.float64)
    order = np.argsort(-p, kind="stable")
    hits = np.cumsum(np.asarray(correct, dtype=np.float64)[order])  # [questions]
    given = np.arange(1, len(p) + 1)
    # A threshold answers all of a tie or none of it: the curve's points end each run of equal p.
    ends = np.flatnonzero(np.append(p[order][1:] != p[order][:-1], True))
    return given[ends] / len(p), hits[ends] / given[ends]
