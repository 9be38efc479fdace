"""Step directories published by rename, as REALM's `refresh_doc_embeds.py` commits an index,
each carrying a manifest that readers check before they trust it.

A writer fills `<root>/.tmp-<step>-<pid>/`; `publish` writes `manifest.json` into it last
(every file's relative path, size in bytes and sha256, what the writer adds, and the step
directories the new one `uses`), then renames the directory to `<root>/<step>/`. A rename
within one filesystem is atomic, so a reader listing `<root>` sees a step either complete or
not at all. Files can still go bad after the rename (a disk that filled up, a copy cut short,
a flipped bit): `latest_verified` gives the newest step whose files match its manifest,
warning about each newer one that does not, so a run resumes from the step before a damaged one.

Retention: after a publish, only the newest `keep` steps are kept, plus any step a manifest
elsewhere in the run names in its `uses` (an index a checkpoint was trained against, the
checkpoint a later stage started from).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from realm.schemas.manifest import MANIFEST_FILE, IntegrityError, file_sha256, read_manifest, verify_step

log = logging.getLogger(__name__)


def staging_dir(root: str | os.PathLike, step: int) -> Path:
    """A fresh, empty `<root>/.tmp-<step>-<pid>/` to write a step into."""
    path = Path(root) / f".tmp-{step}-{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def publish(
    staging: Path,
    root: str | os.PathLike,
    step: int,
    keep: int | None = None,
    *,
    uses: Iterable[str | os.PathLike] = (),
    metadata: dict | None = None,
) -> Path:
    """Write the manifest into `staging` (with `metadata` and the step directories it `uses`),
    rename it to `<root>/<step>/` (replacing a previous publish of the same step) and, with
    `keep`, remove older steps (`prune`)."""
    write_manifest(staging, uses, metadata or {})
    target = Path(root) / str(step)
    replace_dir(staging, target)  # a resumed run re-publishing a step replaces it
    if keep is not None:
        prune(root, step, keep)
    return target


def replace_dir(new: Path, target: Path) -> None:
    """Rename `new` to `target`, moving an existing `target` aside first (rename cannot replace
    a non-empty directory) and deleting it after, so `target` is never half of either."""
    if target.exists():
        retired = target.with_name(f".old-{target.name}-{os.getpid()}")
        os.rename(target, retired)
        os.rename(new, target)
        shutil.rmtree(retired)
    else:
        os.rename(new, target)


def write_manifest(staging: Path, uses: Iterable[str | os.PathLike], metadata: dict) -> None:
    files = {
        path.relative_to(staging).as_posix(): {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(staging.rglob("*"))
        if path.is_file() and path.name != MANIFEST_FILE
    }
    # Relative to the step directory (the staging dir sits beside it, at the same depth), so
    # a run folder moved elsewhere still names what it uses.
    used = [os.path.relpath(os.path.abspath(path), os.path.abspath(staging)) for path in uses]
    manifest = {**metadata, "files": files, "uses": used}
    (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))


def record_files(directory: str | os.PathLike, names: Iterable[str]) -> None:
    """Add or update the size and sha256 of each of `names` in `<directory>/manifest.json`,
    for a directory whose files are written one at a time (`predictions/<dataset>.parquet`);
    `verify_step` then checks them as it checks a published step's. The manifest is replaced
    by rename, never half written; a damaged one is an `IntegrityError`, not overwritten."""
    directory = Path(directory)
    manifest = read_manifest(directory) if (directory / MANIFEST_FILE).is_file() else {"files": {}, "uses": []}
    for name in names:
        path = directory / name
        manifest["files"][name] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    staged = directory / f".{MANIFEST_FILE}.tmp-{os.getpid()}"
    staged.write_text(json.dumps(manifest, indent=2))
    os.replace(staged, directory / MANIFEST_FILE)


def prune(root: str | os.PathLike, step: int, keep: int) -> None:
    """Remove the steps of `root` older than the newest `keep` up to `step`, except those a
    manifest under `root`'s parent (the run root for index/ and embeddings/, checkpoints/ for
    a stage's checkpoints) `uses`. Steps after `step` are left alone: they are newer ones a
    resumed run fell back from (damaged), which it will publish again."""
    kept_or_older = [path for number, path in published_steps(root) if number <= step]
    in_use = used_step_dirs(Path(root).parent)
    for path in kept_or_older[:-keep]:
        if path.resolve() not in in_use:
            shutil.rmtree(path, ignore_errors=True)


def used_step_dirs(search_root: Path) -> set[Path]:
    """Every step directory a manifest under `search_root` names in its `uses`, resolved."""
    used = set()
    for manifest_path in search_root.rglob(MANIFEST_FILE):
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # a damaged manifest protects nothing; its own step is skipped by readers
        uses = manifest.get("uses") if isinstance(manifest, dict) else None
        for path in uses if isinstance(uses, list) else ():  # a manifest of another shape protects nothing either
            try:
                used.add((manifest_path.parent / path).resolve())
            except (TypeError, ValueError, RuntimeError, OSError):  # not a path, a NUL in it, a symlink loop
                continue
    return used


def published_steps(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every published step directory, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((int(entry.name), entry) for entry in root.iterdir() if entry.is_dir() and entry.name.isdigit())


def step_damage(
    path: str | os.PathLike, legacy_marker: str | None = None, *, contents: bool = True
) -> IntegrityError | None:
    """Why the step at `path` is not whole, or None when it is: its manifest is missing or does
    not parse, or a file it lists is missing, of another size or (with `contents`) another
    hash. A step without a manifest is whole when `legacy_marker` is given and the step holds
    that file: older realm wrote no manifest but wrote that file last, so its presence still
    marks a complete step and runs begun before manifests existed keep resuming."""
    path = Path(path)
    if legacy_marker is not None and not (path / MANIFEST_FILE).is_file() and (path / legacy_marker).is_file():
        return None
    try:
        verify_step(path, contents=contents)
    except IntegrityError as problem:
        return problem
    return None


def latest_verified(root: str | os.PathLike, legacy_marker: str | None = None) -> Path | None:
    """The newest `<root>/<step>/` that is whole by `step_damage`, or None. A newer step
    without a manifest (one a writer never published) is skipped silently, any other damaged
    one with a warning naming the file."""
    for _, path in reversed(published_steps(root)):
        problem = step_damage(path, legacy_marker)
        if problem is None:
            return path
        if (path / MANIFEST_FILE).is_file():
            log.warning("%s; falling back to an older step", problem)
    return None
