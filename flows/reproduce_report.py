"""The reproduction table: `results.parquet` (schema `REPRODUCTION_RESULTS`), `results.md`,
`results.png` and the same table as Prefect artifacts. An invocation that trains some of the
systems (`ReproduceParams.systems`) keeps the rows an earlier one published for the others,
when they trained under the same settings. `results.md` ends with every system paired with
the baseline's on the same questions (`realm.flows.comparison`): over all of them on one
seed, over the seeds every row has on several."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from realm.flows.reproduce_runs import system_root
from realm.flows.reproduce_systems import SYSTEMS

RESULTS_FILE = "results.parquet"
# The paper's comparisons are against the ICT-only retriever: REALM's gain is measured from it.
BASELINE = "orqa"


def earlier_rows(root: Path, settings_sha256: str, retrained: Iterable[str]) -> list[dict]:
    """The rows of `root`'s table for systems not in `retrained` that trained under
    `settings_sha256` (`ReproduceParams.settings_digest`); none from a table that predates
    the settings column."""
    from realm.schemas import REPRODUCTION_RESULTS, read_table

    path = root / RESULTS_FILE
    if not path.is_file():
        return []
    retrained = set(retrained)
    return [row for row in read_table(str(path), REPRODUCTION_RESULTS).to_pylist()
            if row["system"] not in retrained and row["settings_sha256"] == settings_sha256]


def table_rows(rows: list[dict]) -> list[dict]:
    """`rows` with the systems in the table's order (`SYSTEMS`), each system's seeds in order."""
    return sorted(rows, key=lambda row: (SYSTEMS.index(row["system"]), row["seed"]))


def publish_results(rows: list[dict], root: Path, repeated: dict[str, str], first_seed: int) -> None:
    """results.parquet, results.md, results.png under `root`, and the table as artifacts, the
    systems in the table's order; `repeated`: the systems left untrained because they would
    repeat another row, with why; `first_seed`: the reproduction's seed (`system_root`)."""
    from realm.schemas import REPRODUCTION_RESULTS, write_table
    from realm.schemas.manifest import IntegrityError

    rows = table_rows(rows)
    write_table(str(root / RESULTS_FILE), rows, REPRODUCTION_RESULTS)
    try:
        paired = paired_markdown(rows, root, first_seed)
    except (OSError, ValueError, IntegrityError) as error:  # a row's predictions moved or lost: the table still publishes
        paired = f"No paired tests: {error}"
    markdown = results_markdown(rows, repeated) + (f"\n\n{paired}" if paired else "")
    (root / "results.md").write_text(markdown + "\n", encoding="utf-8")
    _plot(rows, root / "results.png")
    create_table_artifact(key="realm-reproduce-results", table=rows, description="REALM vs ORQA vs BM25, per seed and dataset")
    create_markdown_artifact(key="realm-reproduce-table", markdown=markdown, description="the reproduction table")


def results_markdown(rows: list[dict], repeated: dict[str, str]) -> str:
    """One line per system and fine-tuning seed: EM, reader accuracy and recall@5 per dataset,
    zero-shot recall@5, wall time, seed; then the systems not trained because they would
    repeat another row."""
    datasets = sorted({r["dataset"] for r in rows})
    by_system: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for row in table_rows(rows):
        by_system[row["system"], row["seed"]][row["dataset"]] = row
    header = ["system"] + [f"{d} EM" for d in datasets] + [f"{d} reader acc." for d in datasets]
    header += [f"{d} R@5" for d in datasets]
    header += [f"{d} zero-shot R@5" for d in datasets] + ["train time", "seed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (system, _), cells in by_system.items():
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
    on the questions both answered: on one fine-tuning seed, mean EM over the datasets, its
    difference with a paired bootstrap interval and McNemar's test on all questions; on several,
    the same difference over the seeds every system has, with the sign-flip test. "" for a
    table of one system."""
    from realm.flows.comparison import compare, compare_seeds, display_names, overall_markdown, seeds_markdown

    systems = list(dict.fromkeys(row["system"] for row in rows))
    if len(systems) < 2:
        return ""
    baseline = BASELINE if BASELINE in systems else systems[0]
    systems = [baseline] + [system for system in systems if system != baseline]
    seeds_of = {system: {row["seed"] for row in rows if row["system"] == system} for system in systems}
    seeds = sorted(set.intersection(*seeds_of.values()))
    if not seeds:
        return f"No paired tests: the systems share no fine-tuning seed ({_seeds_text(seeds_of)})."
    runs = [[str(system_root(root, system, seed, first_seed)) for seed in seeds] for system in systems]
    relative = [[str(Path(run).relative_to(root)) for run in seeded] for seeded in runs]
    left_out = "" if all(seeds_of[s] == set(seeds) for s in systems) else (
        f" Seeds not every system has are left out ({_seeds_text(seeds_of)})."
    )
    if len(seeds) == 1:
        firsts = [seeded[0] for seeded in runs]
        table = overall_markdown(compare(firsts)["overall"], display_names(firsts))
        command = " ".join(run[0] for run in relative)
        title = f"Paired against {baseline} on the same questions, seed {seeds[0]}"
    else:
        table = seeds_markdown(compare_seeds(runs), runs)
        command = " ".join(",".join(seeded) for seeded in relative)
        title = f"Paired against {baseline} over fine-tuning seeds {', '.join(map(str, seeds))}"
    return f"{title} (per dataset: `realm compare {command}` in this folder).{left_out}\n\n{table}"


def _seeds_text(seeds_of: dict[str, set[int]]) -> str:
    return "; ".join(f"{system}: {', '.join(map(str, sorted(seeds)))}" for system, seeds in seeds_of.items())


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    systems = list(dict.fromkeys(r["system"] for r in rows))
    datasets = sorted({r["dataset"] for r in rows})
    seeded = defaultdict(list)
    for r in rows:
        seeded[r["system"], r["dataset"]].append(r["exact_match"])
    value = {key: sum(ems) / len(ems) for key, ems in seeded.items()}  # a system's bar: the mean over its seeds
    width = 0.8 / max(len(datasets), 1)
    figure, axis = pyplot.subplots(figsize=(max(6, 1.3 * len(systems)), 3.6))
    for offset, dataset in enumerate(datasets):
        axis.bar([i + offset * width for i in range(len(systems))],
                 [value.get((s, dataset), 0.0) for s in systems], width, label=dataset)
    axis.set_xticks([i + width * (len(datasets) - 1) / 2 for i in range(len(systems))])
    axis.set_xticklabels(systems, rotation=25, ha="right", fontsize=8)
    axis.set_ylabel("exact match" if all(len(ems) == 1 for ems in seeded.values()) else "exact match, mean over seeds")
    axis.legend(fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
