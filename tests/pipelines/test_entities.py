"""The entities stage: every block's whole text tagged once by spaCy, one row per block; a text
spaCy cannot take dead-lettered; run on its own, it writes `block_entities/` beside the blocks."""

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines import entities
from realm.pipelines.entities import TagBlockEntities, tag_blocks
from realm.pipelines.ner import load_ner
from realm.schemas import BLOCK_ENTITIES, BLOCKS, read_table, write_table
from tests.pipelines.blocks_fixture import make_block

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
APOLLO = make_block("Apollo 11", ["Neil Armstrong was its commander.", "It landed in July 1969."])
NOTHING = make_block("Nothing", ["it was quite nice."])


def spans(record):
    text = {APOLLO["block_id"]: APOLLO["text"], NOTHING["block_id"]: NOTHING["text"]}[record["block_id"]]
    return record["block_id"], [(text[e["start"] : e["end"]], e["label"]) for e in record["entities"]]


def test_a_blocks_whole_text_is_tagged_and_a_block_without_entities_keeps_its_row():
    records = list(tag_blocks(load_ner(), [APOLLO, NOTHING]))
    assert [spans(r) for r in records] == [
        (APOLLO["block_id"], [("Neil Armstrong", "PERSON"), ("July 1969", "DATE")]),
        (NOTHING["block_id"], []),
    ]


def test_the_transform_tags_every_block_and_dead_letters_a_text_spacy_cannot_take():
    too_long = {**NOTHING, "block_id": 5, "text": "word " * 200_001}  # spaCy takes 1,000,000 characters
    with TestPipeline() as p:
        out = p | beam.Create([APOLLO, NOTHING, too_long]) | TagBlockEntities()
        assert_that(
            out["block_entities"] | beam.Map(spans),
            equal_to([
                (APOLLO["block_id"], [("Neil Armstrong", "PERSON"), ("July 1969", "DATE")]),
                (NOTHING["block_id"], []),
            ]),
            label="tagged",
        )
        assert_that(
            out["dead_letter"] | "Reason" >> beam.Map(lambda d: (d["stage"], d["record_key"], d["reason"])),
            equal_to([("entities", "5", "entities_text_too_long_for_ner")]),
            label="dead",
        )


def test_run_alone_it_writes_block_entities_beside_the_blocks(tmp_path):
    write_table(str(tmp_path / "blocks" / "part-0.parquet"), [APOLLO, NOTHING], BLOCKS)
    counts = entities.run(["--blocks", str(tmp_path / "blocks"), "--output", str(tmp_path), *IN_PROCESS])
    table = read_table(str(tmp_path / "block_entities"), BLOCK_ENTITIES)
    assert sorted(spans(r) for r in table.to_pylist()) == sorted(spans(r) for r in tag_blocks(load_ner(), [APOLLO, NOTHING]))
    assert counts["entities"] == {"blocks": 2, "blocks_without_entity": 1, "entities": 2}
