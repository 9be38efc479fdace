"""Read MediaWiki XML export dumps (`*.xml`, `*.xml.bz2`, e.g. enwiki pages-articles) into documents.

A dump is streamed, never loaded whole: the decompressed lines are cut into `<page>...</page>`
byte chunks (MediaWiki's exporter puts `<page>` and `</page>` on lines of their own) and each
page is parsed on its own, so a malformed page or one with invalid UTF-8 becomes one dead
letter and the rest of the file goes on. Only articles are kept: redirects, disambiguation
pages and other namespaces are skipped and counted (`realm.read/skipped_*`). Articles are then
spread over the workers for the costly part, `wikitext_to_plain_text`; an article left empty
by cleaning is still emitted, and the chunk stage rejects it as `chunk_empty_body`. Cleaning
runs in a child process with a time limit (`realm.pipelines.time_limit`): a page whose markup
makes the wikitext parser overrun it is a `read_markup_too_slow` dead letter, where it held its
worker for hours, and one the parser fails on a `read_markup_unparsable` one, where it failed
the pipeline.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io import fileio

from realm.pipelines.corpus_files import (
    STAGE,
    CorruptFileError,
    MatchCorpusFiles,
    read_lines,
)
from realm.pipelines.dead_letters import DEAD_LETTER, counter, reject
from realm.pipelines.time_limit import CallFailed, CallTimedOut, TimeLimitedCalls
from realm.pipelines.wikitext import wikitext_to_plain_text

SOURCE = "wikipedia"
DEFAULT_ARTICLE_BASE_URL = "https://en.wikipedia.org/wiki/"
ARTICLE_NAMESPACE = "0"
# Cleaning enwiki's longest articles takes seconds; a page that needs a minute is pathological
# markup (a run of thousands of unclosed templates), not prose worth the worker's time.
CLEANING_TIMEOUT_S = 60.0

# Templates marking a disambiguation or set-index page (first letter case-insensitive, as in MediaWiki).
_DISAMBIGUATION_TEMPLATE = re.compile(
    r"\{\{\s*(?:[^{}|]*[ _]disambiguation|disambiguation|disambig|disamb|dab|hndis|geodis|numberdis|"
    r"set[ _]index[ _]article|sia|shipindex|mountainindex|roadindex|surname|given[ _]name)\s*[|}]",
    re.IGNORECASE,
)


class MalformedPageError(ValueError):
    """A page chunk that is not a well-formed `<page>` element with a title and an id."""


@dataclass(frozen=True)
class Page:
    page_id: str
    title: str
    namespace: str
    is_redirect: bool
    timestamp: str | None
    wikitext: str


def iter_dump_chunks(lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[str, int, bytes]]:
    """Cut a dump's numbered lines into `(kind, first line number, bytes)` chunks.

    Kinds: "siteinfo", "page", "unclosed_page" for a page cut off by the next `<page>` or by
    the end of the file, and "after_element" for markup other than `</mediawiki>` after a
    `</page>` or `</siteinfo>` on its line (a page there: dumps put one tag per line, and this
    reader relies on it).
    Only one page is ever held in memory.
    """
    kind, start, buffer = None, 0, []
    for line_number, line in lines:
        stripped = line.strip()
        if stripped.startswith((b"<page>", b"<siteinfo>")):
            if kind == "page":
                yield "unclosed_page", start, b"".join(buffer)
            kind, start, buffer = ("page" if stripped.startswith(b"<page>") else "siteinfo"), line_number, []
        if kind is None:
            continue
        closing = f"</{kind}>".encode()
        end = line.find(closing)  # markup inside the element is escaped: this is its end
        if end < 0:
            buffer.append(line)
            continue
        buffer.append(line[: end + len(closing)])
        yield kind, start, b"".join(buffer)
        kind, buffer = None, []
        if (rest := line[end + len(closing) :].strip()) and rest != b"</mediawiki>":
            yield "after_element", line_number, rest
    if kind == "page":
        yield "unclosed_page", start, b"".join(buffer)


def article_base_url(siteinfo_xml: bytes) -> str:
    """`https://<host>/wiki/` from `<siteinfo><base>` (the main page's URL), or the English default."""
    try:
        base = _strip_namespaces(ET.fromstring(siteinfo_xml)).findtext("base")
    except ET.ParseError:
        return DEFAULT_ARTICLE_BASE_URL
    if not base or "/" not in base:
        return DEFAULT_ARTICLE_BASE_URL
    return base.rsplit("/", 1)[0] + "/"


def article_url(base_url: str, title: str) -> str:
    """MediaWiki's URL of `title`: spaces as underscores, the rest percent-encoded as MediaWiki does."""
    return base_url + urllib.parse.quote(title.replace(" ", "_"), safe="/:(),'!*;@$_-.~")


def parse_page(page_xml: bytes) -> Page:
    """Parse one `<page>` chunk; raises UnicodeDecodeError, ET.ParseError or MalformedPageError."""
    page = _strip_namespaces(ET.fromstring(page_xml.decode("utf-8")))
    title, page_id = (page.findtext("title") or "").strip(), (page.findtext("id") or "").strip()
    if not title or not page_id:
        raise MalformedPageError("page without <title> or <id> (or a blank one)")
    revisions = page.findall("revision")
    # A history dump lists revisions oldest first; the last one is the article as it stands.
    revision = revisions[-1] if revisions else ET.Element("revision")
    return Page(
        page_id=page_id,
        title=title,
        namespace=(page.findtext("ns") or ARTICLE_NAMESPACE).strip(),
        is_redirect=page.find("redirect") is not None,
        timestamp=revision.findtext("timestamp"),
        wikitext=revision.findtext("text") or "",
    )


def skip_reason(page: Page) -> str | None:
    """Why `page` is not an article ("namespace", "redirect", "disambiguation"), or None."""
    if page.namespace != ARTICLE_NAMESPACE:
        return "namespace"
    if page.is_redirect or page.wikitext.lstrip()[:9].upper() == "#REDIRECT":
        return "redirect"
    if page.title.endswith("(disambiguation)") or _DISAMBIGUATION_TEMPLATE.search(page.wikitext):
        return "disambiguation"
    return None


def page_to_document(page: Page, base_url: str, text: str) -> dict:
    """The document of an article whose wikitext cleaned to `text`."""
    return {
        "doc_id": f"{SOURCE}:{page.page_id}",
        "source": SOURCE,
        "title": page.title,
        "text": text,
        "url": article_url(base_url, page.title),
        "date": page.timestamp,
    }


def _strip_namespaces(element: ET.Element) -> ET.Element:
    # Export schema versions differ only in the namespace URI ({...export-0.10/}, 0.11, ...).
    for node in element.iter():
        node.tag = node.tag.rpartition("}")[2]
    return element


class ReadWikipediaPagesFn(beam.DoFn):
    """One dump file -> `(article Page, base URL, record key)`; bad pages and a damaged stream ->
    dead letters.

    Only XML parsing happens here; the costly wikitext cleaning runs after a reshuffle, so
    a single-file dump is cleaned by every worker rather than by the one reading it.
    """

    def __init__(self):
        self.skipped = {
            reason: counter(STAGE, f"skipped_{reason}")
            for reason in ("namespace", "redirect", "disambiguation")
        }

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        base_url = DEFAULT_ARTICLE_BASE_URL
        articles = chunks = 0
        try:
            for kind, line_number, chunk in iter_dump_chunks(read_lines(readable)):
                chunks += 1
                record_key = f"{path}:{line_number}"
                if kind == "siteinfo":
                    base_url = article_base_url(chunk)
                elif kind == "unclosed_page":
                    yield reject(STAGE, record_key, "read_malformed_xml", "<page> without </page>", chunk)
                elif kind == "after_element":
                    yield reject(STAGE, record_key, "read_malformed_xml", "markup after a closing tag on its line", chunk)
                else:
                    outcome = self._article_or_rejection(record_key, chunk)
                    if isinstance(outcome, Page):
                        articles += 1
                        yield outcome, base_url, record_key
                    elif outcome is not None:
                        yield outcome
        except CorruptFileError as error:
            yield reject(STAGE, error.record_key, "read_corrupt_file", str(error))
        else:
            if not chunks and readable.metadata.size_in_bytes:
                # Legal XML all the same (one line, or prefixed tags): dropped without a word before.
                yield reject(STAGE, f"{path}:1", "read_malformed_xml",
                             "no line starts with <page>: dumps put one tag per line, as dumps.wikimedia.org and "
                             "Special:Export write them")
        logging.info("read %d articles from %s", articles, path)

    def _article_or_rejection(self, record_key: str, chunk: bytes):
        """The page if it is an article, a dead letter if it cannot be parsed, None if skipped."""
        try:
            page = parse_page(chunk)
        except UnicodeDecodeError as error:
            return reject(STAGE, record_key, "read_undecodable_bytes", str(error), chunk)
        except (ET.ParseError, MalformedPageError) as error:
            return reject(STAGE, record_key, "read_malformed_xml", str(error), chunk)
        reason = skip_reason(page)
        if reason is not None:
            self.skipped[reason].inc()
            return None
        return page


class CleanWikitextFn(beam.DoFn):
    """`(article Page, base URL, record key)` -> its document, the wikitext cleaned in a child
    process; a page whose cleaning overruns `timeout_s` -> a `read_markup_too_slow` dead letter,
    one whose cleaning raises (or kills the child) -> `read_markup_unparsable`."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def setup(self):
        self.clean = TimeLimitedCalls(wikitext_to_plain_text, self.timeout_s)

    def process(self, element):
        page, base_url, record_key = element
        try:
            text = self.clean(page.wikitext)
        except (CallTimedOut, CallFailed) as error:
            reason = "read_markup_too_slow" if isinstance(error, CallTimedOut) else "read_markup_unparsable"
            yield reject(STAGE, record_key, reason, f"{page.title} ({len(page.wikitext):,} characters): {error}",
                         page.wikitext)
            return
        yield page_to_document(page, base_url, text)

    def teardown(self):
        if (clean := getattr(self, "clean", None)) is not None:  # None when setup failed
            clean.close()


class ReadWikipediaXml(beam.PTransform):
    """Read MediaWiki XML dumps matching `file_pattern` into `{"documents", "dead_letter"}`."""

    def __init__(self, file_pattern: str, cleaning_timeout_s: float = CLEANING_TIMEOUT_S):
        super().__init__()
        self.file_pattern = file_pattern
        self.cleaning_timeout_s = cleaning_timeout_s

    def expand(self, pbegin):
        pages = (
            pbegin
            | "Files" >> MatchCorpusFiles(self.file_pattern)
            | "SplitPages" >> beam.ParDo(ReadWikipediaPagesFn()).with_outputs(DEAD_LETTER, main="articles")
        )
        cleaned = (
            pages.articles
            | "SpreadArticles" >> beam.Reshuffle()
            | "CleanWikitext" >> beam.ParDo(CleanWikitextFn(self.cleaning_timeout_s)).with_outputs(DEAD_LETTER, main="documents")
        )
        dead_letters = (pages[DEAD_LETTER], cleaned[DEAD_LETTER]) | "DeadLetters" >> beam.Flatten()
        return {"documents": cleaned.documents, "dead_letter": dead_letters}
