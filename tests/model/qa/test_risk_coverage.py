import numpy as np
import pytest

from realm.model.qa.risk_coverage import (
    MIN_CONFIDENCE, answered, exact_match_at_coverage, risk_coverage_curve, selective_exact_match,
)

# Five answers, most confident first after sorting: 0.9 right, 0.7 wrong, 0.7 right, 0.4 right, 0.1 wrong.
PROBABILITIES = [0.4, 0.7, 0.9, 0.1, 0.7]
CORRECT = [True, False, True, False, True]


def test_by_default_every_question_is_answered_even_one_nothing_was_read_for():
    assert answered(0.0, MIN_CONFIDENCE)
    assert selective_exact_match(PROBABILITIES, CORRECT, MIN_CONFIDENCE) == (1.0, 3 / 5)


def test_a_minimum_confidence_answers_only_the_questions_at_or_above_it():
    assert answered(0.7, 0.7) and not answered(0.69, 0.7)
    assert selective_exact_match(PROBABILITIES, CORRECT, 0.5) == (3 / 5, 2 / 3)
    assert selective_exact_match(PROBABILITIES, CORRECT, 0.95) == (0.0, None)


def test_exact_match_at_a_coverage_is_that_of_the_most_confident_share():
    assert exact_match_at_coverage(PROBABILITIES, CORRECT, 1.0) == pytest.approx(3 / 5)
    assert exact_match_at_coverage(PROBABILITIES, CORRECT, 0.2) == 1.0  # the 0.9 alone
    # 0.4 of 5 is 2 answers: 0.9 and the first 0.7 in question order (wrong)
    assert exact_match_at_coverage(PROBABILITIES, CORRECT, 0.4) == 0.5
    assert exact_match_at_coverage(PROBABILITIES, CORRECT, 0.01) == 1.0  # at least one answer


def test_the_curve_has_a_point_per_threshold_answering_ties_together():
    coverage, exact_match = risk_coverage_curve(PROBABILITIES, CORRECT)
    np.testing.assert_allclose(coverage, [1 / 5, 3 / 5, 4 / 5, 1.0])
    np.testing.assert_allclose(exact_match, [1.0, 2 / 3, 3 / 4, 3 / 5])
    for share, em in zip(coverage, exact_match):  # each point is what some threshold gives
        threshold = sorted(PROBABILITIES, reverse=True)[round(share * 5) - 1]
        assert selective_exact_match(PROBABILITIES, CORRECT, threshold) == pytest.approx((share, em))
