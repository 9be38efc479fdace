from pathlib import Path

import pytest

from realm.model.analysis.comparison import compare
from realm.model.analysis.comparison_markdown import comparison_markdown, seeds_markdown
from realm.model.analysis.paired_stats import mcnemar_exact_p_value
from realm.model.analysis.seed_comparison import compare_seeds
from realm.model.publish import IntegrityError, record_files
from realm.schemas import MASKED_SPAN_OUTCOMES, PREDICTIONS, write_table


def _evaluated(root, dataset, outcomes, num_read=5):
    """A run root whose predictions hold `outcomes`: (exact_match, answer_rank) per question."""
    rows = [
        {"dataset": dataset, "question": f"q{i}", "answers": ["a"], "prediction": "a" if em else "b", "score": -1.0,
         "block_ids": [1, 2], "block_probs": [0.5, 0.5], "exact_match": em, "answer_rank": rank, "num_read": num_read}
        for i, (em, rank) in enumerate(outcomes)
    ]
    write_table(str(root / "predictions" / f"{dataset}.parquet"), rows, PREDICTIONS)
    return str(root)


def test_runs_are_compared_question_by_question_against_the_first(tmp_path):
    # baseline right on q0-q1; the other right on q0 and q2-q5: 4 right only there, 1 only in the baseline
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (True, 1), (False, 0), (False, 2), (False, None), (False, 7)])
    other = _evaluated(tmp_path / "b", "nq", [(True, 0), (False, 1), (True, 0), (True, 2), (True, 6), (True, 7)])
    found = compare([baseline, other])

    assert list(found) == ["questions", "overall"]  # neither run was pre-trained
    first, second = found["questions"]
    assert (first["run"], first["n"], first["em"], first["p_value"]) == (baseline, 6, 2 / 6, None)
    assert first["reader_accuracy"] == 2 / 4 and first["n_answer_read"] == 4  # ranks 0, 1, 0, 2 are read
    assert first["recall_at_5"] == 4 / 6
    assert (second["only_this_right"], second["only_baseline_right"]) == (4, 1)
    assert second["p_value"] == mcnemar_exact_p_value(4, 1)
    assert second["reader_accuracy"] == 3 / 4 and second["em"] == 5 / 6
    assert second["em_low"] <= second["em"] <= second["em_high"]
    assert "| nq | b | 6 | 0.833 [" in comparison_markdown(found, [baseline, other])


def test_over_all_datasets_each_run_gets_its_mean_em_and_its_difference_from_the_first_with_an_interval(tmp_path):
    # nq: the baseline right on 1 of 4, the other on 3 (2 right only there); ct: 2 of 2 against
    # 1 of 2 (1 right only in the baseline). Each dataset weighs the same in the means.
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, 0), (False, 0), (False, 0)])
    _evaluated(tmp_path / "a", "ct", [(True, 0), (True, 0)])
    other = _evaluated(tmp_path / "b", "nq", [(True, 0), (True, 0), (True, 0), (False, 0)])
    _evaluated(tmp_path / "b", "ct", [(False, 0), (True, 0)])
    first, second = compare([baseline, other])["overall"]

    assert first == {"run": baseline, "datasets": ["ct", "nq"], "n": 6, "mean_em": (1 + 1 / 4) / 2, "difference": None,
                     "difference_low": None, "difference_high": None, "only_this_right": None,
                     "only_baseline_right": None, "p_value": None}
    assert second["mean_em"] == (1 / 2 + 3 / 4) / 2
    assert second["difference"] == (1 / 2 + 3 / 4) / 2 - (1 + 1 / 4) / 2
    assert second["difference_low"] < second["difference"] < second["difference_high"]
    assert (second["only_this_right"], second["only_baseline_right"]) == (2, 1)
    assert second["p_value"] == mcnemar_exact_p_value(2, 1)
    markdown = comparison_markdown(compare([baseline, other]), [baseline, other])
    assert ("| run | mean EM of ct, nq | difference from baseline [95% CI] | right only here / only in baseline, all 6 "
            "questions | p (all questions) |") in markdown
    assert "| a | 0.625 | baseline |  |  |" in markdown
    assert f"| b | 0.625 | +0.000 [{second['difference_low']:+.3f}, {second['difference_high']:+.3f}] | 2 / 1 | 1 |" in markdown


def test_systems_of_several_seeds_are_compared_seed_by_seed_and_over_the_seeds(tmp_path):
    # Baseline seeds right on 1 and 2 of 4 nq questions; the other's on 3 and 2: seed 0 pairs
    # 2 right only there and 0 only in the baseline, seed 1 pairs 1 and 1.
    baseline = [_evaluated(tmp_path / "a0", "nq", [(True, 0), (False, 0), (False, 0), (False, 0)]),
                _evaluated(tmp_path / "a1", "nq", [(True, 0), (True, 0), (False, 0), (False, 0)])]
    other = [_evaluated(tmp_path / "b0", "nq", [(True, 0), (True, 0), (True, 0), (False, 0)]),
             _evaluated(tmp_path / "b1", "nq", [(True, 0), (False, 0), (True, 0), (False, 0)])]
    first, second = compare_seeds([baseline, other])["over_seeds"]

    assert (first["system"], first["mean_em_per_seed"], first["mean_em"], first["difference"], first["p_value"]) == (
        baseline, [1 / 4, 2 / 4], 3 / 8, None, None)
    assert (second["mean_em_per_seed"], second["mean_em"], second["n"]) == ([3 / 4, 2 / 4], 5 / 8, 4)
    assert second["difference"] == 5 / 8 - 3 / 8
    assert second["difference_low"] <= second["difference"] <= second["difference_high"]
    assert (second["only_this_right"], second["only_baseline_right"]) == (3, 1)  # summed over the seed pairs
    # Seed-averaged, only q2 differs (by 1): every sign flip is as extreme as what was seen.
    assert second["p_value"] == 1.0
    markdown = seeds_markdown(compare_seeds([baseline, other]), [baseline, other])
    assert "| a0, a1 | 0.250 / 0.500 | 0.375 | baseline |  |  |" in markdown
    assert f"| b0, b1 | 0.750 / 0.500 | 0.625 | +0.250 [{second['difference_low']:+.3f}, " in markdown
    with pytest.raises(ValueError, match="every system needs as many seeds as the first \\(2\\)"):
        compare_seeds([baseline, other[:1]])
    with pytest.raises(FileNotFoundError, match="no predictions"):
        compare_seeds([baseline, [other[0], str(tmp_path)]])


def test_retrieval_is_compared_question_by_question_and_exact_match_split_by_which_run_read_an_answer(tmp_path):
    # three blocks read: the answer in the top 5 only with the second run for q2, only with the
    # baseline for q3 and q4; read by both for q0 and q5 (the second right on q5 alone), only by
    # the second for q1 (right), only by the baseline for q4 (right there)
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, 3), (False, None), (False, 4), (True, 2), (False, 1)], 3)
    other = _evaluated(tmp_path / "b", "nq", [(True, 0), (True, 1), (False, 4), (False, None), (False, None), (True, 2)], 3)
    found = compare([baseline, other])

    first, second = found["questions"]
    assert first["recall_at_5_paired"] is None and first["answer_read"] is None
    assert second["recall_at_5_paired"] == {
        "only_this_right": 1, "only_baseline_right": 2, "p_value": mcnemar_exact_p_value(1, 2)
    }
    assert second["answer_read"] == {
        "both": {"n": 2, "only_this_right": 1, "only_baseline_right": 0, "p_value": 1.0},
        "only_this": {"n": 1, "right": 1},
        "only_baseline": {"n": 1, "right": 1},
    }
    assert "| 1 / 2, p = 1 | (2) 1 / 0, p = 1 | 1 of 1 | 1 of 1 |" in comparison_markdown(found, [baseline, other])


def test_runs_linking_one_masked_spans_directory_compare_only_their_predictions(tmp_path):
    _pretrained(tmp_path / "pretrain", "held_out", [(1, True, False), (2, False, False)])
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "masked_spans").symlink_to(tmp_path / "pretrain" / "masked_spans")
        runs.append(str(tmp_path / name))
    assert list(compare(runs)) == ["masked_spans"]  # nothing else to compare: the table is shown
    for run in runs:
        _evaluated(Path(run), "nq", [(True, 0), (False, 1)])
    assert list(compare(runs)) == ["questions", "overall"]
    own = _pretrained(tmp_path / "c", "held_out", [(1, True, False), (2, True, False)])
    _evaluated(tmp_path / "c", "nq", [(True, 0), (True, 1)])
    assert list(compare([runs[0], own])) == ["questions", "overall", "masked_spans"]  # two directories: both tables


def test_runs_that_answered_other_questions_are_refused(tmp_path):
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, None)])
    other = _evaluated(tmp_path / "b", "nq", [(True, 0)])
    with pytest.raises(ValueError, match="nq: .* answered different questions"):
        compare([baseline, other])
    (tmp_path / "c").mkdir()  # a run folder holding neither kind of result
    with pytest.raises(FileNotFoundError, match="no predictions .* and no masked_spans/"):
        compare([baseline, str(tmp_path / "c")])


def test_a_dataset_only_some_runs_evaluated_is_left_out_by_name(tmp_path, caplog):
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, None)])
    _evaluated(tmp_path / "a", "ct", [(True, 0)])
    other = _evaluated(tmp_path / "b", "nq", [(False, 0), (False, None)])
    with caplog.at_level("WARNING"):
        found = compare([baseline, other])
    assert {row["dataset"] for row in found["questions"]} == {"nq"}
    assert f"dataset ct left out: only {baseline} evaluated it" in caplog.text


def test_asked_for_datasets_alone_are_compared_and_averaged_in_the_order_asked(tmp_path):
    # nq: 1 of 2 against 2 of 2; ct: 0 of 1 against 1 of 1; demo, left out: 1 of 1 against 0 of 1.
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, 0)])
    _evaluated(tmp_path / "a", "ct", [(False, 0)])
    _evaluated(tmp_path / "a", "demo", [(True, 0)])
    other = _evaluated(tmp_path / "b", "nq", [(True, 0), (True, 0)])
    _evaluated(tmp_path / "b", "ct", [(True, 0)])
    _evaluated(tmp_path / "b", "demo", [(False, 0)])

    found = compare([baseline, other], ["nq", "ct"])
    assert [(row["dataset"], row["run"]) for row in found["questions"]] == [
        ("nq", baseline), ("nq", other), ("ct", baseline), ("ct", other)]
    first, second = found["overall"]
    assert (first["datasets"], first["n"], first["mean_em"]) == (["nq", "ct"], 3, (1 / 2 + 0) / 2)
    assert (second["mean_em"], second["only_this_right"], second["only_baseline_right"]) == ((1 + 1) / 2, 2, 0)
    assert compare([baseline, other])["overall"][1]["only_baseline_right"] == 1  # the demo question, without the choice

    over_seeds = compare_seeds([[baseline], [other]], ["ct"])["over_seeds"]
    assert [row["mean_em"] for row in over_seeds] == [0.0, 1.0] and over_seeds[0]["datasets"] == ["ct"]
    with pytest.raises(ValueError, match=f"dataset wq: {baseline}, {other} evaluated no such dataset"):
        compare([baseline, other], ["nq", "wq"])


def test_predictions_that_changed_since_evaluate_recorded_them_are_named(tmp_path):
    predictions = tmp_path / "a" / "predictions"
    run = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, None)])
    _evaluated(tmp_path / "a", "wq", [(True, 0)])
    record_files(predictions, ["nq.parquet", "wq.parquet"])  # as `realm evaluate` does
    assert [row["n"] for row in compare([run])["questions"]] == [2, 1]
    _evaluated(tmp_path / "a", "nq", [(True, 0), (True, 0)])  # rewritten behind evaluate's back
    with pytest.raises(IntegrityError, match=f"^{predictions / 'nq.parquet'}: size \\d+, manifest.json says \\d+$"):
        compare([run])
    record_files(predictions, ["nq.parquet"])
    (predictions / "wq.parquet").unlink()
    with pytest.raises(IntegrityError, match=f"^{predictions / 'wq.parquet'}: missing, manifest.json lists it$"):
        compare([run])


def _pretrained(root, examples, outcomes, step=1000):
    """A run root whose masked_spans/<examples>.parquet holds `outcomes`: (example_id,
    right_with_retrieval, right_null_only) per example, as pre-training's last evaluation writes them."""
    rows = [
        {"example_id": i, "step": step, "right_with_retrieval": with_retrieval, "right_null_only": null_only,
         "span_in_candidates": i % 2 == 0, "right_reading_holder": False}
        for i, with_retrieval, null_only in outcomes
    ]
    write_table(str(root / "masked_spans" / f"{examples}.parquet"), rows, MASKED_SPAN_OUTCOMES)
    record_files(root / "masked_spans", [f"{examples}.parquet"])
    return str(root)


def test_pretrained_runs_are_compared_example_by_example_with_retrieval(tmp_path):
    # the same four examples, written in another order by the second run: paired by example id.
    # Baseline right with retrieval on 10, 11; the other on 11, 12, 13: 2 right only there, 1 only in the baseline
    baseline = _pretrained(tmp_path / "closed", "never_trained_on", [(10, True, True), (11, True, True), (12, False, False), (13, False, False)])
    other = _pretrained(tmp_path / "realm", "never_trained_on", [(13, True, False), (12, True, False), (11, True, True), (10, False, False)], step=500)
    found = compare([baseline, other])

    assert list(found) == ["masked_spans"]  # neither run was evaluated on questions
    first, second = found["masked_spans"]
    assert (first["examples"], first["run"], first["step"], first["n"]) == ("never_trained_on", baseline, 1000, 4)
    assert (first["accuracy_with_retrieval"], first["accuracy_null_only"], first["p_value"]) == (0.5, 0.5, None)
    assert (second["step"], second["accuracy_with_retrieval"], second["accuracy_null_only"]) == (500, 0.75, 0.25)
    assert first["span_in_candidates"] == second["span_in_candidates"] == 0.5  # ids 10 and 12
    assert (second["only_this_right"], second["only_baseline_right"]) == (2, 1)
    assert second["p_value"] == mcnemar_exact_p_value(2, 1)
    assert second["accuracy_with_retrieval_low"] <= 0.75 <= second["accuracy_with_retrieval_high"]
    # split by the span being in this run's retrieved blocks (ids 10, 12) or not (11, 13)
    assert first["in_retrieved"] is None and first["not_in_retrieved"] is None
    assert second["in_retrieved"] == {"n": 2, "only_this_right": 1, "only_baseline_right": 1, "p_value": 1.0}
    assert second["not_in_retrieved"] == {"n": 2, "only_this_right": 1, "only_baseline_right": 0, "p_value": 1.0}
    markdown = comparison_markdown(found, [baseline, other])
    assert "| never_trained_on | realm | 500 | 4 | 0.750 [" in markdown
    assert "| (2) 1 / 1, p = 1 | (2) 1 / 0, p = 1 |" in markdown


def test_runs_with_both_kinds_of_result_get_both_tables(tmp_path):
    runs = []
    for name in ("a", "b"):
        _evaluated(tmp_path / name, "nq", [(True, 0), (False, 1)])
        runs.append(_pretrained(tmp_path / name, "held_out", [(1, True, False), (2, False, False)]))
    found = compare(runs)
    assert list(found) == ["questions", "overall", "masked_spans"]
    assert comparison_markdown(found, runs).count("| baseline |") == 3  # a baseline row in each table


def test_pretrained_runs_on_other_examples_are_refused(tmp_path):
    baseline = _pretrained(tmp_path / "a", "held_out", [(1, True, False), (2, False, False)])
    other = _pretrained(tmp_path / "b", "held_out", [(1, True, False), (3, False, False)])
    with pytest.raises(ValueError, match=r"masked_spans/held_out: .* evaluated different examples \(2 and 2, 1 shared\)"):
        compare([baseline, other])
    evaluated_only = _evaluated(tmp_path / "c", "nq", [(True, 0)])
    with pytest.raises(FileNotFoundError, match="share no kind of result"):
        compare([baseline, evaluated_only])


def test_masked_span_outcomes_that_went_missing_are_named(tmp_path):
    run = _pretrained(tmp_path / "a", "held_out", [(1, True, False)])
    _evaluated(tmp_path / "a", "nq", [(True, 0)])
    (tmp_path / "a" / "masked_spans" / "held_out.parquet").unlink()
    # not silently left out of the comparison: the manifest still lists it
    with pytest.raises(IntegrityError, match="held_out.parquet: missing, manifest.json lists it$"):
        compare([run])


def test_outcomes_that_list_their_candidates_get_the_copying_breakdown(tmp_path):
    listed = [
        # a holder (block 7) ranked first reads the span right, nothing else does: copied
        {"example_id": 1, "step": 9, "right_with_retrieval": True, "right_null_only": False, "span_in_candidates": True,
         "right_reading_holder": True, "candidate_block_ids": [-1, 7, 8], "retrieval_log_probs": [-3.0, -0.1, -2.5],
         "candidates_holding_span": [False, True, False], "candidates_right": [False, True, False]},
        # the holder (block 8) ranked 2nd of 3: p(z|x) 0.25 against the top block's 0.7
        {"example_id": 2, "step": 9, "right_with_retrieval": False, "right_null_only": False, "span_in_candidates": True,
         "right_reading_holder": True, "candidate_block_ids": [-1, 5, 8], "retrieval_log_probs": [-3.0, -0.357, -1.386],
         "candidates_holding_span": [False, False, True], "candidates_right": [False, False, True]},
    ]
    write_table(str(tmp_path / "new" / "masked_spans" / "held_out.parquet"), listed, MASKED_SPAN_OUTCOMES)
    old = _pretrained(tmp_path / "old", "held_out", [(1, True, False), (2, False, False)])  # before the candidates were listed
    found = compare([old, str(tmp_path / "new")])

    before, after = found["masked_spans"]
    assert before["copying"] is None
    assert after["copying"]["span_in_candidates"] == 2 and after["copying"]["copied"] == 2
    assert (after["copying"]["copied_holder_first"], after["copying"]["copied_holder_first_right"]) == (1, 1)
    assert (after["copying"]["copied_holder_lower"], after["copying"]["copied_holder_lower_right"]) == (1, 0)
    markdown = comparison_markdown(found, [old, str(tmp_path / "new")])
    assert "| held_out | old | not recorded: evaluated before the candidates were listed" in markdown
    assert "| held_out | new | 2 | 1 / 1 / 0 / 0 | 2 (0) | 2 | 1 (1) | 1 (0) | 0.25 / 0.70 |" in markdown
    assert "best holder's rank" in markdown
    assert "best holder's rank" not in comparison_markdown(compare([old]), [old])  # no breakdown where none is recorded


def test_a_closed_book_run_is_shown_as_reading_no_blocks(tmp_path):
    closed_book = [
        {"example_id": i, "step": 9, "right_with_retrieval": right, "right_null_only": right, "span_in_candidates": False,
         "right_reading_holder": False, "candidate_block_ids": [-1], "retrieval_log_probs": [0.0],
         "candidates_holding_span": [False], "candidates_right": [right]}
        for i, right in ((1, True), (2, False))
    ]
    write_table(str(tmp_path / "cb" / "masked_spans" / "held_out.parquet"), closed_book, MASKED_SPAN_OUTCOMES)
    run = str(tmp_path / "cb")
    found = compare([run])
    assert found["masked_spans"][0]["copying"]["reads_blocks"] is False
    assert "| held_out | cb | none: it read the null document alone (closed book) |" in comparison_markdown(found, [run])


def test_an_empty_set_of_masked_span_outcomes_is_refused_naming_it(tmp_path):
    run = _pretrained(tmp_path / "a", "held_out", [])
    with pytest.raises(ValueError, match=r"^masked_spans/held_out: .* holds no examples"):
        compare([run])


def test_runs_of_one_folder_name_are_told_apart_and_a_run_named_twice_or_missing_is_refused(tmp_path):
    outcomes = [(True, 0), (False, 1)]
    first = _evaluated(tmp_path / "repro_a" / "systems" / "orqa", "nq", outcomes)
    second = _evaluated(tmp_path / "repro_b" / "systems" / "orqa", "nq", outcomes)
    bm25 = _evaluated(tmp_path / "repro_b" / "systems" / "bm25", "nq", outcomes)
    markdown = comparison_markdown(compare([first, second, bm25]), [first, second, bm25])
    assert "| nq | repro_a/systems/orqa | 2 |" in markdown and "| nq | repro_b/systems/orqa | 2 |" in markdown
    assert "| nq | bm25 | 2 |" in markdown
    with pytest.raises(ValueError, match=f"^{first}/. is {first} again; name each run once$"):
        compare([first, bm25, f"{first}/."])
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path}/orqq: no such directory$"):
        compare([first, str(tmp_path / "orqq")])
