"""Building a run's artifacts aside and swapping them in only once the pipeline has succeeded.

A pipeline writes into `<output>/.staging-<name>-<pid>/`; when it has finished, each staged
artifact directory replaces the run's (the old one deleted whole, with anything Beam left in
it) and each staged file replaces the run's file. Each staged artifact gets a manifest of its
files' sizes and sha256 first (`realm.schemas.manifest`), which readers check. A pipeline
that fails before that leaves the run exactly as it was, and the staging directory is
removed either way. A single stage run on its own (`realm.pipelines.execution.run_single_stage`)
shares `dead_letter/` with the stages before it: it replaces only its own shards there
(`replace_shards`), and the directory's manifest keeps listing the others'. Everything goes
through Beam's `FileSystems`, so a `gs://` run root works as a local one does.

Inputs inside the run are safe: the pipeline has read them to the end before anything is
replaced, so `prepare --corpus documents --input RUN/documents/*.parquet --output RUN` and
`--knowledge_blocks RUN/blocks` read the run's previous artifacts.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

from apache_beam.io.filesystems import FileSystems

from realm.schemas.leftovers import remove_leftovers
from realm.schemas.manifest import MANIFEST_FILE, stream_sha256

STAGING_PREFIX = ".staging-"


@contextlib.contextmanager
def staged_output(output: str, name: str) -> Iterator[str]:
    """A fresh `<output>/.staging-<name>-<pid>/` to build into, removed when the block ends."""
    staging = FileSystems.join(output, f"{STAGING_PREFIX}{name}-{os.getpid()}")
    remove_leftovers(output)  # a killed run's staging directory (a local output; os.walk skips gs://)
    _remove_tree(staging)  # left by a killed run that had our pid
    try:
        yield staging
    finally:
        _remove_tree(staging)


def write_manifests(staging: str, artifacts: list[str]) -> None:
    """`<staging>/<artifact>/manifest.json` for each of `artifacts`: every file's size and sha256."""
    for artifact in artifacts:
        directory = FileSystems.join(staging, artifact)
        _write_manifest(directory, _listing(_files(directory)))


def move_into_place(staging: str, output: str, artifacts: list[str], files: list[str]) -> None:
    """Replace `<output>/<artifact>/` by the staged directory's files, for each of `artifacts`,
    and `<output>/<file>` by the staged file, for each of `files` (paths relative to the run)."""
    for artifact in artifacts:
        staged = [m.path for m in _files(FileSystems.join(staging, artifact))]
        target = FileSystems.join(output, artifact)
        _remove_tree(target)
        _make_dirs(target)
        FileSystems.rename(staged, [FileSystems.join(target, FileSystems.split(path)[1]) for path in staged])
    for file in files:
        target = FileSystems.join(output, file)
        _make_dirs(FileSystems.split(target)[0])
        FileSystems.rename([FileSystems.join(staging, file)], [target])


def replace_shards(staging: str, output: str, artifact: str, prefix: str) -> None:
    """Replace the `<prefix>-*` files of `<output>/<artifact>/` by those staged in
    `<staging>/<artifact>/`, leaving its other files; its manifest lists the new files and
    what it listed of the others (one written by an older realm may list none)."""
    target = FileSystems.join(output, artifact)
    before = {FileSystems.split(m.path)[1]: m.path for m in _files(target)}
    listed = {}
    if MANIFEST_FILE in before:
        with FileSystems.open(before[MANIFEST_FILE], compression_type="uncompressed") as handle:
            listed = json.loads(handle.read().decode("utf-8"))["files"]
    old = [path for name, path in before.items() if name.startswith(f"{prefix}-")]
    if old:
        FileSystems.delete(old)
    staged = _files(FileSystems.join(staging, artifact), f"{prefix}-*")
    _make_dirs(target)
    FileSystems.rename([m.path for m in staged], [FileSystems.join(target, FileSystems.split(m.path)[1]) for m in staged])
    kept = {name: entry for name, entry in listed.items() if not name.startswith(f"{prefix}-")}
    _write_manifest(target, kept | _listing(_files(target, f"{prefix}-*")))


def _listing(matches: list) -> dict[str, dict]:
    """{file name: {"size", "sha256"}} of each of `matches` (FileSystems metadata)."""
    files = {}
    for match in sorted(matches, key=lambda m: m.path):
        with FileSystems.open(match.path, compression_type="uncompressed") as handle:
            files[FileSystems.split(match.path)[1]] = {"size": match.size_in_bytes, "sha256": stream_sha256(handle)}
    return files


def _write_manifest(directory: str, files: dict[str, dict]) -> None:
    # Written aside and renamed over the old one: rewritten in place, a crash would leave half a
    # manifest, and a run copied with hard links (as the tests copy one) would see its copy's change.
    path = FileSystems.join(directory, MANIFEST_FILE)
    aside = f"{path}.tmp-{os.getpid()}"
    with FileSystems.create(aside) as handle:
        handle.write(json.dumps({"files": dict(sorted(files.items()))}, indent=2).encode("utf-8"))
    FileSystems.rename([aside], [path])


def _files(directory: str, pattern: str = "*") -> list:
    return FileSystems.match([FileSystems.join(directory, pattern)])[0].metadata_list


def _remove_tree(path: str) -> None:
    if FileSystems.get_filesystem(path).has_dirs():
        if FileSystems.exists(path):
            FileSystems.delete([path])
    else:  # an object store: a "directory" is a prefix, deleted whole when named with a trailing "/"
        FileSystems.delete([path.rstrip("/") + "/"])


def _make_dirs(path: str) -> None:
    if not FileSystems.exists(path):
        FileSystems.mkdirs(path)
