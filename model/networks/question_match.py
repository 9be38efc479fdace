"""Which block wordpieces belong to a word the question also says: the reader's exact-match
input feature (DrQA's, Chen et al. 2017), and the knowledge-augmented encoder's with the
masked sentence as the question.

A reader trained on a few thousand questions learns which spans look like answers faster than it
learns to align a question with the block through attention: it answered "1911" for the
year Marie Curie *shared* the Nobel Prize in *Physics*, next to "shared the 1903 Nobel Prize
in Physics". Marking the block's words that the question says gives that alignment as an
input (`realm.model.networks.reader.Reader`), not something each layer must rediscover.
Words are whole words (a wordpiece and its `##` continuations), compared as BM25 compares
them (`realm.model.index.bm25`): uncased (the vocabulary is), Snowball-stemmed ("shared" is
"share"), without the same English stop words, which match in every block.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import Stemmer
import torch

from realm.model.networks.bm25s_on_cpu import STOPWORDS_EN
from realm.model.networks.inputs import BertInputs, body_positions
from realm.model.tokenization import WordPieceTokenizer

CONTINUATION = "##"
# Snowball's stemmer language, BM25's too (`realm.model.index.bm25`).
LANGUAGE = "english"


def words(tokens: Sequence[str]) -> list[tuple[str, int, int]]:
    """(word, first, end) of each whole word in wordpiece `tokens`: a token and the `##`
    continuations after it."""
    found: list[tuple[str, int, int]] = []
    for position, token in enumerate(tokens):
        if token.startswith(CONTINUATION) and found:
            word, first, _ = found[-1]
            found[-1] = (word + token[len(CONTINUATION) :], first, position + 1)
        else:
            found.append((token, position, position + 1))
    return found


@functools.cache
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer(LANGUAGE)


def stemmed_words(tokens: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """(word, Snowball stem, first, end) of each of `words(tokens)`."""
    found = words(tokens)
    stems = _stemmer().stemWords([word for word, _, _ in found])
    return [(word, stem, first, end) for (word, first, end), stem in zip(found, stems)]


def content_stems(tokens: Sequence[str]) -> set[str]:
    """The stems of the words of `tokens` that have a letter or digit and are not stop words."""
    return {
        stem for word, stem, _, _ in stemmed_words(tokens)
        if word not in STOPWORDS_EN and any(c.isalnum() for c in word)
    }


def question_stems(tokenizer: WordPieceTokenizer, question_ids: Sequence[int]) -> set[str]:
    """`content_stems` of a question's wordpieces: what `question_word_matches` looks for."""
    return content_stems(tokenizer.convert_ids_to_tokens(list(question_ids)))


def question_word_matches(tokenizer: WordPieceTokenizer, asked: set[str], body_ids: Sequence[int]) -> list[int]:
    """1 for each wordpiece of `body_ids` inside a word whose stem is in `asked` (the question's
    `question_stems`, computed once for all the blocks it reads), else 0."""
    flags = [0] * len(body_ids)
    for _, stem, first, end in stemmed_words(tokenizer.convert_ids_to_tokens(list(body_ids))):
        if stem in asked:
            flags[first:end] = [1] * (end - first)
    return flags


def question_match_flags(
    tokenizer: WordPieceTokenizer,
    joint: BertInputs,
    question_and_body_ids: Sequence[tuple[Sequence[int], Sequence[int]]],
) -> torch.Tensor:
    """[n, length] int64 `question_word_matches` of each row of the padded `[CLS] q [SEP] z_body
    [SEP]` inputs `joint` (one (question, body) pair a row), at the body's positions as `join`
    kept it; 0 elsewhere and for the null document's empty body."""
    body_starts, body_lengths = body_positions(joint)
    flags = torch.zeros_like(joint.input_ids)
    asked: dict[tuple[int, ...], set[str]] = {}  # each question's stems, once for all the blocks it reads
    for row, (start, length) in enumerate(zip(body_starts.tolist(), body_lengths.tolist())):
        question, body = question_and_body_ids[row]
        key = tuple(question)
        if key not in asked:
            asked[key] = question_stems(tokenizer, question)
        flags[row, start : start + length] = torch.tensor(
            question_word_matches(tokenizer, asked[key], body[:length]), dtype=torch.long
        )
    return flags
