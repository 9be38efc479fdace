"""Where an answer occurs in a block: the gold spans fine-tuning trains the reader towards.

Text answers match by wordpieces (`find_gold_spans`); CuratedTrec's regex answers match the
block's own text over whole-word spans (`regex_gold_spans`); `gold_spans` picks by the
example's answer type.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from realm.model.index.block_store import BlockStore
from realm.model.networks.reader import body_offsets
from realm.model.qa.answer_metrics import normalize_answer
from realm.model.qa.qa_data import QAExample
from realm.model.tokenization import WordPieceTokenizer


def find_gold_spans(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    answers: Sequence[str],
    max_span_wordpieces: int = 10,
) -> list[tuple[int, int]]:
    """(start, end) body-relative, end inclusive, of every body span whose wordpieces equal an
    answer's (as given, or after `normalize_answer`, which drops articles and punctuation).

    The uncased WordPiece tokenizer already lowercases and strips accents. A span must cover
    whole words: it may not start or end inside a word (a `##` piece at its start or right
    after its end), so "art" never matches inside "artist".
    """
    body_ids = list(body_ids)
    continues_word = [t.startswith("##") for t in tokenizer.convert_ids_to_tokens(body_ids)] + [False]
    spans = set()
    for answer in answers:
        for variant in {answer, normalize_answer(answer)}:
            answer_ids = tokenizer.encode(variant)
            width = len(answer_ids)
            if not 0 < width <= max_span_wordpieces:
                continue
            for start in range(len(body_ids) - width + 1):
                if (
                    body_ids[start : start + width] == answer_ids
                    and not continues_word[start]
                    and not continues_word[start + width]
                ):
                    spans.add((start, start + width - 1))
    return sorted(spans)


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern]:
    """CuratedTrec's answer patterns, case-insensitive; one that does not compile is left out
    (it matches nothing) rather than failing the question's whole dataset."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern, flags=re.IGNORECASE | re.UNICODE))
        except re.error:
            continue
    return compiled


def regex_gold_spans(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    body_text: str,
    patterns: Sequence[str],
    max_span_wordpieces: int = 10,
) -> list[tuple[int, int]]:
    """(start, end) body-relative, end inclusive, of every whole-word body span of at most
    `max_span_wordpieces` whose text in the block (`span_text`: "U.S.", "$1,000" as written) a
    pattern matches in full, case-insensitively.

    In full, not DrQA's prefix match, so "1903 and 1911" is no target for "1903". A pattern
    that does not compile matches nothing. Blocks whose text no pattern matches anywhere are
    skipped before the span enumeration; a block whose text does not re-tokenize to its body
    has no spans here.
    """
    compiled = compile_patterns(patterns)
    if not any(c.search(body_text) for c in compiled):
        return []
    offsets = body_offsets(tokenizer, body_ids, body_text)
    if offsets is None:
        return []
    continues_word = [t.startswith("##") for t in tokenizer.convert_ids_to_tokens(list(body_ids))] + [False]
    spans = []
    for start in range(len(offsets)):
        if continues_word[start]:
            continue
        for end in range(start, min(start + max_span_wordpieces, len(offsets))):
            if not continues_word[end + 1]:
                text = body_text[offsets[start][0] : offsets[end][1]]
                if any(c.fullmatch(text) for c in compiled):
                    spans.append((start, end))
    return spans


def gold_spans(
    tokenizer: WordPieceTokenizer, blocks: BlockStore, block_id: int, example: QAExample, max_span_wordpieces: int
) -> list[tuple[int, int]]:
    """The example's answer spans in a block's body, by its answer type."""
    body_ids = blocks.body_ids(block_id)
    if example.answer_type == "regex":
        return regex_gold_spans(tokenizer, body_ids, blocks.text(block_id), example.answers, max_span_wordpieces)
    return find_gold_spans(tokenizer, body_ids, example.answers, max_span_wordpieces)
