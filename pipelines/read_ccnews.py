"""Read CC-News into documents, from its JSON-lines dumps or from raw WARC files.

`ReadCcNewsJsonl` takes the JSON lines of the public dumps in either layout: news-please's
(`title`, `maintext`, `date_publish`, `url`) or the Hugging Face `cc_news` one (`title`, `text`,
`date`, `url`). `ReadWarc` takes `*.warc` / `*.warc.gz` files, keeps the HTML responses and
extracts each page's main text with trafilatura (offline: it is handed the HTML, never a URL
to fetch). A page whose text is only navigation (menus, link lists, a section's headlines:
trafilatura's fallback keeps those when it finds no article) is dropped with its reason. Documents of both are keyed by a hash of their URL, so one article gets the same
native id whichever way it was read. Damage in a WARC (bytes that read as no record, a record
cut short, a file cut) is a `read_corrupt_warc` dead letter naming where it starts, and
reading goes on at the next record after it (the next `WARC/1.x` line, or gzip member, that
reads as one), so one bad record does not cost the rest of the file; a file cut short ends
there. A response record that names no URL (`WARC-Target-URI`) is a `read_no_target_uri` dead
letter; a record whose Content-Length ends it where no blank line follows, or takes in the
next record (a length too short cuts the record, one too long takes in the next: a record of
an uncompressed file that another one starts inside and claims an end at or past its own) is a
`read_bad_content_length` one, and reading goes on at the first record after its start, so a
wrong length costs no other record. A record start is a `WARC/1.x` line, or gzip member,
followed by the headers every record has (a page quoting one starts none).
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import datetime
from typing import NamedTuple

import apache_beam as beam
import trafilatura
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.limitreader import LimitReader
from warcio.statusandheaders import StatusAndHeadersParserException

from realm.pipelines.corpus_files import (
    STAGE,
    MatchCorpusFiles,
    ReadJsonLines,
    optional_str,
    required_str,
)
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.paragraphs import plain_paragraphs

CCNEWS_SOURCE = "ccnews"
WARC_SOURCE = "warc"
URL_HASH_HEX_CHARS = 16
# Where a page declares its charset when the HTTP header does not: a <meta> near the top.
_HTML_SNIFF_BYTES = 2048
_CHARSET = r"""charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)"""
_HEADER_CHARSET = re.compile(_CHARSET, re.IGNORECASE)
_META_CHARSET = re.compile(_CHARSET.encode("ascii"), re.IGNORECASE)
# What warcio raises on a damaged WARC (measured on files cut at every 37 bytes): a bad record
# start is ArchiveLoadFailed, a header block cut short an AttributeError, HTTP headers cut
# short an EOFError. Damage inside a gzip member ends the iteration quietly instead, which the
# end-offset check catches.
_DAMAGED_WARC_ERRORS = (ArchiveLoadFailed, StatusAndHeadersParserException, AttributeError, EOFError)
_NO_TARGET_URI = object()
# Where a record may start: a WARC version line at the start of a line, or a gzip member's magic.
_RECORD_START = re.compile(rb"(?<=\n)WARC/1\.[01]\r?\n|\x1f\x8b\x08")
_RESYNC_WINDOW_BYTES = 1 << 20
_RESYNC_OVERLAP_BYTES = 16  # longer than a match plus the line break before it
_MANDATORY_HEADERS = ("WARC-Record-ID", "Content-Length")  # of every record (WARC 1.0 and 1.1, section 5)
# Prose has a paragraph with a sentence of at least this many words; menu items, link lists
# and headlines have none (they are short, or end without a full stop).
MIN_SENTENCE_WORDS = 6
_SENTENCE_END = re.compile(r"""[.!?…]["'”’)\]]*(?:\s|$)""")


class NoMainTextError(ValueError):
    """trafilatura found no main text in a page (an empty shell, a script-rendered app)."""

    reason = "read_no_main_text"


class NavigationOnlyError(ValueError):
    """The text of a page is only navigation: no paragraph holds a sentence."""

    reason = "read_navigation_only"


def is_navigation_only(text: str) -> bool:
    """Whether no paragraph of `text` has `MIN_SENTENCE_WORDS` words and ends a sentence."""
    return not any(
        len(paragraph.split()) >= MIN_SENTENCE_WORDS and _SENTENCE_END.search(paragraph)
        for paragraph in text.splitlines()
    )


def url_doc_id(source: str, url: str) -> str:
    """`<source>:<first 16 hex chars of sha1(url)>`: stable across runs and readers."""
    return f"{source}:{hashlib.sha1(url.encode('utf-8')).hexdigest()[:URL_HASH_HEX_CHARS]}"


def iso_date(value: str | None) -> str | None:
    """`value` as ISO-8601 when it parses ("2017-12-11 00:00:00" -> "2017-12-11T00:00:00"), else as is."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value.strip()).isoformat()
    except ValueError:
        return value


def ccnews_record_to_document(record: dict) -> dict:
    """One CC-News JSON record (news-please or HF layout) as a document."""
    url = required_str(record, "url")
    title = optional_str(record, "title") or ""
    return {
        "doc_id": url_doc_id(CCNEWS_SOURCE, url),
        "source": CCNEWS_SOURCE,
        "title": title,
        "text": plain_paragraphs(required_str(record, "maintext", "text"), title),
        "url": url,
        "date": iso_date(optional_str(record, "date_publish", "date")),
    }


def decode_html(body: bytes, content_type: str | None) -> str:
    """Decode an HTTP body with the charset its header or a <meta> declares, else UTF-8.

    Raises UnicodeError when the bytes do not match (a codec like punycode raises its base
    class) or decode to lone surrogates (unicode_escape can), LookupError for an unknown charset.
    """
    header = _HEADER_CHARSET.search(content_type or "")
    meta = _META_CHARSET.search(body[:_HTML_SNIFF_BYTES])
    charset = header.group(1) if header else meta.group(1).decode("ascii") if meta else "utf-8"
    html = body.decode(charset)
    html.encode("utf-8")  # UnicodeEncodeError for a lone surrogate, which no stage could write
    return html


def html_to_document(url: str, html: str, crawl_date: str | None) -> dict:
    """The main text of a news page as a document; raises NoMainTextError or NavigationOnlyError."""
    extracted = trafilatura.bare_extraction(
        html, url=url, include_comments=False, include_tables=False, with_metadata=True
    )
    title = (extracted.title or "") if extracted else ""
    text = plain_paragraphs(extracted.text or "", title) if extracted else ""
    if not text:
        raise NoMainTextError("trafilatura extracted no main text")
    if is_navigation_only(text):
        raise NavigationOnlyError(f"no paragraph of {MIN_SENTENCE_WORDS}+ words ends a sentence: {text[:80]!r}")
    return {
        "doc_id": url_doc_id(WARC_SOURCE, url),
        "source": WARC_SOURCE,
        "title": title,
        "text": text,
        "url": url,
        # The publication date from the page; the crawl date is an upper bound when it has none.
        "date": extracted.date or crawl_date,
    }


def next_record_start(handle, offset: int, end: int) -> int | None:
    """The first file offset from `offset` to before `end` where a WARC record reads (a
    `WARC/1.x` line of an uncompressed file, a gzip member of a compressed one), or None: where
    reading goes on after damage, so one bad record does not cost the rest of the file."""
    tried = -1
    window_start = offset
    while window_start < end:
        handle.seek(window_start)
        window = handle.read(min(_RESYNC_WINDOW_BYTES, end - window_start + _RESYNC_OVERLAP_BYTES))
        if not window:
            break
        for match in _RECORD_START.finditer(window):
            candidate = window_start + match.start()
            if candidate >= end:
                return None
            if candidate > tried:  # windows overlap: each candidate is tried once
                tried = candidate
                if _reads_a_record(handle, candidate):
                    return candidate
        window_start += max(len(window) - _RESYNC_OVERLAP_BYTES, 1)
    return None


def _reads_a_record(handle, offset: int) -> bool:
    return _claimed_end(handle, offset) is not None


def _claimed_end(handle, offset: int) -> int | None:
    """Where the record that reads at `offset` says its content ends (uncompressed files: its
    headers' end plus its Content-Length), or None where no record reads: headers without the
    ones every WARC record has (a `WARC/1.0` line in a page, the page's lines after it read as
    headers) are none."""
    handle.seek(offset)
    records = ArchiveIterator(handle, no_record_parse=True)
    try:
        record = next(records, None)
    except Exception:  # whatever a false start raises (zlib, warcio, EOF): no record starts there
        return None
    if record is None or not all(record.rec_headers.get_header(name) for name in _MANDATORY_HEADERS):
        return None
    return handle.tell() - records.reader.rem_length() + record.length


class _Stop(NamedTuple):
    """Where reading a file with one warcio iterator stopped: at `damage` (None: after a record
    whose Content-Length is wrong, which has its own dead letter), and where to search for the
    next record from."""

    offset: int
    damage: str | None
    search_from: int


class HtmlPage(NamedTuple):
    record_key: str  # <path>:<record offset>
    url: str
    html: str
    crawl_date: str | None


class ReadWarcResponsesFn(beam.DoFn):
    """One WARC file -> an HtmlPage per HTML response; undecodable pages and damage -> dead letters.

    Text extraction, the costly part, runs after a reshuffle, so the pages of one WARC file
    are extracted by every worker rather than by the one reading it.
    """

    def __init__(self):
        self.skipped_http_status = counter(STAGE, "skipped_http_status")
        self.skipped_non_html = counter(STAGE, "skipped_non_html")

    def process(self, readable: fileio.ReadableFile):
        path, size = readable.metadata.path, readable.metadata.size_in_bytes
        self.pages = 0
        # warcio decompresses record-at-a-time .warc.gz itself, so Beam must hand over raw bytes.
        with readable.open(
            mime_type="application/octet-stream", compression_type=CompressionTypes.UNCOMPRESSED
        ) as handle:
            resume_at = 0
            # Every stop searches from past the start of the last record read, so each pass
            # starts further on, and no record is read twice.
            while (stop := (yield from self._records_from(handle, path, resume_at, size))) is not None:
                resume_at = next_record_start(handle, stop.search_from, size)
                if stop.damage is None:
                    if resume_at is None:  # the rest belongs to the record its dead letter names
                        break
                    continue
                if resume_at is None:
                    yield reject(STAGE, f"{path}:{stop.offset}", "read_corrupt_warc", f"{stop.damage}; no record after it")
                    break
                yield reject(STAGE, f"{path}:{stop.offset}", "read_corrupt_warc",
                             f"{stop.damage}; {resume_at - stop.offset} bytes skipped to the next record, at {resume_at}")
        logging.info("read %d HTML pages from %s", self.pages, path)

    def _records_from(self, handle, path: str, start: int, size: int):
        """Yield the outcomes of the records from file offset `start` on; return None at the
        file's end, else where reading stopped and why (`_Stop`)."""
        handle.seek(start)
        # HTTP headers are parsed below, as warcio would, once the record is known to name its
        # URL: warcio's own parse raises on a response without WARC-Target-URI, which would
        # end the file's reading there.
        records = ArchiveIterator(handle, no_record_parse=True)
        floor = start  # warcio's offset inside a damaged gzip member can lie before the records read
        while True:
            record_start, misplaced_ends = max(records.offset, floor), records.err_count
            try:
                record = next(records, None)
                if record is None:
                    break
                body = self._html_body(record, records.loader)
                records.read_to_end()
            except _DAMAGED_WARC_ERRORS as error:
                # One line: warcio's advice for a whole-file gzip (recompress it) spans several.
                return _Stop(record_start, f"{type(error).__name__}: {' '.join(str(error).split())}", record_start + 1)
            if not isinstance(record.raw_stream, LimitReader) or record.raw_stream.limit > 0:
                return _Stop(record_start, "record shorter than its Content-Length", record_start + 1)
            floor = record_start + 1
            misplaced_end = records.err_count > misplaced_ends or self._took_in_a_record(handle, record_start, records)
            if body is _NO_TARGET_URI:
                yield reject(STAGE, f"{path}:{record_start}", "read_no_target_uri",
                             "a response record without WARC-Target-URI: no URL to key or extract it by")
            elif misplaced_end:
                # A length too short cuts the record read, one too long takes in the next record.
                yield reject(STAGE, f"{path}:{record_start}", "read_bad_content_length",
                             "its Content-Length ends it where no blank line follows, or takes in the next record")
            elif body is not None:
                outcome = self._page_or_rejection(f"{path}:{record_start}", record, body)
                self.pages += isinstance(outcome, HtmlPage)
                yield outcome
            if misplaced_end:
                # warcio would go on after skipping a line, which a length off by more than a
                # line puts inside a record (this one, or the next): go on at the first record
                # after this one's start instead.
                return _Stop(record_start, None, record_start + 1)
        if records.offset < size:
            # warcio ends quietly when a .warc.gz is cut or damaged inside a gzip member.
            offset = max(records.offset, floor)
            return _Stop(offset, f"{size - offset} bytes after the last record", offset + 1)
        return None

    @staticmethod
    def _took_in_a_record(handle, record_start: int, records: ArchiveIterator) -> bool:
        """Whether a record of an uncompressed file took in the next one, its Content-Length too
        long: warcio's blank-line check passes when that length ends on a blank line inside the
        next record, or just after it. Then a record starts inside this one and claims an end
        (with its own blank lines) at or past this one's; a `WARC/1.0` line a page merely
        quotes claims one before it. (A .warc.gz record ends with its gzip member, so a length
        too long there reads as a record cut short.)"""
        if records.reader.decompressor is not None:
            return False
        claimed_end = sum(records.member_info)  # (record start, headers and content length)
        reading_at = handle.tell()  # under warcio's buffered reader, which goes on from here
        try:
            inside = record_start + 1
            while (inside := next_record_start(handle, inside, claimed_end)) is not None:
                if _claimed_end(handle, inside) + len(b"\r\n\r\n") >= claimed_end:
                    return True
                inside += 1
            return False
        finally:
            handle.seek(reading_at)

    def _html_body(self, record, loader) -> bytes | object | None:
        """The decoded HTTP payload of an HTML response record, `_NO_TARGET_URI` for a response
        without its URL, None for any other record."""
        if record.rec_type != "response":
            return None
        url = record.rec_headers.get_header("WARC-Target-URI")
        if not url:
            return _NO_TARGET_URI
        record.http_headers = loader.load_http_headers(record.rec_type, url, record.raw_stream, record.length)
        if record.http_headers is None:  # not an http(s) URL, or an empty record
            return None
        if not record.http_headers.get_statuscode().startswith("2"):
            self.skipped_http_status.inc()
            return None
        if "html" not in (record.http_headers.get_header("Content-Type") or "").lower():
            self.skipped_non_html.inc()
            return None
        return record.content_stream().read()

    def _page_or_rejection(self, record_key: str, record, body: bytes):
        url = record.rec_headers.get_header("WARC-Target-URI")
        try:
            html = decode_html(body, record.http_headers.get_header("Content-Type"))
        except (UnicodeError, LookupError) as error:
            return reject(STAGE, record_key, "read_undecodable_bytes", f"{url}: {error}", body)
        return HtmlPage(record_key, url, html, record.rec_headers.get_header("WARC-Date"))


class ExtractMainTextFn(beam.DoFn):
    """HtmlPage -> document, or a `read_no_main_text` / `read_navigation_only` dead letter."""

    def process(self, page: HtmlPage):
        try:
            yield html_to_document(page.url, page.html, page.crawl_date)
        except (NoMainTextError, NavigationOnlyError) as error:
            yield reject(STAGE, page.record_key, error.reason, f"{page.url}: {error}", page.html)


class ReadCcNewsJsonl(beam.PTransform):
    """Read CC-News JSON lines matching `file_pattern` into `{"documents", "dead_letter"}`."""

    def __init__(self, file_pattern: str):
        super().__init__()
        self.file_pattern = file_pattern

    def expand(self, pbegin):
        return pbegin | "JsonLines" >> ReadJsonLines(self.file_pattern, ccnews_record_to_document)


class ReadWarc(beam.PTransform):
    """Read WARC files matching `file_pattern` into `{"documents", "dead_letter"}`."""

    def __init__(self, file_pattern: str):
        super().__init__()
        self.file_pattern = file_pattern

    def expand(self, pbegin):
        pages = (
            pbegin
            | "Files" >> MatchCorpusFiles(self.file_pattern)
            | "ReadResponses" >> beam.ParDo(ReadWarcResponsesFn()).with_outputs(DEAD_LETTER, main="pages")
        )
        extracted = (
            pages.pages
            | "SpreadPages" >> beam.Reshuffle()
            | "ExtractMainText" >> beam.ParDo(ExtractMainTextFn()).with_outputs(DEAD_LETTER, main="documents")
        )
        dead_letter = (pages[DEAD_LETTER], extracted[DEAD_LETTER]) | "DeadLetters" >> beam.Flatten()
        return {"documents": extracted.documents, "dead_letter": dead_letter}
