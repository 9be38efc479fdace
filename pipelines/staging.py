"""Building a run's artifacts aside and swapping them in only once the pipeline has succeeded.

A pipeline writes into `<output>/.staging-<name>-<pid>/`; when it has finished, each staged
artifact directory replaces the run's (the old one deleted whole, with anything Beam left in
it) unless the run's holds the same rows already (then it stays as it was, files and all, so
nothing keyed on it changes), and each staged file replaces the run's file. Each staged
artifact gets a manifest first (`realm.schemas.manifest`): its files' sizes and sha256, which
readers check, and its rows (count and hash sum per file prefix, `realm.schemas.rows_digest`)
where the pipeline summed them for every file prefix there, so a stage keyed on the artifact
knows the same rows written in other shards as the same
(`realm.model.training.stage_inputs.content_digest`). A pipeline that fails before that
leaves the run exactly as it was, and the staging directory is removed either way. A single
stage run on its own (`realm.pipelines.execution.run_single_stage`) shares `dead_letter/`
with the stages before it: it replaces only its own shards there (`replace_shards`), and the
directory's manifest keeps listing the others'. Everything goes through Beam's
`FileSystems`, so a `gs://` run root works as a local one does (its artifacts are always
replaced).

Inputs inside the run are safe: the pipeline has read them to the end before anything is
replaced, so `prepare --corpus documents --input RUN/documents/*.parquet --output RUN` and
`--knowledge_blocks RUN/blocks` read the run's previous artifacts.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from realm.pipelines.artifacts import ROWS_FILE_SUFFIX, rows_file
from realm.schemas.io import parquet_files_under, read_validated, shard_prefix
from realm.schemas.leftovers import remove_leftovers
from realm.schemas.manifest import MANIFEST_FILE, IntegrityError, stream_sha256, verify_step
from realm.schemas.rows_digest import ROWS_KEY, rows_digest, rows_entry_of

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
    """`<staging>/<artifact>/manifest.json` for each of `artifacts`: every file's size and
    sha256, and the rows entries `WriteArtifact` left beside them (taken in and removed)."""
    for artifact in artifacts:
        directory = FileSystems.join(staging, artifact)
        rows = _take_rows_files([m.path for m in _files(directory, f"*{ROWS_FILE_SUFFIX}")])
        _write_manifest(directory, _listing(_files(directory)), rows)


def move_into_place(staging: str, output: str, artifacts: dict[str, pa.Schema], files: list[str]) -> list[str]:
    """Replace `<output>/<artifact>/` by the staged directory's files, for each of `artifacts`
    (name: schema) whose rows differ from the run's, and `<output>/<file>` by the staged file,
    for each of `files` (paths relative to the run); the names of the artifacts left as they
    were, holding the staged rows already (`_holds_the_same_rows`)."""
    # Every artifact is looked at before any is replaced: one that cannot be read ends nothing half done.
    kept = [name for name, schema in artifacts.items()
            if _holds_the_same_rows(FileSystems.join(output, name), FileSystems.join(staging, name), schema)]
    for artifact in [name for name in artifacts if name not in kept]:
        staged = [m.path for m in _files(FileSystems.join(staging, artifact))]
        target = FileSystems.join(output, artifact)
        _remove_tree(target)
        _make_dirs(target)
        FileSystems.rename(staged, [FileSystems.join(target, FileSystems.split(path)[1]) for path in staged])
    for file in files:
        target = FileSystems.join(output, file)
        _make_dirs(FileSystems.split(target)[0])
        FileSystems.rename([FileSystems.join(staging, file)], [target])
    return kept


def _holds_the_same_rows(target: str, staged: str, schema: pa.Schema) -> bool:
    """Whether the run's artifact `target`, a local directory whose files are the ones its
    manifest lists and undamaged, holds the rows of the `staged` one: compared by their rows
    digests, or, where an older realm wrote `target` and recorded none, by hashing its rows as
    WriteArtifact does (one that no longer reads through `schema` is not). Keeping it then keeps
    its files' digests, which every stage and cached result after it may be keyed on (an older
    manifest's are its files'); an object store's artifact is always replaced."""
    if not os.path.isfile(os.path.join(target, MANIFEST_FILE)):
        return False
    with FileSystems.open(FileSystems.join(staged, MANIFEST_FILE), compression_type="uncompressed") as handle:
        staged_rows = json.loads(handle.read().decode("utf-8")).get(ROWS_KEY)
    if staged_rows is None:
        return False
    try:
        listed = verify_step(target)
        # Every Parquet file a reader would read is one it lists.
        present = parquet_files_under(target)
        if {os.path.relpath(path, target) for path in present} != {
            name for name in listed.get("files", {}) if name.endswith(".parquet")
        }:
            return False
        rows = listed.get(ROWS_KEY) or {
            path: rows_entry_of(read_validated(path, schema).to_pylist(), schema.names) for path in present
        }
    except (IntegrityError, ValueError, OSError):  # damaged, or not of this schema (ArtifactError): replaced
        return False
    return rows_digest(rows) == rows_digest(staged_rows)


def replace_shards(staging: str, output: str, artifact: str, prefix: str) -> None:
    """Replace the `<prefix>-*` files of `<output>/<artifact>/` by those staged in
    `<staging>/<artifact>/`, leaving its other files; its manifest lists the new files and
    what it listed of the others (one written by an older realm may list none)."""
    target = FileSystems.join(output, artifact)
    before = {FileSystems.split(m.path)[1]: m.path for m in _files(target)}
    manifest = {}
    if MANIFEST_FILE in before:
        with FileSystems.open(before[MANIFEST_FILE], compression_type="uncompressed") as handle:
            manifest = json.loads(handle.read().decode("utf-8"))
    old = [path for name, path in before.items() if name.startswith(f"{prefix}-")]
    if old:
        FileSystems.delete(old)
    staged = _files(FileSystems.join(staging, artifact), f"{prefix}-*")
    _make_dirs(target)
    FileSystems.rename([m.path for m in staged], [FileSystems.join(target, FileSystems.split(m.path)[1]) for m in staged])
    kept = {name: entry for name, entry in manifest.get("files", {}).items() if not name.startswith(f"{prefix}-")}
    staged_rows = rows_file(FileSystems.join(staging, artifact), prefix)
    rows = _take_rows_files([staged_rows] if FileSystems.exists(staged_rows) else [])
    kept_rows = {name: entry for name, entry in (manifest.get(ROWS_KEY) or {}).items() if name != prefix}
    _write_manifest(target, kept | _listing(_files(target, f"{prefix}-*")), kept_rows | rows)


def _take_rows_files(paths: list[str]) -> dict[str, dict]:
    """{file prefix: rows entry} of the `<prefix>.rows.json` files at `paths`, which are removed."""
    rows = {}
    for path in paths:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            rows[FileSystems.split(path)[1][: -len(ROWS_FILE_SUFFIX)]] = json.loads(handle.read().decode("utf-8"))
    if paths:
        FileSystems.delete(paths)
    return rows


def _listing(matches: list) -> dict[str, dict]:
    """{file name: {"size", "sha256"}} of each of `matches` (FileSystems metadata)."""
    files = {}
    for match in sorted(matches, key=lambda m: m.path):
        with FileSystems.open(match.path, compression_type="uncompressed") as handle:
            files[FileSystems.split(match.path)[1]] = {"size": match.size_in_bytes, "sha256": stream_sha256(handle)}
    return files


def _write_manifest(directory: str, files: dict[str, dict], rows: dict[str, dict]) -> None:
    """The manifest of `files`, with `rows` where they are those of exactly the shards' prefixes
    (rows that miss a prefix, as a manifest an older realm wrote records none, would tell a
    stage the artifact holds fewer rows than it does)."""
    manifest = {"files": dict(sorted(files.items()))}
    prefixes = {shard_prefix(name) for name in files}
    if rows and prefixes == rows.keys():
        manifest[ROWS_KEY] = dict(sorted(rows.items()))
    # Written aside and renamed over the old one: rewritten in place, a crash would leave half a
    # manifest, and a run copied with hard links (as the tests copy one) would see its copy's change.
    path = FileSystems.join(directory, MANIFEST_FILE)
    aside = f"{path}.tmp-{os.getpid()}"
    with FileSystems.create(aside) as handle:
        handle.write(json.dumps(manifest, indent=2).encode("utf-8"))
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
