"""Statistics for comparing two systems on the same examples: the exact McNemar test on their
discordant examples, percentile-bootstrap intervals of an accuracy, and of the difference of two
systems' accuracies averaged over several sets of examples (paired: one resample for both), and
a sign-flip test of that difference.

Pure Python and numpy; the pre-training evaluation and `realm compare` both use them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mcnemar_exact_p_value(only_first_right: int, only_second_right: int) -> float:
    """Two-sided exact McNemar test: under "both are equally accurate" each discordant
    example is a fair coin, so p = P(a split at least this uneven of their total)."""
    discordant = only_first_right + only_second_right
    tail = sum(math.comb(discordant, i) for i in range(min(only_first_right, only_second_right) + 1))
    return min(1.0, 2 * tail / 2**discordant)


_DRAWS_PER_CHUNK = 4_000_000


def bootstrap_interval(
    correct: Sequence[bool], confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of `correct` (examples resampled with
    replacement, seeded so a table is reproducible); (nan, nan) for no examples."""
    values = np.asarray(correct, dtype=np.float64)
    if values.size == 0:
        return math.nan, math.nan
    return _percentiles(_resampled_means(values, resamples, np.random.default_rng(seed)), confidence)


def paired_sign_flip_p_value(
    sets: Sequence[tuple[Sequence[float], Sequence[float]]], resamples: int = 10_000, seed: int = 0
) -> float:
    """Two-sided p of the difference `paired_difference_interval` measures, under "the two
    systems are exchangeable on every example": each example's difference (outcomes may be
    averages over seeds) flips sign at random. Monte Carlo, (1 + draws as extreme) / (1 +
    resamples); on one set of 0/1 outcomes it is the exact McNemar test, drawn. Sets without
    examples are left out; nan when none has any."""
    differences = _differences(sets)
    if not differences:
        return math.nan
    rng = np.random.default_rng(seed)
    observed = abs(np.mean([d.mean() for d in differences]))
    flipped = np.mean([_chunked_means(d, resamples, lambda rows, d=d: d * rng.choice((-1.0, 1.0), size=(rows, d.size)))
                       for d in differences], axis=0)
    return float((1 + np.count_nonzero(np.abs(flipped) >= observed - 1e-12)) / (1 + resamples))


def paired_difference_interval(
    sets: Sequence[tuple[Sequence[bool], Sequence[bool]]], confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """The first system's accuracy minus the second's, each averaged over `sets` (pairs of
    outcomes on one set's examples, in the same order; every set weighs the same, as a table's
    mean over datasets does), and its percentile-bootstrap interval: each set's examples
    resampled with replacement, the same resample for both systems. Sets without examples are
    left out; (nan, nan, nan) when none has any."""
    differences = _differences(sets)
    if not differences:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = np.mean([_resampled_means(d, resamples, rng) for d in differences], axis=0)
    low, high = _percentiles(means, confidence)
    return float(np.mean([d.mean() for d in differences])), low, high


def _differences(sets: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[np.ndarray]:
    """Each set's example-by-example first minus second, sets without examples left out."""
    return [np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64)
            for first, second in sets if len(first)]


def _resampled_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The means of `resamples` resamples of `values` with replacement."""
    return _chunked_means(values, resamples, lambda rows: values[rng.integers(0, values.size, size=(rows, values.size))])


def _chunked_means(values: np.ndarray, resamples: int, draw) -> np.ndarray:
    """Row means of `resamples` rows that `draw(rows)` makes from `values`, a chunk at a time."""
    # Drawn in chunks of ~4M values (32 MB): all at once held resamples x examples, 13 GB for
    # NQ-open's training set. The generator yields the same draws either way.
    rows = max(1, _DRAWS_PER_CHUNK // values.size)
    return np.concatenate([draw(min(rows, resamples - done)).mean(axis=1) for done in range(0, resamples, rows)])


def _percentiles(means: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)
