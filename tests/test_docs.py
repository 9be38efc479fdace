"""The README and docs/ hold together: every relative link and image resolves to a file (and to
a heading, where the link names one), and the README stays a user's page: at most 250 lines, no
line over 400 characters."""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
README_MAX_LINE_CHARS = 400

# [text](target) and ![alt](target); the text may hold escaped brackets or code. Targets with a
# scheme (http:, mailto:) are not ours to check.
LINK = re.compile(r"!?\[(?:[^\[\]]|\\[\[\]])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")


def lines_outside_fences(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def relative_links(text: str) -> list[str]:
    return [
        target
        for line in lines_outside_fences(text)
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line))
        if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")
    ]


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation other than '-' and '_' dropped,
    spaces to '-'."""
    kept = "".join(ch for ch in heading.strip().lower() if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for line in lines_outside_fences(path.read_text(encoding="utf-8")):
        if match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            anchor = heading_anchor(match.group(1))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def test_heading_anchors_follow_github():
    assert heading_anchor("Another corpus (`realm index`)") == "another-corpus-realm-index"
    assert heading_anchor("Caching, resuming and what starts a new stage") == "caching-resuming-and-what-starts-a-new-stage"
    assert heading_anchor("The `pretrain` stage: REALM's pre-training") == "the-pretrain-stage-realms-pre-training"


def test_links_are_found_outside_code_only():
    text = "see [a](docs/a.md) and ![b](b.png#x)\n```\n[c](nowhere.md)\n```\n`[d](code.md)` [e](https://x.org)"
    assert relative_links(text) == ["docs/a.md", "b.png#x"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_a_short_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"
    long = [f"line {number}: {len(line)} characters" for number, line in enumerate(lines, 1)
            if len(line) > README_MAX_LINE_CHARS]
    assert not long, f"README.md lines over {README_MAX_LINE_CHARS} characters: " + "; ".join(long)


def test_every_docs_page_is_linked_from_the_readme():
    readme_links = {target.partition("#")[0] for target in relative_links((ROOT / "README.md").read_text(encoding="utf-8"))}
    unlinked = [page.name for page in ROOT.glob("docs/*.md") if f"docs/{page.name}" not in readme_links]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
