"""The reproduction table: its systems in order, where each system's runs live, and what
`realm-reproduce` publishes from its rows: `results.parquet` (schema `REPRODUCTION_RESULTS`),
`results.md` and `results.png`. An invocation keeps the rows an earlier one published for the
systems and fine-tuning seeds it does not train, when they trained under the same settings.
`results.md` ends with every system paired with the baseline on the same questions
(`realm.model.analysis.comparison`), over the fine-tuning seeds the two have."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from realm.schemas.manifest import IntegrityError

log = logging.getLogger(__name__)

SystemName = Literal[
    "bm25", "orqa", "realm", "realm_retriever_baseline_encoder", "baseline_retriever_realm_encoder",
    "random_spans", "stale_index", "closed_book",
]
SYSTEMS: tuple[SystemName, ...] = SystemName.__args__

RESULTS_FILE = "results.parquet"
# The paper's comparisons are against the ICT-only retriever: REALM's gain is measured from it.
BASELINE = "orqa"


def system_root(root: Path, system: str, seed: int, first_seed: int) -> Path:
    """Where `system` fine-tunes with `seed`: `systems/<system>` for the reproduction's first
    seed (the layout of runs with one seed), `systems/<system>_seed<seed>` for the others."""
    return root / "systems" / (system if seed == first_seed else f"{system}_seed{seed}")


def earlier_rows(root: Path, settings_sha256: str, retrained: Iterable[tuple[str, int]]) -> list[dict]:
    """The rows of `root`'s table for the (system, fine-tuning seed) pairs not in `retrained`
    that trained under `settings_sha256` (`ReproduceParams.settings_digest`); none from a table
    that predates the settings column."""
    from realm.schemas import REPRODUCTION_RESULTS, read_table

    path = root / RESULTS_FILE
    if not path.is_file():
        return []
    retrained = set(retrained)
    return [row for row in read_table(str(path), REPRODUCTION_RESULTS).to_pylist()
            if (row["system"], row["seed"]) not in retrained and row["settings_sha256"] == settings_sha256]


def table_rows(rows: list[dict]) -> list[dict]:
    """`rows` with the systems in the table's order (`SYSTEMS`), each system's seeds in order."""
    return sorted(rows, key=lambda row: (SYSTEMS.index(row["system"]), row["seed"]))


def write_results(rows: list[dict], root: Path, repeated: dict[str, str], first_seed: int) -> str:
    """results.parquet, results.md, results.png under `root`, the systems in the table's order;
    `repeated`: the systems left untrained because they would repeat another row, with why;
    `first_seed`: the reproduction's seed (`system_root`). Returns results.md's markdown."""
    from realm.schemas import REPRODUCTION_RESULTS, write_table

    rows = table_rows(rows)
    write_table(str(root / RESULTS_FILE), rows, REPRODUCTION_RESULTS)
    paired = paired_markdown(rows, root, first_seed)
    markdown = results_markdown(rows, repeated) + (f"\n\n{paired}" if paired else "")
    (root / "results.md").write_text(markdown + "\n", encoding="utf-8")
    _plot(rows, root / "results.png")
    return markdown


def results_markdown(rows: list[dict], repeated: dict[str, str]) -> str:
    """One line per system and fine-tuning seed: EM, reader accuracy and recall@5 per dataset,
    zero-shot recall@5, wall time, seed; then the systems not trained because they would
    repeat another row."""
    datasets = sorted({r["dataset"] for r in rows})
    by_line: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for row in table_rows(rows):
        by_line[row["system"], row["seed"]][row["dataset"]] = row
    header = ["system"] + [f"{d} EM" for d in datasets] + [f"{d} reader acc." for d in datasets]
    header += [f"{d} R@5" for d in datasets]
    header += [f"{d} zero-shot R@5" for d in datasets] + ["train time", "seed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (system, _), cells in by_line.items():
        first = next(iter(cells.values()))
        values = [system]
        for key in ("exact_match", "reader_accuracy", "recall_at_5", "zero_shot_recall_at_5"):
            values += [_cell(cells.get(d, {}).get(key)) for d in datasets]
        values += [f"{first['train_seconds'] / 60:.0f} min", str(first["seed"])]
        lines.append("| " + " | ".join(values) + " |")
    counts = ", ".join(f"{d}: {next(r['n'] for r in rows if r['dataset'] == d)} questions" for d in datasets)
    skipped = "".join(f"\n- {system} {reason}." for system, reason in repeated.items())
    return "\n".join(lines) + f"\n\n{counts}." + (f"\n\nNot trained:{skipped}" if skipped else "")


def paired_markdown(rows: list[dict], root: Path, first_seed: int) -> str:
    """Each system against the baseline (`BASELINE` where it is a row, else the table's first),
    on the questions and fine-tuning seeds both have: on one seed, mean EM over the datasets,
    its difference with a paired bootstrap interval and McNemar's test on all questions; on
    several, the same difference over the seeds with the sign-flip test. The systems that share
    the same seeds with the baseline share a table; a system that cannot be compared (no seed in
    common, a run lost or answering other questions) is named with why, in place and in the
    log, and the others' table stands. "" for a table of one system."""
    systems = list(dict.fromkeys(row["system"] for row in rows))
    if len(systems) < 2:
        return ""
    baseline = BASELINE if BASELINE in systems else systems[0]
    seeds_of = {system: {row["seed"] for row in rows if row["system"] == system} for system in systems}
    groups: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for system in systems:
        if system != baseline:
            groups[tuple(sorted(seeds_of[system] & seeds_of[baseline]))].append(system)
    tables = []
    for seeds, paired in groups.items():
        tables += _paired_tables(root, first_seed, baseline, list(seeds), paired, seeds_of)
    return "\n\n".join(tables)


def _paired_tables(root: Path, first_seed: int, baseline: str, seeds: list[int], systems: list[str],
                   seeds_of: dict[str, set[int]]) -> list[str]:
    """`systems`' table against `baseline` over `seeds`; where it cannot be built, each system's
    alone, so that one system's lost run hides no other's comparison."""
    if not seeds:
        return [_not_paired(systems, baseline, f"no fine-tuning seed in common with {baseline}")]
    try:
        return [_paired_table(root, first_seed, baseline, seeds, systems, seeds_of)]
    except (OSError, ValueError, IntegrityError) as error:  # lost or moved predictions, other questions
        if len(systems) == 1:
            return [_not_paired(systems, baseline, str(error))]
        return [table for system in systems
                for table in _paired_tables(root, first_seed, baseline, seeds, [system], seeds_of)]


def _not_paired(systems: list[str], baseline: str, why: str) -> str:
    log.warning("no paired test of %s against %s: %s", ", ".join(systems), baseline, why)
    return f"No paired test of {', '.join(systems)} against {baseline}: {why}."


def _paired_table(root: Path, first_seed: int, baseline: str, seeds: list[int], systems: list[str],
                  seeds_of: dict[str, set[int]]) -> str:
    """`systems` against `baseline` over `seeds`, with the command that prints it again."""
    from realm.model.analysis.comparison import compare
    from realm.model.analysis.comparison_markdown import display_names, overall_markdown, seeds_markdown
    from realm.model.analysis.seed_comparison import compare_seeds

    runs = [[str(system_root(root, system, seed, first_seed)) for seed in seeds] for system in [baseline, *systems]]
    first_seed_runs = " ".join(str(Path(seeded[0]).relative_to(root)) for seeded in runs)
    left_out = "; ".join(
        f"{system} {', '.join(map(str, sorted(seeds_of[system] - set(seeds))))}"
        for system in [baseline, *systems] if seeds_of[system] - set(seeds)
    )
    left_out = f" Seeds left out, not in both: {left_out}." if left_out else ""
    if len(seeds) == 1:
        first = [seeded[0] for seeded in runs]
        table = overall_markdown(compare(first)["overall"], display_names(first))
        title = (f"Paired against {baseline} on the same questions, seed {seeds[0]} "
                 f"(per dataset: `realm compare {first_seed_runs}` in this folder).")
    else:
        table = seeds_markdown(compare_seeds(runs), runs)
        together = " ".join(",".join(str(Path(run).relative_to(root)) for run in seeded) for seeded in runs)
        title = (f"Paired against {baseline} over fine-tuning seeds {', '.join(map(str, seeds))} (`realm compare "
                 f"{together}` in this folder; per dataset, one seed at a time, e.g. seed {seeds[0]}: "
                 f"`realm compare {first_seed_runs}`).")
    return f"{title}{left_out}\n\n{table}"


def json_table(rows: list[dict]) -> dict:
    """{system: {dataset: scores}} (`realm reproduce --json`): EM and recall@5 averaged over the
    system's fine-tuning seeds, and each seed's EM in the order of `seeds`."""
    table: dict[str, dict[str, dict]] = {}
    for (system, dataset), cells in by_system_and_dataset(rows).items():
        table.setdefault(system, {})[dataset] = {
            "em": mean_over_seeds(cells, "exact_match"), "em_per_seed": [cell["exact_match"] for cell in cells],
            "seeds": [cell["seed"] for cell in cells], "recall_at_5": mean_over_seeds(cells, "recall_at_5"),
            "zero_shot_recall_at_5": cells[0]["zero_shot_recall_at_5"], "n": cells[0]["n"],
        }
    return table


def by_system_and_dataset(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """`rows` grouped by (system, dataset), the systems in the table's order, each group's
    fine-tuning seeds in order."""
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in table_rows(rows):
        grouped[row["system"], row["dataset"]].append(row)
    return grouped


def mean_over_seeds(cells: list[dict], key: str) -> float:
    """`key` averaged over one (system, dataset)'s rows, a row per fine-tuning seed."""
    return sum(cell[key] for cell in cells) / len(cells)


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    systems = list(dict.fromkeys(r["system"] for r in rows))
    datasets = sorted({r["dataset"] for r in rows})
    seeded = by_system_and_dataset(rows)
    value = {key: mean_over_seeds(cells, "exact_match") for key, cells in seeded.items()}  # a system's bar
    width = 0.8 / max(len(datasets), 1)
    figure, axis = pyplot.subplots(figsize=(max(6, 1.3 * len(systems)), 3.6))
    for offset, dataset in enumerate(datasets):
        axis.bar([i + offset * width for i in range(len(systems))],
                 [value.get((s, dataset), 0.0) for s in systems], width, label=dataset)
    axis.set_xticks([i + width * (len(datasets) - 1) / 2 for i in range(len(systems))])
    axis.set_xticklabels(systems, rotation=25, ha="right", fontsize=8)
    several = any(len(cells) > 1 for cells in seeded.values())
    axis.set_ylabel("exact match, mean over each system's seeds" if several else "exact match")
    axis.legend(fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
