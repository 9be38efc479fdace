"""Chunk documents into retrieval blocks of at most 288 wordpieces: `documents` -> `blocks/`.

Each document body is split into sentences (spaCy's rule-based sentencizer, paragraphs are
hard boundaries) and sentences are packed greedily into blocks whose doc-tower input
`[CLS] title [SEP] body [SEP]` fits the budget; a single sentence longer than a whole block
is cut at wordpiece boundaries (counted). Every sentence of a body lands in exactly one block.

    python -m realm.pipelines.chunk --input DOCUMENTS_DIR --output DIR [Beam flags]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.transforms.combiners import CountCombineFn, SingleInputTupleCombineFn
from realm.model.tokenization import BLOCK_SPECIAL_TOKENS, MAX_BLOCK_WORDPIECES, WordPieceTokenizer, load_tokenizer
from realm.pipelines.artifacts import ReadArtifact
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.execution import run_single_stage
from realm.pipelines.sentences import stable_id
from realm.pipelines.spacy_import import import_spacy
from realm.schemas import BLOCKS, DOCUMENTS

STAGE = "chunk"
# Titles are cut so that a long title never starves the body of its budget.
MAX_TITLE_WORDPIECES = 32
# Beyond this a "document" is a concatenation or a dump error, not an article.
MAX_DOCUMENT_CHARS = 2_000_000
_PARAGRAPH = re.compile(r"[^\n]+")


def block_id_for(title: str, text: str) -> int:
    """Stable signed int64 id from title and body: the same block gets the same id on every run."""
    return stable_id(title, text)


def sentence_spans(text: str, sentencizer) -> list[tuple[int, int]]:
    """Char spans (start, end) of the sentences of `text`; newlines always end a sentence."""
    spans = []
    for paragraph in _PARAGRAPH.finditer(text):
        offset = paragraph.start()
        for sent in sentencizer(paragraph.group()).sents:
            stripped = sent.text.strip()
            if not stripped:
                continue
            start = offset + sent.start_char + (len(sent.text) - len(sent.text.lstrip()))
            spans.append((start, start + len(stripped)))
    return spans


def split_into_blocks(
    doc_id: str,
    title: str,
    text: str,
    tokenizer: WordPieceTokenizer,
    sentencizer,
    max_wordpieces: int = MAX_BLOCK_WORDPIECES,
) -> tuple[list[dict], int]:
    """Greedy sentence packing of one document; returns (BLOCKS records, sentences cut).

    Budget per block: 3 specials + title + body <= max_wordpieces, with the title capped at
    MAX_TITLE_WORDPIECES. The body is tokenized once; BERT's pre-tokenizer never joins
    wordpieces across whitespace, so the wordpieces of a sentence are exactly those whose
    char offsets fall inside it.
    """
    title_ids = tokenizer.encode(title)[:MAX_TITLE_WORDPIECES]
    body_budget = max_wordpieces - BLOCK_SPECIAL_TOKENS - len(title_ids)
    encoding = tokenizer.encode_with_offsets(text)
    # Units: (char_start, char_end, first wordpiece, end wordpiece) of each sentence or sentence piece.
    units: list[tuple[int, int, int, int]] = []
    cut_sentences = 0
    cursor = 0
    for start, end in sentence_spans(text, sentencizer):
        first = cursor
        while cursor < len(encoding.ids) and encoding.offsets[cursor][0] < end:
            cursor += 1
        if cursor - first <= body_budget:
            units.append((start, end, first, cursor))
            continue
        cut_sentences += 1
        for piece_start in range(first, cursor, body_budget):
            piece_end = min(piece_start + body_budget, cursor)
            char_start = start if piece_start == first else encoding.offsets[piece_start][0]
            char_end = end if piece_end == cursor else encoding.offsets[piece_end][0]
            units.append((char_start, char_end, piece_start, piece_end))

    groups: list[list[tuple[int, int, int, int]]] = []
    for unit in units:
        if groups and unit[3] - groups[-1][0][2] <= body_budget:
            groups[-1].append(unit)
        else:
            groups.append([unit])

    blocks = []
    for index, group in enumerate(groups):
        block_start, block_end = group[0][0], group[-1][1]
        body = text[block_start:block_end]
        body_ids = encoding.ids[group[0][2] : group[-1][3]]
        blocks.append(
            {
                "block_id": block_id_for(title, body),
                "doc_id": doc_id,
                "block_index": index,
                "title": title,
                "text": body,
                "sentence_starts": [unit[0] - block_start for unit in group],
                "title_token_ids": title_ids,
                "body_token_ids": body_ids,
                "num_tokens": BLOCK_SPECIAL_TOKENS + len(title_ids) + len(body_ids),
            }
        )
    return blocks, cut_sentences


def load_sentencizer():
    """spaCy's rule-based sentencizer: no model weights, a few microseconds per sentence."""
    nlp = import_spacy().blank("en")
    nlp.add_pipe("sentencizer")
    nlp.max_length = MAX_DOCUMENT_CHARS
    return nlp


class ChunkDocumentFn(beam.DoFn):
    def __init__(self, tokenizer: WordPieceTokenizer, max_wordpieces: int = MAX_BLOCK_WORDPIECES):
        self.tokenizer = tokenizer
        self.max_wordpieces = max_wordpieces
        self.documents = counter(STAGE, "documents")
        self.blocks = counter(STAGE, "blocks")
        self.cut_sentences = counter(STAGE, "sentences_cut_over_budget")

    def setup(self):
        self.sentencizer = load_sentencizer()

    def process(self, document: dict) -> Iterator:
        doc_id, text = document["doc_id"], document["text"] or ""
        if len(text) > MAX_DOCUMENT_CHARS:
            yield reject(STAGE, doc_id, "document_too_long", f"{len(text)} chars > {MAX_DOCUMENT_CHARS}", text)
            return
        if not text.strip():
            yield reject(STAGE, doc_id, "empty_body", "document has no body text", document.get("title"))
            return
        blocks, cut = split_into_blocks(
            doc_id, document["title"] or "", text, self.tokenizer, self.sentencizer, self.max_wordpieces
        )
        if not any(block["body_token_ids"] for block in blocks):  # zero-width or control characters alone
            yield reject(STAGE, doc_id, "empty_body", "no wordpiece in its body text", document.get("title"))
            return
        self.documents.inc()
        self.blocks.inc(len(blocks))
        self.cut_sentences.inc(cut)
        yield from blocks


def copy_rank(block: dict) -> tuple[str, int]:
    """Which copy of a block is kept: the smallest (doc_id, block_index), so every run keeps the same one."""
    return block["doc_id"], block["block_index"]


def first_of_duplicated(element) -> Iterator[tuple[int, tuple[str, int]]]:
    """(block_id, rank of the kept copy) for a block_id held by more than one block; counts the
    copies dropped (0 for a block_id held once, so a clean corpus still reports the counter)."""
    block_id, (first_rank, copies) = element
    counter(STAGE, "duplicate_blocks_dropped").inc(copies - 1)
    if copies > 1:
        yield block_id, first_rank


def is_kept_copy(block: dict, kept_ranks: dict[int, tuple[str, int]]) -> bool:
    kept_rank = kept_ranks.get(block["block_id"])
    return kept_rank is None or kept_rank == copy_rank(block)


class DropDuplicateBlocks(beam.PTransform):
    """blocks -> one block per block_id. Identical title + body (a document published twice, a
    mirrored news story) would otherwise enter the index twice and split retrieval mass between
    copies. Only (block_id, copy rank) pairs go through the shuffle; the blocks themselves are
    filtered in place against the kept rank of each duplicated block_id, a side input as large
    as the corpus's duplicates, not the corpus."""

    def expand(self, blocks):
        # (block_id, (doc_id, block_index)) per block, combined before the shuffle into
        # (block_id, ((doc_id, block_index) of the first copy, copies)).
        kept_ranks = (
            blocks
            | "RankCopies" >> beam.Map(lambda block: (block["block_id"], copy_rank(block)))
            | "FirstCopy" >> beam.CombinePerKey(SingleInputTupleCombineFn(min, CountCombineFn()))
            | "DuplicatedIds" >> beam.FlatMap(first_of_duplicated)
        )
        return blocks | "KeepFirstCopies" >> beam.Filter(is_kept_copy, beam.pvalue.AsDict(kept_ranks))


class ChunkDocuments(beam.PTransform):
    """documents -> {"blocks": unique BLOCKS records, "dead_letter": DEAD_LETTER records}."""

    def __init__(self, model_dir: str | None = None, max_wordpieces: int = MAX_BLOCK_WORDPIECES):
        super().__init__()
        # Read where the pipeline is built; the DoFn carries it to workers, which lack `model_dir`.
        self.tokenizer = load_tokenizer(model_dir)
        self.max_wordpieces = max_wordpieces

    def expand(self, documents):
        outputs = documents | "Chunk" >> beam.ParDo(
            ChunkDocumentFn(self.tokenizer, self.max_wordpieces)
        ).with_outputs(DEAD_LETTER, main="blocks")
        return {"blocks": outputs.blocks | DropDuplicateBlocks(), "dead_letter": outputs[DEAD_LETTER]}


def run(argv=None):
    return run_single_stage(
        sys.argv[1:] if argv is None else argv, STAGE, ["documents"], {"blocks": BLOCKS},
        lambda p, o: p | ReadArtifact(o.documents, DOCUMENTS) | ChunkDocuments(o.model_dir, o.max_block_wordpieces),
    )


if __name__ == "__main__":
    run()
