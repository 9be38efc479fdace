from realm.flows.reproduce_report import results_markdown

ROWS = [
    {"system": system, "dataset": "nq", "n": 146, "exact_match": em, "reader_accuracy": 0.25, "recall_at_5": 0.3,
     "zero_shot_recall_at_5": 0.2, "train_seconds": 600.0, "seed": 0}
    for system, em in (("bm25", 0.05), ("orqa", 0.07))
]


def test_the_table_names_each_row_left_untrained_and_the_row_it_would_repeat():
    markdown = results_markdown(ROWS, {"stale_index": "repeats realm: no index is ever refreshed"})
    lines = markdown.splitlines()
    assert lines[2].startswith("| bm25 | 0.050 | 0.250 | 0.300 | 0.200 | 10 min | 0 |")
    assert lines[3].startswith("| orqa | 0.070 |")
    assert "nq: 146 questions." in markdown
    assert lines[-2:] == ["Not trained:", "- stale_index repeats realm: no index is ever refreshed."]
    assert "Not trained" not in results_markdown(ROWS, {})
