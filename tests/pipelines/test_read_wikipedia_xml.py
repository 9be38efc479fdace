import bz2

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.read_wikipedia_xml import (
    MalformedPageError,
    ReadWikipediaXml,
    iter_dump_chunks,
    parse_page,
    skip_reason,
)
from tests.pipelines.wikipedia_fixture import (
    ARTICLES,
    FOOTER,
    HEADER,
    MALFORMED_PAGE,
    PARIS_TEXT,
    UNDECODABLE_PAGE,
    dump_bytes,
    page,
)

def line_of(dump: bytes, marker: bytes) -> int:
    """1-based line number of the `<page>` line of the page containing `marker`."""
    before = dump[: dump.index(marker)]
    return before[: before.rindex(b"<page>")].count(b"\n") + 1


def document(page_id, title, text, base="https://simple.wikipedia.org/wiki/"):
    return {
        "doc_id": f"wikipedia:{page_id}",
        "source": "wikipedia",
        "title": title,
        "text": text,
        "url": base + title.replace(" ", "_"),
        "date": "2024-05-01T12:00:00Z",
    }


LYON = document(20, "Lyon", "Lyon is a city in France.")


def counter_values(result, names):
    counters = result.metrics().query(MetricsFilter().with_namespace("realm.read"))["counters"]
    values = {counter.key.metric.name: counter.committed for counter in counters}
    return {name: values.get(name, 0) for name in names}


def test_dump_chunks_report_a_page_cut_off_by_the_next_page_or_the_end_of_file():
    lines = [b"<page>\n", b"<title>A</title>\n", b"<page>\n", b"</page>\n", b"<page>\n", b"<title>B\n"]
    chunks = list(iter_dump_chunks(enumerate(lines, start=1)))
    assert [(kind, start) for kind, start, _ in chunks] == [("unclosed_page", 1), ("page", 3), ("unclosed_page", 5)]


def test_non_articles_are_recognised_by_namespace_redirect_and_disambiguation_markers():
    parsable = [chunk for chunk in ARTICLES if chunk not in (MALFORMED_PAGE, UNDECODABLE_PAGE)]
    assert [skip_reason(parse_page(chunk)) for chunk in parsable] == [
        None,
        "redirect",
        "redirect",
        "disambiguation",
        "disambiguation",
        "disambiguation",
        "namespace",
        None,
        None,
    ]


@pytest.mark.parametrize("page", [
    b"<page><title>   </title><id>7</id><revision><text>Body.</text></revision></page>",
    b"<page><title>Seven</title><id> </id><revision><text>Body.</text></revision></page>",
])
def test_a_page_with_a_blank_title_or_id_is_malformed(page):
    with pytest.raises(MalformedPageError, match="without <title> or <id>"):
        parse_page(page)


def test_a_page_closed_mid_line_is_read_and_what_follows_it_there_is_reported():
    lines = [b"<page>\n", b"<title>A</title><id>1</id>\n", b"</page></mediawiki>\n",
             b"<page><title>B</title><id>2</id></page><page><title>C</title><id>3</id></page>\n"]
    chunks = list(iter_dump_chunks(enumerate(lines, start=1)))
    assert chunks == [
        ("page", 1, b"<page>\n<title>A</title><id>1</id>\n</page>"),
        ("page", 4, b"<page><title>B</title><id>2</id></page>"),
        ("after_element", 4, b"<page><title>C</title><id>3</id></page>"),
    ]


def test_a_dump_with_no_page_on_a_line_of_its_own_is_a_dead_letter_not_nothing(tmp_path):
    path = tmp_path / "one-line.xml"
    path.write_bytes(b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><page><title>A</title>'
                     b"<id>1</id><revision><text>Body.</text></revision></page></mediawiki>")
    pipeline, outputs = run_reader(str(path))
    assert_that(outputs["documents"], equal_to([]), label="Documents")
    assert_that(outputs["dead_letter"] | beam.Map(lambda row: (row["reason"], row["record_key"], row["detail"][:28])),
                equal_to([("read_malformed_xml", f"{path}:1", "no line starts with <page>: ")]), label="DeadLetters")
    pipeline.run().wait_until_finish()


def run_reader(pattern):
    pipeline = TestPipeline()
    outputs = pipeline | ReadWikipediaXml(pattern)
    return pipeline, outputs


def test_dump_yields_articles_and_one_dead_letter_per_bad_page_and_counts_skips(tmp_path):
    dump = dump_bytes(ARTICLES)
    path = tmp_path / "simplewiki-pages-articles.xml"
    path.write_bytes(dump)
    pipeline, outputs = run_reader(str(tmp_path / "*.xml"))
    assert_that(
        outputs["documents"],
        equal_to([document(10, "Paris", PARIS_TEXT), document(19, "Stub", ""), LYON]),
        label="Documents",
    )
    assert_that(
        outputs["dead_letter"] | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"])),
        equal_to(
            [
                ("read", "read_malformed_xml", f"{path}:{line_of(dump, b'<title>Broken')}"),
                ("read", "read_undecodable_bytes", f"{path}:{line_of(dump, b'<title>Bytes')}"),
            ]
        ),
        label="DeadLetters",
    )
    result = pipeline.run()
    result.wait_until_finish()
    assert counter_values(result, ["skipped_redirect", "skipped_disambiguation", "skipped_namespace"]) == {
        "skipped_redirect": 2,
        "skipped_disambiguation": 3,
        "skipped_namespace": 1,
    }


def test_bz2_multistream_dump_is_streamed_and_a_truncated_stream_keeps_the_pages_before_it(tmp_path):
    first_stream = bz2.compress(HEADER + ARTICLES[0])
    second_stream = bz2.compress(ARTICLES[-1] + FOOTER)
    (tmp_path / "whole.xml.bz2").write_bytes(first_stream + second_stream)
    # Cut inside the second stream: Paris (first stream) survives, Lyon is lost with the tail.
    (tmp_path / "cut.xml.bz2").write_bytes(first_stream + second_stream[: len(second_stream) // 2])
    pipeline, outputs = run_reader(str(tmp_path / "*.xml.bz2"))
    paris = document(10, "Paris", PARIS_TEXT)
    assert_that(outputs["documents"], equal_to([paris, LYON, paris]), label="Documents")
    first_unread_line = (HEADER + ARTICLES[0]).count(b"\n") + 1
    assert_that(
        outputs["dead_letter"] | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"])),
        equal_to([("read", "read_corrupt_file", f"{tmp_path / 'cut.xml.bz2'}:{first_unread_line}")]),
        label="DeadLetters",
    )
    pipeline.run().wait_until_finish()


def test_dump_without_siteinfo_links_articles_to_english_wikipedia(tmp_path):
    (tmp_path / "pages.xml").write_bytes(b"<mediawiki>\n" + ARTICLES[-1] + FOOTER)
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadWikipediaXml(str(tmp_path / "pages.xml"))
        assert_that(
            outputs["documents"] | beam.Map(lambda doc: doc["url"]),
            equal_to(["https://en.wikipedia.org/wiki/Lyon"]),
        )


def test_a_page_whose_markup_makes_cleaning_overrun_its_time_is_a_dead_letter_and_the_rest_are_read(tmp_path):
    """20,000 unclosed templates would hold mwparserfromhell for minutes (quadratic tokenizer);
    with a 3-second limit the page is one dead letter, and the page after it is read."""
    stuck = page(30, "Stuck", "{{a|" * 20_000 + "text")
    dump = dump_bytes([stuck, ARTICLES[-1]])
    path = tmp_path / "pages.xml"
    path.write_bytes(dump)
    pipeline = TestPipeline()
    outputs = pipeline | ReadWikipediaXml(str(path), cleaning_timeout_s=3)
    assert_that(outputs["documents"], equal_to([LYON]), label="Documents")
    assert_that(
        outputs["dead_letter"] | beam.Map(lambda row: (row["reason"], row["record_key"], row["detail"])),
        equal_to([("read_markup_too_slow", f"{path}:{line_of(dump, b'<title>Stuck')}",
                   "Stuck (80,004 characters): wikitext_to_plain_text ran past 3 s")]),
        label="DeadLetters",
    )
    pipeline.run().wait_until_finish()
