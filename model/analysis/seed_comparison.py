"""Systems of several fine-tuning seeds compared over their seeds (`realm compare A0,A1 B0,B1`):
each system's mean EM per seed and over the seeds, and its difference from the first system's
with a paired interval and a sign-flip test on the questions' seed-averaged outcomes."""

from __future__ import annotations

from realm.model.analysis.question_comparison import mean_em, pooled, question_outcomes
from realm.model.analysis.run_outcomes import paired_test, read_results, require_predictions, run_layouts


def compare_seeds(systems: list[list[str]], datasets: list[str] | None = None) -> dict[str, list[dict]]:
    """{"over_seeds": a row per system}: each system's runs are its seeds, paired in the order
    given with the first system's (every system has as many), over `datasets` where given
    (`question_outcomes`), else every dataset they all answered. A row: {system (its runs),
    datasets, n (questions per seed), mean_em_per_seed, mean_em (over seeds), difference (from
    the first system's mean_em), difference_low, difference_high (a paired bootstrap 95%
    interval, questions resampled within each dataset, the same resample for every seed of both:
    the spread of questions for these seeds; the spread between trained seeds is not in it),
    only_this_right, only_baseline_right (discordant questions summed over the seed pairs, a
    question once per pair: a description, not a test), p_value (the sign-flip test of the
    difference, on each question's seed-averaged outcomes: a question counts once, however
    many seeds agree on it)}, the last six None for the first."""
    from realm.model.analysis.paired_stats import paired_difference_interval, paired_sign_flip_p_value
    from realm.schemas import PREDICTIONS

    if any(len(runs) != len(systems[0]) for runs in systems):
        raise ValueError(f"every system needs as many seeds as the first ({len(systems[0])}), paired in order: {systems}")
    run_roots = [run for runs in systems for run in runs]
    tables = [read_results(layout.predictions, PREDICTIONS) for layout in run_layouts(run_roots)]
    require_predictions(run_roots, tables)
    datasets, outcomes = question_outcomes(run_roots, tables, datasets)

    def over_seeds(runs: list[str], dataset: str) -> list[float]:
        """Each question's exact match averaged over the seeds."""
        return [sum(column) / len(runs) for column in zip(*(outcomes[run][dataset] for run in runs))]

    baseline = systems[0]
    baseline_over_seeds = {dataset: over_seeds(baseline, dataset) for dataset in datasets}
    rows = []
    for i, runs in enumerate(systems):
        per_seed = [mean_em(outcomes[run], datasets) for run in runs]
        row = {"system": runs, "datasets": datasets, "n": sum(len(outcomes[runs[0]][d]) for d in datasets),
               "mean_em_per_seed": per_seed, "mean_em": sum(per_seed) / len(per_seed)}
        if i == 0:
            rows.append({**row, **dict.fromkeys(
                ("difference", "difference_low", "difference_high", "only_this_right", "only_baseline_right", "p_value"))})
            continue
        pairs = [(over_seeds(runs, dataset), baseline_over_seeds[dataset]) for dataset in datasets]
        difference, low, high = paired_difference_interval(pairs)
        discordant = [paired_test(pooled(outcomes[run], datasets), pooled(outcomes[baseline_run], datasets), False)
                      for run, baseline_run in zip(runs, baseline)]
        rows.append({
            **row, "difference": difference, "difference_low": low, "difference_high": high,
            "only_this_right": sum(pair["only_this_right"] for pair in discordant),
            "only_baseline_right": sum(pair["only_baseline_right"] for pair in discordant),
            "p_value": paired_sign_flip_p_value(pairs),
        })
    return {"over_seeds": rows}
