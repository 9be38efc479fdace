import apache_beam as beam
import pytest

from realm.pipelines.readers import CORPORA, read_corpus


def test_every_corpus_is_applied_under_its_own_label_and_returns_both_outputs(tmp_path):
    pipeline = beam.Pipeline()
    for corpus in CORPORA:
        pattern = None if corpus == "vital" else str(tmp_path / "*")
        outputs = read_corpus(pipeline, corpus, pattern, limit=3 if corpus == "vital" else None)
        assert set(outputs) == {"documents", "dead_letter"}
    labels = {transform.full_label for transform in pipeline.transforms_stack[0].parts}
    assert labels == {
        "ReadVital",
        "ReadWikipediaXml",
        "ReadWikiextractor",
        "ReadCcnewsJsonl",
        "ReadWarc",
        "ReadDocuments",
    }


@pytest.mark.parametrize(
    ("corpus", "input_pattern", "limit", "message"),
    [
        ("wikipedia-xml", None, None, "needs an input"),
        ("warc", "", None, "needs an input"),
        ("vital", "some/*.json", None, "reads no input"),
        ("ccnews-jsonl", "news/*.jsonl", 10, "vital corpus only"),
        ("common-crawl", "x", None, "unknown corpus 'common-crawl'"),
    ],
)
def test_a_wrong_corpus_input_or_limit_is_refused_with_a_clear_message(corpus, input_pattern, limit, message):
    with pytest.raises(ValueError, match=message):
        read_corpus(beam.Pipeline(), corpus, input_pattern, limit=limit)
