import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.read_documents import ReadDocuments
from realm.schemas import DOCUMENTS, write_table

PARQUET_ROWS = [
    {"doc_id": "mine:1", "source": "mine", "title": "One", "text": "First.", "url": None, "date": "2020-01-01"},
    {"doc_id": "mine:2", "source": "mine", "title": "Two", "text": "Second.", "url": "https://x/2", "date": None},
]


def test_parquet_and_jsonl_files_are_read_and_bad_json_lines_become_dead_letters(tmp_path):
    write_table(str(tmp_path / "docs.parquet"), PARQUET_ROWS, DOCUMENTS)
    lines = tmp_path / "docs.jsonl"
    lines.write_text(
        "\n".join(
            [
                json.dumps({"doc_id": "j:1", "title": "Three", "text": "Third.", "url": "https://x/3"}),
                json.dumps({"doc_id": "j:2", "title": "Four", "text": ""}),
                json.dumps({"doc_id": "j:3", "text": "No title."}),
                json.dumps({"doc_id": 4, "title": "Five", "text": "Numeric id."}),
                '{"doc_id": "j:5", "title": ',
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadDocuments(str(tmp_path / "docs.*"))
        assert_that(
            outputs["documents"],
            equal_to(
                PARQUET_ROWS
                + [
                    {
                        "doc_id": "j:1",
                        "source": "documents",
                        "title": "Three",
                        "text": "Third.",
                        "url": "https://x/3",
                        "date": None,
                    }
                ]
            ),
            label="Documents",
        )
        assert_that(
            outputs["dead_letter"] | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"])),
            equal_to(
                [
                    ("read", "read_missing_field", f"{lines}:2"),
                    ("read", "read_missing_field", f"{lines}:3"),
                    ("read", "read_malformed_json", f"{lines}:4"),
                    ("read", "read_malformed_json", f"{lines}:5"),
                ]
            ),
            label="DeadLetters",
        )


def test_a_parquet_file_without_a_documents_column_fails_naming_the_file_and_the_column(tmp_path):
    path = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"doc_id": ["a"], "source": ["s"], "title": ["t"], "body": ["x"]}), path)
    with pytest.raises(Exception, match=rf"{path}: missing column 'text'"):
        with TestPipeline() as pipeline:
            pipeline | ReadDocuments(str(path))


def test_a_bom_is_no_part_of_the_first_record_and_lines_no_stage_could_hold_are_dead_letters(tmp_path):
    lines = tmp_path / "docs.jsonl"
    first = json.dumps({"doc_id": "j:1", "title": "One", "text": "First."})
    lines.write_bytes(b"\xef\xbb\xbf" + "\n".join([
        first,
        '{"doc_id": "j:2", "title": "Half a pair", "text": "Bad \\ud800 here."}',  # JSON escape of a lone surrogate
        "[" * 100_000,  # nested past Python's recursion limit
        json.dumps({"doc_id": "j:4", "title": "Four", "text": "Fourth."}),
    ]).encode() + b"\n")
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadDocuments(str(lines))
        assert_that(outputs["documents"] | beam.Map(lambda d: d["doc_id"]), equal_to(["j:1", "j:4"]), label="Documents")
        assert_that(
            outputs["dead_letter"] | beam.Map(lambda row: (row["reason"], row["record_key"], row["detail"][:25])),
            equal_to([
                ("read_invalid_unicode", f"{lines}:2", "text holds a lone surroga"),
                ("read_malformed_json", f"{lines}:3", "maximum recursion depth e"),
            ]),
            label="DeadLetters",
        )


def test_a_parquet_row_with_a_null_where_a_value_is_required_or_a_blank_id_is_a_dead_letter(tmp_path):
    path = tmp_path / "docs.parquet"
    empty_body = dict(PARQUET_ROWS[1], doc_id="mine:5", text="")  # the chunker's to dead-letter
    rows = [*PARQUET_ROWS, dict(PARQUET_ROWS[0], doc_id="mine:3", title=None), dict(PARQUET_ROWS[0], doc_id="  "),
            empty_body, dict(PARQUET_ROWS[1], doc_id="mine:6", source=None, text=None)]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([field.with_nullable(True) for field in DOCUMENTS])), path)
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadDocuments(str(path))
        assert_that(outputs["documents"], equal_to([*PARQUET_ROWS, empty_body]), label="Documents")
        assert_that(
            outputs["dead_letter"] | beam.Map(lambda row: (row["reason"], row["record_key"], row["detail"])),
            equal_to([("read_missing_field", f"{path}:row 3", "missing title"),
                      ("read_missing_field", f"{path}:row 4", "missing doc_id (empty)"),
                      ("read_missing_field", f"{path}:row 6", "missing source, text")]),
            label="DeadLetters",
        )
