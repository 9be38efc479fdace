"""A sharded MIPS index built in parallel from an embeddings artifact's files: each shard from
its own embeddings shard (a run of consecutive Parquet files; a Beam pipeline writes one file
per output shard), by its own process, which reads only those files. A builder therefore holds
one shard's vectors, never the corpus's, and shards build side by side (on one host here; the
same split serves one host per shard).

An IVF index is trained once, in the calling process, on a sample drawn from every file; each
worker adds its vectors to a copy of that trained empty index, so all shards share one coarse
quantizer (what `MipsIndex.search` relies on to route a query once). The published step is the
layout `MipsIndex.save` writes, and `MipsIndex.load` opens it; its manifest lists every shard
with its block fingerprint and the embeddings files (and their sha256) it was built from.

A run's own builds (`realm.model.index.rebuild.publish_embeddings_and_index`) come here when
their index has several shards: the embeddings staged for the step are first rewritten as one
file per shard (`split_embeddings`), then published, then built from. Every reader here takes
a file a record batch at a time.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import pyarrow.parquet as pq

from realm.model.index.embed_corpus import embedding_arrays, embedding_batches
from realm.model.index.mips import (
    IndexConfig,
    empty_index,
    fill_shard,
    index_metadata,
    process_cores,
    set_faiss_threads,
    shard_bounds,
    training_rows,
    write_shard,
)
from realm.model.publish import publish, staging_dir
from realm.schemas import EMBEDDING_DIM, EMBEDDINGS
from realm.schemas.io import open_parquet, parquet_files, parquet_files_under
from realm.schemas.manifest import MANIFEST_FILE, read_manifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardBuild:
    """One shard's build, as its worker process saw it: blocks, seconds (reading its files,
    adding them to the index, writing it) and the worker's peak resident memory."""

    blocks: int
    seconds: float
    peak_rss_bytes: int


@dataclass(frozen=True)
class ShardedBuild:
    path: Path  # the published index step
    train_seconds: float  # sampling every file and training the shared quantizer (IVF only)
    shards: list[ShardBuild]


def group_files(counts: list[int], shards: int) -> list[list[int]]:
    """Indexes of consecutive files, one run per shard, cut where the rows come closest to
    equal shares (`counts`: each file's rows); every shard gets at least one file."""
    if len(counts) < shards:
        raise ValueError(f"{len(counts)} embeddings files cannot make {shards} shards (a shard is one or more whole files)")
    cumulative = np.cumsum(counts)  # rows up to and including each file
    bounds = [0]
    for share in range(1, shards):
        cut = int(np.abs(cumulative - cumulative[-1] * share / shards).argmin()) + 1
        bounds.append(min(max(cut, bounds[-1] + 1), len(counts) - (shards - share)))
    bounds.append(len(counts))
    return [list(range(start, stop)) for start, stop in zip(bounds, bounds[1:])]


def split_embeddings(directory: str | os.PathLike, shards: int) -> list[str]:
    """Rewrite the EMBEDDINGS files written into `directory` (a staging directory, before it is
    published) as one file per shard, `part-<n>.parquet`, of near-equal rows cut in the files'
    order, one batch in memory at a time; returns them. Whatever wrote the files (the in-process
    embedder's one, an incremental update's two, the Beam pipeline's many), each shard of
    `build_sharded_index` then reads one file of its own rows."""
    written = parquet_files_under(str(directory))
    counts = [open_parquet(file).metadata.num_rows for file in written]
    batches = embedding_batches(written)
    split = [Path(directory) / f"part-{number:05d}.parquet" for number in range(shards)]
    partial = [path.with_name(f".{path.name}.tmp") for path in split]  # hidden: not read as a part
    pending = None
    for path, (start, stop) in zip(partial, shard_bounds(sum(counts), shards)):
        with pq.ParquetWriter(path, EMBEDDINGS) as writer:
            wanted = stop - start
            while wanted:
                if pending is None or pending.num_rows == 0:
                    pending = next(batches)
                taken = pending.slice(0, wanted)
                writer.write_table(taken)
                wanted -= taken.num_rows
                pending = pending.slice(taken.num_rows)
    for file in written:
        os.remove(file)
    for path, final in zip(partial, split):
        os.replace(path, final)
    return [str(path) for path in split]


def build_sharded_index(
    embeddings_dir: str | os.PathLike,
    index_root: str | os.PathLike,
    step: int,
    config: IndexConfig,
    *,
    workers: int | None = None,
    keep: int | None = None,
    lineage: dict | None = None,
    uses: Iterable[str | os.PathLike] = (),
) -> ShardedBuild:
    """Build `config.shards` shards from the files of the `embeddings/<step>/` artifact at
    `embeddings_dir`, `workers` at a time (None: one per core of this process's share,
    `process_cores`, at most one per shard), each worker with its share of those cores, and
    publish them as `<index_root>/<step>/` (see `MipsIndex.save` for `keep`, `lineage` and `uses`)."""
    files = parquet_files(str(embeddings_dir))  # checks the artifact against its manifest
    counts = [open_parquet(file).metadata.num_rows for file in files]
    groups = group_files(counts, config.shards)
    checksums = _file_checksums(Path(embeddings_dir), files)
    started = time.perf_counter()
    set_faiss_threads()
    config, empty = empty_index(EMBEDDING_DIM, sum(counts), config)
    if not empty.is_trained:
        empty.train(_rows_of_files(files, training_rows(sum(counts), config)))
    train_seconds = time.perf_counter() - started
    trained = faiss.serialize_index(empty)  # uint8 bytes, what each worker starts from
    cores = process_cores()
    workers = min(workers or cores, config.shards)
    staging = staging_dir(index_root, step)
    # A fresh process per shard ("spawn": faiss's OpenMP pool does not survive a fork), so a
    # worker's peak memory is its shard's alone.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, max_tasks_per_child=1) as pool:
        jobs = [
            pool.submit(
                _build_shard, trained, [files[i] for i in group], sum(counts[i] for i in group),
                {checksums[files[i]][0]: checksums[files[i]][1] for i in group},
                str(staging), number, config, max(1, cores // workers),
            )
            for number, group in enumerate(groups)
        ]
        built = [job.result() for job in jobs]
    entries = [entry for entry, _ in built]
    path = publish(
        staging, index_root, step, keep, uses=uses,
        metadata=index_metadata(step, EMBEDDING_DIM, config, entries, lineage),
    )
    log.info("sharded index of %d blocks in %d shards published %s", sum(counts), len(groups), path)
    return ShardedBuild(path, train_seconds, [shard for _, shard in built])


def _file_checksums(embeddings_dir: Path, files: list[str]) -> dict[str, tuple[str, str]]:
    """file -> (its path relative to the artifact, its sha256 from the artifact's manifest,
    "" when the artifact has none)."""
    listed = read_manifest(embeddings_dir)["files"] if (embeddings_dir / MANIFEST_FILE).is_file() else {}
    relative = {file: Path(file).relative_to(embeddings_dir).as_posix() for file in files}
    return {file: (name, listed.get(name, {}).get("sha256", "")) for file, name in relative.items()}


def _rows_of_files(files: list[str], rows: np.ndarray) -> np.ndarray:
    """[len(rows), dim] vectors at sorted `rows` of the files' concatenation, one batch in
    memory at a time."""
    picked = np.empty((len(rows), EMBEDDING_DIM), dtype=np.float32)
    start = 0
    for table in embedding_batches(files):
        stop = start + table.num_rows
        mine = (rows >= start) & (rows < stop)
        if mine.any():
            picked[mine] = embedding_arrays(table)[1][rows[mine] - start]
        start = stop
    return picked


def _build_shard(
    trained: np.ndarray,
    files: list[str],
    blocks: int,
    embeddings_files: dict[str, str],
    staging: str,
    number: int,
    config: IndexConfig,
    threads: int,
) -> tuple[dict, ShardBuild]:
    """In a worker process: shard `number` from `files` (`blocks` rows in all) into `staging`;
    returns its manifest entry and how its build went."""
    started = time.perf_counter()
    set_faiss_threads(threads)
    block_ids = np.empty(blocks, dtype=np.int64)
    vectors = np.empty((blocks, EMBEDDING_DIM), dtype=np.float32)
    row = 0
    for table in embedding_batches(files):
        # Filled in place: one batch's arrays beside the shard's, never a whole file's.
        block_ids[row : row + table.num_rows], vectors[row : row + table.num_rows] = embedding_arrays(table)
        row += table.num_rows
    shard = fill_shard(faiss.deserialize_index(trained), vectors, block_ids, embeddings_files)
    entry = write_shard(Path(staging), number, config, shard)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return entry, ShardBuild(blocks, time.perf_counter() - started, peak)
