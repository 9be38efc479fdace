from realm.model.analysis.reproduction_table import json_table, paired_markdown, results_markdown

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


def test_rows_of_systems_not_retrained_are_kept_only_under_the_same_settings(tmp_path):
    from realm.model.analysis.reproduction_table import earlier_rows
    from realm.schemas import REPRODUCTION_RESULTS, write_table

    assert earlier_rows(tmp_path, "a" * 64, [("bm25", 0)]) == []  # no table yet
    rows = [dict(row, settings_sha256="a" * 64) for row in ROWS]
    write_table(str(tmp_path / "results.parquet"), rows, REPRODUCTION_RESULTS)
    assert earlier_rows(tmp_path, "a" * 64, [("bm25", 0)]) == rows[1:]
    assert earlier_rows(tmp_path, "a" * 64, [("bm25", 1)]) == rows  # another seed of bm25: its seed 0 stays
    assert earlier_rows(tmp_path, "b" * 64, [("bm25", 0)]) == []  # trained under other settings
    write_table(str(tmp_path / "results.parquet"), ROWS, REPRODUCTION_RESULTS)  # before rows recorded them
    assert earlier_rows(tmp_path, "a" * 64, []) == []


def test_each_fine_tuning_seed_is_a_line_of_its_own_in_seed_order():
    seeded = [dict(row, seed=1, exact_match=row["exact_match"] + 0.1) for row in ROWS] + ROWS
    lines = results_markdown(seeded, {}).splitlines()
    assert [line.split(" | ")[:2] for line in lines[2:6]] == [
        ["| bm25", "0.050"], ["| bm25", "0.150"], ["| orqa", "0.070"], ["| orqa", "0.170"],
    ]
    assert [line.split(" | ")[-1] for line in lines[2:6]] == ["0 |", "1 |", "0 |", "1 |"]


def test_the_json_table_averages_each_system_over_its_seeds_and_names_each_seed():
    seeded = [dict(ROWS[0], seed=1, exact_match=0.15, recall_at_5=0.5), dict(ROWS[1], dataset="wq", n=177)] + ROWS
    table = json_table(seeded)
    assert list(table) == ["bm25", "orqa"] and list(table["orqa"]) == ["wq", "nq"]
    assert table["bm25"]["nq"] == {
        "em": 0.1, "em_per_seed": [0.05, 0.15], "seeds": [0, 1], "recall_at_5": 0.4, "zero_shot_recall_at_5": 0.2,
        "n": 146,
    }
    assert table["orqa"]["wq"] == {
        "em": 0.07, "em_per_seed": [0.07], "seeds": [0], "recall_at_5": 0.3, "zero_shot_recall_at_5": 0.2, "n": 177,
    }


def test_a_system_is_paired_only_on_seeds_it_shares_with_the_baseline_and_a_lost_run_is_named(tmp_path):
    assert paired_markdown(ROWS[:1], tmp_path, 0) == ""
    rows = [ROWS[0], dict(ROWS[1], seed=1), dict(ROWS[0], system="realm", seed=1)]
    # realm shares seed 1 with orqa, whose run was never written here; bm25 shares none.
    assert paired_markdown(rows, tmp_path, 0).split("\n\n") == [
        "No paired test of bm25 against orqa: no fine-tuning seed in common with orqa.",
        f"No paired test of realm against orqa: {tmp_path}/systems/orqa_seed1: no such directory.",
    ]
