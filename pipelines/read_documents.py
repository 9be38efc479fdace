"""Read `documents` files written by anyone: Parquet with the DOCUMENTS schema, or JSON lines.

The format goes by file name: a `*.parquet` file that is not Parquet or has a missing or
mistyped DOCUMENTS column stops the pipeline with its path and the reason (a wrong file is the
user's error, not a bad record; `check_parquet_files` finds a local one before the pipeline
starts), and a row with a null where DOCUMENTS requires a value, or a blank `doc_id`, becomes
one dead letter (a blank title or text is the contract's: the chunker dead-letters an empty
body, and a run's own `documents/` holds such rows). Every other file is read as JSON lines
(optionally .bz2/.gz) whose records need non-empty string `doc_id`, `title` and `text`, with
`source` defaulting to "documents"; a bad line becomes one dead letter.
"""

from __future__ import annotations

import logging

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from realm.pipelines.corpus_files import (
    STAGE,
    MatchCorpusFiles,
    ReadJsonLinesFn,
    optional_str,
    required_str,
)
from realm.pipelines.dead_letters import DEAD_LETTER, reject
from realm.schemas import DOCUMENTS
from realm.schemas.io import naming_damage, open_parquet, validate_table

DEFAULT_SOURCE = "documents"
_REQUIRED = [field.name for field in DOCUMENTS if not field.nullable]


def documents_record_to_document(record: dict) -> dict:
    """One JSON record as a document; raises MissingFieldError / MalformedRecordError."""
    return {
        "doc_id": required_str(record, "doc_id"),
        "source": optional_str(record, "source") or DEFAULT_SOURCE,
        "title": required_str(record, "title"),
        "text": required_str(record, "text"),
        "url": optional_str(record, "url"),
        "date": optional_str(record, "date"),
    }


def _parquet_or_json(readable: fileio.ReadableFile, num_partitions: int) -> int:
    return 0 if readable.metadata.path.endswith(".parquet") else 1


class ReadDocumentsParquetFn(beam.DoFn):
    """One Parquet file -> its rows (its columns checked against DOCUMENTS first); a row with a
    null in a required column or a blank `doc_id` is a `read_missing_field` dead letter keyed
    `<path>:row <n>` (from 1)."""

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        with readable.open(mime_type="application/octet-stream") as handle, naming_damage(path):
            table = pq.read_table(handle)
        validate_table(table.schema.empty_table(), DOCUMENTS, path)  # columns and types; rows below
        documents = 0
        for number, row in enumerate(table.select(DOCUMENTS.names).to_pylist(), start=1):
            missing = [name for name in _REQUIRED if row[name] is None]
            if missing or not row["doc_id"].strip():
                why = ", ".join(missing) if missing else "doc_id (empty)"
                yield reject(STAGE, f"{path}:row {number}", "read_missing_field", f"missing {why}", row)
                continue
            documents += 1
            yield row
        logging.info("read %d documents from %s", documents, path)


def check_parquet_files(file_pattern: str) -> None:
    """Before any pipeline runs: every local `*.parquet` file matching `file_pattern` opens as
    Parquet and has DOCUMENTS's columns, or an ArtifactError names it and the reason (one line
    where a worker's error would be a traceback). Remote files are checked by the workers."""
    for metadata in FileSystems.match([file_pattern])[0].metadata_list:
        if metadata.path.endswith(".parquet") and "://" not in metadata.path:
            validate_table(open_parquet(metadata.path).schema_arrow.empty_table(), DOCUMENTS, metadata.path)


class ReadDocuments(beam.PTransform):
    """Read documents files matching `file_pattern` into `{"documents", "dead_letter"}`."""

    def __init__(self, file_pattern: str):
        super().__init__()
        self.file_pattern = file_pattern

    def expand(self, pbegin):
        parquet_files, json_files = (
            pbegin
            | "Files" >> MatchCorpusFiles(self.file_pattern)
            | "ByFormat" >> beam.Partition(_parquet_or_json, 2)
        )
        from_parquet = parquet_files | "ReadParquet" >> beam.ParDo(ReadDocumentsParquetFn()).with_outputs(
            DEAD_LETTER, main="documents"
        )
        from_json = json_files | "ReadJsonLines" >> beam.ParDo(
            ReadJsonLinesFn(documents_record_to_document)
        ).with_outputs(DEAD_LETTER, main="documents")
        documents = (
            (from_json.documents, from_parquet.documents)
            | "Merge" >> beam.Flatten()
            # Each file is read by one worker; spread its rows for the stages downstream.
            | "SpreadDocuments" >> beam.Reshuffle()
        )
        dead_letter = (from_json[DEAD_LETTER], from_parquet[DEAD_LETTER]) | "MergeDeadLetters" >> beam.Flatten()
        return {"documents": documents, "dead_letter": dead_letter}
