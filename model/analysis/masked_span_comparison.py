"""Pre-trained runs compared masked span by masked span on their outcomes
(`masked_spans/<examples>.parquet`, MASKED_SPAN_OUTCOMES, pre-training's last evaluation):
accuracy with retrieval and with the null document alone, with intervals, each run tested
against the first on the same never-trained-on examples, overall and split by whether a block
the run retrieved holds the span (where copying from the block can help) or not (where only
reading the sentence can); and, where the outcomes list their candidates, where p(z|x) ranks
the blocks holding the span (`copying_breakdown`)."""

from __future__ import annotations

import numpy as np

from realm.model.analysis.run_outcomes import accuracy_interval, paired_test, shared_stems


def compare_masked_spans(run_roots: list[str], tables: list[dict[str, list[dict]]]) -> list[dict]:
    """A row per (examples, run), `compare`'s "masked_spans" rows; refused when a set holds no
    examples or the runs evaluated different ones."""
    rows = []
    for examples in shared_stems(run_roots, tables, "set of masked-span examples"):
        baseline = {o["example_id"]: o for o in tables[0][examples]}
        ids = sorted(baseline)
        if not ids:
            raise ValueError(f"masked_spans/{examples}: {run_roots[0]} holds no examples; pre-training writes at least one")
        for root, by_examples in zip(run_roots, tables):
            outcomes = {o["example_id"]: o for o in by_examples[examples]}
            if outcomes.keys() != baseline.keys():
                raise ValueError(
                    f"masked_spans/{examples}: {root} and {run_roots[0]} evaluated different examples "
                    f"({len(outcomes)} and {len(baseline)}, {len(outcomes.keys() & baseline.keys())} shared); "
                    "pre-train both from one corpus with the same seed, batch size and steps"
                )
            right = [outcomes[i]["right_with_retrieval"] for i in ids]
            is_baseline = root == run_roots[0]
            by_holding = {
                held: [i for i in ids if outcomes[i]["span_in_candidates"] == held] for held in (True, False)
            }
            rows.append({
                "examples": examples, "run": root, "step": outcomes[ids[0]]["step"], "n": len(ids),
                **accuracy_interval(right, "accuracy_with_retrieval"),
                **accuracy_interval([outcomes[i]["right_null_only"] for i in ids], "accuracy_null_only"),
                "span_in_candidates": sum(outcomes[i]["span_in_candidates"] for i in ids) / len(ids),
                **paired_test(right, [baseline[i]["right_with_retrieval"] for i in ids], is_baseline),
                **{
                    key: None if is_baseline else {
                        "n": len(part),
                        **paired_test([outcomes[i]["right_with_retrieval"] for i in part],
                                      [baseline[i]["right_with_retrieval"] for i in part], False),
                    }
                    for key, part in (("in_retrieved", by_holding[True]), ("not_in_retrieved", by_holding[False]))
                },
                "copying": copying_breakdown(list(outcomes.values())),
            })
    return rows


def copying_breakdown(outcomes: list[dict]) -> dict | None:
    """Where p(z|x) puts the blocks the encoder could copy the span from, over MASKED_SPAN_OUTCOMES
    rows; None when a row predates the per-candidate columns. A candidate's rank is 1 + the
    number read with a higher p(z|x) (the null document ranked with the rest). Counts:
    `span_in_candidates`, examples whose span a retrieved block holds, and of those
    `holder_rank_1`, `holder_rank_2`, `holder_rank_3`, `holder_rank_4_plus` by the best-ranked
    holder; `right_reading_holder`, those a holder read alone gets right, and of those
    `right_reading_holder_null_too`, also right from the sentence alone (the null document);
    `copied`, right only by reading a holder (the null document and every other block wrong),
    split by whether its best-ranked right holder is ranked first (`copied_holder_first`,
    `copied_holder_first_right` of them right with retrieval) or lower (`copied_holder_lower`,
    `copied_holder_lower_right`, with the mean p(z|x) of that holder and of the top candidate:
    `copied_holder_lower_p`, `copied_holder_lower_top_p`; None when there are none), and
    `reads_blocks`: whether any example read a block besides the null document (a closed-book
    run reads none, and every count is 0)."""
    if any(row.get("retrieval_log_probs") is None for row in outcomes):
        return None
    counts = dict.fromkeys(
        ("span_in_candidates", "holder_rank_1", "holder_rank_2", "holder_rank_3", "holder_rank_4_plus",
         "right_reading_holder", "right_reading_holder_null_too", "copied", "copied_holder_first",
         "copied_holder_first_right", "copied_holder_lower", "copied_holder_lower_right"),
        0,
    )
    lower_holder_p, lower_top_p = [], []
    for row in outcomes:
        log_p = np.asarray(row["retrieval_log_probs"], dtype=np.float64)
        holds = np.asarray(row["candidates_holding_span"], dtype=bool)
        right = np.asarray(row["candidates_right"], dtype=bool)
        if not holds.any():
            continue
        rank = 1 + (log_p[None, :] > log_p[:, None]).sum(axis=1)  # [k]
        counts["span_in_candidates"] += 1
        best = int(rank[holds].min())
        counts[f"holder_rank_{best}" if best <= 3 else "holder_rank_4_plus"] += 1
        right_holders = holds & right
        if not right_holders.any():
            continue
        counts["right_reading_holder"] += 1
        counts["right_reading_holder_null_too"] += bool(right[0])
        if (right & ~holds).any():
            continue
        counts["copied"] += 1
        first = int(np.flatnonzero(right_holders)[np.argmin(rank[right_holders])])
        where = "first" if rank[first] == 1 else "lower"
        counts[f"copied_holder_{where}"] += 1
        counts[f"copied_holder_{where}_right"] += bool(row["right_with_retrieval"])
        if where == "lower":
            lower_holder_p.append(float(np.exp(log_p[first])))
            lower_top_p.append(float(np.exp(log_p.max())))
    return {
        **counts,
        "copied_holder_lower_p": float(np.mean(lower_holder_p)) if lower_holder_p else None,
        "copied_holder_lower_top_p": float(np.mean(lower_top_p)) if lower_top_p else None,
        "reads_blocks": any(len(row["retrieval_log_probs"]) > 1 for row in outcomes),
    }
