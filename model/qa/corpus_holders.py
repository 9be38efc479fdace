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
from realm.model.qa.answer_metrics import normalize_answer
from realm.model.qa.gold_spans import compile_patterns, gold_spans
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
        if example.answer_type == "regex":
            if texts is None:
                texts = [(b, blocks.text(b)) for b in block_ids.tolist()]
            candidates = _regex_candidates(example.answers, texts)
        else:
            candidates = _wordpiece_candidates(tokenizer, example.answers, postings, max_span_wordpieces)
        excluded = set(example.excluded_block_ids)
        holding = [
            b for b in sorted(candidates)
            if b not in excluded and gold_spans(tokenizer, blocks, b, example, max_span_wordpieces)
        ]
        holders.append(np.asarray(holding, dtype=np.int64))
    return holders


def _wordpiece_candidates(
    tokenizer: WordPieceTokenizer, answers: Sequence[str], postings: dict[int, set[int]], max_span_wordpieces: int
) -> set[int]:
    """Blocks holding every wordpiece of some answer (as given or normalised)."""
    found: set[int] = set()
    for answer in answers:
        for variant in {answer, normalize_answer(answer)}:
            ids = tokenizer.encode(variant)
            if not 0 < len(ids) <= max_span_wordpieces:
                continue
            lists = sorted((postings.get(i, set()) for i in set(ids)), key=len)
            found |= set.intersection(*lists)
    return found


def _regex_candidates(patterns: Sequence[str], texts: list[tuple[int, str]]) -> set[int]:
    """Blocks whose text some pattern matches anywhere (a pattern that does not compile
    matches nothing, as in `regex_gold_spans`). Each block is searched on its own: one search
    of the joined texts would let a match run across a block's end and hide the next block's."""
    compiled = compile_patterns(patterns)
    return {block_id for block_id, text in texts if any(c.search(text) for c in compiled)}
