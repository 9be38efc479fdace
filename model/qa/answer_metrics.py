"""Open-QA answer metrics: exact match after the standard normalisation, regex match for CuratedTrec.

Normalisation as in the NQ-open / DrQA evaluation: Unicode NFD, lowercase, punctuation
dropped, the articles a/an/the dropped, whitespace collapsed.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = unicodedata.normalize("NFD", text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def regex_match(prediction: str, pattern: str) -> bool:
    """CuratedTrec exact match as DrQA scores it: the pattern matches at the prediction's start,
    case-insensitively. A pattern that does not compile matches nothing."""
    try:
        compiled = re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error:
        return False
    return compiled.match(prediction) is not None


def exact_match(prediction: str, answers: Iterable[str], answer_type: str = "text") -> bool:
    if answer_type == "regex":
        return any(regex_match(prediction, pattern) for pattern in answers)
    normalized = normalize_answer(prediction)
    return any(normalized == normalize_answer(answer) for answer in answers)


def answer_in_text(text: str, answers: Iterable[str], answer_type: str = "text") -> bool:
    """Whether a retrieved block contains an answer (recall@k): normalised substring, or regex search."""
    if answer_type == "regex":
        return any(_regex_search(pattern, text) for pattern in answers)
    haystack = f" {normalize_answer(text)} "
    return any(f" {normalize_answer(answer)} " in haystack for answer in answers if normalize_answer(answer))


def answer_within(rank: int | None, k: int) -> bool:
    """Whether the first block holding an answer, ranked `rank` (`answering.answer_rank`; None
    when no retrieved block holds one), is among the top `k`: recall@k's hit, and with the
    number of blocks read, whether the reader had an answer to read."""
    return rank is not None and rank < k


def _regex_search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text, flags=re.IGNORECASE | re.UNICODE) is not None
    except re.error:
        return False
