import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.model.tokenization import load_tokenizer
from realm.pipelines.ict import BuildIctExamples, build_ict_examples
from tests.pipelines.blocks_fixture import make_block

SENTENCES = ["Paris is the capital of France.", "It lies on the Seine.", "It has many museums."]


def test_query_is_removed_from_its_context_unless_kept():
    tokenizer = load_tokenizer()
    removed = build_ict_examples(make_block("Paris", SENTENCES), tokenizer, keep_probability=0.0)
    (example,) = removed
    assert example["query_text"] in SENTENCES
    assert example["query_text"] not in example["context_text"]
    assert sorted([example["query_text"], *[s for s in SENTENCES if s in example["context_text"]]]) == sorted(SENTENCES)
    assert example["context_body_token_ids"] == tokenizer.encode(example["context_text"])
    assert not example["query_kept_in_context"]
    (kept,) = build_ict_examples(make_block("Paris", SENTENCES), tokenizer, keep_probability=1.0)
    assert kept["query_kept_in_context"] and kept["query_text"] in kept["context_text"]


def test_keep_rate_is_about_ten_percent_and_seeded():
    tokenizer = load_tokenizer()
    blocks = [make_block(f"T{i}", [f"Sentence {i} a.", f"Sentence {i} b."]) for i in range(400)]
    examples = [e for b in blocks for e in build_ict_examples(b, tokenizer, seed=1)]
    kept = sum(e["query_kept_in_context"] for e in examples)
    assert 20 <= kept <= 65  # 10% of 400 = 40, binomial sd = 6
    assert examples == [e for b in blocks for e in build_ict_examples(b, tokenizer, seed=1)]


def test_ict_transform_skips_single_sentence_blocks():
    with TestPipeline() as p:
        out = p | beam.Create([make_block("Paris", SENTENCES), make_block("Solo", ["Only one sentence."])]) | BuildIctExamples(
            queries_per_block=3
        )
        assert_that(
            out["ict_examples"] | beam.Map(lambda e: e["context_title"]), equal_to(["Paris"] * 3), label="examples"
        )
        assert_that(out["dead_letter"], equal_to([]), label="dead")
