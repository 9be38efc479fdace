"""A small news crawl for the reader and prepare tests: two articles as HTML, and WARC records of any pages."""

import io

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

BRIDGE_URL = "https://news.example.com/2019/03/bridge"
CAFE_URL = "https://news.example.com/2019/03/cafe"

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
# A section front: menus and headlines, no article (trafilatura's fallback returns their text).
SECTION_URL = "https://news.example.com/world"
SECTION_HTML = """<html><head><title>World news</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/world">World</a></li><li><a href="/sport">Sport</a></li></ul></nav>
<div><h2><a href="/2019/03/bridge">Council approves river bridge after a decade of debate</a></h2>
<h2><a href="/2019/03/cafe">Cafe on the main square reopens after renovation</a></h2>
<ul><li><a href="/world/archive">More world news</a></li><li><a href="/archive">Archive</a></li></ul></div>
<footer><a href="/contact">Contact us</a> | <a href="/privacy">Privacy policy</a></footer></body></html>"""
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
