import io
import json
import socket

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from realm.pipelines.read_ccnews import (
    ReadCcNewsJsonl,
    ReadWarc,
    ccnews_record_to_document,
    decode_html,
    url_doc_id,
)

BRIDGE_PARAGRAPHS = [
    "The city council voted on Tuesday to approve the new bridge over the river, ending a debate "
    "that had divided the town for nearly a decade and filled many public meetings.",
    "Construction is expected to begin next spring and to last three years, according to the "
    "mayor's office, which said the bridge would carry both cars and a protected bicycle lane.",
]
BRIDGE_HTML = f"""<html><head><title>Council approves river bridge</title>
<meta property="article:published_time" content="2019-03-04T10:00:00Z"></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Council approves river bridge</h1><p>{BRIDGE_PARAGRAPHS[0]}</p><p>{BRIDGE_PARAGRAPHS[1]}</p></article>
<footer>Copyright 2019 Example News</footer></body></html>"""
CAFE_PARAGRAPH = (
    "The caf\xe9 on the main square reopened this week after a long renovation, and its owners "
    "said that the old recipes had been kept exactly as their grandparents wrote them down, "
    "from the soup of the day to the famous apple cake served every Sunday afternoon."
)
CAFE_HTML = f"""<html><head><meta charset="windows-1252"><title>Caf\xe9 reopens</title></head>
<body><article><h1>Caf\xe9 reopens</h1><p>{CAFE_PARAGRAPH}</p></article></body></html>"""
# A script-rendered page: the crawler saw an empty shell.
EMPTY_HTML = "<html><head><title>App</title></head><body><div id='app'></div><script>render()</script></body></html>"


def response(writer, url, body: bytes, content_type="text/html; charset=utf-8", status="200 OK"):
    headers = StatusAndHeaders(status, [("Content-Type", content_type)], protocol="HTTP/1.1")
    crawl_date = {"WARC-Date": "2019-03-05T08:00:00Z"}
    return writer.create_warc_record(
        url, "response", payload=io.BytesIO(body), http_headers=headers, warc_headers_dict=crawl_date
    )


def warc_records(gzip: bool, pages) -> list[bytes]:
    """Each record serialised on its own, so a test knows every record's offset."""
    serialised = []
    for kind, url, *rest in pages:
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=gzip)
        if kind == "request":
            record = writer.create_warc_record(url, "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n"))
        else:
            record = response(writer, url, *rest)
        writer.write_record(record)
        serialised.append(buffer.getvalue())
    return serialised


def document(source, url, title, text, date):
    return {"doc_id": url_doc_id(source, url), "source": source, "title": title, "text": text, "url": url, "date": date}


BRIDGE_URL = "https://news.example.com/2019/03/bridge"
CAFE_URL = "https://news.example.com/2019/03/cafe"
BRIDGE = document("warc", BRIDGE_URL, "Council approves river bridge", "\n".join(BRIDGE_PARAGRAPHS), "2019-03-04")
CAFE = document("warc", CAFE_URL, "Caf\xe9 reopens", CAFE_PARAGRAPH, "2019-03-05T08:00:00Z")


def dead_letter_keys(dead_letters):
    return dead_letters | beam.Map(lambda row: (row["stage"], row["reason"], row["record_key"]))


def test_html_is_decoded_with_the_header_charset_then_the_meta_charset_then_utf8():
    assert decode_html("é".encode("latin-1"), "text/html; charset=ISO-8859-1") == "é"
    assert decode_html(b'<meta charset="windows-1252">\x93q\x94', "text/html").endswith("\u201cq\u201d")
    with pytest.raises(UnicodeDecodeError):
        decode_html(b"<p>caf\xe9</p>", "text/html")


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


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a reader tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_warc_html_responses_become_documents_and_bad_or_damaged_records_dead_letters(tmp_path, no_network):
    crawl = warc_records(
        gzip=True,
        pages=[
            ("request", BRIDGE_URL),
            ("response", BRIDGE_URL, BRIDGE_HTML.encode("utf-8")),
            ("response", CAFE_URL, CAFE_HTML.encode("windows-1252"), "text/html"),
            ("response", "https://news.example.com/bad-bytes", b"<html><body><p>caf\xe9 \xff\xfe</p></body></html>"),
            ("response", "https://news.example.com/app", EMPTY_HTML.encode()),
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

    pipeline = TestPipeline()
    outputs = pipeline | ReadWarc(str(tmp_path / "*.warc*"))
    assert_that(outputs["documents"], equal_to([BRIDGE, CAFE, BRIDGE, BRIDGE]), label="Documents")
    crawl_path = tmp_path / "crawl.warc.gz"
    assert_that(
        dead_letter_keys(outputs["dead_letter"]),
        equal_to(
            [
                ("read", "read_undecodable_bytes", f"{crawl_path}:{sum(map(len, crawl[:3]))}"),
                ("read", "read_no_main_text", f"{crawl_path}:{sum(map(len, crawl[:4]))}"),
                ("read", "read_corrupt_warc", f"{tmp_path / 'cut.warc'}:{len(cut[0])}"),
                ("read", "read_corrupt_warc", f"{tmp_path / 'cut-header.warc.gz'}:{len(cut_gz[0])}"),
            ]
        ),
        label="DeadLetters",
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("realm.read"))["counters"]
    skipped = {c.key.metric.name: c.committed for c in counters if c.key.metric.name.startswith("skipped_")}
    assert skipped == {"skipped_non_html": 1, "skipped_http_status": 1}
