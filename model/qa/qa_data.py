"""Open-QA question sets in the formats users bring, read into one `QAExample` shape.

- JSON lines `{"question", "answers": [...], "dataset"?, "answer_type"?}` (this project's
  format, `../shared/data/qa/`), and upstream NQ-open JSONL (`{"question", "answer": [...]}`);
- WebQuestions JSON: a list of `{"qText", "answers"}` or of the original
  `{"utterance", "targetValue": "(list (description X) ...)"}`;
- CuratedTrec TSV: `question<TAB>answer regex` per line (answers are regular expressions).
The suffix says which (`.jsonl`, `.json`, `.tsv`); another suffix is refused by name. A record that cannot be read raises `QAFormatError` naming the file, line and reason: so do a
file that is not UTF-8, holds no question, gives a dataset name that is not a plain name
(it becomes a file name: `predictions/<dataset>.parquet`), or a regex answer that does not
compile.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_DESCRIPTION = re.compile(r'\(description (?:"((?:[^"\\]|\\.)*)"|([^()]*))\)')


class QAFormatError(ValueError):
    """A question file or record that does not follow any supported format."""


@dataclass(frozen=True)
class QAExample:
    question: str
    answers: list[str] = field(hash=False)
    dataset: str
    answer_type: str = "text"  # "text" | "regex"
    # Blocks never to retrieve for this question (a cloze question's own sentence's blocks).
    excluded_block_ids: tuple[int, ...] = field(default=(), hash=False)


def hash_chosen(key: str, fraction: float) -> bool:
    """Whether `key` (a question, salted by its caller) falls in a `fraction` chosen by its
    sha256: the same questions on every run and machine, whatever their order or file."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


# A dataset name becomes a file name; letters, digits, '.', '_' and '-', not starting with '.'.
_DATASET_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def read_qa_file(path: str | Path, dataset: str | None = None) -> list[QAExample]:
    """Read any supported format; `dataset` overrides the name stored in or derived from the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such question file")
    default_name = dataset or path.name.split(".")[0]
    if path.suffix == ".tsv":
        examples = _read_trec_tsv(path, default_name)
    elif path.suffix == ".json":
        examples = _read_webquestions_json(path, default_name)
    elif path.suffix == ".jsonl":
        examples = _read_jsonl(path, dataset)
    else:
        raise QAFormatError(
            f"{path}: unknown question file suffix {path.suffix!r}: .jsonl (JSON lines), .json (WebQuestions) or "
            ".tsv (CuratedTrec)"
        )
    if not examples:
        raise QAFormatError(f"{path}: holds no questions")
    return examples


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors write one) is not text
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise QAFormatError(f"{path}:{line}: not UTF-8 ({error.reason} at byte {error.start})") from None


def _example(path, where, question, answers, dataset, answer_type="text") -> QAExample:
    if not isinstance(question, str) or not question.strip():
        raise QAFormatError(f"{path}:{where}: missing or empty question")
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise QAFormatError(f"{path}:{where}: answers must be a non-empty list of strings, got {answers!r}")
    if answer_type not in ("text", "regex"):
        raise QAFormatError(f"{path}:{where}: unknown answer_type {answer_type!r}")
    if answer_type == "regex":
        for pattern in answers:
            try:
                re.compile(pattern)
            except re.error as error:
                raise QAFormatError(f"{path}:{where}: answer regex {pattern!r} does not compile ({error})") from None
    if not isinstance(dataset, str) or not _DATASET_NAME.fullmatch(dataset):
        raise QAFormatError(
            f"{path}:{where}: dataset name {dataset!r} must be letters, digits, '.', '_' or '-' (it names a file)"
        )
    return QAExample(question.strip(), list(answers), dataset, answer_type)


def _read_jsonl(path: Path, dataset: str | None) -> list[QAExample]:
    examples = []
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise QAFormatError(f"{path}:{number}: not JSON ({error.msg})") from error
        if not isinstance(record, dict):
            raise QAFormatError(f"{path}:{number}: expected a JSON object")
        answers = record.get("answers", record.get("answer"))
        name = dataset or record.get("dataset") or path.name.split(".")[0]
        examples.append(_example(path, number, record.get("question"), answers, name, record.get("answer_type", "text")))
    return examples


def _read_webquestions_json(path: Path, dataset: str) -> list[QAExample]:
    try:
        records = json.loads(_text(path))
    except json.JSONDecodeError as error:
        raise QAFormatError(f"{path}: not JSON ({error.msg})") from error
    if not isinstance(records, list):
        raise QAFormatError(f"{path}: expected a JSON list of questions")
    examples = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise QAFormatError(f"{path}:[{index}]: expected a JSON object, got {type(record).__name__}")
        if "qText" in record:
            examples.append(_example(path, f"[{index}]", record["qText"], record.get("answers"), dataset))
        else:
            target = record.get("targetValue", "")
            if not isinstance(target, str):
                raise QAFormatError(f"{path}:[{index}]: targetValue must be a string, got {target!r}")
            answers = [quoted.replace('\\"', '"') or bare.strip() for quoted, bare in _DESCRIPTION.findall(target)]
            examples.append(_example(path, f"[{index}]", record.get("utterance"), answers, dataset))
    return examples


def _read_trec_tsv(path: Path, dataset: str) -> list[QAExample]:
    examples = []
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        question, _, pattern = line.partition("\t")
        if not pattern.strip():
            raise QAFormatError(f"{path}:{number}: expected 'question<TAB>answer regex'")
        examples.append(_example(path, number, question, [pattern.strip()], dataset, "regex"))
    return examples
