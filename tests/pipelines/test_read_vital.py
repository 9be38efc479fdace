import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.pipelines.read_vital import (
    ReadVitalArticles,
    load_vital_summaries,
    vital_summaries_path,
    vital_summary_to_document,
)


def test_the_embedded_summaries_hold_about_ten_thousand_english_articles():
    assert vital_summaries_path().name == "summaries_en-us.json"
    summaries = load_vital_summaries()
    assert 9_000 < len(summaries) < 11_000
    assert all(summary["title"] == title and summary["extract"] for title, summary in summaries.items())


def test_summary_becomes_a_vital_document_linked_to_wikipedia():
    summary = {"title": "2001: A Space Odyssey", "extract": "A 1968 film.\n\nBy Kubrick.", "description": "", "topic": ""}
    assert vital_summary_to_document(summary) == {
        "doc_id": "vital:2001: A Space Odyssey",
        "source": "vital",
        "title": "2001: A Space Odyssey",
        "text": "A 1968 film.\nBy Kubrick.",
        "url": "https://en.wikipedia.org/wiki/2001:_A_Space_Odyssey",
        "date": None,
    }


def test_limit_reads_the_first_titles_in_sorted_order_with_no_dead_letters():
    summaries = load_vital_summaries()
    expected = [vital_summary_to_document(summaries[title]) for title in sorted(summaries)[:20]]
    with TestPipeline() as pipeline:
        outputs = pipeline | ReadVitalArticles(limit=20)
        assert_that(outputs["documents"], equal_to(expected), label="Documents")
        assert_that(outputs["dead_letter"], equal_to([]), label="DeadLetters")


def test_documents_are_spread_over_two_worker_processes():
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    with TestPipeline(options=options) as pipeline:
        documents = pipeline | ReadVitalArticles(limit=50)
        worker_pids = (
            documents["documents"]
            | beam.Map(lambda _: os.getpid())
            | beam.Distinct()
            | beam.combiners.Count.Globally()
        )
        assert_that(worker_pids, equal_to([2]))
