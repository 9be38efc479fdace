import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.model.tokenization import load_tokenizer
from realm.pipelines.salient import TagSalientSpans, build_pretrain_example, find_date_spans, merge_spans
from tests.pipelines.blocks_fixture import make_block


def dates(text):
    return [text[s:e] for s, e in find_date_spans(text)]


def test_date_regexes_find_the_paper_formats():
    assert dates("It happened on 20 July 1969.") == ["20 July 1969"]
    assert dates("It happened on July 20, 1969.") == ["July 20, 1969"]
    assert dates("It happened in July 1969.") == ["July 1969"]
    assert dates("It happened in 1969.") == ["1969"]
    assert dates("It happened in the 1960s.") == ["the 1960s"]
    assert dates("Caesar died in 44 BC; Vesuvius erupted in AD 79.") == ["44 BC", "AD 79"]
    assert dates("He scored 12345 points and 42 goals.") == []


def test_overlapping_spans_keep_the_longer_one():
    spans = [(10, 14, "DATE", "date_regex"), (5, 14, "DATE", "ner"), (20, 25, "PERSON", "ner")]
    assert merge_spans(spans) == [(5, 14, "DATE", "ner"), (20, 25, "PERSON", "ner")]


def test_example_spans_carry_char_and_wordpiece_offsets_and_one_masked_span():
    tokenizer = load_tokenizer()
    sentence = "Neil Armstrong walked on the Moon on 20 July 1969."
    entities = [(0, 14, "PERSON"), (37, 49, "DATE"), (5, 9, "CARDINAL")]
    record, truncated = build_pretrain_example(7, 0, sentence, entities, tokenizer, seed=3)
    assert not truncated
    assert record["forbidden_block_ids"] == [7]
    assert [(sentence[s["start"] : s["end"]], s["label"], s["source"]) for s in record["spans"]] == [
        ("Neil Armstrong", "PERSON", "ner"),
        ("20 July 1969", "DATE", "ner"),
    ]
    for span in record["spans"]:
        pieces = tokenizer.decode(record["token_ids"][span["token_start"] : span["token_end"]])
        assert pieces == sentence[span["start"] : span["end"]].lower()
    masked = record["masked_token_positions"]
    assert masked in ([0, 1], list(range(record["spans"][1]["token_start"], record["spans"][1]["token_end"])))
    again, _ = build_pretrain_example(7, 0, sentence, entities, tokenizer, seed=3)
    assert again == record


def test_sentence_without_salient_span_is_kept_with_no_mask():
    record, _ = build_pretrain_example(1, 2, "it was quite nice.", [], load_tokenizer())
    assert record["spans"] == [] and record["masked_token_positions"] == []


def test_tag_transform_runs_spacy_and_keeps_every_sentence():
    block = make_block(
        "Apollo 11",
        # A paragraph of zero-width spaces gives no wordpiece: no example to mask or read.
        ["Apollo 11 was flown by NASA in July 1969.", "Neil Armstrong was its commander.", "it was quite nice.", "\u200b"],
    )
    broken = {**make_block("Broken", ["One.", "Two."]), "sentence_starts": [4, 0]}
    with TestPipeline() as p:
        out = p | beam.Create([block, broken]) | TagSalientSpans()
        assert_that(
            out["pretrain_examples"]
            # NER labels of "Apollo 11" vary with spaCy's batch context; the stable ones are asserted.
            | "Summ" >> beam.Map(
                lambda e: (e["text"], sorted({s["label"] for s in e["spans"]} & {"DATE", "ORG", "PERSON"}), e["origin_block_id"])
            ),
            equal_to(
                [
                    ("Apollo 11 was flown by NASA in July 1969.", ["DATE", "ORG"], block["block_id"]),
                    ("Neil Armstrong was its commander.", ["PERSON"], block["block_id"]),
                    ("it was quite nice.", [], block["block_id"]),
                ]
            ),
            label="examples",
        )
        assert_that(
            out["dead_letter"] | "Reason" >> beam.Map(lambda d: (d["stage"], d["reason"])),
            equal_to([("salient", "salient_bad_sentence_offsets")]),
            label="dead",
        )
