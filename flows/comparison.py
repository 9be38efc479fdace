"""Comparing evaluated runs question by question: `realm compare RUN_A RUN_B ...`.

Reads each run's `predictions/<dataset>.parquet` (written by `realm evaluate` through the
PREDICTIONS schema, checked against the sizes and sha256 it recorded) and, per dataset the runs share, reports exact match, reader accuracy
(exact match among the questions with an answer in the blocks read) and recall@5, each with
a percentile-bootstrap 95% interval, and an exact McNemar test of each run against the first
on the questions exactly one of them answers right. Runs must have answered the same
questions (the same question file), or the comparison is refused naming the dataset.
"""

from __future__ import annotations

from pathlib import Path

from realm.schemas.run_layout import RunLayout


def compare_runs(run_roots: list[str]) -> list[dict]:
    """One row per (dataset, run): {dataset, run, n, em, em_low, em_high, reader_accuracy,
    reader_low, reader_high, n_answer_read, recall_at_5, only_this_right, only_baseline_right,
    p_value} (the last three None for the baseline)."""
    from realm.model.qa.paired_stats import bootstrap_interval, mcnemar_exact_p_value
    from realm.model.publish import MANIFEST_FILE, verify_step
    from realm.schemas import PREDICTIONS, read_table

    tables = {}
    for root in run_roots:
        directory = RunLayout.at(root).predictions
        files = sorted(directory.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"{directory}: no predictions; run `realm evaluate --run {root} --qa ...` first")
        if (directory / MANIFEST_FILE).is_file():  # runs evaluated before manifests have none
            verify_step(directory)
        tables[root] = {file.stem: read_table(str(file), PREDICTIONS).to_pylist() for file in files}
    shared = sorted(set.intersection(*(set(by_dataset) for by_dataset in tables.values())))
    if not shared:
        raise ValueError(f"the runs {run_roots} evaluated no dataset in common")

    rows = []
    for dataset in shared:
        baseline = tables[run_roots[0]][dataset]
        for root in run_roots:
            predictions = tables[root][dataset]
            if [p["question"] for p in predictions] != [p["question"] for p in baseline]:
                raise ValueError(f"{dataset}: {root} and {run_roots[0]} answered different questions; evaluate both on one file")
            em = [p["exact_match"] for p in predictions]
            read = [p["exact_match"] for p in predictions if p["answer_rank"] is not None and p["answer_rank"] < p["num_read"]]
            only_this = sum(a and not b["exact_match"] for a, b in zip(em, baseline))
            only_baseline = sum(b["exact_match"] and not a for a, b in zip(em, baseline))
            is_baseline = root == run_roots[0]
            rows.append({
                "dataset": dataset, "run": root, "n": len(em), "em": sum(em) / len(em),
                **dict(zip(("em_low", "em_high"), bootstrap_interval(em))),
                "reader_accuracy": sum(read) / len(read) if read else None,
                **dict(zip(("reader_low", "reader_high"), bootstrap_interval(read))),
                "n_answer_read": len(read),
                "recall_at_5": sum(p["answer_rank"] is not None and p["answer_rank"] < 5 for p in predictions) / len(em),
                "only_this_right": None if is_baseline else only_this,
                "only_baseline_right": None if is_baseline else only_baseline,
                "p_value": None if is_baseline else mcnemar_exact_p_value(only_this, only_baseline),
            })
    return rows


def comparison_markdown(rows: list[dict], run_roots: list[str]) -> str:
    names = {root: Path(root).name or root for root in run_roots}
    lines = [
        "| dataset | run | n | EM [95% CI] | reader accuracy [95% CI] (n) | R@5 | right only here / only in baseline | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reader = "-" if r["reader_accuracy"] is None else (
            f"{r['reader_accuracy']:.3f} [{r['reader_low']:.3f}, {r['reader_high']:.3f}]"
        )
        paired = "baseline" if r["p_value"] is None else f"{r['only_this_right']} / {r['only_baseline_right']}"
        p_value = "" if r["p_value"] is None else f"{r['p_value']:.3g}"
        lines.append(
            f"| {r['dataset']} | {names[r['run']]} | {r['n']} | {r['em']:.3f} [{r['em_low']:.3f}, {r['em_high']:.3f}] "
            f"| {reader} ({r['n_answer_read']}) | {r['recall_at_5']:.3f} | {paired} | {p_value} |"
        )
    return "\n".join(lines)
