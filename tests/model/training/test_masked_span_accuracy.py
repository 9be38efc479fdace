import math

import numpy as np
import pytest
import torch

from realm.model.training.candidates import Candidates
from realm.model.training.masked_span_accuracy import MaskedSpanTally


def test_a_batch_is_tallied_per_example_with_its_candidates_and_no_padding():
    candidates = Candidates(
        block_ids=np.array([[-1, 7, 8, -1], [-1, 9, 7, 5]]),
        mask=np.array([[True, True, True, False], [True, True, True, True]]),
        mips_scores=np.zeros((2, 4), dtype=np.float32),
    )
    log_p_z = torch.log(torch.tensor([[0.2, 0.5, 0.3, 0.0], [0.1, 0.2, 0.3, 0.4]]))
    holding = np.array([[False, False, True, False], [False, False, False, False]])
    right = torch.tensor([[False, False, True, True], [True, False, False, False]])  # the padding slot's "right" ignored
    tally = MaskedSpanTally()
    tally.add([11, 12], torch.tensor([True, False]), candidates, log_p_z, holding, right)

    first, second = tally.outcomes(step=3)
    assert {k: first[k] for k in ("example_id", "step", "right_with_retrieval", "right_null_only",
                                  "span_in_candidates", "right_reading_holder")} == {
        "example_id": 11, "step": 3, "right_with_retrieval": True, "right_null_only": False,
        "span_in_candidates": True, "right_reading_holder": True,
    }
    assert first["candidate_block_ids"] == [-1, 7, 8]
    assert first["retrieval_log_probs"] == pytest.approx([math.log(0.2), math.log(0.5), math.log(0.3)])
    assert (first["candidates_holding_span"], first["candidates_right"]) == ([False, False, True], [False, False, True])
    assert (second["right_null_only"], second["span_in_candidates"], second["right_reading_holder"]) == (True, False, False)
    assert second["candidate_block_ids"] == [-1, 9, 7, 5]
    summary = tally.summary()
    assert (summary["examples"], summary["right_only_with_retrieval"], summary["right_only_null"]) == (2, 1, 1)
    assert summary["span_in_candidates_right_reading_that_block"] == 1
