"""The documents contract's text: stripped paragraphs, one per line (Beam-free, for every reader)."""

from __future__ import annotations


def plain_paragraphs(text: str, title: str = "") -> str:
    """`text` as the documents contract wants it: stripped paragraphs joined by single "\\n".

    A first line equal to `title` is dropped: extractors repeat the title as the first
    paragraph, and the chunker already puts the title in front of every block.
    """
    paragraphs = [" ".join(line.split()) for line in text.splitlines()]
    paragraphs = [paragraph for paragraph in paragraphs if paragraph]
    if paragraphs and title and paragraphs[0] == " ".join(title.split()):
        paragraphs = paragraphs[1:]
    return "\n".join(paragraphs)
