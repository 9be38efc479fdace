"""The sentences of a block, as the chunker recorded them in `sentence_starts`.

Salient-span tagging, ICT and the trivial-retrieval filter all need "the sentences of this
block"; reading them back from the chunker's offsets (instead of re-splitting) guarantees
the three stages agree on what a sentence is.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_SPACES = re.compile(r"\s+")


def block_sentences(block: dict) -> list[tuple[int, str]]:
    """(char start, sentence text) for each sentence of a BLOCKS record, whitespace-stripped."""
    text, starts = block["text"], list(block["sentence_starts"])
    if any(b <= a for a, b in zip(starts, starts[1:])) or (starts and not 0 <= starts[0] <= len(text)):
        raise ValueError(f"block {block['block_id']}: sentence_starts {starts} not increasing within text")
    ends = starts[1:] + [len(text)]
    return [(start, text[start:end].rstrip()) for start, end in zip(starts, ends)]


def normalise_sentence(sentence: str) -> str:
    """Unicode NFKC, case-folded, whitespace collapsed: copies that differ only in layout match."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", sentence).casefold()).strip()


def sentence_hash(sentence: str) -> str:
    """The join key of the trivial-retrieval filter: 128-bit hash of the normalised sentence."""
    return hashlib.blake2b(normalise_sentence(sentence).encode("utf-8"), digest_size=16).hexdigest()


def stable_id(*parts) -> int:
    """A signed int64 id derived from `parts`, identical on every worker and every run."""
    key = "\x1f".join(str(part) for part in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big", signed=True)
