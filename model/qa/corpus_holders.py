"""Every block of the corpus that holds a question's answer, by the rule fine-tuning's gold
spans use (`realm.model.qa.gold_spans`): text answers match whole words by wordpieces,
CuratedTrec's regex answers the block text in full.

Testing 3k questions against 10k blocks span by span would take hours; a posting list of the
blocks each wordpiece occurs in narrows a text answer to the blocks holding all of its
wordpieces, and one search of each regex over the joined corpus text narrows a regex answer to
the blocks it matches anywhere, so the exact test runs on those alone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from realm.model.index.block_store import BlockStore
from realm.model.qa.answer_metrics import normalize_answer
from realm.model.qa.gold_spans import gold_spans
from realm.model.qa.qa_data import QAExample
from realm.model.tokenization import WordPieceTokenizer

# Joins block texts for the regex pass: no answer pattern matches across it.
_SEPARATOR = "\n\x00\n"


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
    texts: str | None = None
    starts = np.empty(0, dtype=np.int64)
    holders = []
    for example in examples:
        if example.answer_type == "regex":
            if texts is None:
                pieces = [blocks.text(int(b)) for b in block_ids]
                starts = np.cumsum([0] + [len(p) + len(_SEPARATOR) for p in pieces[:-1]])
                texts = _SEPARATOR.join(pieces)
            candidates = _regex_candidates(example.answers, texts, starts, block_ids)
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


def _regex_candidates(patterns: Sequence[str], texts: str, starts: np.ndarray, block_ids: np.ndarray) -> set[int]:
    """Blocks whose text some pattern matches anywhere (a pattern that does not compile
    matches nothing, as in `regex_gold_spans`)."""
    found: set[int] = set()
    for pattern in patterns:
        try:
            compiled = re.compile(pattern, flags=re.IGNORECASE | re.UNICODE)
        except re.error:
            continue
        for match in compiled.finditer(texts):
            found.add(int(block_ids[np.searchsorted(starts, match.start(), side="right") - 1]))
    return found
