import bz2
import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.corpus_files import MissingFieldError
from realm.pipelines.read_wikiextractor import ReadWikiExtractor, wikiextractor_record_to_document


def record_line(page_id, title, text, **extra) -> bytes:
    record = {"id": page_id, "url": f"https://en.wikipedia.org/wiki?curid={page_id}", "title": title, "text": text}
    return (json.dumps({**record, **extra}) + "\n").encode("utf-8")


def document(page_id, title, text):
    return {
        "doc_id": f"wikiextractor:{page_id}",
        "source": "wikiextractor",
        "title": title,
        "text": text,
        "url": f"https://en.wikipedia.org/wiki?curid={page_id}",
        "date": None,
    }


def test_record_drops_the_repeated_title_and_undoes_wikiextractors_html_escaping():
    record = json.loads(record_line("12", "Anarchism", "Anarchism\n\nA philosophy &amp; movement.\n\n\nIt is sceptical."))
    assert wikiextractor_record_to_document(record) == document(
        "12", "Anarchism", "A philosophy & movement.\nIt is sceptical."
    )


def test_record_without_url_is_a_missing_field():
    with pytest.raises(MissingFieldError, match="url"):
        wikiextractor_record_to_document({"id": "1", "title": "T", "text": "x"})


def test_nested_output_directories_plain_and_bz2_yield_documents_and_keyed_dead_letters(tmp_path):
    plain = tmp_path / "extracted" / "AA" / "wiki_00"
    compressed = tmp_path / "extracted" / "AB" / "wiki_01.bz2"
    plain.parent.mkdir(parents=True)
    compressed.parent.mkdir(parents=True)
    plain.write_bytes(
        record_line("12", "Anarchism", "Anarchism\n\nAnarchism is a political philosophy.")
        + b"\n"  # a blank line is not a record
        + b'{"id": "13", "title": \n'
        + json.dumps({"id": "14", "url": "u", "text": "no title"}).encode() + b"\n"
        + record_line("15", "Caf\xe9", "Latin-1, not UTF-8").decode("unicode_escape").encode("latin-1")
        + record_line("16", "Stub", "")
        + b"[1, 2]\n"
        + json.dumps({"id": 17, "url": "u", "title": "T", "text": "x"}).encode() + b"\n"
    )
    compressed.write_bytes(bz2.compress(record_line("25", "Autism", "Autism is a condition.")))
    cut_short = tmp_path / "extracted" / "AB" / "wiki_02.gz"
    cut_short.write_bytes(b"")  # a download that wrote nothing
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadWikiExtractor(str(tmp_path / "extracted" / "**"))
        assert_that(
            outputs["documents"],
            equal_to(
                [
                    document("12", "Anarchism", "Anarchism is a political philosophy."),
                    document("16", "Stub", ""),
                    document("25", "Autism", "Autism is a condition."),
                ]
            ),
            label="Documents",
        )
        assert_that(
            outputs["dead_letter"] | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"])),
            equal_to(
                [
                    ("read", "read_malformed_json", f"{plain}:3"),
                    ("read", "read_missing_field", f"{plain}:4"),
                    ("read", "read_undecodable_bytes", f"{plain}:5"),
                    ("read", "read_malformed_json", f"{plain}:7"),
                    ("read", "read_malformed_json", f"{plain}:8"),
                    ("read", "read_corrupt_file", f"{cut_short}:1"),
                ]
            ),
            label="DeadLetters",
        )


def test_a_file_starting_with_a_byte_order_mark_yields_its_first_record(tmp_path):
    """Windows editors start a UTF-8 file with one; the first line is still a record."""
    (tmp_path / "wiki_00").write_bytes(b"\xef\xbb\xbf" + record_line("12", "Anarchism", "Anarchism is a philosophy."))
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadWikiExtractor(str(tmp_path / "wiki_00"))
        assert_that(outputs["documents"], equal_to([document("12", "Anarchism", "Anarchism is a philosophy.")]), label="Documents")
        assert_that(outputs["dead_letter"], equal_to([]), label="DeadLetters")
