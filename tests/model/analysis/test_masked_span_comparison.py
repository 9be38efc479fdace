import math

import pytest

from realm.model.analysis.masked_span_comparison import copying_breakdown


def _row(p_z, holding, right, with_retrieval=False):
    """An outcome row over candidates (null document first) with p(z|x) `p_z`."""
    return {
        "right_with_retrieval": with_retrieval, "right_null_only": right[0],
        "retrieval_log_probs": [math.log(p) for p in p_z], "candidates_holding_span": holding, "candidates_right": right,
    }


def test_the_breakdown_ranks_holders_by_p_z_and_finds_the_spans_only_a_holder_gets_right():
    rows = [
        # copied, its holder ranked first; the marginal gets it
        _row([0.1, 0.2, 0.6, 0.1], [False, False, True, False], [False, False, True, False], with_retrieval=True),
        # copied by the holder ranked 3rd (tied with the null document); the best holder is 2nd; the marginal misses it
        _row([0.1, 0.2, 0.6, 0.1], [False, True, False, True], [False, False, False, True]),
        # a holder ranked first reads it right, and so does the sentence alone: not copying
        _row([0.1, 0.7, 0.2], [False, True, False], [True, True, False], with_retrieval=True),
        # the only holder ranked 4th, nothing right
        _row([0.05, 0.5, 0.25, 0.15, 0.05], [False, False, False, False, True], [False] * 5),
        # no holder: left out
        _row([0.5, 0.5], [False, False], [True, False], with_retrieval=True),
        # a holder ranked 2nd reads it right, but so does a block without the span: not copying
        _row([0.1, 0.5, 0.4], [False, False, True], [False, True, True]),
    ]
    assert copying_breakdown(rows) == {
        "span_in_candidates": 5, "holder_rank_1": 2, "holder_rank_2": 2, "holder_rank_3": 0, "holder_rank_4_plus": 1,
        "right_reading_holder": 4, "right_reading_holder_null_too": 1,
        "copied": 2, "copied_holder_first": 1, "copied_holder_first_right": 1,
        "copied_holder_lower": 1, "copied_holder_lower_right": 0,
        "copied_holder_lower_p": pytest.approx(0.1), "copied_holder_lower_top_p": pytest.approx(0.6),
        "reads_blocks": True,
    }
    # outcomes written before the candidates were listed read back with them null
    assert copying_breakdown([*rows, {**rows[0], "retrieval_log_probs": None}]) is None
