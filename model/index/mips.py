"""Maximum inner product search over block embeddings: faiss, with a numpy brute-force twin.

`MipsIndex` is exact (`IndexFlatIP`) by default; for large corpora `ivf` (IVF with an HNSW
coarse quantizer over 8-bit scalar-quantised vectors) or `hnsw` shortlist k·shortlist_factor
hits, which are then re-scored exactly against the stored float32 vectors, so returned scores
are always exact inner products. `BruteForceIndex` has the same interface and is the oracle
the tests hold faiss to.

Above MAX_SHARD_BLOCKS blocks (or with `IndexConfig.shards`) the index is a list of shards,
each a faiss index over consecutive rows with its own vectors and block ids; a search asks
every shard for its candidates and merges them. An IVF index's shards share one coarse
quantizer, trained once, so the lists are routed once per query for all of them
(`realm.model.index.shards` builds the shards in parallel from an embeddings artifact's files).

An index is saved as a published step directory `index/<step>/` (see `realm.model.publish`):
index.faiss, vectors.npy, block_ids.npy (in `shard-<n>/` each, when sharded) and, written
last, manifest.json with the checkpoint step, dim, count, index type, config, the shards with
their lineage, and every file's size and sha256; `load` verifies all of them.
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

from realm.model.index.lineage import shard_lineage
from realm.model.networks.device import usable_cores
from realm.model.publish import MANIFEST_FILE, IntegrityError, latest_verified, publish, staging_dir, verify_step

INDEX_FILE = "index.faiss"
VECTORS_FILE = "vectors.npy"
BLOCK_IDS_FILE = "block_ids.npy"
SHARD_DIR = "shard-{:05d}"
# Below a million blocks exact search costs little beside reading the blocks it finds
# (docs/scaling.md, "The index per corpus size").
EXACT_SEARCH_MAX_BLOCKS = 1_000_000
# Blocks a shard holds at most: it bounds a shard builder's memory, which grows with its blocks
# (docs/scaling.md, "The index per corpus size"); Wikipedia's 13M make 4 shards.
MAX_SHARD_BLOCKS = 4_000_000
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
    for "ivf"). `shortlist_factor`: approximate hits per wanted hit, re-scored exactly (in
    every shard). `train_points_per_list`: k-means sample size per IVF list (see
    TRAIN_POINTS_PER_LIST). `shards`: faiss indexes over consecutive rows, searched in turn
    and merged.
    """

    kind: Literal["flat", "ivf", "hnsw"] = "flat"
    nlist: int | None = None
    nprobe: int = 8
    hnsw_neighbors: int = 32
    ef_construction: int = 40
    ef_search: int = 64
    shortlist_factor: int = 4
    train_points_per_list: int = TRAIN_POINTS_PER_LIST
    shards: int = 1

    @classmethod
    def for_corpus(cls, count: int, shards: int | None = None) -> IndexConfig:
        """Exact below EXACT_SEARCH_MAX_BLOCKS, IVF with an HNSW coarse quantizer at nprobe 8
        above, the knee of the recall curves; one shard per MAX_SHARD_BLOCKS unless `shards`
        says how many (docs/scaling.md, "The index per corpus size")."""
        kind = "flat" if count < EXACT_SEARCH_MAX_BLOCKS else "ivf"
        if shards is None:
            shards = max(1, math.ceil(count / MAX_SHARD_BLOCKS))
        elif not 1 <= shards <= max(1, count):
            raise ValueError(f"{shards} index shards for {count} blocks: a shard holds one block or more")
        return cls(kind=kind, shards=shards)


def ivf_nlist(count: int) -> int:
    """IVF lists for `count` vectors: MAX_IVF_LISTS for large corpora (speed and recall:
    `bench/mips.py`), scaled down as a power of two so every list keeps enough training points."""
    return int(min(MAX_IVF_LISTS, 2 ** math.floor(math.log2(max(1, count // MIN_POINTS_PER_LIST)))))


def set_faiss_threads(threads: int | None = None) -> int:
    """Let faiss use `threads` (None: this process's share of the cores, OMP_NUM_THREADS where a
    launcher set it, torchrun's cores / N, else every core). The process has one OpenMP runtime,
    so this sets torch's count too: more than the process's share oversubscribes the cores of
    every rank (docs/measurements.md, "faiss's threads on N processes"). The same count in every
    thread and at every point of a run, so a resumed run computes what an uninterrupted one did."""
    threads = threads or process_cores()
    faiss.omp_set_num_threads(threads)
    return threads


def process_cores() -> int:
    """This process's share of the cores: the count OMP_NUM_THREADS gives its outermost level
    ("8", or "8,1" for nested levels) where a launcher set one, else every core it may run on."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else usable_cores()


def empty_index(dim: int, count: int, config: IndexConfig) -> tuple[IndexConfig, faiss.Index]:
    """An empty faiss index of `config.kind` for `count` vectors of `dim`, and `config` with
    IVF's nlist filled in. An IVF index is still untrained: train it on the rows
    `training_rows(count, config)` of the whole corpus, then copy it into every shard."""
    if config.kind == "flat":
        return config, faiss.IndexFlatIP(dim)
    if config.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_neighbors, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.ef_construction
        return config, index
    if config.kind == "ivf":
        config = dataclasses.replace(config, nlist=config.nlist or ivf_nlist(count))
        # 8-bit codes make the lists 4x smaller; exact re-scoring undoes their rounding.
        index = faiss.index_factory(dim, f"IVF{config.nlist}_HNSW{config.hnsw_neighbors},SQ8", faiss.METRIC_INNER_PRODUCT)
        faiss.extract_index_ivf(index).cp.min_points_per_centroid = min(
            MIN_POINTS_PER_LIST, config.train_points_per_list
        )  # a sample below faiss's floor is deliberate: no warning per build
        return config, index
    raise ValueError(f"unknown index kind {config.kind!r}")


def training_rows(count: int, config: IndexConfig) -> np.ndarray:
    """The sorted rows of a `count`-vector corpus an IVF index (nlist filled in) trains on."""
    sample_size = min(count, config.train_points_per_list * config.nlist)
    return np.sort(np.random.default_rng(0).choice(count, sample_size, replace=False))


def shard_bounds(count: int, shards: int) -> list[tuple[int, int]]:
    """(start, stop) rows of `shards` consecutive slices of `count` rows, sizes within one."""
    edges = np.linspace(0, count, shards + 1).round().astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


@dataclass(frozen=True)
class IndexShard:
    """A faiss index over consecutive rows of a `MipsIndex`, with their float32 vectors [n, dim]
    (maybe a read-only memmap) and block ids [n]; `embeddings` names the embeddings files it
    was built from (relative path -> sha256; empty when built from vectors in memory)."""

    index: faiss.Index
    vectors: np.ndarray
    block_ids: np.ndarray
    embeddings: dict[str, str] = dataclasses.field(default_factory=dict)


def fill_shard(empty: faiss.Index, vectors: np.ndarray, block_ids: np.ndarray, embeddings: dict | None = None) -> IndexShard:
    """A shard holding `vectors` in a copy of the (trained) `empty` index."""
    index = faiss.clone_index(empty)
    index.add(vectors)
    return IndexShard(index, vectors, block_ids, embeddings or {})


def write_shard(staging: Path, number: int, config: IndexConfig, shard: IndexShard) -> dict:
    """Write shard `number`'s files into the index's `staging` directory (into `shard-<n>/`
    when `config` has several shards); returns its entry in the index manifest."""
    name = SHARD_DIR.format(number) if config.shards > 1 else ""
    directory = staging / name
    directory.mkdir(parents=True, exist_ok=True)
    faiss.write_index(shard.index, str(directory / INDEX_FILE))
    np.save(directory / VECTORS_FILE, np.asarray(shard.vectors))
    np.save(directory / BLOCK_IDS_FILE, shard.block_ids)
    return {"dir": name, "count": len(shard.block_ids), "lineage": shard_lineage(shard.block_ids, shard.embeddings)}


def index_metadata(step: int, dim: int, config: IndexConfig, shard_entries: list[dict], lineage: dict | None) -> dict:
    """What an index's manifest records besides its files; `shard_entries` from `write_shard`
    (listed only when there are several: one shard's files are the step's own)."""
    return {
        "checkpoint_step": step,
        "dim": dim,
        "count": sum(entry["count"] for entry in shard_entries),
        "index_type": config.kind,
        "config": dataclasses.asdict(config),
        **({"shards": shard_entries} if config.shards > 1 else {}),
        **({"lineage": lineage} if lineage is not None else {}),
    }


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
    """faiss MIPS over block embeddings with exact scores, in one shard or several; see the
    module docstring."""

    def __init__(self, shards: list[IndexShard], config: IndexConfig, path: Path | None = None):
        if len(shards) != config.shards:
            raise ValueError(f"{len(shards)} shards, the config says {config.shards}")
        self.shards = shards
        self.config = config
        self.path = path  # the published step it was loaded from; None when built in memory
        self.block_ids = shards[0].block_ids if len(shards) == 1 else np.concatenate([s.block_ids for s in shards])
        self._first_rows = np.cumsum([0] + [len(s.block_ids) for s in shards])  # [shards + 1]
        self._lookup = _BlockIdLookup(self.block_ids)
        self.set_search_params(config.nprobe, config.ef_search)

    @property
    def dim(self) -> int:
        return self.shards[0].vectors.shape[1]

    @property
    def count(self) -> int:
        return len(self.block_ids)

    @property
    def vectors(self) -> np.ndarray:
        """[count, dim] float32 in row order (a copy when the index has several shards)."""
        if len(self.shards) == 1:
            return self.shards[0].vectors
        return np.concatenate([np.asarray(shard.vectors) for shard in self.shards])

    @classmethod
    def build(cls, embeddings: np.ndarray, block_ids: np.ndarray, config: IndexConfig | None = None) -> MipsIndex:
        """Index `embeddings` [count, dim] whose rows are the blocks `block_ids` [count]; the
        shards of a sharded config are built one after the other, each with every core."""
        embeddings, block_ids = _check_vectors(embeddings, block_ids)
        config = config or IndexConfig.for_corpus(len(block_ids))
        set_faiss_threads()
        config, empty = empty_index(embeddings.shape[1], len(block_ids), config)
        if not empty.is_trained:
            empty.train(embeddings[training_rows(len(block_ids), config)])
        shards = [
            fill_shard(empty, embeddings[start:stop], block_ids[start:stop])
            for start, stop in shard_bounds(len(block_ids), config.shards)
        ]
        return cls(shards, config)

    def set_search_params(self, nprobe: int, ef_search: int) -> None:
        """Search-time knobs; they need no rebuild (the benchmark sweeps them)."""
        self.config = dataclasses.replace(self.config, nprobe=nprobe, ef_search=ef_search)
        for shard in self.shards:
            if self.config.kind == "ivf":
                ivf = faiss.extract_index_ivf(shard.index)
                ivf.nprobe = min(nprobe, ivf.nlist)  # the coarse assignment is [q, ivf.nprobe]
                faiss.downcast_index(ivf.quantizer).hnsw.efSearch = ef_search
            elif self.config.kind == "hnsw":
                shard.index.hnsw.efSearch = ef_search

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores [q, k] float32 exact inner products, block_ids [q, k] int64), best first.

        Where the index has fewer than k blocks to return, scores are -inf (block id -1).
        """
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.config.kind == "ivf":
            # Every shard shares the first one's trained quantizer: route the queries once.
            ivf = faiss.extract_index_ivf(self.shards[0].index)
            coarse_scores, coarse_lists = ivf.quantizer.search(queries, ivf.nprobe)  # [q, nprobe] x2
        scores, rows = [], []
        for shard, first_row in zip(self.shards, self._first_rows):
            if self.config.kind == "flat":
                shard_scores, shard_rows = shard.index.search(queries, k)  # [q, k] x2, exact already
            else:
                shortlist = min(k * self.config.shortlist_factor, self.count)
                if self.config.kind == "ivf":
                    _, shard_rows = faiss.extract_index_ivf(shard.index).search_preassigned(
                        queries, shortlist, coarse_lists, coarse_scores
                    )  # [q, shortlist], -1 where none
                else:
                    # efSearch = max(ef_search, shortlist), passed per call: set on the shared
                    # index, it raced between threads searching at once (the HTTP workers).
                    params = faiss.SearchParametersHNSW(efSearch=max(self.config.ef_search, shortlist))
                    _, shard_rows = shard.index.search(queries, shortlist, params=params)
                shortlist_vectors = shard.vectors[shard_rows.clip(min=0)]  # [q, shortlist, dim] float32
                shard_scores = np.einsum("qd,qsd->qs", queries, shortlist_vectors)  # [q, shortlist]
            scores.append(shard_scores)
            rows.append(np.where(shard_rows >= 0, shard_rows + first_row, -1))
        return _top_k(np.concatenate(scores, axis=1), np.concatenate(rows, axis=1), k, self.block_ids)

    def lookup(self, block_ids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of `block_ids` (any shape) -> [..., dim]."""
        block_ids = np.asarray(block_ids)
        rows = self._lookup.rows(block_ids.ravel())
        found = np.empty((len(rows), self.dim), dtype=np.float32)
        shard_of_row = np.searchsorted(self._first_rows, rows, side="right") - 1
        for number, shard in enumerate(self.shards):
            mine = shard_of_row == number
            found[mine] = shard.vectors[rows[mine] - self._first_rows[number]]
        return found.reshape(*block_ids.shape, self.dim)

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
        entries = [write_shard(staging, number, self.config, shard) for number, shard in enumerate(self.shards)]
        metadata = index_metadata(step, self.dim, self.config, entries, lineage)
        return publish(staging, index_root, step, keep, uses=uses, metadata=metadata)

    @classmethod
    def load(cls, path: str | os.PathLike, expected_dim: int | None = None) -> MipsIndex:
        """Open a published index, verifying sizes, checksums, dim and count of the index and of
        each shard; raise `IntegrityError` (`IndexIntegrityError` for dim and count) naming
        `path` (or the shard's directory) on any mismatch."""
        path = Path(path)
        manifest = verify_step(path)
        set_faiss_threads()
        dim, count = manifest["dim"], manifest["count"]
        entries = manifest.get("shards", [{"count": count}])
        listed = sum(entry["count"] for entry in entries)
        if listed != count:
            raise IndexIntegrityError(f"{path}: its shards hold {listed} blocks, {MANIFEST_FILE} says {count}")
        shards = [_load_shard(path / entry.get("dir", ""), dim, entry) for entry in entries]
        if expected_dim is not None and dim != expected_dim:
            raise IndexIntegrityError(f"{path}: index dim is {dim}, the model embeds in {expected_dim}")
        return cls(shards, IndexConfig(**manifest["config"]), path)


def _load_shard(directory: Path, dim: int, entry: dict) -> IndexShard:
    """One shard's files, checked against the dim and the count its manifest entry gives."""
    index = faiss.read_index(str(directory / INDEX_FILE))
    vectors = np.load(directory / VECTORS_FILE, mmap_mode="r")
    block_ids = np.load(directory / BLOCK_IDS_FILE)
    count = entry["count"]
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
            raise IndexIntegrityError(f"{directory}: {key} is {value}, {MANIFEST_FILE} says {wanted[key]}")
    return IndexShard(index, vectors, block_ids, entry.get("lineage", {}).get("embeddings", {}))


def latest_published(index_root: str | os.PathLike) -> Path | None:
    """The newest `<index_root>/<step>/` whose files match its manifest; staging and partial
    dirs never count, and a damaged newer one is skipped with a warning naming the file."""
    return latest_verified(index_root)
