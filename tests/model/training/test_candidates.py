import numpy as np

from realm.model.training.candidates import assemble_candidates, filter_trivial_retrievals, mips_fetch_size


def _hits(ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    scores = np.linspace(10, 1, len(ids), dtype=np.float32)
    return scores[None, :], np.array([ids], dtype=np.int64)


def test_filter_trivial_retrievals_keeps_order_and_drops_excluded():
    keep = filter_trivial_retrievals(np.array([5, -9, 7, 3]), {-9, 3})
    assert keep.tolist() == [True, False, True, False]


def test_origin_and_forbidden_never_appear_and_null_is_first():
    scores, ids = _hits([100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100])
    candidates = assemble_candidates(scores, ids, origin_block_ids=[200], forbidden_block_ids=[[400, 500]])
    assert candidates.block_ids.shape == (1, 8)
    assert candidates.mask.all()
    real = candidates.block_ids[0, 1:].tolist()
    assert not {200, 400, 500} & set(real)
    # Refill: the next hits move up, order preserved.
    assert real == [100, 300, 600, 700, 800, 900, 1000]
    np.testing.assert_array_equal(candidates.mips_scores[0, 1:], scores[0, [0, 2, 5, 6, 7, 8, 9]])


def test_too_few_hits_are_padded_and_masked():
    scores, ids = _hits([1, 2, 3, 4])
    scores[0, 3] = -np.inf  # the index ran out of blocks
    candidates = assemble_candidates(scores, ids, origin_block_ids=[2], forbidden_block_ids=[[]])
    assert candidates.mask[0].tolist() == [True, True, True, False, False, False, False, False]
    assert candidates.block_ids[0, 1:3].tolist() == [1, 3]


def test_fetch_size_leaves_k_minus_one_after_worst_case_exclusions():
    forbidden = [[1], [1, 2, 3, 4]]
    fetch = mips_fetch_size(forbidden, num_candidates=8)
    # Worst case: all 4 forbidden plus the origin come first.
    assert fetch - (4 + 1) == 7


def test_rows_are_independent():
    ids = np.array([[1, 2, 3], [1, 2, 3]], dtype=np.int64)
    scores = np.ones_like(ids, dtype=np.float32)
    candidates = assemble_candidates(scores, ids, [1, 3], [[], [2]], num_candidates=3)
    assert candidates.block_ids[:, 1:].tolist() == [[2, 3], [1, -1]]
    assert candidates.mask.tolist() == [[True, True, True], [True, True, False]]
