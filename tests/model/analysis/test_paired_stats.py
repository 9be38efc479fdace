import math

import pytest

from realm.model.analysis.paired_stats import (
    bootstrap_interval,
    mcnemar_exact_p_value,
    paired_difference_interval,
    paired_sign_flip_p_value,
)


def test_mcnemar_exact_p_value_is_the_two_sided_binomial_tail_of_the_discordant_split():
    assert mcnemar_exact_p_value(0, 0) == 1.0
    assert mcnemar_exact_p_value(3, 0) == pytest.approx(0.25)  # 2 * (1/2)^3
    assert mcnemar_exact_p_value(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_exact_p_value(9, 1) == mcnemar_exact_p_value(1, 9)


def test_bootstrap_interval_brackets_the_accuracy_and_narrows_with_more_examples():
    small = bootstrap_interval([True] * 3 + [False] * 7)
    large = bootstrap_interval([True] * 300 + [False] * 700)
    assert small[0] < 0.3 < small[1] and large[0] < 0.3 < large[1]
    assert large[1] - large[0] < 0.5 * (small[1] - small[0])
    # ~ the normal approximation 0.3 ± 1.96·sqrt(0.3·0.7/1000) = ±0.028 for 1,000 examples
    assert large == pytest.approx((0.3 - 0.028, 0.3 + 0.028), abs=0.006)
    assert bootstrap_interval([True] * 5) == (1.0, 1.0)
    assert all(math.isnan(v) for v in bootstrap_interval([]))
    assert bootstrap_interval([True, False] * 20) == bootstrap_interval([True, False] * 20)  # seeded


def test_bootstrap_resamples_in_chunks_give_the_interval_of_one_draw_of_them_all(monkeypatch):
    import numpy as np

    import realm.model.analysis.paired_stats

    correct = (np.random.default_rng(1).random(1234) < 0.3).astype(np.float64)
    means = correct[np.random.default_rng(0).integers(0, correct.size, size=(500, correct.size))].mean(axis=1)
    whole = tuple(np.quantile(means, [0.025, 0.975]))
    monkeypatch.setattr(realm.model.analysis.paired_stats, "_DRAWS_PER_CHUNK", 100 * correct.size + 7)  # 100 rows, 5 chunks
    assert bootstrap_interval(correct, resamples=500) == pytest.approx(whole, abs=1e-12)  # the same draws


def test_the_paired_difference_weighs_each_set_the_same_and_its_interval_resamples_both_systems_together():
    # Set one: the first system right on 30 of 100 more than the second; set two: both the same.
    first = [True] * 30 + [False] * 70
    difference, low, high = paired_difference_interval([(first, [False] * 100), ([True, False] * 5, [True, False] * 5)])
    assert difference == pytest.approx((0.3 + 0.0) / 2)
    # Set two adds nothing to the spread: the interval is set one's own, halved, ~ 0.15 ± 1.96·sqrt(0.3·0.7/100) / 2.
    assert (low, high) == pytest.approx((0.15 - 0.045, 0.15 + 0.045), abs=0.01)
    # Paired: two systems right on the same examples differ by exactly 0 in every resample.
    assert paired_difference_interval([(first, first)]) == (0.0, 0.0, 0.0)
    # Sets without examples are left out, and none at all gives no difference.
    assert paired_difference_interval([(first, [False] * 100), ([], [])])[0] == pytest.approx(0.3)
    assert all(math.isnan(v) for v in paired_difference_interval([([], [])]))


def test_the_sign_flip_test_is_mcnemar_on_one_set_of_outcomes_and_counts_each_example_once():
    first, second = [True] * 12 + [False] * 3 + [True] * 20, [False] * 12 + [True] * 3 + [True] * 20
    assert paired_sign_flip_p_value([(first, second)]) == pytest.approx(mcnemar_exact_p_value(12, 3), abs=0.005)
    assert paired_sign_flip_p_value([(first, first)]) == 1.0
    # Two seeds that agree, averaged per example, give the one seed's p: an example counts once.
    two_seeds = [((a + a) / 2, (b + b) / 2) for a, b in zip(first, second)]
    assert paired_sign_flip_p_value([(first, second)]) == paired_sign_flip_p_value(
        [([a for a, _ in two_seeds], [b for _, b in two_seeds])])
    assert math.isnan(paired_sign_flip_p_value([([], [])]))
