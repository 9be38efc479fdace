"""Wikitext to plain text: the prose of an article, without its markup.

Beam-free (mwparserfromhell and the standard library): all that the child process cleaning an
article under a time limit (`realm.pipelines.time_limit`) has to import for it.
"""

from __future__ import annotations

import re

import mwparserfromhell
from mwparserfromhell.nodes import ExternalLink, Heading, HTMLEntity, Tag, Text, Wikilink
from mwparserfromhell.wikicode import Wikicode

from realm.pipelines.paragraphs import plain_paragraphs

# Tags whose content is not running prose: citations, tables, galleries, formulas, code.
_DROPPED_TAGS = frozenset(
    "ref references table gallery imagemap timeline graph math chem ce score hiero syntaxhighlight"
    " source pre templatedata templatestyles mapframe maplink inputbox categorytree noinclude".split()
)
# Wikilinks to these namespaces render as media or page metadata, not as words in the text.
_HIDDEN_LINK_NAMESPACES = frozenset({"file", "image", "category"})
# Interlanguage links ([[fr:Paris]], [[zh-min-nan:Paris]]) are language codes before the colon.
_LANGUAGE_PREFIX = re.compile(r"^(?:[a-z]{2,3}(?:-[a-z]+)*|simple)$")
# Appendix sections hold citations and link lists, which make poor evidence blocks.
_APPENDIX_HEADING = re.compile(
    r"^\s*(?:see also|references|external links|further reading|notes|notes and references|"
    r"footnotes|citations|sources|bibliography)\s*$",
    re.IGNORECASE,
)
_BEHAVIOUR_SWITCH = re.compile(r"__[A-Z]+__")
# What template removal leaves of a pronunciation in a lead: "Paris ({{IPA|..}}; {{IPA|..}}) is".
_EMPTY_PARENTHESES = re.compile(r"\s*\(\s*[;,\s]*\)")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# ... and of a citation template before a full stop; ".NET" keeps its space.
_SPACE_BEFORE_PUNCTUATION = re.compile(r" +([,.;:])(?=\s|$)")


def wikitext_to_plain_text(wikitext: str) -> str:
    """Plain text of an article's wikitext, paragraphs separated by "\\n".

    Templates, comments, references, tables and other non-prose tags, file/category and
    interlanguage links, and the appendix sections (See also, References, External links, ...)
    are dropped; links keep their visible text. Section headings are kept as a line of their
    own, without the `==` markup: a heading is the topic of the paragraphs below it ("Early
    life", "Geography"), which helps both retrieval and salient-span masking.
    """
    code = mwparserfromhell.parse(wikitext)
    for section in code.get_sections(levels=[2], matches=_is_appendix_heading):
        code.remove(section)
    text = _BEHAVIOUR_SWITCH.sub("", _visible_text(code))
    text = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", _EMPTY_PARENTHESES.sub("", text))
    return plain_paragraphs(text)


def _is_appendix_heading(heading) -> bool:
    return bool(_APPENDIX_HEADING.match(str(heading)))


def _visible_text(code: Wikicode) -> str:
    parts = []
    for node in code.nodes:
        if isinstance(node, Text):
            parts.append(node.value)
        elif isinstance(node, HTMLEntity):
            # A numeric reference to half a UTF-16 pair (`&#xD800;`) is U+FFFD, as HTML renders
            # it: a lone surrogate cannot be encoded, and would stop the pipeline where written.
            parts.append(_LONE_SURROGATE.sub("\ufffd", node.normalize()))
        elif isinstance(node, Wikilink):
            if not _is_hidden_link(str(node.title)):
                label = node.text if node.text is not None else node.title
                parts.append(_visible_text(label).lstrip(":"))
        elif isinstance(node, ExternalLink):
            if node.title is not None:
                parts.append(_visible_text(node.title))
            elif not node.brackets:
                parts.append(str(node.url))
        elif isinstance(node, Heading):
            parts.append(f"\n{_visible_text(node.title)}\n")
        elif isinstance(node, Tag):
            tag = str(node.tag).strip().lower()
            if tag == "br":
                parts.append("\n")
            elif tag not in _DROPPED_TAGS and node.contents is not None:
                parts.append(_visible_text(node.contents))
        # Templates, template arguments and comments render nothing without template expansion.
    return "".join(parts)


def _is_hidden_link(title: str) -> bool:
    title = title.strip()
    if title.startswith(":") or ":" not in title:  # a leading colon makes any link visible
        return False
    prefix = title.split(":", 1)[0].strip()
    return prefix.lower() in _HIDDEN_LINK_NAMESPACES or bool(_LANGUAGE_PREFIX.match(prefix))
