"""Inverse Cloze Task examples: `blocks/` -> `ict_examples/`, the retriever's warm-start data.

A sentence of a block is the pseudo-query and the rest of the block its context; the sentence
is removed from the context 90% of the time (kept 10%, seeded per block) so the retriever
learns lexical matching without relying on it (ORQA, Lee et al. 2019). Blocks with a single
sentence have no context to pair with and are counted.

    python -m realm.pipelines.ict --blocks BLOCKS_DIR --output DIR [Beam flags]
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator

import apache_beam as beam
from realm.model.tokenization import WordPieceTokenizer, load_tokenizer
from realm.pipelines.artifacts import ReadArtifact
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.execution import run_single_stage
from realm.pipelines.options import DEFAULT_ICT_KEEP_PROBABILITY
from realm.pipelines.sentences import block_sentences, stable_id
from realm.schemas import BLOCKS, ICT_EXAMPLES

STAGE = "ict"


def build_ict_examples(
    block: dict,
    tokenizer: WordPieceTokenizer,
    seed: int = 0,
    keep_probability: float = DEFAULT_ICT_KEEP_PROBABILITY,
    queries_per_block: int = 1,
) -> list[dict]:
    """ICT_EXAMPLES records for one block: up to `queries_per_block` distinct query sentences."""
    sentences = block_sentences(block)
    if len(sentences) < 2:
        return []
    text = block["text"]
    rng = random.Random(stable_id(seed, "ict", block["block_id"]))
    examples = []
    for index in sorted(rng.sample(range(len(sentences)), min(queries_per_block, len(sentences)))):
        start, query = sentences[index]
        kept = rng.random() < keep_probability
        if kept:
            context = text
        else:
            end = sentences[index + 1][0] if index + 1 < len(sentences) else len(text)
            context = (text[:start] + text[end:]).strip()
        examples.append(
            {
                "example_id": stable_id("ict", block["block_id"], index),
                "query_text": query,
                "query_token_ids": tokenizer.encode(query),
                "context_block_id": block["block_id"],
                "context_title": block["title"],
                "context_text": context,
                "context_title_token_ids": list(block["title_token_ids"]),
                "context_body_token_ids": list(block["body_token_ids"]) if kept else tokenizer.encode(context),
                "query_kept_in_context": kept,
            }
        )
    return examples


class BuildIctExamplesFn(beam.DoFn):
    def __init__(self, tokenizer: WordPieceTokenizer, seed, keep_probability, queries_per_block):
        self.tokenizer = tokenizer
        self.seed = seed
        self.keep_probability = keep_probability
        self.queries_per_block = queries_per_block
        self.examples = counter(STAGE, "examples")
        self.kept = counter(STAGE, "examples_query_kept_in_context")
        self.single_sentence = counter(STAGE, "blocks_with_single_sentence")

    def process(self, block: dict) -> Iterator:
        try:
            examples = build_ict_examples(
                block, self.tokenizer, self.seed, self.keep_probability, self.queries_per_block
            )
        except ValueError as error:
            yield reject(STAGE, block["block_id"], "bad_sentence_offsets", str(error), block["text"])
            return
        if not examples:
            self.single_sentence.inc()
        self.examples.inc(len(examples))
        self.kept.inc(sum(e["query_kept_in_context"] for e in examples))
        yield from examples


class BuildIctExamples(beam.PTransform):
    """blocks -> {"ict_examples": ICT_EXAMPLES records, "dead_letter": ...}."""

    def __init__(self, model_dir=None, seed=0, keep_probability=DEFAULT_ICT_KEEP_PROBABILITY, queries_per_block=1):
        super().__init__()
        # Read where the pipeline is built; the DoFn carries it to workers, which lack `model_dir`.
        self.fn = BuildIctExamplesFn(load_tokenizer(model_dir), seed, keep_probability, queries_per_block)

    def expand(self, blocks):
        outputs = blocks | "Build" >> beam.ParDo(self.fn).with_outputs(DEAD_LETTER, main="ict_examples")
        return {"ict_examples": outputs.ict_examples, "dead_letter": outputs[DEAD_LETTER]}


def run(argv=None):
    return run_single_stage(
        sys.argv[1:] if argv is None else argv, STAGE, ["blocks"], {"ict_examples": ICT_EXAMPLES},
        lambda p, o: p
        | ReadArtifact(o.blocks, BLOCKS)
        | BuildIctExamples(o.model_dir, o.seed, o.ict_keep_probability, o.ict_queries_per_block),
    )


if __name__ == "__main__":
    run()
