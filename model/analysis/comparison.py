"""Comparing runs example by example: `realm compare RUN_A RUN_B ...`.

Questions: each run's `predictions/<dataset>.parquet` (written by `realm evaluate` through the
PREDICTIONS schema) gives, per dataset the runs share, exact match, reader accuracy (exact
match among the questions with an answer in the blocks read) and recall@5, each with a
percentile-bootstrap 95% interval, and an exact McNemar test of each run against the first on
the questions exactly one of them answers right; the same test of an answer in the top 5, and
exact match split by which of the two runs read an answer (so a retriever that finds harder
questions' answers is told apart from a reader that reads worse). Over all the datasets: each
run's mean EM, its difference from the first run's with a paired bootstrap 95% interval, and
the McNemar test on all the questions. Runs must have answered the same questions (the same
question file), or the comparison is refused naming the dataset.

Masked spans: each run's `masked_spans/<examples>.parquet` (pre-training's last evaluation,
MASKED_SPAN_OUTCOMES) gives masked-span accuracy with retrieval and with the null document
alone, with intervals, and the same paired test of accuracy with retrieval against the first
run: e.g. REALM's pre-training against a closed-book one, on the same never-trained-on
examples, and that test again on two parts of them: the examples whose span a block the run
retrieved holds (where copying from the block can help) and the rest (where only reading the
sentence can). Runs must have evaluated the same examples, or the comparison is refused; runs
that link one masked_spans/ directory (fine-tuning roots of one pre-training) compare only their
predictions, where they have them. Where the
outcomes list their candidates (pre-trained since 2026-11-28), a second table shows where
p(z|x) ranks the blocks holding the span and what the marginal makes of the spans only such a
block's reading gets right (`masked_span_accuracy.copying_breakdown`).

Every file read is checked against the sizes and sha256 its directory's manifest recorded.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa

from realm.model.qa.answer_metrics import answer_within
from realm.schemas.run_layout import RunLayout

log = logging.getLogger(__name__)


def _results(directory: Path, schema: pa.Schema) -> dict[str, list[dict]] | None:
    """`<directory>/*.parquet` by file stem, read through `schema` once the manifest (where one
    was written) checks out; None when the directory holds neither."""
    from realm.model.publish import MANIFEST_FILE, verify_step
    from realm.schemas import read_table

    files = sorted(directory.glob("*.parquet"))
    if (directory / MANIFEST_FILE).is_file():  # runs evaluated before manifests have none
        verify_step(directory)  # a file the manifest lists and the directory lost is named here
    elif not files:
        return None
    return {file.stem: read_table(str(file), schema).to_pylist() for file in files}


def _paired(correct: list[bool], baseline: list[bool], is_baseline: bool) -> dict:
    """The exact McNemar test of `correct` against `baseline` (the same examples, in order)."""
    from realm.model.qa.paired_stats import mcnemar_exact_p_value

    only_this = sum(a and not b for a, b in zip(correct, baseline))
    only_baseline = sum(b and not a for a, b in zip(correct, baseline))
    return {
        "only_this_right": None if is_baseline else only_this,
        "only_baseline_right": None if is_baseline else only_baseline,
        "p_value": None if is_baseline else mcnemar_exact_p_value(only_this, only_baseline),
    }


def _accuracy(correct: list[bool], key: str) -> dict:
    """{key, key_low, key_high}: the mean of `correct` and its bootstrap 95% interval."""
    from realm.model.qa.paired_stats import bootstrap_interval

    low, high = bootstrap_interval(correct)
    return {key: sum(correct) / len(correct) if correct else None, f"{key}_low": low, f"{key}_high": high}


def compare(run_roots: list[str], datasets: list[str] | None = None) -> dict[str, list[dict]]:
    """{"questions": rows, "overall": rows, "masked_spans": rows}, each where every run has
    that kind of result; refused when they share neither. `datasets` keeps the questions rows,
    and the overall rows' means, to those datasets (`_question_outcomes`).

    A questions row per (dataset, run): {dataset, run, n, em, em_low, em_high,
    reader_accuracy, reader_low, reader_high, n_answer_read, recall_at_5, only_this_right,
    only_baseline_right, p_value, recall_at_5_paired, answer_read} (the last five None for the
    baseline; `_retrieval_split` says what the last two hold). An overall row per run is
    `_overall`'s, over the datasets of the questions rows. A masked-spans row
    per (examples, run): {examples, run, step, n, accuracy_with_retrieval and its interval
    (…_low, …_high), accuracy_null_only and its interval, span_in_candidates, the paired
    three, of accuracy with retrieval against the first run's, `in_retrieved` and
    `not_in_retrieved`: the paired three plus n, on the examples whose span this run's
    retrieved blocks hold and on the rest (None for the baseline), and copying:
    `copying_breakdown`'s dict, None for outcomes written before the candidates were listed};
    left out when the runs share one masked_spans/ directory and have predictions to compare."""
    from realm.schemas import MASKED_SPAN_OUTCOMES, PREDICTIONS

    layouts = _layouts(run_roots)
    predictions = [_results(layout.predictions, PREDICTIONS) for layout in layouts]
    masked_spans = [_results(layout.masked_spans, MASKED_SPAN_OUTCOMES) for layout in layouts]
    found = {}
    if datasets:  # asked for datasets: masked spans alone would not answer
        _require_predictions(run_roots, predictions)
    if all(predictions):
        found["questions"], found["overall"] = _compare_questions(run_roots, predictions, datasets)
    # Fine-tuning roots made from one pre-training link its masked_spans/: comparing a directory
    # with itself would print a table of ties.
    one_directory = len(layouts) > 1 and len({layout.masked_spans.resolve() for layout in layouts}) == 1
    if all(masked_spans) and not (one_directory and found):
        found["masked_spans"] = _compare_masked_spans(run_roots, masked_spans)
    if not found:
        lacking = next((root for root, p, m in zip(run_roots, predictions, masked_spans) if not p and not m), None)
        raise FileNotFoundError(
            f"{_no_predictions(lacking)} and no masked_spans/ (pre-training writes them)"
            if lacking is not None else f"the runs {run_roots} share no kind of result: some have only predictions, some only masked_spans"
        )
    return found


def compare_seeds(systems: list[list[str]], datasets: list[str] | None = None) -> dict[str, list[dict]]:
    """{"over_seeds": a row per system}: each system's runs are its seeds, paired in the order
    given with the first system's (every system has as many), over `datasets` where given
    (`_question_outcomes`), else every dataset they all answered. A row: {system (its runs),
    datasets, n (questions per seed), mean_em_per_seed, mean_em (over seeds), difference (from
    the first system's mean_em), difference_low, difference_high (a paired bootstrap 95%
    interval, questions resampled within each dataset, the same resample for every seed of both:
    the spread of questions for these seeds; the spread between trained seeds is not in it),
    only_this_right, only_baseline_right (discordant questions summed over the seed pairs, a
    question once per pair: a description, not a test), p_value (the sign-flip test of the
    difference, on each question's seed-averaged outcomes: a question counts once, however
    many seeds agree on it)}, the last six None for the first."""
    from realm.model.qa.paired_stats import paired_difference_interval, paired_sign_flip_p_value
    from realm.schemas import PREDICTIONS

    if any(len(runs) != len(systems[0]) for runs in systems):
        raise ValueError(f"every system needs as many seeds as the first ({len(systems[0])}), paired in order: {systems}")
    run_roots = [run for runs in systems for run in runs]
    tables = [_results(layout.predictions, PREDICTIONS) for layout in _layouts(run_roots)]
    _require_predictions(run_roots, tables)
    datasets, outcomes = _question_outcomes(run_roots, tables, datasets)

    def over_seeds(runs: list[str], dataset: str) -> list[float]:
        """Each question's exact match averaged over the seeds."""
        return [sum(column) / len(runs) for column in zip(*(outcomes[run][dataset] for run in runs))]

    baseline = systems[0]
    baseline_over_seeds = {dataset: over_seeds(baseline, dataset) for dataset in datasets}
    rows = []
    for i, runs in enumerate(systems):
        per_seed = [_mean_em(outcomes[run], datasets) for run in runs]
        row = {"system": runs, "datasets": datasets, "n": sum(len(outcomes[runs[0]][d]) for d in datasets),
               "mean_em_per_seed": per_seed, "mean_em": sum(per_seed) / len(per_seed)}
        if i == 0:
            rows.append({**row, **dict.fromkeys(
                ("difference", "difference_low", "difference_high", "only_this_right", "only_baseline_right", "p_value"))})
            continue
        pairs = [(over_seeds(runs, dataset), baseline_over_seeds[dataset]) for dataset in datasets]
        difference, low, high = paired_difference_interval(pairs)
        discordant = [_paired(_pooled(outcomes[run], datasets), _pooled(outcomes[baseline_run], datasets), False)
                      for run, baseline_run in zip(runs, baseline)]
        rows.append({
            **row, "difference": difference, "difference_low": low, "difference_high": high,
            "only_this_right": sum(pair["only_this_right"] for pair in discordant),
            "only_baseline_right": sum(pair["only_baseline_right"] for pair in discordant),
            "p_value": paired_sign_flip_p_value(pairs),
        })
    return {"over_seeds": rows}


def _mean_em(by_dataset: dict[str, list[bool]], datasets: list[str]) -> float:
    """The datasets' exact match averaged, each weighing the same (as the reproduction's table does)."""
    return sum(sum(by_dataset[d]) / len(by_dataset[d]) for d in datasets) / len(datasets)


def _pooled(by_dataset: dict[str, list[bool]], datasets: list[str]) -> list[bool]:
    """The datasets' exact match per question, one list."""
    return [em for dataset in datasets for em in by_dataset[dataset]]


def _layouts(run_roots: list[str]) -> list[RunLayout]:
    """The runs' layouts; refused naming a folder that does not exist or a run named twice."""
    layouts = [RunLayout.at(root) for root in run_roots]
    for i, layout in enumerate(layouts):
        if not layout.root.is_dir():
            raise FileNotFoundError(f"{run_roots[i]}: no such directory")
        if layout.root in (earlier := [other.root for other in layouts[:i]]):
            raise ValueError(f"{run_roots[i]} is {run_roots[earlier.index(layout.root)]} again; name each run once")
    return layouts


def _require_predictions(run_roots: list[str], tables: list[dict[str, list[dict]]]) -> None:
    """Refused naming the first run that has no predictions."""
    if (lacking := next((root for root, table in zip(run_roots, tables) if not table), None)) is not None:
        raise FileNotFoundError(_no_predictions(lacking))


def _no_predictions(root: str) -> str:
    return f"{RunLayout.at(root).predictions}: no predictions (run `realm evaluate --run {root} --qa ...` first)"


def _shared(run_roots: list[str], tables: list[dict[str, list[dict]]], what: str) -> list[str]:
    """The file stems every run has, sorted; refused when there are none, and each left out
    named with the runs that have it."""
    shared = sorted(set.intersection(*(set(table) for table in tables)))
    if not shared:
        raise ValueError(f"the runs {run_roots} evaluated no {what} in common")
    for stem in sorted(set.union(*(set(table) for table in tables)) - set(shared)):
        having = [root for root, table in zip(run_roots, tables) if stem in table]
        log.warning("%s %s left out: only %s evaluated it", what, stem, ", ".join(having))
    return shared


def _question_outcomes(
    run_roots: list[str], tables: list[dict[str, list[dict]]], wanted: list[str] | None = None
) -> tuple[list[str], dict]:
    """The datasets every run answered (only those `wanted`, in its order, where given: the
    three dev sets' mean without the demo set's 40 questions weighing like NQ's 146), and {run:
    {dataset: exact match per question}}; refused naming a wanted dataset a run did not
    answer, or the dataset where a run answered other questions than the first run."""
    if wanted:
        for dataset in wanted:
            if lacking := [root for root, table in zip(run_roots, tables) if dataset not in table]:
                raise ValueError(f"dataset {dataset}: {', '.join(lacking)} evaluated no such dataset")
        datasets = list(dict.fromkeys(wanted))
    else:
        datasets = _shared(run_roots, tables, "dataset")
    outcomes = {root: {} for root in run_roots}
    for dataset in datasets:
        questions = [p["question"] for p in tables[0][dataset]]
        for root, by_dataset in zip(run_roots, tables):
            if [p["question"] for p in by_dataset[dataset]] != questions:
                raise ValueError(f"{dataset}: {root} and {run_roots[0]} answered different questions; evaluate both on one file")
            outcomes[root][dataset] = [p["exact_match"] for p in by_dataset[dataset]]
    return datasets, outcomes


def _compare_questions(
    run_roots: list[str], tables: list[dict[str, list[dict]]], wanted: list[str] | None = None
) -> tuple[list[dict], list[dict]]:
    """The per-(dataset, run) rows, and the per-run rows over all their datasets (`_overall`)."""
    rows = []
    datasets, outcomes = _question_outcomes(run_roots, tables, wanted)
    for dataset in datasets:
        baseline = tables[0][dataset]
        for root, by_dataset in zip(run_roots, tables):
            predictions = by_dataset[dataset]
            em = outcomes[root][dataset]
            read = [p["exact_match"] for p in predictions if _answer_read(p)]
            em_interval, reader = _accuracy(em, "em"), _accuracy(read, "reader_accuracy")
            is_baseline = root == run_roots[0]
            rows.append({
                "dataset": dataset, "run": root, "n": len(em), **em_interval,
                "reader_accuracy": reader["reader_accuracy"],
                "reader_low": reader["reader_accuracy_low"], "reader_high": reader["reader_accuracy_high"],
                "n_answer_read": len(read),
                "recall_at_5": sum(map(_in_top_5, predictions)) / len(em),
                **_paired(em, outcomes[run_roots[0]][dataset], is_baseline),
                **({"recall_at_5_paired": None, "answer_read": None} if is_baseline else _retrieval_split(predictions, baseline)),
            })
    return rows, _overall(run_roots, datasets, outcomes)


def _overall(run_roots: list[str], datasets: list[str], outcomes: dict[str, dict[str, list[bool]]]) -> list[dict]:
    """A row per run: {run, datasets, n, mean_em (the datasets' EM averaged, each weighing the
    same, as the reproduction's table does), difference (from the first run's mean_em),
    difference_low, difference_high (its paired bootstrap 95% interval, questions resampled
    within each dataset), and the exact McNemar test on all the questions pooled}, the last
    five None for the first run."""
    from realm.model.qa.paired_stats import paired_difference_interval

    baseline = outcomes[run_roots[0]]
    rows = []
    for root in run_roots:
        is_baseline = root == run_roots[0]
        difference, low, high = (None, None, None) if is_baseline else paired_difference_interval(
            [(outcomes[root][dataset], baseline[dataset]) for dataset in datasets]
        )
        rows.append({
            "run": root, "datasets": datasets, "n": sum(len(baseline[dataset]) for dataset in datasets),
            "mean_em": _mean_em(outcomes[root], datasets),
            "difference": difference, "difference_low": low, "difference_high": high,
            **_paired(_pooled(outcomes[root], datasets), _pooled(baseline, datasets), is_baseline),
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
        "recall_at_5_paired": _paired([_in_top_5(p) for p, _ in pairs], [_in_top_5(b) for _, b in pairs], False),
        "answer_read": {
            "both": {"n": len(both), **_paired([p["exact_match"] for p, _ in both], [b["exact_match"] for _, b in both], False)},
            "only_this": {"n": len(only_this), "right": sum(p["exact_match"] for p in only_this)},
            "only_baseline": {"n": len(only_baseline), "right": sum(b["exact_match"] for b in only_baseline)},
        },
    }


def _compare_masked_spans(run_roots: list[str], tables: list[dict[str, list[dict]]]) -> list[dict]:
    from realm.model.training.masked_span_accuracy import copying_breakdown

    rows = []
    for examples in _shared(run_roots, tables, "set of masked-span examples"):
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
                **_accuracy(right, "accuracy_with_retrieval"),
                **_accuracy([outcomes[i]["right_null_only"] for i in ids], "accuracy_null_only"),
                "span_in_candidates": sum(outcomes[i]["span_in_candidates"] for i in ids) / len(ids),
                **_paired(right, [baseline[i]["right_with_retrieval"] for i in ids], is_baseline),
                **{
                    key: None if is_baseline else {
                        "n": len(part),
                        **_paired([outcomes[i]["right_with_retrieval"] for i in part],
                                  [baseline[i]["right_with_retrieval"] for i in part], False),
                    }
                    for key, part in (("in_retrieved", by_holding[True]), ("not_in_retrieved", by_holding[False]))
                },
                "copying": copying_breakdown(list(outcomes.values())),
            })
    return rows


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
