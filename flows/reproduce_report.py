"""The reproduction table: `results.parquet` (schema `REPRODUCTION_RESULTS`), `results.md`,
`results.png` and the same table as Prefect artifacts. An invocation that trains some of the
systems (`ReproduceParams.systems`) keeps the rows an earlier one published for the others,
when they trained under the same settings."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from realm.flows.reproduce_systems import SYSTEMS

RESULTS_FILE = "results.parquet"


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
    """`rows` with the systems in the table's order (`SYSTEMS`)."""
    return sorted(rows, key=lambda row: SYSTEMS.index(row["system"]))


def publish_results(rows: list[dict], root: Path, repeated: dict[str, str]) -> None:
    """results.parquet, results.md, results.png under `root`, and the table as artifacts, the
    systems in the table's order; `repeated`: the systems left untrained because they would
    repeat another row, with why."""
    from realm.schemas import REPRODUCTION_RESULTS, write_table

    rows = table_rows(rows)
    write_table(str(root / RESULTS_FILE), rows, REPRODUCTION_RESULTS)
    markdown = results_markdown(rows, repeated)
    (root / "results.md").write_text(markdown + "\n", encoding="utf-8")
    _plot(rows, root / "results.png")
    create_table_artifact(key="realm-reproduce-results", table=rows, description="REALM vs ORQA vs BM25, per dataset")
    create_markdown_artifact(key="realm-reproduce-table", markdown=markdown, description="the reproduction table")


def results_markdown(rows: list[dict], repeated: dict[str, str]) -> str:
    """One line per system: EM, reader accuracy and recall@5 per dataset, zero-shot recall@5,
    wall time, seed; then the systems not trained because they would repeat another row."""
    datasets = sorted({r["dataset"] for r in rows})
    by_system: dict[str, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        by_system[row["system"]][row["dataset"]] = row
    header = ["system"] + [f"{d} EM" for d in datasets] + [f"{d} reader acc." for d in datasets]
    header += [f"{d} R@5" for d in datasets]
    header += [f"{d} zero-shot R@5" for d in datasets] + ["train time", "seed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for system, cells in by_system.items():
        first = next(iter(cells.values()))
        values = [system]
        for key in ("exact_match", "reader_accuracy", "recall_at_5", "zero_shot_recall_at_5"):
            values += [_cell(cells.get(d, {}).get(key)) for d in datasets]
        values += [f"{first['train_seconds'] / 60:.0f} min", str(first["seed"])]
        lines.append("| " + " | ".join(values) + " |")
    counts = ", ".join(f"{d}: {next(r['n'] for r in rows if r['dataset'] == d)} questions" for d in datasets)
    skipped = "".join(f"\n- {system} {reason}." for system, reason in repeated.items())
    return "\n".join(lines) + f"\n\n{counts}." + (f"\n\nNot trained:{skipped}" if skipped else "")


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    systems = list(dict.fromkeys(r["system"] for r in rows))
    datasets = sorted({r["dataset"] for r in rows})
    value = {(r["system"], r["dataset"]): r["exact_match"] for r in rows}
    width = 0.8 / max(len(datasets), 1)
    figure, axis = pyplot.subplots(figsize=(max(6, 1.3 * len(systems)), 3.6))
    for offset, dataset in enumerate(datasets):
        axis.bar([i + offset * width for i in range(len(systems))],
                 [value.get((s, dataset), 0.0) for s in systems], width, label=dataset)
    axis.set_xticks([i + width * (len(datasets) - 1) / 2 for i in range(len(systems))])
    axis.set_xticklabels(systems, rotation=25, ha="right", fontsize=8)
    axis.set_ylabel("exact match")
    axis.legend(fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
