import pytest

from realm.flows.comparison import compare_runs, comparison_markdown
from realm.model.publish import IntegrityError, record_files
from realm.model.qa.paired_stats import mcnemar_exact_p_value
from realm.schemas import PREDICTIONS, write_table


def _evaluated(root, dataset, outcomes):
    """A run root whose predictions hold `outcomes`: (exact_match, answer_rank) per question."""
    rows = [
        {"dataset": dataset, "question": f"q{i}", "answers": ["a"], "prediction": "a" if em else "b", "score": -1.0,
         "block_ids": [1, 2], "block_probs": [0.5, 0.5], "exact_match": em, "answer_rank": rank, "num_read": 5}
        for i, (em, rank) in enumerate(outcomes)
    ]
    write_table(str(root / "predictions" / f"{dataset}.parquet"), rows, PREDICTIONS)
    return str(root)


def test_runs_are_compared_question_by_question_against_the_first(tmp_path):
    # baseline right on q0-q1; the other right on q0 and q2-q5: 4 right only there, 1 only in the baseline
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (True, 1), (False, 0), (False, 2), (False, None), (False, 7)])
    other = _evaluated(tmp_path / "b", "nq", [(True, 0), (False, 1), (True, 0), (True, 2), (True, 6), (True, 7)])
    rows = compare_runs([baseline, other])

    first, second = rows
    assert (first["run"], first["n"], first["em"], first["p_value"]) == (baseline, 6, 2 / 6, None)
    assert first["reader_accuracy"] == 2 / 4 and first["n_answer_read"] == 4  # ranks 0, 1, 0, 2 are read
    assert first["recall_at_5"] == 4 / 6
    assert (second["only_this_right"], second["only_baseline_right"]) == (4, 1)
    assert second["p_value"] == mcnemar_exact_p_value(4, 1)
    assert second["reader_accuracy"] == 3 / 4 and second["em"] == 5 / 6
    assert second["em_low"] <= second["em"] <= second["em_high"]
    assert "| nq | b | 6 | 0.833 [" in comparison_markdown(rows, [baseline, other])


def test_runs_that_answered_other_questions_are_refused(tmp_path):
    baseline = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, None)])
    other = _evaluated(tmp_path / "b", "nq", [(True, 0)])
    with pytest.raises(ValueError, match="nq: .* answered different questions"):
        compare_runs([baseline, other])
    with pytest.raises(FileNotFoundError, match="no predictions"):
        compare_runs([baseline, str(tmp_path / "c")])


def test_predictions_that_changed_since_evaluate_recorded_them_are_named(tmp_path):
    predictions = tmp_path / "a" / "predictions"
    run = _evaluated(tmp_path / "a", "nq", [(True, 0), (False, None)])
    _evaluated(tmp_path / "a", "wq", [(True, 0)])
    record_files(predictions, ["nq.parquet", "wq.parquet"])  # as `realm evaluate` does
    assert [row["n"] for row in compare_runs([run])] == [2, 1]
    _evaluated(tmp_path / "a", "nq", [(True, 0), (True, 0)])  # rewritten behind evaluate's back
    with pytest.raises(IntegrityError, match=f"^{predictions / 'nq.parquet'}: size \\d+, manifest.json says \\d+$"):
        compare_runs([run])
    record_files(predictions, ["nq.parquet"])
    (predictions / "wq.parquet").unlink()
    with pytest.raises(IntegrityError, match=f"^{predictions / 'wq.parquet'}: missing, manifest.json lists it$"):
        compare_runs([run])
