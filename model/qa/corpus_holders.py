"""Every block of the corpus that holds a question's answer, by the rule fine-tuning's gold
spans use (`realm.model.qa.gold_spans`): text answers match whole words by wordpieces,
CuratedTrec's regex answers the block text in full.

Testing 3k questions against 10k blocks span by span would take hours; a posting list of the
blocks each wordpiece occurs in narrows a text answer to the blocks holding all of its
wordpieces, and a regex answer to the blocks whose text it matches anywhere (the test
`regex_gold_spans` itself starts with), so the exact test runs on those alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from realm.model.index.block_store import BlockStore
from realm.model.qa.gold_spans import answer_wordpieces, compile_patterns, holds_regex_span, wordpiece_spans
from realm.model.qa.qa_data import QAExample
from realm.model.tokenization import WordPieceTokenizer


def answer_holders(
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    block_ids: np.ndarray,
    examples: Sequence[QAExample],
    max_span_wordpieces: int,
) -> list[np.ndarray]:
    """For each example, the sorted block ids among `block_ids` (e.g. an index's) with a gold
    span of its answer, leaving out the blocks it excludes."""
    block_ids = np.asarray(block_ids, dtype=np.int64)
    postings: dict[int, set[int]] = defaultdict(set)
    for block_id in block_ids.tolist():
        for wordpiece in set(blocks.body_ids(block_id)):
            postings[wordpiece].add(block_id)
    texts: list[tuple[int, str]] | None = None
    holders = []
    for example in examples:
        excluded = set(example.excluded_block_ids)
        if example.answer_type == "regex":
            if texts is None:
                texts = [(b, blocks.text(b)) for b in block_ids.tolist()]
            holding = [
                b for b in sorted(_regex_candidates(example.answers, texts))
                if b not in excluded
                and holds_regex_span(tokenizer, blocks.body_ids(b), blocks.text(b), example.answers, max_span_wordpieces)
            ]
        else:
            answers = answer_wordpieces(tokenizer, example.answers, max_span_wordpieces)  # encoded once, not per block
            holding = [
                b for b in sorted(_wordpiece_candidates(answers, postings))
                if b not in excluded and wordpiece_spans(tokenizer, blocks.body_ids(b), answers)
            ]
        holders.append(np.asarray(holding, dtype=np.int64))
    return holders


def _wordpiece_candidates(answers: Sequence[Sequence[int]], postings: dict[int, set[int]]) -> set[int]:
    """Blocks holding every wordpiece of some answer (`answer_wordpieces`)."""
    found: set[int] = set()
    for ids in answers:
        lists = sorted((postings.get(i, set()) for i in set(ids)), key=len)
        found |= set.intersection(*lists)
    return found


def _regex_candidates(patterns: Sequence[str], texts: list[tuple[int, str]]) -> set[int]:
    """Blocks whose text some pattern matches anywhere (a pattern that does not compile
    matches nothing, as in `regex_gold_spans`). Each block is searched on its own: one search
    of the joined texts would let a match run across a block's end and hide the next block's."""
    compiled = compile_patterns(patterns)
    return {block_id for block_id, text in texts if any(c.search(text) for c in compiled)}
