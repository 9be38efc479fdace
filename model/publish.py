"""Step directories published by rename, as REALM's `refresh_doc_embeds.py` commits an index.

A writer fills `<root>/.tmp-<step>-<pid>/`, writes its marker file (manifest or training
state) last, then renames the directory to `<root>/<step>/`. A rename within one filesystem
is atomic, so a reader listing `<root>` sees a step either complete or not at all; readers
also skip any step directory without its marker. Old steps beyond `keep` are removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def staging_dir(root: str | os.PathLike, step: int) -> Path:
    """A fresh, empty `<root>/.tmp-<step>-<pid>/` to write a step into."""
    path = Path(root) / f".tmp-{step}-{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def publish(staging: Path, root: str | os.PathLike, step: int, keep: int | None = None) -> Path:
    """Rename `staging` to `<root>/<step>/` (replacing a previous publish of the same step)
    and delete all but the newest `keep` published steps."""
    target = Path(root) / str(step)
    if target.exists():
        # Re-publishing a step (a resumed run redoing it): move the old one aside first,
        # since rename cannot replace a non-empty directory.
        retired = Path(root) / f".old-{step}-{os.getpid()}"
        os.rename(target, retired)
        os.rename(staging, target)
        shutil.rmtree(retired)
    else:
        os.rename(staging, target)
    if keep is not None:
        for _, old in published_steps(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return target


def published_steps(root: str | os.PathLike, marker: str | None = None) -> list[tuple[int, Path]]:
    """(step, path) of every published step directory, oldest first; with `marker`, only
    those that contain that file."""
    root = Path(root)
    if not root.is_dir():
        return []
    steps = []
    for entry in root.iterdir():
        if entry.is_dir() and entry.name.isdigit() and (marker is None or (entry / marker).is_file()):
            steps.append((int(entry.name), entry))
    return sorted(steps)


def latest_step_dir(root: str | os.PathLike, marker: str) -> Path | None:
    """The newest published step directory holding `marker`, or None."""
    steps = published_steps(root, marker)
    return steps[-1][1] if steps else None
