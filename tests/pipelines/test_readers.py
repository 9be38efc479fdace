import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.readers import CORPORA, DropDuplicateDocIds, read_corpus


def _document(doc_id: str, title: str, text: str) -> dict:
    return {"doc_id": doc_id, "source": "documents", "title": title, "text": text, "url": None, "date": None}


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


def test_documents_sharing_an_id_keep_one_copy_and_dead_letter_the_rest():
    paris = _document("wiki:1", "Paris", "Paris is the capital of France.")
    again = _document("wiki:1", "Paris", "Paris is the capital of France.")  # the dump listed twice
    edited = _document("wiki:1", "Paris", "Paris is a city.")  # another revision under the same id
    lyon = _document("wiki:2", "Lyon", "Lyon is a city.")
    with TestPipeline() as pipeline:
        outputs = pipeline | beam.Create([again, lyon, paris, edited]) | DropDuplicateDocIds()
        # The copy kept sorts first by title and text, whichever arrived first.
        assert_that(outputs["documents"], equal_to([edited, lyon]), label="Documents")
        assert_that(
            outputs["dead_letter"] | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"], row["raw"])),
            equal_to([("read", "read_duplicate_doc_id", "wiki:1", "Paris\nParis is the capital of France.")] * 2),
            label="DeadLetters",
        )
