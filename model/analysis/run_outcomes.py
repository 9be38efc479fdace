"""What every comparison of runs starts from: each run's result files, read once its manifest
checks out, the runs' layouts, and the cells any comparison row carries (a paired test against
the first run, an accuracy with its interval)."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa

from realm.schemas.run_layout import RunLayout

log = logging.getLogger(__name__)


def read_results(directory: Path, schema: pa.Schema) -> dict[str, list[dict]] | None:
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


def run_layouts(run_roots: list[str]) -> list[RunLayout]:
    """The runs' layouts; refused naming a folder that does not exist or a run named twice."""
    layouts = [RunLayout.at(root) for root in run_roots]
    for i, layout in enumerate(layouts):
        if not layout.root.is_dir():
            raise FileNotFoundError(f"{run_roots[i]}: no such directory")
        if layout.root in (earlier := [other.root for other in layouts[:i]]):
            raise ValueError(f"{run_roots[i]} is {run_roots[earlier.index(layout.root)]} again; name each run once")
    return layouts


def require_predictions(run_roots: list[str], tables: list[dict[str, list[dict]]]) -> None:
    """Refused naming the first run that has no predictions."""
    if (lacking := next((root for root, table in zip(run_roots, tables) if not table), None)) is not None:
        raise FileNotFoundError(no_predictions(lacking))


def no_predictions(root: str) -> str:
    return f"{RunLayout.at(root).predictions}: no predictions (run `realm evaluate --run {root}` first)"


def shared_stems(run_roots: list[str], tables: list[dict[str, list[dict]]], what: str) -> list[str]:
    """The file stems every run has, sorted; refused when there are none, and each left out
    named with the runs that have it."""
    shared = sorted(set.intersection(*(set(table) for table in tables)))
    if not shared:
        raise ValueError(f"the runs {run_roots} evaluated no {what} in common")
    for stem in sorted(set.union(*(set(table) for table in tables)) - set(shared)):
        having = [root for root, table in zip(run_roots, tables) if stem in table]
        log.warning("%s %s left out: only %s evaluated it", what, stem, ", ".join(having))
    return shared


def paired_test(correct: list[bool], baseline: list[bool], is_baseline: bool) -> dict:
    """The exact McNemar test of `correct` against `baseline` (the same examples, in order)."""
    from realm.model.analysis.paired_stats import mcnemar_exact_p_value

    only_this = sum(a and not b for a, b in zip(correct, baseline))
    only_baseline = sum(b and not a for a, b in zip(correct, baseline))
    return {
        "only_this_right": None if is_baseline else only_this,
        "only_baseline_right": None if is_baseline else only_baseline,
        "p_value": None if is_baseline else mcnemar_exact_p_value(only_this, only_baseline),
    }


def accuracy_interval(correct: list[bool], key: str) -> dict:
    """{key, key_low, key_high}: the mean of `correct` and its bootstrap 95% interval."""
    from realm.model.analysis.paired_stats import bootstrap_interval

    low, high = bootstrap_interval(correct)
    return {key: sum(correct) / len(correct) if correct else None, f"{key}_low": low, f"{key}_high": high}
