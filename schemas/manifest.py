"""Manifests: every file of a directory with its size and sha256, written last, checked by readers.

A published step (`realm.model.publish`: checkpoints, indexes, embeddings), a prepared
artifact (`realm prepare` writes one into each artifact directory once the pipeline has
succeeded) and `predictions/` carry `manifest.json`: `{"files": {relative path: {"size",
"sha256"}}, ...}` plus what the writer adds (a prepared artifact: its rows per file prefix,
`realm.schemas.rows_digest`). `verify_step` checks a directory against it and
names the first file that is missing, of another size or altered. A file can go bad after it
was written (a disk that filled up, a copy cut short, a flipped bit), and an uncompressed
Parquet page with flipped bytes still reads, as other text or other token ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import BinaryIO

from realm.schemas.rows_digest import ROWS_KEY

MANIFEST_FILE = "manifest.json"


class IntegrityError(RuntimeError):
    """A directory whose files do not match its manifest, or that has none."""


def read_manifest(directory: str | os.PathLike) -> dict:
    """The manifest of `directory`; `IntegrityError` naming it if it has none, it does not
    parse, or it is not an object listing files, each with its sha256."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise IntegrityError(f"{directory}: no {MANIFEST_FILE}; not a published step")
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise IntegrityError(f"{path}: does not parse ({error})") from None
    # A manifest that lists nothing would vouch for any directory.
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files", manifest.get("sha256")), dict):
        raise IntegrityError(f"{path}: not a manifest (no object of files)")
    for name, listed in _listed_files(manifest).items():
        if not isinstance(listed.get("sha256") if isinstance(listed, dict) else None, str):
            raise IntegrityError(f"{path}: {name!r} is listed without its sha256")
    rows = manifest.get(ROWS_KEY, {})
    if not isinstance(rows, dict) or not all(_is_rows_entry(entry) for entry in rows.values()):
        raise IntegrityError(f"{path}: {ROWS_KEY!r} is not a row count and hash sum per file prefix")
    return manifest


def _is_rows_entry(entry) -> bool:
    return (
        isinstance(entry, dict) and type(entry.get("count")) is int
        and isinstance(entry.get("sum"), str) and re.fullmatch("[0-9a-f]+", entry["sum"]) is not None
    )


def verify_step(directory: str | os.PathLike, *, contents: bool = True) -> dict:
    """The manifest of `directory` once every file it lists is there with its size and sha256
    (without `contents`, its size only: a stat per file, for reports that read no weights);
    else `IntegrityError` naming the first file that is not and what is wrong with it."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    files = _listed_files(manifest)
    # Sizes first: a stat per file finds a truncated or missing file before any hashing.
    for name, listed in files.items():
        path = directory / name
        if not path.is_file():
            raise IntegrityError(f"{path}: missing, {MANIFEST_FILE} lists it")
        size = path.stat().st_size
        if "size" in listed and size != listed["size"]:
            raise IntegrityError(f"{path}: size {size}, {MANIFEST_FILE} says {listed['size']}")
    for name, listed in files.items() if contents else ():
        if file_sha256(directory / name) != listed["sha256"]:
            raise IntegrityError(f"{directory / name}: sha256 does not match {MANIFEST_FILE} (corrupt)")
    return manifest


def _listed_files(manifest: dict) -> dict:
    if "files" in manifest:
        return manifest["files"]
    # Indexes published before sizes were recorded list their files' sha256 alone.
    return {name: {"sha256": digest} for name, digest in manifest.get("sha256", {}).items()}


def file_sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as handle:
        return stream_sha256(handle)


def stream_sha256(handle: BinaryIO) -> str:
    """The sha256 of what `handle` reads to its end (a local file, or Beam's `FileSystems.open`)."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()
