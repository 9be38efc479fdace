"""Read `documents` files written by anyone: Parquet with the DOCUMENTS schema, or JSON lines.

The format goes by file name: `*.parquet` files are validated whole against DOCUMENTS, and a
file that is not Parquet or has a missing or mistyped column stops the pipeline with its path
and the reason (a wrong file is the user's error, not a bad record; `check_parquet_files` finds
a local one before the pipeline starts); every other file is read as JSON lines
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
    MatchCorpusFiles,
    ReadJsonLinesFn,
    optional_str,
    required_str,
)
from realm.pipelines.dead_letters import DEAD_LETTER
from realm.schemas import DOCUMENTS
from realm.schemas.io import naming_damage, open_parquet, validate_table

DEFAULT_SOURCE = "documents"


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
    """One Parquet file -> its rows, after validating the whole file against DOCUMENTS."""

    def process(self, readable: fileio.ReadableFile):
        with readable.open(mime_type="application/octet-stream") as handle, naming_damage(readable.metadata.path):
            table = pq.read_table(handle)
        rows = validate_table(table, DOCUMENTS, readable.metadata.path).to_pylist()
        logging.info("read %d documents from %s", len(rows), readable.metadata.path)
        yield from rows


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
        from_parquet = parquet_files | "ReadParquet" >> beam.ParDo(ReadDocumentsParquetFn())
        from_json = json_files | "ReadJsonLines" >> beam.ParDo(
            ReadJsonLinesFn(documents_record_to_document)
        ).with_outputs(DEAD_LETTER, main="documents")
        documents = (
            (from_json.documents, from_parquet)
            | "Merge" >> beam.Flatten()
            # Each file is read by one worker; spread its rows for the stages downstream.
            | "SpreadDocuments" >> beam.Reshuffle()
        )
        return {"documents": documents, "dead_letter": from_json[DEAD_LETTER]}
