"""SQuAD v1.1 questions (Rajpurkar et al. 2016), read for the reader's reading-comprehension warm-up.

SQuAD's own JSON: `{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}]}]}]}]}`, each answer a span of its paragraph at a
character offset, one per annotator. `read_squad` checks the file's sha256 where it is given
(the shipped development set's) and every record: one that is not as above, or whose answer
text is not at its offset, raises `QAFormatError` naming the question and the reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from realm.model.qa.qa_data import QAFormatError

DATASET = "squad"


@dataclass(frozen=True)
class SquadQuestion:
    id: str
    question: str
    paragraph_id: str  # "squad:<article>.<paragraph>", positions in the file
    title: str  # the article's, underscores read as spaces
    context: str  # the paragraph
    answers: tuple[tuple[int, str], ...]  # (character offset in `context`, text) per annotator


def read_squad(path: str | Path, sha256: str | None = None) -> list[SquadQuestion]:
    """Every question of a SQuAD v1.1 file, in file order; with `sha256`, the file must have it."""
    path = Path(path)
    data = path.read_bytes()
    if sha256 is not None and (digest := hashlib.sha256(data).hexdigest()) != sha256:
        raise QAFormatError(f"{path}: sha256 {digest}, not the expected {sha256}; the file is not the one shipped")
    try:
        records = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise QAFormatError(f"{path}: not JSON ({error})") from None
    articles = records.get("data") if isinstance(records, dict) else None
    if not isinstance(articles, list):
        raise QAFormatError(f"{path}: expected a JSON object with a list 'data' of articles")
    questions = []
    for a, article in enumerate(articles):
        title = _field(path, f"data[{a}]", article, "title", str)
        for p, paragraph in enumerate(_field(path, f"data[{a}]", article, "paragraphs", list)):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(path, where, paragraph, "context", str)
            for q, qa in enumerate(_field(path, where, paragraph, "qas", list)):
                questions.append(_question(path, f"{where}.qas[{q}]", qa, f"squad:{a}.{p}", title, context))
    if not questions:
        raise QAFormatError(f"{path}: holds no questions")
    return questions


def _question(path: Path, where: str, qa, paragraph_id: str, title: str, context: str) -> SquadQuestion:
    question_id = _field(path, where, qa, "id", str)
    named = f"{where} (question {question_id})"
    question = _field(path, named, qa, "question", str)
    if not question.strip():
        raise QAFormatError(f"{path}: {named}: empty question")
    answers = _field(path, named, qa, "answers", list)
    if not answers:
        raise QAFormatError(f"{path}: {named}: no answers")
    spans = []
    for i, answer in enumerate(answers):
        text = _field(path, f"{named} answer {i}", answer, "text", str)
        start = _field(path, f"{named} answer {i}", answer, "answer_start", int)
        if not text.strip():
            raise QAFormatError(f"{path}: {named}: answer {i} is empty")
        if start < 0 or context[start : start + len(text)] != text:
            raise QAFormatError(
                f"{path}: {named}: answer {i} {text!r} is not at character {start} of its paragraph "
                f"(which has {context[max(start, 0) : max(start, 0) + len(text)]!r} there)"
            )
        spans.append((start, text))
    return SquadQuestion(question_id, question.strip(), paragraph_id, title.replace("_", " "), context, tuple(spans))


def _field(path: Path, where: str, record, name: str, kind: type):
    """record[name], which must be a `kind` (an int is not a bool)."""
    value = record.get(name) if isinstance(record, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise QAFormatError(f"{path}: {where}: '{name}' must be {kind.__name__}, got {value!r}")
    return value


def draw_questions(questions: Sequence[SquadQuestion], count: int, seed: int) -> list[SquadQuestion]:
    """Up to `count` of `questions` drawn by `seed`, no two with the same question text (a
    question is known by its text from here on: its candidates, its validation hash)."""
    drawn, seen = [], set()
    for index in np.random.default_rng(seed).permutation(len(questions)):
        question = questions[index]
        if question.question not in seen:
            seen.add(question.question)
            drawn.append(question)
        if len(drawn) == count:
            break
    return drawn
