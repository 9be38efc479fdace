"""Read WikiExtractor `--json` output (`AA/wiki_00`, ..., optionally .bz2) into documents.

Each line is `{"id", "url", "title", "text"}` for one article whose wikitext WikiExtractor has
already cleaned; pass a pattern such as `extracted/**` to read its nested directories. A line
that is not JSON, lacks a field, or is not UTF-8 becomes a dead letter keyed `<file>:<line>`.
"""

from __future__ import annotations

import html

import apache_beam as beam

from realm.pipelines.corpus_files import ReadJsonLines, required_str
from realm.pipelines.paragraphs import plain_paragraphs

SOURCE = "wikiextractor"


def wikiextractor_record_to_document(record: dict) -> dict:
    """One WikiExtractor JSON record as a document; raises MissingFieldError / MalformedRecordError."""
    title = required_str(record, "title")
    # WikiExtractor escapes &, < and > by default (its --html-safe); older versions also
    # repeat the title as the first paragraph. An article it cleaned down to nothing is kept
    # (empty text) for the chunk stage to reject as chunk_empty_body.
    text = html.unescape(required_str(record, "text", allow_empty=True))
    return {
        "doc_id": f"{SOURCE}:{required_str(record, 'id')}",
        "source": SOURCE,
        "title": title,
        "text": plain_paragraphs(text, title),
        "url": required_str(record, "url"),
        "date": None,
    }


class ReadWikiExtractor(beam.PTransform):
    """Read WikiExtractor JSON files matching `file_pattern` into `{"documents", "dead_letter"}`."""

    def __init__(self, file_pattern: str):
        super().__init__()
        self.file_pattern = file_pattern

    def expand(self, pbegin):
        return pbegin | "JsonLines" >> ReadJsonLines(self.file_pattern, wikiextractor_record_to_document)
