"""What an index was built from, recorded in its manifest: the doc tower (checkpoint step and
the sha256 of its weights), the corpus snapshot (block count and a hash of its content), the
block length it embedded, and when; each shard of a sharded index, its own blocks and the
embeddings files it was built from. Block ids are hashes of a block's title and body
(`pipelines/chunk.py`), so the sorted ids fingerprint the corpus's content.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from realm.model.publish import file_sha256, read_manifest

WEIGHTS_FILE = "model.safetensors"  # what `save_pretrained` writes a tower's weights to


def doc_tower_fingerprint(doc_embedder_dir: str | os.PathLike, step: int) -> dict:
    return {"step": step, "sha256": file_sha256(Path(doc_embedder_dir) / WEIGHTS_FILE)}


def corpus_fingerprint(block_ids: np.ndarray) -> dict:
    ids = np.sort(np.asarray(block_ids, dtype="<i8"))
    return {"blocks": int(len(ids)), "content_sha256": hashlib.sha256(ids.tobytes()).hexdigest()}


def shard_lineage(block_ids: np.ndarray, embeddings_files: dict[str, str]) -> dict:
    """What one shard of an index holds, in its manifest entry: the fingerprint of its blocks
    and, when it was built from an embeddings artifact's files, their relative paths and sha256."""
    return {"corpus": corpus_fingerprint(block_ids), **({"embeddings": embeddings_files} if embeddings_files else {})}


def index_lineage(doc_tower: dict, block_ids: np.ndarray, max_block_wordpieces: int, **extra) -> dict:
    """The `lineage` an index's manifest records; `extra` adds what the builder knows besides
    (an incremental update's counts, the corpus's name)."""
    return {
        "doc_tower": doc_tower,
        "corpus": corpus_fingerprint(block_ids),
        "max_block_wordpieces": max_block_wordpieces,
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def read_lineage(index_path: str | os.PathLike) -> dict | None:
    """The lineage a published index records (None: built before lineage was recorded)."""
    return read_manifest(index_path).get("lineage")


def lineage_mismatches(
    index_path: str | os.PathLike, doc_tower: dict, block_ids: np.ndarray | None, max_block_wordpieces: int
) -> list[str]:
    """What the index at `index_path` was not built from, of "doc tower", "corpus" (not compared
    when `block_ids` is None) and "block length" ([] when it was built from all of them; all of
    them when it records no lineage)."""
    lineage = read_lineage(index_path) or {}
    built_from = {"doc tower": ("doc_tower", doc_tower), "block length": ("max_block_wordpieces", max_block_wordpieces)}
    if block_ids is not None:
        built_from["corpus"] = ("corpus", corpus_fingerprint(block_ids))
    return [name for name, (key, value) in built_from.items() if lineage.get(key) != value]
