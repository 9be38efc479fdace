"""A copy-friendly choice of the masked span: a salient span that few other blocks hold.

The seeded salient span is often one the encoder can guess without reading (measured on the
vital corpus: 29% of them are held by more than 30 other blocks: years, countries), so the few
examples whose span a retrieved block holds teach little copying, and retrieval adds little
to masked-span accuracy. Masking instead a salient span that 1 to `max_blocks` blocks other
than the sentence's own hold verbatim makes the span hard to guess and possible to read: the
idea behind salient-span masking, taken one step further. Measured (docs/measurements.md, "A copy-friendly
target"): the query tower learned to find such blocks, the encoder did not learn to copy, so
`PretrainConfig.copy_span_max_blocks` is off by default. Holders are counted in Python, ~3 s
for the vital corpus's 10k blocks: sized for corpora of that order, not for Wikipedia's 13M.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from realm.model.index.block_store import BlockStore
from realm.model.training.pretrain_step import MAX_MASKED_WORDPIECES

log = logging.getLogger(__name__)


def _span_ids(example: dict, span: dict) -> tuple[int, ...]:
    return tuple(example["token_ids"][span["token_start"] : span["token_end"]])


def _maskable(span: dict) -> bool:
    return 0 < span["token_end"] - span["token_start"] <= MAX_MASKED_WORDPIECES


def span_holders(examples: list[dict], blocks: BlockStore) -> dict[tuple[int, ...], set[int]]:
    """For each maskable salient span's wordpieces, the blocks whose body holds them verbatim
    (what `pretrain_step.candidates_holding_span` checks for a retrieved block)."""
    wanted = {_span_ids(example, span) for example in examples for span in example["spans"] if _maskable(span)}
    lengths = sorted({len(ids) for ids in wanted})
    holders: dict[tuple[int, ...], set[int]] = defaultdict(set)
    for block_id in blocks.block_ids.tolist():
        body = blocks.body_ids(block_id)
        for length in lengths:
            for start in range(len(body) - length + 1):
                ids = tuple(body[start : start + length])
                if ids in wanted:
                    holders[ids].add(block_id)
    return holders


def copy_friendly_examples(examples: list[dict], blocks: BlockStore, max_blocks: int) -> list[dict]:
    """The `examples` with a salient span held by 1 to `max_blocks` blocks outside their
    `forbidden_block_ids`, each with `masked_token_positions` set to the one held by the
    fewest (the seeded span on a tie, else the earliest); the others are left out. Needs the
    `token_ids`, `spans` and `forbidden_block_ids` columns."""
    holders = span_holders(examples, blocks)
    kept = []
    for example in examples:
        forbidden = set(example["forbidden_block_ids"])
        seeded = example["masked_token_positions"]
        choices = []
        for span in example["spans"]:
            if not _maskable(span):
                continue
            count = len(holders.get(_span_ids(example, span), set()) - forbidden)
            if 1 <= count <= max_blocks:
                positions = list(range(span["token_start"], span["token_end"]))
                choices.append((count, positions != seeded, span["token_start"], positions))
        if choices:
            kept.append({**example, "masked_token_positions": min(choices)[3]})
    log.info(
        "copy-friendly spans: %d of %d examples have a salient span held by 1 to %d other blocks",
        len(kept), len(examples), max_blocks,
    )
    return kept
