"""Questions the corpus asks itself: the reader's span-selection warm-up before Open QA.

A pre-training sentence with one salient span replaced by a wh-word ("Neil Armstrong was the
commander of Apollo 11" -> "who was the commander of Apollo 11") is a question whose answer
is the span (Lewis et al. 2019, cloze translation; Splinter and span-selection pre-training
train readers the same way). The sentence's own block and every block containing the sentence
verbatim (`forbidden_block_ids`, REALM's trivial retrievals) are excluded from its candidates,
so the reader must find the answer elsewhere in the corpus rather than copy it from its
context. The wh-word follows the span's entity label, so the warm-up questions read like the
questions fine-tuning and users ask.
"""

from __future__ import annotations

import numpy as np

from realm.model.qa.qa_data import QAExample
from realm.schemas.examples import PRETRAIN_EXAMPLES
from realm.schemas.io import read_table

DATASET = "cloze"
# The salient-span labels (spaCy's OntoNotes entities the pipeline keeps, and DATE) to the
# wh-word a question about them starts with; every other label (ORG, NORP, EVENT, ...) asks "what".
WH_WORDS = {"PERSON": "who", "GPE": "where", "LOC": "where", "FAC": "where", "DATE": "when"}


def cloze_question(text: str, start: int, end: int, label: str) -> str:
    """`text` with the characters [start, end) replaced by the wh-word for `label`."""
    return f"{text[:start]}{WH_WORDS.get(label, 'what')}{text[end:]}"


def cloze_questions(
    pretrain_examples: str, count: int, seed: int, max_question_wordpieces: int
) -> list[QAExample]:
    """Up to `count` cloze questions from the sentences of `pretrain_examples/` with a salient
    span, one per sentence, chosen by `seed` (the same ones whatever the shards' order). Each
    masks the span the pre-training example masks, excludes the example's forbidden blocks,
    and fits `max_question_wordpieces` (a longer sentence would lose its end, or its wh-word,
    to the cut)."""
    table = read_table(
        pretrain_examples, PRETRAIN_EXAMPLES,
        columns=["forbidden_block_ids", "text", "token_ids", "spans", "masked_token_positions"],
    )
    rows = table.to_pylist()
    order = np.random.default_rng(seed).permutation(len(rows))
    questions = []
    for index in order:
        row = rows[index]
        span = _masked_span(row)
        # The wh-word is at most two wordpieces where the span had at least one.
        if span is None or len(row["token_ids"]) + 1 > max_question_wordpieces:
            continue
        answer = row["text"][span["start"] : span["end"]].strip()
        if not answer:
            continue
        questions.append(
            QAExample(
                cloze_question(row["text"], span["start"], span["end"], span["label"]),
                [answer],
                DATASET,
                excluded_block_ids=tuple(row["forbidden_block_ids"]),
            )
        )
        if len(questions) == count:
            break
    return questions


def _masked_span(row: dict) -> dict | None:
    """The salient span the pre-training example masks (seeded per example by the pipeline)."""
    if not row["masked_token_positions"]:
        return None
    first = row["masked_token_positions"][0]
    return next((s for s in row["spans"] if s["token_start"] == first), None)
