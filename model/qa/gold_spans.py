"""Where an answer occurs in a block: the gold spans fine-tuning trains the reader towards.

Text answers match by wordpieces (`find_gold_spans`); CuratedTrec's regex answers match the
block's own text over whole-word spans (`regex_gold_spans`); `gold_spans` picks by the
example's answer type.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

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
    return wordpiece_spans(tokenizer, body_ids, answer_wordpieces(tokenizer, answers, max_span_wordpieces))


def answer_wordpieces(tokenizer: WordPieceTokenizer, answers: Sequence[str], max_span_wordpieces: int) -> list[list[int]]:
    """The wordpieces `find_gold_spans` looks for: each answer's, as given and normalised,
    once each, but those empty or wider than `max_span_wordpieces`. Encoded once, they can be
    sought in many bodies (`wordpiece_spans`)."""
    found: list[list[int]] = []
    for answer in answers:
        for variant in {answer, normalize_answer(answer)}:
            ids = tokenizer.encode(variant)
            if 0 < len(ids) <= max_span_wordpieces and ids not in found:
                found.append(ids)
    return found


def wordpiece_spans(
    tokenizer: WordPieceTokenizer, body_ids: Sequence[int], answers: Sequence[Sequence[int]]
) -> list[tuple[int, int]]:
    """`find_gold_spans` of answers already encoded (`answer_wordpieces`)."""
    body_ids = list(body_ids)
    # Read only once some answer's wordpieces occur: most bodies searched hold none.
    continues_word: list[bool] | None = None
    spans = set()
    for answer_ids in answers:
        answer_ids, width = list(answer_ids), len(answer_ids)
        if not 0 < width <= len(body_ids):
            continue
        start = -1
        while True:
            try:  # the answer's first wordpiece at each start it fits from, found at C speed
                start = body_ids.index(answer_ids[0], start + 1, len(body_ids) - width + 1)
            except ValueError:
                break
            if body_ids[start : start + width] != answer_ids:
                continue
            if continues_word is None:
                continues_word = _continues_word(tokenizer, body_ids)
            if not continues_word[start] and not continues_word[start + width]:
                spans.add((start, start + width - 1))
    return sorted(spans)


def _continues_word(tokenizer: WordPieceTokenizer, body_ids: Sequence[int]) -> list[bool]:
    """Whether each body wordpiece continues the word before it (a `##` piece), and False one
    past the end: a span ending at the body's last wordpiece ends a word."""
    return [t.startswith("##") for t in tokenizer.convert_ids_to_tokens(list(body_ids))] + [False]


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
    return list(_regex_spans(tokenizer, body_ids, body_text, patterns, max_span_wordpieces))


def holds_regex_span(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    body_text: str,
    patterns: Sequence[str],
    max_span_wordpieces: int = 10,
) -> bool:
    """Whether `regex_gold_spans` finds any span, looking no further than the first: the span
    search is most of the time that finding every corpus block holding an answer takes."""
    return next(_regex_spans(tokenizer, body_ids, body_text, patterns, max_span_wordpieces), None) is not None


def _regex_spans(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    body_text: str,
    patterns: Sequence[str],
    max_span_wordpieces: int,
) -> Iterator[tuple[int, int]]:
    """`regex_gold_spans`' spans one at a time, by start then end: whether a block holds the
    answer at all is known at its first (`holds_regex_span`)."""
    compiled = compile_patterns(patterns)
    if not any(c.search(body_text) for c in compiled):
        return
    offsets = body_offsets(tokenizer, body_ids, body_text)
    if offsets is None:
        return
    continues_word = _continues_word(tokenizer, body_ids)
    for start in range(len(offsets)):
        if continues_word[start]:
            continue
        for end in range(start, min(start + max_span_wordpieces, len(offsets))):
            if not continues_word[end + 1]:
                text = body_text[offsets[start][0] : offsets[end][1]]
                if any(c.fullmatch(text) for c in compiled):
                    yield start, end


def gold_spans(
    tokenizer: WordPieceTokenizer, blocks: BlockStore, block_id: int, example: QAExample, max_span_wordpieces: int
) -> list[tuple[int, int]]:
    """The example's answer spans in a block's body, by its answer type."""
    body_ids = blocks.body_ids(block_id)
    if example.answer_type == "regex":
        return regex_gold_spans(tokenizer, body_ids, blocks.text(block_id), example.answers, max_span_wordpieces)
    return find_gold_spans(tokenizer, body_ids, example.answers, max_span_wordpieces)
