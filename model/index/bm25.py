"""BM25 over the knowledge blocks: the sparse retriever of the paper's BERT-Baseline rows.

`bm25s` (sparse-matrix BM25, Lucene's scoring, k1 = 1.2 and b = 0.75 as Lucene/Anserini use)
indexes each block's title and text, lowercased, English stopwords removed, Snowball-stemmed
(PyStemmer). The index is published like a MIPS index: `<root>/<step>/` by rename, with a
manifest (`index_type` "bm25", block count, settings, size and sha256 of every file) written last, so
`realm.model.qa.question_retrieval.load_question_retriever` tells the two apart by the manifest
and a half-written or corrupt index fails with an error naming the path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import Stemmer

from realm.model.index.mips import IndexIntegrityError
from realm.model.networks.bm25s_on_cpu import bm25s
from realm.model.networks.question_match import LANGUAGE
from realm.model.publish import MANIFEST_FILE, publish, read_manifest, staging_dir, verify_step
from realm.schemas import BLOCKS, read_table

INDEX_TYPE = "bm25"
BLOCK_IDS_FILE = "block_ids.npy"
K1, B = 1.2, 0.75


def _tokenize(texts: Sequence[str]):
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=Stemmer.Stemmer(LANGUAGE), show_progress=False)


class Bm25Index:
    """BM25 over blocks: `build`, `search_texts`, `save` / `load`."""

    def __init__(self, model: bm25s.BM25, block_ids: np.ndarray):
        self.model = model
        self.block_ids = np.asarray(block_ids, dtype=np.int64)

    @property
    def count(self) -> int:
        return len(self.block_ids)

    @classmethod
    def build(cls, block_ids: Sequence[int], texts: Sequence[str]) -> Bm25Index:
        if len(block_ids) != len(texts):
            raise ValueError(f"{len(block_ids)} block ids but {len(texts)} texts")
        if not len(texts):
            raise ValueError("cannot build a BM25 index over no blocks")
        model = bm25s.BM25(k1=K1, b=B, method="lucene")
        model.index(_tokenize(texts), show_progress=False)
        return cls(model, np.asarray(block_ids))

    @classmethod
    def from_blocks(cls, blocks_path: str) -> Bm25Index:
        """Over `blocks/` Parquet: each block's title and text (the whole `[CLS] title [SEP]
        body [SEP]` block a dense retriever sees)."""
        table = read_table(blocks_path, BLOCKS, columns=["block_id", "title", "text"])
        texts = [f"{title} {text}" for title, text in zip(table["title"].to_pylist(), table["text"].to_pylist())]
        return cls.build(table["block_id"].to_numpy(), texts)

    def search_texts(self, questions: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores [n, k] float32, block_ids [n, k] int64) best first, as `MipsIndex.search`:
        slots past the corpus's end hold -inf and -1. Blocks sharing no term with the question
        score 0 and still fill the top k (in no particular order among themselves): a
        retriever always returns k blocks, as the dense one does."""
        n = len(questions)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        block_ids = np.full((n, k), -1, dtype=np.int64)
        found = min(k, self.count)
        if n and found:
            rows, row_scores = self.model.retrieve(_tokenize(questions), k=found, show_progress=False, n_threads=0)
            scores[:, :found] = row_scores
            block_ids[:, :found] = self.block_ids[rows]
        return scores, block_ids

    def save(self, index_root: str | os.PathLike, step: int = 0, keep: int | None = 1) -> Path:
        """Publish as `<index_root>/<step>/` (atomic rename), keeping the newest `keep` steps."""
        staging = staging_dir(index_root, step)
        self.model.save(str(staging / "bm25s"), show_progress=False)
        np.save(staging / BLOCK_IDS_FILE, self.block_ids)
        metadata = {
            "checkpoint_step": step, "index_type": INDEX_TYPE, "count": self.count, "k1": K1, "b": B, "stemmer": LANGUAGE,
        }
        return publish(staging, index_root, step, keep, metadata=metadata)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Bm25Index:
        """Open a published BM25 index, verifying every file's size and checksum and the block count."""
        path = Path(path)
        manifest = read_manifest(path)
        if manifest.get("index_type") != INDEX_TYPE:
            raise IndexIntegrityError(f"{path}: index_type is {manifest.get('index_type')!r}, not {INDEX_TYPE!r}")
        verify_step(path)
        block_ids = np.load(path / BLOCK_IDS_FILE)
        if len(block_ids) != manifest["count"]:
            raise IndexIntegrityError(f"{path}: {len(block_ids)} block ids, {MANIFEST_FILE} says {manifest['count']}")
        model = bm25s.BM25.load(str(path / "bm25s"), show_progress=False, verbosity=0)
        return cls(model, block_ids)
