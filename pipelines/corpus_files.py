"""What the corpus readers (`read_*.py`) share: matching and opening input files, JSON-lines records.

Inputs are glob patterns read through Beam's `FileSystems`, so a local path and a `gs://` URL
work alike; matched files are reshuffled so that several files are read by several workers.
`.bz2` and `.gz` files are decompressed by the standard library rather than by Beam, because
Beam's `CompressedFile` ends a truncated stream silently (a half `.bz2` reads as zero lines,
no error) while `bz2`/`gzip` raise, which the readers turn into one `read_corrupt_file` dead
letter after keeping everything read before the damage. `ReadJsonLines` is the whole reader
for a JSON-lines format once given the pure function that maps one record to a document.
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import gzip
import json
import logging
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes

from realm.pipelines.dead_letters import DEAD_LETTER, reject

STAGE = "read"

# What a damaged compressed stream raises: truncation (EOFError), bad bz2 data (OSError),
# bad deflate data (zlib.error).
_DAMAGED_STREAM_ERRORS = (EOFError, OSError, zlib.error)


class MissingFieldError(ValueError):
    """A record lacks a field the document needs (absent, null or empty)."""


class MalformedRecordError(ValueError):
    """A record holds a field of the wrong type."""


class CorruptFileError(Exception):
    """A compressed file could not be read to its end; `record_key` names where reading stopped."""

    def __init__(self, record_key: str, cause: Exception):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.record_key = record_key


def required_str(record: dict, *names: str, allow_empty: bool = False) -> str:
    """The first of `names` present in `record`, which must be a (non-blank) string."""
    value = next((record[name] for name in names if record.get(name) is not None), None)
    if value is None:
        raise MissingFieldError(" or ".join(names))
    if not isinstance(value, str):
        raise MalformedRecordError(f"{' or '.join(names)} is {type(value).__name__}, expected a string")
    if not allow_empty and not value.strip():
        raise MissingFieldError(f"{' or '.join(names)} (empty)")
    return value


def optional_str(record: dict, *names: str) -> str | None:
    """The first of `names` present and non-null in `record`, which must then be a string."""
    value = next((record[name] for name in names if record.get(name) is not None), None)
    if value is not None and not isinstance(value, str):
        raise MalformedRecordError(f"{' or '.join(names)} is {type(value).__name__}, expected a string")
    return value


@contextlib.contextmanager
def open_decompressed(readable: fileio.ReadableFile) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed by the standard library when its name ends in .bz2 or .gz."""
    path = readable.metadata.path
    with readable.open(
        mime_type="application/octet-stream", compression_type=CompressionTypes.UNCOMPRESSED
    ) as raw:
        if path.endswith(".bz2"):
            # BZ2File reads multi-stream files (Wikipedia's *-multistream.xml.bz2) to the end.
            yield bz2.BZ2File(raw)
        elif path.endswith(".gz"):
            yield gzip.GzipFile(fileobj=raw)
        else:
            yield raw


def read_lines(readable: fileio.ReadableFile) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, raw line) of a possibly compressed file, streamed.

    Raises CorruptFileError keyed `<path>:<first unread line>` when the stream is damaged.
    """
    path = readable.metadata.path
    line_number = 0
    if path.endswith(".gz") and readable.metadata.size_in_bytes == 0:  # gzip reads none as empty, quietly
        raise CorruptFileError(f"{path}:1", EOFError("a zero-byte file holds no gzip member (a download cut short?)"))
    with open_decompressed(readable) as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                if line_number == 1:  # Windows editors start a UTF-8 file with a byte-order mark
                    line = line.removeprefix(codecs.BOM_UTF8)
                yield line_number, line
        except _DAMAGED_STREAM_ERRORS as error:
            raise CorruptFileError(f"{path}:{line_number + 1}", error) from error


class MatchCorpusFiles(beam.PTransform):
    """The files matching a glob pattern, as `ReadableFile`s spread over the workers."""

    def __init__(self, file_pattern: str):
        super().__init__()
        self.file_pattern = file_pattern

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self.file_pattern)
            # MatchFiles emits every file from one bundle; without this one worker reads them all.
            | "SpreadFiles" >> beam.Reshuffle()
            | "Open" >> fileio.ReadMatches()
        )


class ReadJsonLinesFn(beam.DoFn):
    """One JSON object per line through `to_document`; every bad line becomes one dead letter."""

    def __init__(self, to_document: Callable[[dict], dict]):
        self.to_document = to_document

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        documents = 0
        try:
            for line_number, line in read_lines(readable):
                if not line.strip():
                    continue
                outcome = self._to_document_or_rejection(f"{path}:{line_number}", line)
                documents += isinstance(outcome, dict)
                yield outcome
        except CorruptFileError as error:
            yield reject(STAGE, error.record_key, "read_corrupt_file", str(error))
        logging.info("read %d documents from %s", documents, path)

    def _to_document_or_rejection(self, record_key: str, line: bytes):
        try:
            record = json.loads(line.decode("utf-8-sig"))  # a BOM opening the file is no part of its first record
        except UnicodeDecodeError as error:
            return reject(STAGE, record_key, "read_undecodable_bytes", str(error), line)
        except (json.JSONDecodeError, RecursionError) as error:  # arrays nested past Python's recursion limit
            return reject(STAGE, record_key, "read_malformed_json", str(error) or type(error).__name__, line)
        if not isinstance(record, dict):
            return reject(
                STAGE, record_key, "read_malformed_json", f"a JSON {type(record).__name__}, not an object", line
            )
        try:
            document = self.to_document(record)
        except MissingFieldError as error:
            return reject(STAGE, record_key, "read_missing_field", f"missing {error}", line)
        except MalformedRecordError as error:
            return reject(STAGE, record_key, "read_malformed_json", str(error), line)
        except UnicodeEncodeError as error:  # an id hashed from a field holding a lone surrogate
            return reject(STAGE, record_key, "read_invalid_unicode", str(error), line)
        # JSON's "\ud800" escapes half a UTF-16 pair: no stage downstream could encode it.
        unencodable = [name for name, value in document.items() if isinstance(value, str) and not _encodable(value)]
        if unencodable:
            return reject(STAGE, record_key, "read_invalid_unicode",
                          f"{unencodable[0]} holds a lone surrogate (a \\u escape of half a UTF-16 pair)", line)
        return document


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ReadJsonLines(beam.PTransform):
    """Read JSON-lines files (optionally .bz2/.gz) into `{"documents", "dead_letter"}`."""

    def __init__(self, file_pattern: str, to_document: Callable[[dict], dict]):
        super().__init__()
        self.file_pattern = file_pattern
        self.to_document = to_document

    def expand(self, pbegin):
        results = (
            pbegin
            | "Files" >> MatchCorpusFiles(self.file_pattern)
            | "ParseLines"
            >> beam.ParDo(ReadJsonLinesFn(self.to_document)).with_outputs(DEAD_LETTER, main="documents")
        )
        return {
            # Each file is read by one worker; spread its documents for the stages downstream.
            "documents": results.documents | "SpreadDocuments" >> beam.Reshuffle(),
            "dead_letter": results[DEAD_LETTER],
        }
