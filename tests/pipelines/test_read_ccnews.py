import json
import re

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.read_ccnews import (
    MIN_SENTENCE_WORDS,
    ReadCcNewsJsonl,
    ReadWarc,
    ccnews_record_to_document,
    decode_html,
    is_navigation_only,
    url_doc_id,
)
from tests.pipelines.news_fixture import (
    BRIDGE_HTML,
    BRIDGE_PARAGRAPHS,
    BRIDGE_URL,
    CAFE_HTML,
    CAFE_PARAGRAPH,
    CAFE_URL,
    EMPTY_HTML,
    SECTION_HTML,
    SECTION_URL,
    warc_records,
)


def document(source, url, title, text, date):
    return {"doc_id": url_doc_id(source, url), "source": source, "title": title, "text": text, "url": url, "date": date}


BRIDGE = document("warc", BRIDGE_URL, "Council approves river bridge", "\n".join(BRIDGE_PARAGRAPHS), "2019-03-04")
CAFE = document("warc", CAFE_URL, "Caf\xe9 reopens", CAFE_PARAGRAPH, "2019-03-05T08:00:00Z")


def dead_letter_keys(dead_letters):
    return dead_letters | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"]))


def test_html_is_decoded_with_the_header_charset_then_the_meta_charset_then_utf8():
    assert decode_html("é".encode("latin-1"), "text/html; charset=ISO-8859-1") == "é"
    assert decode_html(b'<meta charset="windows-1252">\x93q\x94', "text/html").endswith("\u201cq\u201d")
    with pytest.raises(UnicodeDecodeError):
        decode_html(b"<p>caf\xe9</p>", "text/html")
    with pytest.raises(UnicodeError):  # its base class, raised by codecs like punycode
        decode_html(b"<p>caf\xe9</p>", "text/html; charset=punycode")
    with pytest.raises(UnicodeEncodeError):  # half a UTF-16 pair, which no stage could write
        decode_html(b"<p>\\ud800</p>", "text/html; charset=unicode_escape")


@pytest.mark.parametrize(
    ("text", "navigation"),
    [
        ("Home\nWorld\nSport\nContact us | Privacy policy", True),
        ("Council approves river bridge after a decade of debate\nMore world news", True),  # headlines
        ("Read more.\nSee all.", True),  # sentences, but shorter than MIN_SENTENCE_WORDS
        ("Home\nThe council voted on Tuesday to approve the bridge.", False),
        ('He said "the bridge opens in spring." The mayor agreed', False),
    ],
)
def test_a_text_is_navigation_when_no_paragraph_holds_a_sentence(text, navigation):
    assert MIN_SENTENCE_WORDS == 6
    assert is_navigation_only(text) is navigation


def test_both_public_jsonl_layouts_map_to_the_same_document_shape():
    news_please = {
        "title": "Bridge approved",
        "maintext": "Bridge approved\nThe council voted.\n\nWork starts in spring.",
        "date_publish": "2019-03-04 10:00:00",
        "url": BRIDGE_URL,
        "source_domain": "news.example.com",
    }
    hugging_face = {
        "title": "Bridge approved",
        "text": "The council voted.\nWork starts in spring.",
        "date": "2019-03-04 10:00:00",
        "url": BRIDGE_URL,
        "domain": "news.example.com",
    }
    text = "The council voted.\nWork starts in spring."
    expected = document("ccnews", BRIDGE_URL, "Bridge approved", text, "2019-03-04T10:00:00")
    assert ccnews_record_to_document(news_please) == expected
    assert ccnews_record_to_document(hugging_face) == expected
    assert expected["doc_id"] == url_doc_id("ccnews", BRIDGE_URL)
    assert len(expected["doc_id"]) == len("ccnews:") + 16


def test_ccnews_jsonl_lines_become_documents_or_dead_letters(tmp_path):
    path = tmp_path / "ccnews-2019.jsonl"
    path.write_text(
        json.dumps({"title": "A", "maintext": "Alpha text.", "date_publish": None, "url": "https://a.example/1"}) + "\n"
        + json.dumps({"title": "B", "maintext": None, "url": "https://a.example/2"}) + "\n"
        + "not json\n",
        encoding="utf-8",
    )
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadCcNewsJsonl(str(tmp_path / "*.jsonl"))
        assert_that(
            outputs["documents"],
            equal_to([document("ccnews", "https://a.example/1", "A", "Alpha text.", None)]),
            label="Documents",
        )
        assert_that(
            dead_letter_keys(outputs["dead_letter"]),
            equal_to([("read", "read_missing_field", f"{path}:2"), ("read", "read_malformed_json", f"{path}:3")]),
            label="DeadLetters",
        )


def test_warc_html_responses_become_documents_and_bad_or_damaged_records_dead_letters(tmp_path, no_network):
    crawl = warc_records(
        gzip=True,
        pages=[
            ("request", BRIDGE_URL),
            ("response", BRIDGE_URL, BRIDGE_HTML.encode("utf-8")),
            ("response", CAFE_URL, CAFE_HTML.encode("windows-1252"), "text/html"),
            ("response", "https://news.example.com/bad-bytes", b"<html><body><p>caf\xe9 \xff\xfe</p></body></html>"),
            ("response", "https://news.example.com/app", EMPTY_HTML.encode()),
            ("response", SECTION_URL, SECTION_HTML.encode()),
            ("response", "https://news.example.com/logo.png", b"\x89PNG", "image/png"),
            ("response", "https://news.example.com/gone", BRIDGE_HTML.encode(), "text/html", "404 Not Found"),
        ],
    )
    (tmp_path / "crawl.warc.gz").write_bytes(b"".join(crawl))
    # Cut inside the second record: the first one is kept, the rest is one read_corrupt_warc.
    two_pages = [("response", BRIDGE_URL, BRIDGE_HTML.encode()), ("response", CAFE_URL, CAFE_HTML.encode())]
    cut = warc_records(gzip=False, pages=two_pages)
    (tmp_path / "cut.warc").write_bytes(cut[0] + cut[1][: len(cut[1]) // 2])
    # Cut inside the second gzip member's header block: warcio itself stops without an error.
    cut_gz = warc_records(gzip=True, pages=two_pages)
    (tmp_path / "cut-header.warc.gz").write_bytes(cut_gz[0] + cut_gz[1][:40])
    # A response that names no URL is one dead letter; the records after it are still read.
    no_uri = cut[0].replace(f"WARC-Target-URI: {BRIDGE_URL}\r\n".encode(), b"")
    assert no_uri != cut[0]
    (tmp_path / "no-uri.warc").write_bytes(no_uri + cut[1])
    # A Content-Length 40 bytes short would cut the page: that record is one dead letter.
    length = re.search(rb"Content-Length: (\d+)\r\n", cut[0])
    short = cut[0].replace(length[0], b"Content-Length: %d\r\n" % (int(length[1]) - 40), 1)
    (tmp_path / "short-length.warc").write_bytes(short + cut[1])

    pipeline = TestPipeline()
    outputs = pipeline | ReadWarc(str(tmp_path / "*.warc*"))
    assert_that(outputs["documents"], equal_to([BRIDGE, CAFE, BRIDGE, BRIDGE, CAFE, CAFE]), label="Documents")
    crawl_path = tmp_path / "crawl.warc.gz"
    assert_that(
        dead_letter_keys(outputs["dead_letter"]),
        equal_to(
            [
                ("read", "read_undecodable_bytes", f"{crawl_path}:{sum(map(len, crawl[:3]))}"),
                ("read", "read_no_main_text", f"{crawl_path}:{sum(map(len, crawl[:4]))}"),
                ("read", "read_navigation_only", f"{crawl_path}:{sum(map(len, crawl[:5]))}"),
                ("read", "read_corrupt_warc", f"{tmp_path / 'cut.warc'}:{len(cut[0])}"),
                ("read", "read_corrupt_warc", f"{tmp_path / 'cut-header.warc.gz'}:{len(cut_gz[0])}"),
                ("read", "read_no_target_uri", f"{tmp_path / 'no-uri.warc'}:0"),
                ("read", "read_bad_content_length", f"{tmp_path / 'short-length.warc'}:0"),
            ]
        ),
        label="DeadLetters",
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("realm.read"))["counters"]
    skipped = {c.key.metric.name: c.committed for c in counters if c.key.metric.name.startswith("skipped_")}
    assert skipped == {"skipped_non_html": 1, "skipped_http_status": 1}


def _with_content_length(record: bytes, change: int) -> bytes:
    length = re.search(rb"Content-Length: (\d+)\r\n", record)
    return record.replace(length[0], b"Content-Length: %d\r\n" % (int(length[1]) + change), 1)


def test_reading_goes_on_at_the_next_record_after_damage_and_a_wrong_length_costs_only_its_record(tmp_path, no_network):
    import gzip

    later_url = BRIDGE_URL + "-update"
    pages = [("response", BRIDGE_URL, BRIDGE_HTML.encode()), ("response", CAFE_URL, CAFE_HTML.encode()),
             ("response", later_url, BRIDGE_HTML.encode())]
    plain, packed = warc_records(gzip=False, pages=pages), warc_records(gzip=True, pages=pages)
    short_first = _with_content_length(plain[0], -300)
    junk = b"not a record\r\n" * 20
    packed_first = gzip.compress(_with_content_length(gzip.decompress(packed[0]), +300))
    files = {
        # 300 bytes short: warcio would go on inside the first record's page; reading goes on at the second.
        "short.warc": short_first + plain[1] + plain[2],
        # Too long: the first record takes in part of the second, which is found again from the first's start.
        "long.warc": _with_content_length(plain[0], +300) + plain[1] + plain[2],
        # Ending on the second record's last line: warcio itself would go on at the third.
        "swallow.warc": _with_content_length(plain[0], len(plain[1]) - 3) + plain[1] + plain[2],
        # Too long, ending on the blank line after the second record's WARC headers: warcio's
        # check passes, and it would emit the first page with part of the second and lose that one.
        "long-to-blank.warc": _with_content_length(plain[0], 4 + plain[1].index(b"\r\n\r\n")) + plain[1] + plain[2],
        # Too long by the whole second record: warcio reads on at the third, and would lose the second.
        "long-by-a-record.warc": _with_content_length(plain[0], len(plain[1])) + plain[1] + plain[2],
        # Bytes that are no record between two records.
        "junk.warc": plain[0] + junk + plain[1] + plain[2],
        # A gzip member whose record is shorter than its Content-Length: the next member reads.
        "long.warc.gz": packed_first + packed[1] + packed[2],
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    at = {name: str(tmp_path / name) for name in files}

    pipeline = TestPipeline()
    outputs = pipeline | ReadWarc(str(tmp_path / "*.warc*"))
    later = document("warc", later_url, BRIDGE["title"], BRIDGE["text"], BRIDGE["date"])
    assert_that(outputs["documents"], equal_to([BRIDGE] + [CAFE, later] * 7), label="Documents")
    rows = outputs["dead_letter"] | beam.Map(lambda row: (row["reason"], row["record_key"], row["detail"]))

    def check(found):
        bad_length = "its Content-Length ends it where no blank line follows, or takes in the next record"
        assert sorted((reason, key) for reason, key, _ in found) == sorted([
            ("read_bad_content_length", f"{at['short.warc']}:0"), ("read_bad_content_length", f"{at['long.warc']}:0"),
            ("read_bad_content_length", f"{at['swallow.warc']}:0"), ("read_bad_content_length", f"{at['long-to-blank.warc']}:0"),
            ("read_bad_content_length", f"{at['long-by-a-record.warc']}:0"),
            ("read_corrupt_warc", f"{at['junk.warc']}:{len(plain[0])}"), ("read_corrupt_warc", f"{at['long.warc.gz']}:0"),
        ])
        details = {key: detail for _, key, detail in found}
        bad_lengths = ("short.warc", "long.warc", "swallow.warc", "long-to-blank.warc", "long-by-a-record.warc")
        assert {details[f"{at[name]}:0"] for name in bad_lengths} == {bad_length}
        assert details[f"{at['junk.warc']}:{len(plain[0])}"] == (
            f"ArchiveLoadFailed: Invalid WARC record, first line: not a record; {len(junk)} bytes skipped to the "
            f"next record, at {len(plain[0]) + len(junk)}"
        )
        assert details[f"{at['long.warc.gz']}:0"] == (
            f"record shorter than its Content-Length; {len(packed_first)} bytes skipped to the next record, at {len(packed_first)}"
        )

    assert_that(rows, check, label="DeadLetters")
    pipeline.run().wait_until_finish()


def test_a_page_that_quotes_warc_records_is_read_whole(tmp_path, no_network):
    """`WARC/1.0` lines inside a page (an article about web archives) start no record: the page
    and the one after it are read, and nothing is a dead letter."""
    quoted = ("<pre>\nWARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: &lt;urn:uuid:1&gt;\r\n"
              "WARC-Target-URI: http://example.org/\r\nContent-Length: 10\r\n\r\n0123456789\r\n\r\n</pre>"
              "<pre>\nWARC/1.0\n</pre>")
    pages = [("response", BRIDGE_URL, BRIDGE_HTML.replace("</article>", quoted + "</article>").encode()),
             ("response", CAFE_URL, CAFE_HTML.encode())]
    (tmp_path / "quoting.warc").write_bytes(b"".join(warc_records(gzip=False, pages=pages)))

    pipeline = TestPipeline()
    outputs = pipeline | ReadWarc(str(tmp_path / "*.warc"))
    assert_that(outputs["documents"] | beam.Map(lambda document: document["url"]), equal_to([BRIDGE_URL, CAFE_URL]),
                label="Documents")
    assert_that(outputs["dead_letter"], equal_to([]), label="DeadLetters")
    pipeline.run().wait_until_finish()


def test_every_damaged_file_is_read_to_its_end_once(tmp_path, no_network):
    """Damage inside gzip members, where warcio's offsets can lie before the records read: each
    file ends (it once read forever, or seeked before its start), no record twice."""
    import gzip

    def page(name: str) -> tuple:
        paragraphs = "".join(f"<p>Paragraph {k} of the {name} story tells what the council decided today.</p>\n"
                             for k in range(40))
        return ("response", f"https://news.example.com/{name}", f"<html><body><article>{paragraphs}</article></body></html>".encode())

    first, second = warc_records(gzip=False, pages=[page("first"), page("second")])
    files = {
        f"short-{cut}.warc.gz": gzip.compress(first) + gzip.compress(_with_content_length(second, -cut)) for cut in (1000, 2000)
    }
    files["whole.warc.gz"] = gzip.compress(first + second + first.replace(b"/first", b"/third"))
    files["cut-http-headers.warc"] = first + second[: second.index(b"HTTP/1.1 200 OK\r\n") + 20]
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)

    pipeline = TestPipeline()
    outputs = pipeline | ReadWarc(str(tmp_path / "*.warc*"))
    urls = outputs["documents"] | beam.Map(lambda document: document["url"].rsplit("/", 1)[1])
    assert_that(urls, equal_to(["first"] * 4), label="Documents")
    first_gz = len(gzip.compress(first))
    assert_that(
        outputs["dead_letter"] | beam.Map(lambda row: (row["reason"], row["record_key"].rsplit("/", 1)[1])),
        equal_to([
            ("read_bad_content_length", f"short-1000.warc.gz:{first_gz}"),
            ("read_bad_content_length", f"short-2000.warc.gz:{first_gz}"),
            ("read_corrupt_warc", "whole.warc.gz:1"),
            ("read_corrupt_warc", f"cut-http-headers.warc:{len(first)}"),
        ]),
        label="DeadLetters",
    )
    pipeline.run().wait_until_finish()


def test_a_whole_file_gzip_keeps_its_first_record_and_says_in_one_line_to_recompress(tmp_path, no_network):
    # warcio reads only a gzip member per record; one member for the whole file ends after the first.
    import gzip

    records = warc_records(gzip=False, pages=[("response", BRIDGE_URL, BRIDGE_HTML.encode()),
                                              ("response", CAFE_URL, CAFE_HTML.encode())])
    (tmp_path / "whole.warc.gz").write_bytes(gzip.compress(b"".join(records)))
    pipeline = TestPipeline()
    outputs = pipeline | ReadWarc(str(tmp_path / "*.warc.gz"))
    assert_that(outputs["documents"], equal_to([BRIDGE]), label="Documents")
    details = outputs["dead_letter"] | beam.Map(
        lambda row: (row["reason"], "\n" in row["detail"], "warcio recompress" in row["detail"]))
    assert_that(details, equal_to([("read_corrupt_warc", False, True)]), label="DeadLetters")
    pipeline.run().wait_until_finish()
