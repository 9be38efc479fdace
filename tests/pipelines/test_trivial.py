import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.sentences import normalise_sentence, sentence_hash
from realm.pipelines.trivial import FilterTrivialRetrievals
from tests.pipelines.blocks_fixture import make_block


def example(example_id, text, origin):
    return {
        "example_id": example_id,
        "origin_block_id": origin,
        "forbidden_block_ids": [origin],
        "text": text,
        "token_ids": [1],
        "spans": [],
        "masked_token_positions": [],
    }


def test_normalisation_ignores_case_width_and_layout():
    assert normalise_sentence("Paris  is\nthe CAPITAL.") == normalise_sentence("paris is the capital.")
    assert sentence_hash("Ｐaris is big.") == sentence_hash("paris is big.")
    assert sentence_hash("Paris is big.") != sentence_hash("Paris is small.")


def test_examples_forbid_every_block_holding_their_sentence_and_drop_boilerplate():
    origin = make_block("Paris", ["Paris is the capital of France.", "It is on the Seine."])
    copy = make_block("Capitals", ["Berlin is big.", "Paris is the capital of  france."])
    unrelated = make_block("Rome", ["Rome is in Italy.", "It is old."])
    boiler = [make_block(f"Page {i}", ["This article is a stub.", f"Fact {i}."]) for i in range(3)]
    corpus = [origin, copy, unrelated, *boiler]
    examples = [
        example(1, "Paris is the capital of France.", origin["block_id"]),  # X = Z and X != Z copies
        example(2, "It is on the Seine.", origin["block_id"]),  # only its own block
        example(3, "A CC-News sentence nobody copied.", 999),  # origin outside the corpus
        example(4, "This article is a stub.", boiler[0]["block_id"]),  # boilerplate
    ]
    with TestPipeline() as p:
        out = {
            "pretrain_examples": p | "Ex" >> beam.Create(examples),
            "knowledge_blocks": p | "Z" >> beam.Create(corpus),
        } | FilterTrivialRetrievals(max_blocks_per_sentence=2)
        assert_that(
            out["pretrain_examples"] | "Ids" >> beam.Map(lambda e: (e["example_id"], e["forbidden_block_ids"])),
            equal_to(
                [
                    (1, sorted([origin["block_id"], copy["block_id"]])),
                    (2, [origin["block_id"]]),
                    (3, [999]),
                ]
            ),
            label="kept",
        )
        assert_that(
            out["dead_letter"] | "Dead" >> beam.Map(lambda d: (d["stage"], d["record_key"], d["reason"])),
            equal_to([("trivial", "4", "trivial_boilerplate_sentence")]),
            label="dead",
        )
