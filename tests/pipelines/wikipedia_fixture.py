"""A small MediaWiki XML export for the reader and prepare tests: pages built in code, good and bad."""

PARIS_WIKITEXT = """{{Short description|Capital of France}}
{{Infobox settlement
| name = Paris
| population = 2,102,650<ref>{{cite web|url=http://x.org|title=Pop}}</ref>
}}
'''Paris''' ({{IPA-fr|paʁi}}) is the [[capital city|capital]] of [[France]].<ref name="insee">INSEE</ref><!-- short -->
It lies on the [[Seine]]&nbsp;river.<ref name="insee" />

== History ==
[[File:Paris.jpg|thumb|The [[Eiffel Tower]] at night]]
The [[Parisii]] founded it. See [http://paris.fr the city's site].


{| class="wikitable"
! Year !! Population
|-
| 1900 || 2,714,068
|}
* [[Louvre]] museum

== References ==
{{reflist}}

== External links ==
* [http://paris.fr Official website]

[[Category:Capitals in Europe]]
[[fr:Paris]]
"""
PARIS_TEXT = (
    "Paris is the capital of France.\n"
    "It lies on the Seine river.\n"
    "History\n"
    "The Parisii founded it. See the city's site.\n"
    "Louvre museum"
)

HEADER = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <base>https://simple.wikipedia.org/wiki/Main_Page</base>
  </siteinfo>
"""
FOOTER = b"</mediawiki>\n"


def page(page_id, title, wikitext, ns=0, redirect=None, timestamp="2024-05-01T12:00:00Z") -> bytes:
    escaped = wikitext.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    redirect_line = f'    <redirect title="{redirect}" />\n' if redirect else ""
    return (
        f"  <page>\n    <title>{title}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n{redirect_line}"
        f"    <revision>\n      <id>{page_id}00</id>\n      <timestamp>{timestamp}</timestamp>\n"
        f'      <text bytes="{len(wikitext)}" xml:space="preserve">{escaped}</text>\n'
        f"    </revision>\n  </page>\n"
    ).encode("utf-8")


# An unclosed <text> inside a page that is otherwise cut correctly.
MALFORMED_PAGE = page(17, "Broken", "unclosed").replace(b"unclosed</text>", b"unclosed")
UNDECODABLE_PAGE = page(18, "Bytes", "cafe").replace(b"cafe", b"caf\xff")

ARTICLES = [
    page(10, "Paris", PARIS_WIKITEXT),
    page(11, "Paname", "#REDIRECT [[Paris]]", redirect="Paris"),
    page(12, "City of Light", "#redirect [[Paris]]"),
    page(13, "Mercury", "'''Mercury''' may refer to:\n* [[Mercury (planet)]]\n{{disambiguation}}"),
    page(14, "Smith (disambiguation)", "'''Smith''' may mean several things."),
    page(15, "John Smith", "'''John Smith''' may be:\n* [[John Smith (explorer)]]\n{{hndis|Smith, John}}"),
    page(16, "Talk:Paris", "Is Paris the capital?", ns=1),
    MALFORMED_PAGE,
    UNDECODABLE_PAGE,
    page(19, "Stub", "{{stub}}<!-- nothing yet -->"),
    page(20, "Lyon", "'''Lyon''' is a city in [[France]]."),
]


def dump_bytes(pages) -> bytes:
    return HEADER + b"".join(pages) + FOOTER
