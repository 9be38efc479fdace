"""Stage results cached with the run, as plain JSON: `<root>/.realm-cache/<task>-<key>.json`.

Expensive, deterministic stages (corpus preparation, whole training stages, evaluation) are
skipped on a re-run with the same inputs and the same code: the key hashes the task's source,
its arguments and the content of the files it `reads` (question files, the corpus, the
checkpoint and index it starts from: `realm.model.training.stage_inputs.content_digest`), so a
file edited in place is a new input. Evaluation keys on all of realm's code too
(`CODE_DIGESTS["realm"]`): its result depends on the reader and answering code its task
calls, and it costs seconds to minutes, so after a change it answers again rather than serve
answers from before it. Preparation keys on the code it runs (`CODE_DIGESTS["prepare"]`: the
pipelines, the schemas, the tokenizer; not the tokenizer's files or installed packages), so
an edit to how blocks or examples are made prepares the corpus again instead of training on
artifacts from before it. Where the rows come out the same, no stage after it trains again
for it: a prepared artifact is read as its rows, not its bytes (its manifest's rows digest,
`realm.schemas.rows_digest`; Beam splits the same rows among shards otherwise from run to
run), and one whose rows did not change is left as it was (`realm.pipelines.staging`), so
every later stage's cached result and checkpoints stay in use. Training keys on its task
alone: a training stage run again resumes from its own checkpoints whatever the code. A
result is reused only while what the stage `writes` (its checkpoints, the prepared
artifacts) holds what it held when the result was cached: a stage run since on other inputs
replaced them, and the stage runs again. A stage that runs again because a file it reads (or
the code it keys on) changed says so (against the task's newest cached result); a file
outside the machine (`gs://...`) is read through Beam's file systems. Paths inside the run
are recorded relative to it, in the key and in the result, so a run folder copied or moved
elsewhere hits its cache and gets paths inside the copy.

Prefect's own result persistence is not used: it pickles results and unpickles them on a
cache hit, so anyone able to write a run folder could run code as whoever runs the flow next.
Here an entry is read with `json.loads` only; one that does not parse, or was written by an
older realm, is reported and the stage runs again (it resumes from its own checkpoints).
Deleting a run deletes its cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from realm.model.publish import MANIFEST_FILE
from realm.model.training.stage_inputs import content_digest, json_digest
from realm.schemas.manifest import IntegrityError, stream_sha256, verify_step
from realm.schemas.run_layout import RunLayout

CACHE_DIR = ".realm-cache"
# How a path inside the run is written in a key or a cached result: "$RUN/checkpoints/ict/40".
RUN_ROOT = "$RUN"
# realm's top-level packages (pyproject.toml's): the code evaluation is keyed on.
REALM_PACKAGES = ("realm.cli", "realm.flows", "realm.model", "realm.pipelines", "realm.schemas")
# What preparation runs: the Beam pipelines, the schemas they write through, and the two
# modules of the model side they import (the tokenizer that makes wordpieces, the progress meter).
PREPARE_MODULES = ("realm.pipelines", "realm.schemas", "realm.model.tokenization", "realm.model.progress")


def cached_in_run(
    task,
    layout: RunLayout,
    reads: Iterable[str | os.PathLike | None] = (),
    writes: Iterable[str | os.PathLike] = (),
    code: Literal["realm", "prepare"] | None = None,
) -> Callable[..., dict]:
    """`task`, skipped when the run holds its JSON result for these arguments, this code (the
    task's source, and with `code` every module of `CODE_DIGESTS[code]`) and the content of
    `reads` (None entries are skipped), and `writes` are as that result left them. A miss
    returns the result as a hit would (JSON round-tripped)."""
    uncached = task.with_options(cache_policy=NO_CACHE, persist_result=False)
    root = layout.root
    reads, writes = [path for path in reads if path is not None], list(writes)

    def run(*args, **kwargs) -> dict:
        contents = read_digests(reads, root)
        digest = CODE_DIGESTS[code] if code else None
        key = cache_key(task.fn, args, kwargs, root, contents, digest)
        path = root / CACHE_DIR / f"{task.name}-{key}.json"
        logger = get_run_logger()
        if path.is_file():
            entry = _read_entry(path)
            if entry is None:
                logger.warning("%s: unreadable cached result %s; running the stage again", task.name, path)
            elif entry["writes"] != _writes_digest(writes, root):
                logger.info("%s: its outputs changed since %s was cached; running the stage again", task.name, path)
            else:
                logger.info("%s: done before with these inputs and code; result from %s", task.name, path)
                return _in_run(entry["result"], root)
        elif changes := _changed_reads(root, task.name, contents, digest):
            logger.info("%s: %s since its last cached run; running the stage again", task.name, "; ".join(changes))
        result = _in_cache(json.loads(json.dumps(uncached(*args, **kwargs), default=_plain)), root)
        entry = {"result": result, "writes": _writes_digest(writes, root), "reads": contents}
        if digest is not None:
            entry["code"] = digest
        write_atomically(path, json.dumps(entry, indent=1))
        return _in_run(result, root)

    return run


def cache_key(fn: Callable, args: tuple, kwargs: dict, root: Path, contents: dict[str, str], code: str | None) -> str:
    """sha256 of the function's source, its arguments (pydantic models by their JSON), the
    content digests of what it reads (`read_digests`), paths inside `root` written relative to
    it, and `code` (one of `CODE_DIGESTS`) where given."""
    arguments = json.loads(json.dumps([list(args), kwargs], default=_plain))
    keyed = [inspect.getsource(fn), _in_cache(arguments, root), contents] + ([code] if code is not None else [])
    return json_digest(keyed)[:32]


def source_digest(modules: Iterable[str]) -> str:
    """sha256 of every Python file of `modules` (importable names: a package's files, each by
    its path inside it, or a module's one file) and their bytes."""
    digest = hashlib.sha256()
    for module in modules:
        spec = importlib.util.find_spec(module)
        directories = spec.submodule_search_locations
        files = [(Path(d), p) for d in directories for p in sorted(Path(d).rglob("*.py"))] if directories else [
            (Path(spec.origin).parent, Path(spec.origin))]
        for directory, path in files:
            digest.update(f"{module}/{path.relative_to(directory).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# Hashed when the flows are imported, before any stage runs (a few ms), so an edit made during
# a long run does not key that run's stages on code it did not start with.
CODE_DIGESTS = {"realm": source_digest(REALM_PACKAGES), "prepare": source_digest(PREPARE_MODULES)}


def read_digests(reads: Iterable[str | os.PathLike], root: Path) -> dict[str, str]:
    """{path (inside `root` as `$RUN/...`): sha256 of its content} of each of `reads`."""
    return {_in_cache(str(path), root): _remote_digest(str(path)) if "://" in str(path) else content_digest(path)
            for path in reads}


def _remote_digest(url: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(url, compression_type="uncompressed") as handle:
        return stream_sha256(handle)


def _changed_reads(root: Path, task_name: str, contents: dict[str, str], code: str | None) -> list[str]:
    """What differs between `contents` and the reads of the task's newest cached result, one
    phrase per file ("x.jsonl changed", "y.jsonl new", "z.jsonl gone"), and "its code changed"
    where `code` is keyed on and that result recorded other code, or none."""
    entries = [p for p in (root / CACHE_DIR).glob(f"{task_name}-*.json") if len(p.stem) == len(task_name) + 33]
    newest = max(entries, key=lambda p: p.stat().st_mtime_ns, default=None)
    entry = (_read_entry(newest) or {}) if newest else {}
    before = entry.get("reads")
    if before is None:
        return []
    changes = [
        f"{path} {'new' if path not in before else 'gone' if path not in contents else 'changed'}"
        for path in sorted(before.keys() | contents.keys())
        if before.get(path) != contents.get(path)
    ]
    return changes + (["its code changed"] if code is not None and entry.get("code") != code else [])


def _writes_digest(writes: Iterable[str | os.PathLike], root: Path) -> dict[str, str | None]:
    """Per written directory, sha256 of the manifests published under it, each with whether
    the files it lists are still there at their sizes (None: the directory is gone)."""
    digests = {}
    for directory in map(Path, writes):
        manifests = sorted(directory.rglob(MANIFEST_FILE)) if directory.is_dir() else None
        digests[_in_cache(str(directory), root)] = None if manifests is None else json_digest(
            {p.relative_to(directory).as_posix(): _manifest_state(p) for p in manifests}
        )
    return digests


def _manifest_state(manifest: Path) -> str:
    """The manifest's text, or how the files it lists no longer match it (a stat each): a
    result whose output files were deleted or replaced is not a cache hit."""
    try:
        verify_step(manifest.parent, contents=False)
    except IntegrityError as problem:
        return f"damaged: {problem}"
    return manifest.read_text()


def _read_entry(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    # Entries written before the reads' digests (or the code's) were recorded have no "reads" ("code").
    return entry if isinstance(entry, dict) and entry.keys() - {"reads", "code"} == {"result", "writes"} else None


def _in_cache(value, root: Path):
    """`value` (plain JSON) with every absolute path inside `root` written as `$RUN/...`."""

    def relative(text: str) -> str:
        if not os.path.isabs(text):
            return text
        inside = os.path.relpath(text, root)
        if inside == ".":
            return RUN_ROOT
        return text if inside == ".." or inside.startswith(".." + os.sep) else f"{RUN_ROOT}/{Path(inside).as_posix()}"

    return _each_string(value, relative)


def _in_run(value, root: Path):
    """`_in_cache` undone against the run's `root` now."""

    def absolute(text: str) -> str:
        if text == RUN_ROOT:
            return str(root)
        return str(root / text[len(RUN_ROOT) + 1 :]) if text.startswith(RUN_ROOT + "/") else text

    return _each_string(value, absolute)


def _each_string(value, convert: Callable[[str], str]):
    """`value` (plain JSON) with `convert` applied to each string in it, keys included."""
    if isinstance(value, dict):
        return {_each_string(key, convert): _each_string(item, convert) for key, item in value.items()}
    if isinstance(value, list):
        return [_each_string(item, convert) for item in value]
    return convert(value) if isinstance(value, str) else value


def _plain(value):
    """JSON for what the stages pass and return beyond JSON's own types."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON: stage arguments and results must be plain data")


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` whole: a reader sees the old file or the new, never part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)
