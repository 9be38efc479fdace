import pytest

from realm.pipelines.wikitext import wikitext_to_plain_text
from tests.pipelines.wikipedia_fixture import PARIS_TEXT, PARIS_WIKITEXT


def test_wikitext_keeps_prose_and_link_text_and_drops_markup_tables_refs_and_appendix_sections():
    assert wikitext_to_plain_text(PARIS_WIKITEXT) == PARIS_TEXT


@pytest.mark.parametrize(
    ("wikitext", "expected"),
    [
        ("[[Target|shown text]] and [[Target]]", "shown text and Target"),
        ("[[:Category:Cities|cities]] [[Category:Cities]][[de:Paris]][[Image:x.png|left|caption]]", "cities"),
        ("A {{convert|5|km}} walk<ref>cite</ref><ref name=a/> <!-- c -->here.", "A walk here."),
        ("[http://example.org Example site] and [http://example.org]", "Example site and"),
        ("Intro\n\n\n\n=== Sub heading ===\nBody &amp; more", "Intro\nSub heading\nBody & more"),
        ("First<br/>second __NOTOC__", "First\nsecond"),
        ("''Italic'' and '''bold''' <math>x^2</math>formula", "Italic and bold formula"),
        ("On the .NET Framework {{cite web|url=x}} .", "On the .NET Framework."),
        ("Half a pair &#xD800; as HTML renders it", "Half a pair \ufffd as HTML renders it"),
    ],
)
def test_wikitext_to_plain_text_case_by_case(wikitext, expected):
    assert wikitext_to_plain_text(wikitext) == expected
