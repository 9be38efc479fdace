"""Runs compared question by question on their predictions (`predictions/<dataset>.parquet`,
the PREDICTIONS schema): per dataset, exact match, reader accuracy and recall@5 with intervals,
each run tested against the first, and what retrieval changed; over the datasets, each run's
mean EM and its paired difference from the first run's."""

from __future__ import annotations

from realm.model.analysis.run_outcomes import accuracy_interval, paired_test, shared_stems
from realm.model.qa.answer_metrics import answer_within


def mean_em(by_dataset: dict[str, list[bool]], datasets: list[str]) -> float:
    """The datasets' exact match averaged, each weighing the same (as the reproduction's table does)."""
    return sum(sum(by_dataset[d]) / len(by_dataset[d]) for d in datasets) / len(datasets)


def pooled(by_dataset: dict[str, list[bool]], datasets: list[str]) -> list[bool]:
    """The datasets' exact match per question, one list."""
    return [em for dataset in datasets for em in by_dataset[dataset]]


def question_outcomes(
    run_roots: list[str], tables: list[dict[str, list[dict]]], wanted: list[str] | None = None
) -> tuple[list[str], dict]:
    """The datasets every run answered (only those `wanted`, in its order, where given: the
    three dev sets' mean without the small demo set weighing like NQ), and {run:
    {dataset: exact match per question}}; refused naming a wanted dataset a run did not
    answer, or the dataset where a run answered other questions than the first run."""
    if wanted:
        for dataset in wanted:
            if lacking := [root for root, table in zip(run_roots, tables) if dataset not in table]:
                raise ValueError(f"dataset {dataset}: {', '.join(lacking)} evaluated no such dataset")
        datasets = list(dict.fromkeys(wanted))
    else:
        datasets = shared_stems(run_roots, tables, "dataset")
    outcomes = {root: {} for root in run_roots}
    for dataset in datasets:
        questions = [p["question"] for p in tables[0][dataset]]
        for root, by_dataset in zip(run_roots, tables):
            if [p["question"] for p in by_dataset[dataset]] != questions:
                raise ValueError(f"{dataset}: {root} and {run_roots[0]} answered different questions; evaluate both on one file")
            outcomes[root][dataset] = [p["exact_match"] for p in by_dataset[dataset]]
    return datasets, outcomes


def compare_questions(
    run_roots: list[str], tables: list[dict[str, list[dict]]], wanted: list[str] | None = None
) -> tuple[list[dict], list[dict]]:
    """The per-(dataset, run) rows, and the per-run rows over all their datasets (`_overall`)."""
    rows = []
    datasets, outcomes = question_outcomes(run_roots, tables, wanted)
    for dataset in datasets:
        baseline = tables[0][dataset]
        for root, by_dataset in zip(run_roots, tables):
            predictions = by_dataset[dataset]
            em = outcomes[root][dataset]
            read = [p["exact_match"] for p in predictions if _answer_read(p)]
            em_interval, reader = accuracy_interval(em, "em"), accuracy_interval(read, "reader_accuracy")
            is_baseline = root == run_roots[0]
            rows.append({
                "dataset": dataset, "run": root, "n": len(em), **em_interval,
                "reader_accuracy": reader["reader_accuracy"],
                "reader_low": reader["reader_accuracy_low"], "reader_high": reader["reader_accuracy_high"],
                "n_answer_read": len(read),
                "recall_at_5": sum(map(_in_top_5, predictions)) / len(em),
                **paired_test(em, outcomes[run_roots[0]][dataset], is_baseline),
                **({"recall_at_5_paired": None, "answer_read": None} if is_baseline else _retrieval_split(predictions, baseline)),
            })
    return rows, _overall(run_roots, datasets, outcomes)


def _overall(run_roots: list[str], datasets: list[str], outcomes: dict[str, dict[str, list[bool]]]) -> list[dict]:
    """A row per run: {run, datasets, n, mean_em (the datasets' EM averaged, each weighing the
    same, as the reproduction's table does), difference (from the first run's mean_em),
    difference_low, difference_high (its paired bootstrap 95% interval, questions resampled
    within each dataset), and the exact McNemar test on all the questions pooled}, the last
    five None for the first run."""
    from realm.model.analysis.paired_stats import paired_difference_interval

    baseline = outcomes[run_roots[0]]
    rows = []
    for root in run_roots:
        is_baseline = root == run_roots[0]
        difference, low, high = (None, None, None) if is_baseline else paired_difference_interval(
            [(outcomes[root][dataset], baseline[dataset]) for dataset in datasets]
        )
        rows.append({
            "run": root, "datasets": datasets, "n": sum(len(baseline[dataset]) for dataset in datasets),
            "mean_em": mean_em(outcomes[root], datasets),
            "difference": difference, "difference_low": low, "difference_high": high,
            **paired_test(pooled(outcomes[root], datasets), pooled(baseline, datasets), is_baseline),
        })
    return rows


def _answer_read(prediction: dict) -> bool:
    return answer_within(prediction["answer_rank"], prediction["num_read"])


def _in_top_5(prediction: dict) -> bool:
    return answer_within(prediction["answer_rank"], 5)


def _retrieval_split(predictions: list[dict], baseline: list[dict]) -> dict:
    """What retrieval changed, question by question, against the baseline: the paired test of
    an answer in the top 5 (`recall_at_5_paired`), and exact match split by which run read an
    answer (`answer_read`): where both did, the paired test (the readers compared on equal
    footing); where only one did, how many and how many it got right. A retriever that brings
    harder questions' answers into the read blocks lowers reader accuracy without reading worse;
    the split tells the two apart."""
    pairs = list(zip(predictions, baseline))
    both = [(p, b) for p, b in pairs if _answer_read(p) and _answer_read(b)]
    only_this = [p for p, b in pairs if _answer_read(p) and not _answer_read(b)]
    only_baseline = [b for p, b in pairs if _answer_read(b) and not _answer_read(p)]
    return {
        "recall_at_5_paired": paired_test([_in_top_5(p) for p, _ in pairs], [_in_top_5(b) for _, b in pairs], False),
        "answer_read": {
            "both": {"n": len(both), **paired_test([p["exact_match"] for p, _ in both], [b["exact_match"] for _, b in both], False)},
            "only_this": {"n": len(only_this), "right": sum(p["exact_match"] for p in only_this)},
            "only_baseline": {"n": len(only_baseline), "right": sum(b["exact_match"] for b in only_baseline)},
        },
    }
