"""Maximum inner product search over block embeddings: faiss, with a numpy brute-force twin.

`MipsIndex` is exact (`IndexFlatIP`) by default; for large corpora `ivf` (IVF with an HNSW
coarse quantizer over 8-bit scalar-quantised vectors) or `hnsw` shortlist k·shortlist_factor
hits, which are then re-scored exactly against the stored float32 vectors, so returned scores
are always exact inner products. `BruteForceIndex` has the same interface and is the oracle
the tests hold faiss to. An index is saved as a published step directory
`index/<step>/` (see `realm.model.publish`): index.faiss, vectors.npy, block_ids.npy and,
written last, manifest.json with the checkpoint step, dim, count, index type and every file's
size and sha256; `load` verifies all of them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import faiss
import numpy as np

from realm.model.networks.device import usable_cores
from realm.model.publish import MANIFEST_FILE, IntegrityError, latest_verified, publish, staging_dir, verify_step

INDEX_FILE = "index.faiss"
VECTORS_FILE = "vectors.npy"
BLOCK_IDS_FILE = "block_ids.npy"
# Exact search is fast enough below a million blocks (`bench/mips.py`).
EXACT_SEARCH_MAX_BLOCKS = 1_000_000
MAX_IVF_LISTS = 16384
# Lists per corpus size: a corpus gets at most one list per 39 vectors (faiss's own floor
# for k-means), so small corpora do not get near-empty lists.
MIN_POINTS_PER_LIST = 39
# The k-means sample, which may go below that floor: k-means costs sample × lists × dim per
# iteration, and a larger sample makes large builds impractical (`bench/mips.py`); the
# centroids only route the shortlist, which is re-scored exactly.
TRAIN_POINTS_PER_LIST = 24


class IndexIntegrityError(IntegrityError):
    """A published index does not match its manifest or what the caller expects."""


@dataclass(frozen=True)
class IndexConfig:
    """`kind`: "flat" (exact), "ivf" or "hnsw" (approximate shortlist + exact re-scoring).

    `nlist`: IVF lists (None: `ivf_nlist(count)`); `nprobe`: lists visited per query.
    `hnsw_neighbors`/`ef_construction`/`ef_search`: the HNSW graph (the IVF coarse quantizer's
    for "ivf"). `shortlist_factor`: approximate hits per wanted hit, re-scored exactly.
    `train_points_per_list`: k-means sample size per IVF list (see TRAIN_POINTS_PER_LIST).
    """

    kind: Literal["flat", "ivf", "hnsw"] = "flat"
    nlist: int | None = None
    nprobe: int = 8
    hnsw_neighbors: int = 32
    ef_construction: int = 40
    ef_search: int = 64
    shortlist_factor: int = 4
    train_points_per_list: int = TRAIN_POINTS_PER_LIST

    @classmethod
    def for_corpus(cls, count: int) -> IndexConfig:
        """Exact below ~1M blocks; IVF with an HNSW coarse quantizer, nprobe 8, above (design §5b)."""
        return cls() if count < EXACT_SEARCH_MAX_BLOCKS else cls(kind="ivf")


def ivf_nlist(count: int) -> int:
    """IVF lists for `count` vectors: MAX_IVF_LISTS for large corpora (speed and recall:
    `bench/mips.py`), scaled down as a power of two so every list keeps enough training points."""
    return int(min(MAX_IVF_LISTS, 2 ** math.floor(math.log2(max(1, count // MIN_POINTS_PER_LIST)))))


def set_faiss_threads() -> int:
    """Let faiss use every core this process may run on (OpenMP otherwise may pick fewer)."""
    threads = usable_cores()
    faiss.omp_set_num_threads(threads)
    return threads


class _BlockIdLookup:
    """block id -> row, through a sorted copy of the ids (no Python dict of 13M entries)."""

    def __init__(self, block_ids: np.ndarray):
        self.order = np.argsort(block_ids, kind="stable")
        self.sorted_ids = block_ids[self.order]
        if len(self.sorted_ids) > 1 and (np.diff(self.sorted_ids) == 0).any():
            raise ValueError("block_ids are not unique")

    def rows(self, block_ids: np.ndarray) -> np.ndarray:
        block_ids = np.asarray(block_ids, dtype=np.int64)
        positions = np.searchsorted(self.sorted_ids, block_ids).clip(max=len(self.sorted_ids) - 1)
        found = self.sorted_ids[positions] == block_ids
        if not found.all():
            raise KeyError(f"block ids not in the index: {block_ids[~found][:5].tolist()}")
        return self.order[positions]


def _check_vectors(embeddings: np.ndarray, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    block_ids = np.ascontiguousarray(block_ids, dtype=np.int64)
    if embeddings.ndim != 2 or len(embeddings) != len(block_ids):
        raise ValueError(f"embeddings {embeddings.shape} do not match block_ids {block_ids.shape}")
    return embeddings, block_ids


class BruteForceIndex:
    """Exact MIPS in numpy: the oracle the faiss index is tested against."""

    def __init__(self, vectors: np.ndarray, block_ids: np.ndarray):
        self.vectors, self.block_ids = _check_vectors(vectors, block_ids)
        self._lookup = _BlockIdLookup(self.block_ids)

    @classmethod
    def build(cls, embeddings: np.ndarray, block_ids: np.ndarray) -> BruteForceIndex:
        return cls(embeddings, block_ids)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores [q, k] float32, block_ids [q, k] int64), best first; -inf scores past the corpus."""
        scores = np.asarray(queries, dtype=np.float32) @ self.vectors.T  # [q, count]
        return _top_k(scores, np.broadcast_to(np.arange(len(self.block_ids)), scores.shape), k, self.block_ids)

    def lookup(self, block_ids: np.ndarray) -> np.ndarray:
        """The stored vectors of `block_ids` (any shape) -> [..., dim] float32."""
        block_ids = np.asarray(block_ids)
        return self.vectors[self._lookup.rows(block_ids.ravel())].reshape(*block_ids.shape, self.vectors.shape[1])


def _top_k(scores: np.ndarray, rows: np.ndarray, k: int, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best k of `scores` [q, n] (rows [q, n]: row of each score, -1 = none), padded to k with
    -inf scores when n < k; ties broken by row for determinism."""
    scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
    if scores.shape[1] > k:  # keep the k best first, so only k entries per row get sorted
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        scores, rows = np.take_along_axis(scores, best, axis=1), np.take_along_axis(rows, best, axis=1)
    order = np.lexsort((rows, -scores), axis=1)  # [q, min(k, n)]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_rows = np.take_along_axis(rows, order, axis=1)
    top_ids = np.where(top_rows >= 0, block_ids[top_rows.clip(min=0)], -1).astype(np.int64)
    if order.shape[1] < k:
        pad = k - order.shape[1]
        top_scores = np.pad(top_scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        top_ids = np.pad(top_ids, ((0, 0), (0, pad)), constant_values=-1)
    return top_scores, top_ids


class MipsIndex:
    """faiss MIPS over block embeddings with exact scores; see the module docstring."""

    def __init__(
        self, index: faiss.Index, vectors: np.ndarray, block_ids: np.ndarray, config: IndexConfig, path: Path | None = None
    ):
        self.index = index
        self.vectors, self.block_ids = vectors, block_ids  # vectors may be a read-only memmap
        self.config = config
        self.path = path  # the published step it was loaded from; None when built in memory
        self._lookup = _BlockIdLookup(block_ids)
        self.set_search_params(config.nprobe, config.ef_search)

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    @property
    def count(self) -> int:
        return len(self.block_ids)

    @classmethod
    def build(cls, embeddings: np.ndarray, block_ids: np.ndarray, config: IndexConfig | None = None) -> MipsIndex:
        """Index `embeddings` [count, dim] whose rows are the blocks `block_ids` [count]."""
        embeddings, block_ids = _check_vectors(embeddings, block_ids)
        config = config or IndexConfig.for_corpus(len(block_ids))
        set_faiss_threads()
        dim = embeddings.shape[1]
        if config.kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif config.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, config.hnsw_neighbors, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = config.ef_construction
        elif config.kind == "ivf":
            nlist = config.nlist or ivf_nlist(len(block_ids))
            config = dataclasses.replace(config, nlist=nlist)
            # 8-bit codes make the lists 4x smaller; exact re-scoring undoes their rounding.
            index = faiss.index_factory(
                dim, f"IVF{nlist}_HNSW{config.hnsw_neighbors},SQ8", faiss.METRIC_INNER_PRODUCT
            )
            faiss.extract_index_ivf(index).cp.min_points_per_centroid = min(
                MIN_POINTS_PER_LIST, config.train_points_per_list
            )  # a sample below faiss's floor is deliberate: no warning per build
            sample_size = min(len(embeddings), config.train_points_per_list * nlist)
            sample = np.random.default_rng(0).choice(len(embeddings), sample_size, replace=False)
            index.train(embeddings[np.sort(sample)])
        else:
            raise ValueError(f"unknown index kind {config.kind!r}")
        index.add(embeddings)
        return cls(index, embeddings, block_ids, config)

    def set_search_params(self, nprobe: int, ef_search: int) -> None:
        """Search-time knobs; they need no rebuild (the benchmark sweeps them)."""
        self.config = dataclasses.replace(self.config, nprobe=nprobe, ef_search=ef_search)
        if self.config.kind == "ivf":
            ivf = faiss.extract_index_ivf(self.index)
            ivf.nprobe = nprobe
            faiss.downcast_index(ivf.quantizer).hnsw.efSearch = ef_search
        elif self.config.kind == "hnsw":
            self.index.hnsw.efSearch = ef_search

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores [q, k] float32 exact inner products, block_ids [q, k] int64), best first.

        Where the index has fewer than k blocks to return, scores are -inf (block id -1).
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.config.kind == "flat":
            scores, rows = self.index.search(queries, k)  # [q, k] x2, exact already
            return _top_k(scores, rows, k, self.block_ids)
        shortlist = min(k * self.config.shortlist_factor, self.count)
        # HNSW searches with efSearch = max(ef_search, shortlist), passed per call: set on the
        # shared index, it raced between threads searching at once (the HTTP workers).
        params = (faiss.SearchParametersHNSW(efSearch=max(self.config.ef_search, shortlist))
                  if self.config.kind == "hnsw" else None)
        _, rows = self.index.search(queries, shortlist, params=params)  # [q, shortlist], -1 where none
        shortlist_vectors = self.vectors[rows.clip(min=0)]  # [q, shortlist, dim] float32
        exact = np.einsum("qd,qsd->qs", queries, shortlist_vectors)  # [q, shortlist]
        return _top_k(exact, rows, k, self.block_ids)

    def lookup(self, block_ids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of `block_ids` (any shape) -> [..., dim]."""
        block_ids = np.asarray(block_ids)
        return np.asarray(self.vectors[self._lookup.rows(block_ids.ravel())]).reshape(*block_ids.shape, self.vectors.shape[1])

    def save(
        self,
        index_root: str | os.PathLike,
        step: int,
        keep: int | None = None,
        lineage: dict | None = None,
        uses: Iterable[str | os.PathLike] = (),
    ) -> Path:
        """Publish as `<index_root>/<step>/` (atomic rename), keeping the newest `keep` steps (None:
        all); `lineage` (`realm.model.index.lineage`) goes into the manifest, and so do the
        published directories it `uses` (kept as long as it is, `realm.model.publish.prune`)."""
        staging = staging_dir(index_root, step)
        faiss.write_index(self.index, str(staging / INDEX_FILE))
        np.save(staging / VECTORS_FILE, np.asarray(self.vectors))
        np.save(staging / BLOCK_IDS_FILE, self.block_ids)
        metadata = {
            "checkpoint_step": step,
            "dim": self.dim,
            "count": self.count,
            "index_type": self.config.kind,
            "config": dataclasses.asdict(self.config),
            **({"lineage": lineage} if lineage is not None else {}),
        }
        return publish(staging, index_root, step, keep, uses=uses, metadata=metadata)

    @classmethod
    def load(cls, path: str | os.PathLike, expected_dim: int | None = None) -> MipsIndex:
        """Open a published index, verifying sizes, checksums, dim and count; raise
        `IntegrityError` (`IndexIntegrityError` for dim and count) naming `path` on any mismatch."""
        path = Path(path)
        manifest = verify_step(path)
        set_faiss_threads()
        index = faiss.read_index(str(path / INDEX_FILE))
        vectors = np.load(path / VECTORS_FILE, mmap_mode="r")
        block_ids = np.load(path / BLOCK_IDS_FILE)
        dim, count = manifest["dim"], manifest["count"]
        found = {
            f"{INDEX_FILE} dim": index.d,
            f"{INDEX_FILE} count": index.ntotal,
            f"{VECTORS_FILE} shape": tuple(vectors.shape),
            f"{BLOCK_IDS_FILE} count": len(block_ids),
        }
        wanted = {
            f"{INDEX_FILE} dim": dim,
            f"{INDEX_FILE} count": count,
            f"{VECTORS_FILE} shape": (count, dim),
            f"{BLOCK_IDS_FILE} count": count,
        }
        for key, value in found.items():
            if value != wanted[key]:
                raise IndexIntegrityError(f"{path}: {key} is {value}, {MANIFEST_FILE} says {wanted[key]}")
        if expected_dim is not None and dim != expected_dim:
            raise IndexIntegrityError(f"{path}: index dim is {dim}, the model embeds in {expected_dim}")
        return cls(index, vectors, block_ids, IndexConfig(**manifest["config"]), path)


def latest_published(index_root: str | os.PathLike) -> Path | None:
    """The newest `<index_root>/<step>/` whose files match its manifest; staging and partial
    dirs never count, and a damaged newer one is skipped with a warning naming the file."""
    return latest_verified(index_root)
