"""Pre-training candidate sets: the null document first, then the top MIPS hits that are not trivial.

Pure numpy on plain values, so the rule is testable without a model or an index. The MIPS
search over-fetches (`mips_fetch_size`) so that after the exclusions k − 1 real blocks remain
whenever the corpus has them; otherwise the tail is padding, masked out.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

NUM_CANDIDATES = 8
# Block-id value in the null-document and padding slots. Block ids are arbitrary int64
# hashes, so this may collide with a real id: read the slot's meaning from its position
# (column 0 is always the null document) and from `Candidates.mask`, never from the id.
NULL_BLOCK_ID = -1


@dataclass(frozen=True)
class Candidates:
    block_ids: np.ndarray  # [batch, k] int64; column 0 the null document
    mask: np.ndarray  # [batch, k] bool; False for padding when too few hits remained
    mips_scores: np.ndarray  # [batch, k] float32; the index's score (stale θ); 0 for null/padding

    @property
    def num_candidates(self) -> int:
        return self.block_ids.shape[1]


def filter_trivial_retrievals(hit_block_ids: np.ndarray, excluded_block_ids: Collection[int]) -> np.ndarray:
    """Boolean keep-mask over `hit_block_ids` [n]: False for the example's own block and for
    every block that holds its sentence verbatim.

    Why (REALM §3.4, "exclude trivial retrievals"): the masked sentence comes from the corpus,
    so its origin block contains the masked span. Retrieving it lets the encoder copy the
    answer, which rewards the retriever for string matching of x against z rather than for
    finding knowledge that helps predict y. Only pre-training excludes; at fine-tuning and
    inference every block is fair game.
    """
    if not excluded_block_ids:
        return np.ones(len(hit_block_ids), dtype=bool)
    return ~np.isin(hit_block_ids, np.fromiter(excluded_block_ids, dtype=np.int64))


def mips_fetch_size(forbidden_block_ids: Sequence[Collection[int]], num_candidates: int = NUM_CANDIDATES) -> int:
    """How many MIPS hits to ask for so that, after removing the origin block and every
    forbidden block of the worst example in the batch, k − 1 real blocks are left."""
    most_excluded = max((len(forbidden) for forbidden in forbidden_block_ids), default=0)
    return num_candidates - 1 + most_excluded + 1  # + 1: the origin block, if not listed


def assemble_candidates(
    hit_scores: np.ndarray,
    hit_block_ids: np.ndarray,
    origin_block_ids: Sequence[int],
    forbidden_block_ids: Sequence[Collection[int]],
    num_candidates: int = NUM_CANDIDATES,
) -> Candidates:
    """Null document + the first k − 1 MIPS hits that are neither the origin nor forbidden.

    hit_scores, hit_block_ids: [batch, n_hits] best first, from `MipsIndex.search`; a hit
    scored -inf is no hit (the index had fewer than n_hits blocks to return).
    """
    batch = hit_block_ids.shape[0]
    block_ids = np.full((batch, num_candidates), NULL_BLOCK_ID, dtype=np.int64)
    mips_scores = np.zeros((batch, num_candidates), dtype=np.float32)
    mask = np.zeros((batch, num_candidates), dtype=bool)
    mask[:, 0] = True  # the null document: lets the encoder fall back on no evidence
    for row in range(batch):
        excluded = {int(origin_block_ids[row]), *map(int, forbidden_block_ids[row])}
        keep = filter_trivial_retrievals(hit_block_ids[row], excluded)
        keep &= np.isfinite(hit_scores[row])
        kept = np.flatnonzero(keep)[: num_candidates - 1]  # refill: the next hits move up
        block_ids[row, 1 : 1 + len(kept)] = hit_block_ids[row, kept]
        mips_scores[row, 1 : 1 + len(kept)] = hit_scores[row, kept]
        mask[row, 1 : 1 + len(kept)] = True
    return Candidates(block_ids=block_ids, mask=mask, mips_scores=mips_scores)
