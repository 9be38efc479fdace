"""SQuAD questions as the reader's warm-up reads them: each over its paragraph, cut into a block
as the corpus is cut, with its marked answers as the gold spans.

The paragraphs go through the corpus's own chunker and entity tagger (`passage_documents` are
the `documents/` rows `realm.flows.reader_warmup` prepares), so a passage looks to the reader as
a corpus block does: whole sentences of at most the corpus's wordpieces, its title, its named
entities. A paragraph longer than one block becomes several; a question's passage is the block
of its paragraph holding the most of its marked answers. `squad_passages` finds it and the
answers' wordpiece spans in it: an answer counts where its text begins and ends on whole words
of the block and is at most `max_span_wordpieces` long (the reader scores no longer span); a
question none of whose answers counts is left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from realm.model.networks.reader import body_offsets
from realm.model.qa.answering import cuts_a_word
from realm.model.qa.qa_data import QAExample
from realm.model.tokenization import WordPieceTokenizer
from realm.model.training.passage_candidates import Passage, Passages
from realm.model.training.squad_questions import DATASET, SquadQuestion
from realm.schemas import BLOCKS
from realm.schemas.io import read_table


def passage_documents(questions: Sequence[SquadQuestion]) -> list[dict]:
    """The DOCUMENTS rows of the questions' paragraphs, one per paragraph."""
    paragraphs = {q.paragraph_id: q for q in questions}
    return [
        {"doc_id": paragraph_id, "source": DATASET, "title": q.title, "text": q.context, "url": None, "date": None}
        for paragraph_id, q in sorted(paragraphs.items())
    ]


def squad_passages(
    questions: Sequence[SquadQuestion], blocks_path: str, tokenizer: WordPieceTokenizer, max_span_wordpieces: int
) -> tuple[list[QAExample], Passages]:
    """The questions that keep an answer (module docstring), as QAExamples (every annotator's
    answer text, for exact match), and their passages among the blocks at `blocks_path`
    (chunked from `passage_documents(questions)`)."""
    blocks = _paragraph_blocks(blocks_path)
    located: dict[str, list[tuple[int, int, str, list[int]]]] = {}
    examples, by_question = [], {}
    for question in questions:
        if question.paragraph_id not in located:
            located[question.paragraph_id] = _located(question.context, blocks.get(question.paragraph_id, []))
        found = [
            (block_id, spans)
            for block_id, start, text, body_ids in located[question.paragraph_id]
            if (spans := answer_spans(tokenizer, body_ids, text, start, question.answers, max_span_wordpieces))
        ]
        if not found:
            continue
        block_id, spans = max(found, key=lambda held: len(held[1]))  # the first of the most
        examples.append(QAExample(question.question, list(dict.fromkeys(t for _, t in question.answers)), DATASET))
        by_question[question.question] = Passage(block_id, tuple(spans))
    return examples, Passages(blocks_path, by_question)


def answer_spans(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    text: str,
    text_start: int,
    answers: Sequence[tuple[int, str]],
    max_span_wordpieces: int,
) -> list[tuple[int, int]]:
    """Body-relative (start, end), end inclusive, of each of `answers` (character offset in the
    paragraph, text) that lies in a block whose `text` starts at `text_start` of the paragraph,
    on whole words and wordpieces, at most `max_span_wordpieces` long; once each, in order."""
    offsets = body_offsets(tokenizer, body_ids, text)
    if offsets is None:
        return []
    starts = {start: i for i, (start, _) in enumerate(offsets)}
    ends = {end: i for i, (_, end) in enumerate(offsets)}
    spans = []
    for offset, answer in answers:
        first = offset - text_start + len(answer) - len(answer.lstrip())
        last = offset - text_start + len(answer.rstrip())
        if first not in starts or last not in ends or cuts_a_word(text, first, last):
            continue
        span = (starts[first], ends[last])
        if span[1] - span[0] < max_span_wordpieces and span not in spans:
            spans.append(span)
    return spans


def _paragraph_blocks(blocks_path: str) -> dict[str, list[tuple[int, str, list[int]]]]:
    """{paragraph (doc_id): [(block_id, text, body wordpieces)] in block order}."""
    table = read_table(blocks_path, BLOCKS, columns=["block_id", "doc_id", "block_index", "text", "body_token_ids"])
    by_paragraph = defaultdict(list)
    for row in sorted(table.to_pylist(), key=lambda r: (r["doc_id"], r["block_index"])):
        by_paragraph[row["doc_id"]].append((row["block_id"], row["text"], row["body_token_ids"]))
    return by_paragraph


def _located(paragraph: str, blocks: list[tuple[int, str, list[int]]]) -> list[tuple[int, int, str, list[int]]]:
    """`blocks` of `paragraph` with the character offset of each one's text in it. The chunker's
    block text is the paragraph from its first sentence's start to its last one's end, so each
    is found in the paragraph after the one before it."""
    located, cursor = [], 0
    for block_id, text, body_ids in blocks:
        start = paragraph.find(text, cursor)
        if start < 0:  # not cut from this paragraph's text: it holds none of its answers
            continue
        located.append((block_id, start, text, body_ids))
        cursor = start + len(text)
    return located
