"""Trivial-retrieval filter: give every pre-training example the blocks it must never retrieve.

A masked sentence retrieving the block it was copied from (X = Z), or any other block holding
the same sentence verbatim (a CC-News sentence pasted into Wikipedia, X != Z), can fill the
mask by copying. This stage joins a normalised hash of every example sentence against every
sentence of the knowledge corpus with a CoGroupByKey, so it scales with the runner (13M
Wikipedia blocks on Dataflow), and writes the matches into `forbidden_block_ids`. A sentence
found in more than `max_blocks_per_sentence` blocks is boilerplate: its examples are dropped,
counted and dead-lettered.

    python -m realm.pipelines.trivial --pretrain_examples DIR --knowledge_blocks DIR --output DIR
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import apache_beam as beam
from realm.pipelines.artifacts import ReadArtifact
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.execution import run_single_stage
from realm.pipelines.options import DEFAULT_MAX_BLOCKS_PER_SENTENCE
from realm.pipelines.sentences import block_sentences, sentence_hash
from realm.schemas import BLOCKS, PRETRAIN_EXAMPLES

STAGE = "trivial"


def block_sentence_keys(block: dict) -> Iterator[tuple[str, int]]:
    """(sentence hash, block_id) once per distinct sentence of a block."""
    hashes = {sentence_hash(text) for _, text in block_sentences(block) if text}
    for key in sorted(hashes):
        yield key, block["block_id"]


class AssignForbiddenBlocksFn(beam.DoFn):
    def __init__(self, max_blocks_per_sentence: int):
        self.max_blocks_per_sentence = max_blocks_per_sentence
        self.examples = counter(STAGE, "examples")
        self.copied_elsewhere = counter(STAGE, "examples_with_copies_beyond_origin")
        self.boilerplate = counter(STAGE, "boilerplate_sentences")

    def process(self, element) -> Iterator:
        _, grouped = element
        examples, block_ids = grouped["examples"], set(grouped["blocks"])
        if not examples:
            return
        if len(block_ids) > self.max_blocks_per_sentence:
            self.boilerplate.inc()
            for example in examples:
                yield reject(
                    STAGE, example["example_id"], "boilerplate_sentence",
                    f"sentence occurs in {len(block_ids)} blocks > {self.max_blocks_per_sentence}",
                    example["text"],
                )
            return
        for example in examples:
            forbidden = block_ids | set(example["forbidden_block_ids"])
            self.examples.inc()
            if forbidden - {example["origin_block_id"]}:
                self.copied_elsewhere.inc()
            yield {**example, "forbidden_block_ids": sorted(forbidden)}


class FilterTrivialRetrievals(beam.PTransform):
    """{"pretrain_examples", "knowledge_blocks"} -> {"pretrain_examples", "dead_letter"}."""

    def __init__(self, max_blocks_per_sentence: int = DEFAULT_MAX_BLOCKS_PER_SENTENCE):
        super().__init__()
        self.max_blocks_per_sentence = max_blocks_per_sentence

    def expand(self, inputs):
        examples_by_sentence = inputs["pretrain_examples"] | "KeyExamples" >> beam.Map(
            lambda example: (sentence_hash(example["text"]), example)
        )
        blocks_by_sentence = inputs["knowledge_blocks"] | "KeyBlockSentences" >> beam.FlatMap(block_sentence_keys)
        # Joined value per sentence hash:
        #   {"examples": [PRETRAIN_EXAMPLES record, ...],   every example with this sentence
        #    "blocks":   [block_id, ...]}                   every knowledge block containing it
        joined = {"examples": examples_by_sentence, "blocks": blocks_by_sentence} | "JoinOnSentence" >> beam.CoGroupByKey()
        outputs = joined | "AssignForbidden" >> beam.ParDo(
            AssignForbiddenBlocksFn(self.max_blocks_per_sentence)
        ).with_outputs(DEAD_LETTER, main="pretrain_examples")
        return {"pretrain_examples": outputs.pretrain_examples, "dead_letter": outputs[DEAD_LETTER]}


def run(argv=None):
    return run_single_stage(
        sys.argv[1:] if argv is None else argv, STAGE, ["pretrain_examples", "knowledge_blocks"],
        {"pretrain_examples": PRETRAIN_EXAMPLES},
        lambda p, o: {
            "pretrain_examples": p | "ReadExamples" >> ReadArtifact(o.pretrain_examples, PRETRAIN_EXAMPLES),
            "knowledge_blocks": p | "ReadBlocks" >> ReadArtifact(o.knowledge_blocks, BLOCKS),
        }
        | FilterTrivialRetrievals(o.max_blocks_per_sentence),
    )


if __name__ == "__main__":
    run()
