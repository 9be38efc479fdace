"""`realm compare`'s markdown: the questions' table per dataset and over them all, the masked
spans' table and its copying breakdown, and the table over fine-tuning seeds, each run named by
as much of its path as tells it from the others."""

from __future__ import annotations

from pathlib import Path

from realm.schemas.run_layout import RunLayout


def display_names(run_roots: list[str]) -> dict[str, str]:
    """Each run's folder name, or as many of its path's last parts as tell it from the others
    (`repro_a/systems/orqa` against `repro_b/systems/orqa`)."""
    paths = [RunLayout.at(root).root.parts for root in run_roots]

    def name(i: int) -> str:
        for depth in range(1, len(paths[i]) + 1):
            suffix = paths[i][-depth:]
            if all(other[-depth:] != suffix for j, other in enumerate(paths) if j != i):
                return str(Path(*suffix))
        return str(Path(*paths[i]))

    return {root: name(i) for i, root in enumerate(run_roots)}


def comparison_markdown(found: dict[str, list[dict]], run_roots: list[str]) -> str:
    """`compare`'s tables: the questions' per dataset and over them all, then the masked spans'."""
    names = display_names(run_roots)
    tables = []
    if "questions" in found:
        tables.append(_questions_markdown(found["questions"], names))
        tables.append(overall_markdown(found["overall"], names))
    if "masked_spans" in found:
        tables.append(_masked_spans_markdown(found["masked_spans"], names))
        if any(row["copying"] for row in found["masked_spans"]):
            tables.append(_copying_markdown(found["masked_spans"], names))
    return "\n\n".join(tables)


def _paired_cells(row: dict) -> tuple[str, str]:
    if row["p_value"] is None:
        return "baseline", ""
    return f"{row['only_this_right']} / {row['only_baseline_right']}", f"{row['p_value']:.3g}"


def _masked_spans_markdown(rows: list[dict], names: dict[str, str]) -> str:
    lines = [
        "| masked spans of | run | step | n | accuracy with retrieval [95% CI] | null document alone [95% CI] "
        "| span in a retrieved block | right only here / only in baseline (with retrieval) | p "
        "| of those, where a block this run retrieved holds the span (n): only here / only in baseline, p "
        "| where none does |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def part(split: dict | None) -> str:
        if split is None:
            return ""
        return f"({split['n']}) {split['only_this_right']} / {split['only_baseline_right']}, p = {split['p_value']:.3g}"

    for r in rows:
        paired, p_value = _paired_cells(r)
        lines.append(
            f"| {r['examples']} | {names[r['run']]} | {r['step']} | {r['n']} "
            f"| {r['accuracy_with_retrieval']:.3f} [{r['accuracy_with_retrieval_low']:.3f}, {r['accuracy_with_retrieval_high']:.3f}] "
            f"| {r['accuracy_null_only']:.3f} [{r['accuracy_null_only_low']:.3f}, {r['accuracy_null_only_high']:.3f}] "
            f"| {r['span_in_candidates']:.3f} | {paired} | {p_value} | {part(r['in_retrieved'])} | {part(r['not_in_retrieved'])} |"
        )
    return "\n".join(lines)


def _copying_markdown(rows: list[dict], names: dict[str, str]) -> str:
    lines = [
        "| masked spans of | run | span in a retrieved block | best holder's rank by p(z\\|x): 1 / 2 / 3 / 4+ "
        "| right reading a holder alone (of those, null document alone right too) "
        "| right only reading a holder | of those, the holder ranked first (right with retrieval) "
        "| ranked lower (right with retrieval) | its p(z\\|x) / the top candidate's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["copying"]
        if c is None:
            lines.append(f"| {r['examples']} | {names[r['run']]} | not recorded: evaluated before the candidates were listed "
                         "(run its pre-training command again to re-evaluate) | | | | | | |")
            continue
        if not c["reads_blocks"]:
            lines.append(f"| {r['examples']} | {names[r['run']]} | none: it read the null document alone (closed book) | | | | | | |")
            continue
        p_cells = "-" if c["copied_holder_lower_p"] is None else (
            f"{c['copied_holder_lower_p']:.2f} / {c['copied_holder_lower_top_p']:.2f}"
        )
        lines.append(
            f"| {r['examples']} | {names[r['run']]} | {c['span_in_candidates']} "
            f"| {c['holder_rank_1']} / {c['holder_rank_2']} / {c['holder_rank_3']} / {c['holder_rank_4_plus']} "
            f"| {c['right_reading_holder']} ({c['right_reading_holder_null_too']}) | {c['copied']} "
            f"| {c['copied_holder_first']} ({c['copied_holder_first_right']}) "
            f"| {c['copied_holder_lower']} ({c['copied_holder_lower_right']}) | {p_cells} |"
        )
    return "\n".join(lines)


def seeds_markdown(found: dict[str, list[dict]], systems: list[list[str]]) -> str:
    """`compare_seeds`' table."""
    names = display_names([run for runs in systems for run in runs])
    rows = found["over_seeds"]
    lines = [
        f"| system | mean EM of {', '.join(rows[0]['datasets'])}, per seed | over the seeds | difference from baseline "
        f"[95% CI] | right only here / only in baseline, summed over the seed pairs ({rows[0]['n']} questions each) "
        f"| p (sign-flip test of the questions' seed-averaged differences) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_seed = " / ".join(f"{em:.3f}" for em in r["mean_em_per_seed"])
        lines.append(f"| {', '.join(names[run] for run in r['system'])} | {per_seed} | {_difference_cells(r)} |")
    return "\n".join(lines)


def _difference_cells(row: dict) -> str:
    """Mean EM, its difference from the baseline's with the interval, and the paired test."""
    if row["difference"] is None:
        return f"{row['mean_em']:.3f} | baseline |  | "
    return (f"{row['mean_em']:.3f} | {row['difference']:+.3f} [{row['difference_low']:+.3f}, {row['difference_high']:+.3f}] | "
            + " | ".join(_paired_cells(row)))


def overall_markdown(rows: list[dict], names: dict[str, str]) -> str:
    """`compare`'s table over all the datasets."""
    datasets = ", ".join(rows[0]["datasets"])
    lines = [
        f"| run | mean EM of {datasets} | difference from baseline [95% CI] | right only here / only in baseline, "
        f"all {rows[0]['n']} questions | p (all questions) |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {names[r['run']]} | {_difference_cells(r)} |" for r in rows]
    return "\n".join(lines)


def _questions_markdown(rows: list[dict], names: dict[str, str]) -> str:
    lines = [
        "| dataset | run | n | EM [95% CI] | reader accuracy [95% CI] (n) | R@5 | right only here / only in baseline | p "
        "| answer in the top 5 only here / only in baseline, p | where both read an answer (n): right only here / only "
        "in baseline, p | answer read only here: right | only in baseline: right there |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reader = "-" if r["reader_accuracy"] is None else (
            f"{r['reader_accuracy']:.3f} [{r['reader_low']:.3f}, {r['reader_high']:.3f}]"
        )
        paired, p_value = _paired_cells(r)
        split = ["", "", "", ""]
        if r["recall_at_5_paired"] is not None:
            recall, read = r["recall_at_5_paired"], r["answer_read"]
            split = [
                f"{recall['only_this_right']} / {recall['only_baseline_right']}, p = {recall['p_value']:.3g}",
                f"({read['both']['n']}) {read['both']['only_this_right']} / {read['both']['only_baseline_right']}, "
                f"p = {read['both']['p_value']:.3g}",
                f"{read['only_this']['right']} of {read['only_this']['n']}",
                f"{read['only_baseline']['right']} of {read['only_baseline']['n']}",
            ]
        lines.append(
            f"| {r['dataset']} | {names[r['run']]} | {r['n']} | {r['em']:.3f} [{r['em_low']:.3f}, {r['em_high']:.3f}] "
            f"| {reader} ({r['n_answer_read']}) | {r['recall_at_5']:.3f} | {paired} | {p_value} | {' | '.join(split)} |"
        )
    return "\n".join(lines)
