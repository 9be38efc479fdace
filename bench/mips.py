"""MIPS recall against speed: exact search beside IVF (over an nprobe grid) and HNSW (over an
efSearch grid), both shortlisting with exact re-scoring, built as the project builds a sharded
index, side by side in one run.

    python bench/mips.py --blocks 1000000 [--queries 1000] [--kinds ivf,hnsw] [--shards 1]
    python bench/mips.py --embeddings runs/<run>/embeddings/<step> --queries 500
    python bench/mips.py --blocks 13000000 --shards 4 --kinds ivf   # Wikipedia's block count

Vectors are synthetic, 128-d, from the reference distribution of design §5b: 10k unit
centres with lognormal(0, 1) weights, x = normalise(c + N(0, I/128)); queries are a data
point + N(0, 0.25·I/128). `--embeddings` measures a corpus's real doc vectors instead, with
held-out doc vectors as queries. Either way the vectors are written as an embeddings artifact
under a scratch directory, in files of at most a million rows, the same number per shard (as a
corpus embedded by many workers arrives), and every index (exact too) is built from it by
`build_sharded_index`, one worker process per shard, `--workers` at a time, then loaded as a
reader would load it. This process holds one file's vectors at a time while writing, then the
loaded indexes (an exact one's faiss copy of every vector, an IVF one's 8-bit codes).

recall@8 is the fraction of the exact top-8 that a setting returns (|top-8 ∩ exact top-8| / 8);
top-1 in 8 is the fraction of queries whose exact best block is among the 8 returned (faiss's
1-recall@8, looser); speedup is exact search time / the setting's, same 1,000-query batch,
same threads (`--threads`: one gives q/s per core, and is what a busy 2-core host sustains;
two OpenMP threads sharing a core with another process lose far more than half). Each build
reports its wall time, the quantizer's training time, and per shard its worker's build time
and peak resident memory and the index's size in memory once loaded (the float32 vectors
beside it are memory-mapped). Ends with one JSON line: the builds, the whole curve, and the
row of the setting `IndexConfig.for_corpus` picks at this size.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from realm.model.index.embed_corpus import load_embeddings, write_embeddings
from realm.model.index.mips import INDEX_FILE, IndexConfig, MipsIndex, set_faiss_threads, shard_bounds
from realm.model.index.shards import build_sharded_index
from realm.model.publish import publish, staging_dir

DIM = 128
NUM_CENTRES = 10_000
CHUNK_ROWS = 1_000_000  # generated at a time: the 13M run must not hold float64 copies
# Rows per artifact file at most: a shard's builder holds one decoded file beside its shard
# (docs/scaling.md, the index's memory).
FILE_ROWS = 1_000_000
K = 8
GIB = 2**30


def reference_chunks(count: int, seed: int = 0) -> Iterator[np.ndarray]:
    """The reference distribution's `count` vectors, CHUNK_ROWS at a time (the same vectors
    however they are later split into files)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((NUM_CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    weights = rng.lognormal(0.0, 1.0, NUM_CENTRES)
    for start in range(0, count, CHUNK_ROWS):
        rows = min(CHUNK_ROWS, count - start)
        chunk = centres[rng.choice(NUM_CENTRES, rows, p=weights / weights.sum())]
        chunk += rng.standard_normal((rows, DIM), dtype=np.float32) / np.sqrt(DIM)
        yield chunk / np.linalg.norm(chunk, axis=1, keepdims=True)


def artifact_files(count: int, shards: int) -> int:
    """Files for `count` rows in `shards` shards: at most FILE_ROWS rows each, as many per shard."""
    return shards * math.ceil(count / (shards * FILE_ROWS))


def write_reference_artifact(root: Path, count: int, files: int, queries: int) -> tuple[Path, np.ndarray]:
    """Publish `count` reference vectors as `<root>/0/` in `files` files (block id = row);
    returns its path and `queries` query vectors (data points + noise)."""
    rng = np.random.default_rng(1)
    picks = np.sort(rng.integers(0, count, queries))
    picked = np.empty((queries, DIM), dtype=np.float32)
    staging = staging_dir(root, 0)
    chunks, pending, pending_start = reference_chunks(count), np.zeros((0, DIM), np.float32), 0
    for part, (start, stop) in enumerate(shard_bounds(count, files)):
        while pending_start + len(pending) < stop:  # a file's rows may span chunks
            pending = np.concatenate([pending, next(chunks)])
        rows = pending[start - pending_start : stop - pending_start]
        mine = (picks >= start) & (picks < stop)
        picked[mine] = rows[picks[mine] - start]
        write_embeddings(str(staging), np.arange(start, stop, dtype=np.int64), rows, 0, part)
        pending, pending_start = pending[stop - pending_start :], stop
    query_vectors = picked + rng.standard_normal((queries, DIM), dtype=np.float32) * np.sqrt(0.25 / DIM)
    return publish(staging, root, 0), query_vectors.astype(np.float32)


def write_held_out_artifact(root: Path, embeddings_dir: str, shards: int, queries: int) -> tuple[Path, np.ndarray]:
    """A real `embeddings/<step>/` artifact with `queries` of its doc vectors, drawn at random,
    held out as queries (no query finds itself), republished as `<root>/0/` for `shards` shards."""
    block_ids, vectors = load_embeddings(embeddings_dir)
    held_out = np.zeros(len(vectors), dtype=bool)
    held_out[np.random.default_rng(0).choice(len(vectors), queries, replace=False)] = True
    block_ids, kept = block_ids[~held_out], vectors[~held_out]
    staging = staging_dir(root, 0)
    for part, (start, stop) in enumerate(shard_bounds(len(kept), artifact_files(len(kept), shards))):
        write_embeddings(str(staging), block_ids[start:stop], kept[start:stop], 0, part)
    return publish(staging, root, 0), np.ascontiguousarray(vectors[held_out])


def timed_search(index: MipsIndex, queries: np.ndarray) -> tuple[np.ndarray, float]:
    index.search(queries[:10], K)  # warm caches and threads
    start = time.perf_counter()
    _, ids = index.search(queries, K)
    return ids, time.perf_counter() - start


def recall_at_k(ids: np.ndarray, exact_ids: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, exact_ids)]))


def top1_in_k(ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Fraction of queries whose exact nearest block is among the k returned (faiss's "1-recall@k")."""
    return float(np.mean([first in row for first, row in zip(exact_ids[:, 0], ids)]))


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # Linux reports KiB


def build(embeddings_dir: Path, index_root: Path, config: IndexConfig, workers: int | None) -> tuple[MipsIndex, dict]:
    """Build `config` from the artifact, load it; returns it and its build's report."""
    start = time.perf_counter()
    built = build_sharded_index(embeddings_dir, index_root, 0, config, workers=workers)
    seconds = time.perf_counter() - start
    index = MipsIndex.load(built.path)  # loading gives faiss every core: main() sets the search threads after
    report = {
        "build_s": round(seconds, 1),
        "train_s": round(built.train_seconds, 1),
        "shard_build_s": [round(shard.seconds, 1) for shard in built.shards],
        "shard_build_peak_rss_gib": [round(shard.peak_rss_bytes / GIB, 2) for shard in built.shards],
        "shard_index_gib": [
            round((built.path / entry_dir / INDEX_FILE).stat().st_size / GIB, 3)
            for entry_dir in ([f"shard-{n:05d}" for n in range(config.shards)] if config.shards > 1 else [""])
        ],
    }
    print(
        f"{config.kind} x{config.shards}: built in {seconds:.1f}s (training {built.train_seconds:.1f}s); per shard: "
        f"build {report['shard_build_s']} s, peak RSS {report['shard_build_peak_rss_gib']} GiB, "
        f"index in memory {report['shard_index_gib']} GiB",
        flush=True,
    )
    return index, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--kinds", default="ivf,hnsw", help="approximate index kinds to compare with exact")
    parser.add_argument("--embeddings", help="an embeddings/<step>/ artifact to measure instead of synthetic vectors")
    parser.add_argument("--shards", type=int, default=1, help="shards of every index")
    parser.add_argument("--workers", type=int, help="shards built at once (default: one per core)")
    parser.add_argument("--nprobe", default="1,2,4,8,16,32,64,128,256", help="IVF lists probed, the grid")
    parser.add_argument("--ef-search", default="32,64,128,256", help="HNSW efSearch, the grid (below the shortlist, 4 x 8, it is the shortlist)")
    parser.add_argument("--threads", type=int, help="faiss threads searching (default: every core; builds use every core)")
    parser.add_argument("--scratch", help="where the artifact and indexes are written (default: a temporary directory)")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="bench-mips-", dir=args.scratch))
    try:
        if args.embeddings:
            embeddings_dir, queries = write_held_out_artifact(scratch / "embeddings", args.embeddings, args.shards, args.queries)
            source = f"{args.embeddings}: doc vectors; {args.queries} held-out doc vectors as queries"
        else:
            embeddings_dir, queries = write_reference_artifact(
                scratch / "embeddings", args.blocks, artifact_files(args.blocks, args.shards), args.queries
            )
            source = (
                f"reference distribution: {DIM}-d, {NUM_CENTRES} unit centres with lognormal(0,1) weights, "
                f"x = normalise(c + N(0, I/{DIM})); {args.queries} queries = data point + N(0, 0.25 I/{DIM})"
            )
        exact, exact_build = build(embeddings_dir, scratch / "exact", IndexConfig(shards=args.shards), args.workers)
        count = exact.count
        threads = set_faiss_threads(args.threads)
        print(f"{source}; {count} blocks in {args.shards} shard(s); faiss threads searching {threads}", flush=True)
        exact_ids, exact_seconds = timed_search(exact, queries)
        exact_qps = args.queries / exact_seconds
        print(f"exact{'':35s} {exact_qps:9.0f} q/s", flush=True)
        del exact
        shutil.rmtree(scratch / "exact")  # 13M: 13 GB of flat index and vectors on disk

        builds = {"flat": exact_build}
        curve = [{"kind": "flat", "setting": "exact", "recall_at_8": 1.0, "top1_in_8": 1.0, "speedup_vs_exact": 1.0,
                  "qps": round(exact_qps, 1)}]
        for kind in [kind for kind in args.kinds.split(",") if kind]:
            config = IndexConfig(kind=kind, shards=args.shards)
            index, builds[kind] = build(embeddings_dir, scratch / kind, config, args.workers)
            set_faiss_threads(args.threads)
            if kind == "ivf":
                nlist = index.config.nlist
                grid = [(int(n), config.ef_search, f"IVF{nlist}_HNSW{config.hnsw_neighbors},SQ8 nprobe {n}")
                        for n in args.nprobe.split(",") if int(n) <= nlist]
            else:
                grid = [(config.nprobe, int(ef), f"HNSW{config.hnsw_neighbors} efSearch {ef}") for ef in args.ef_search.split(",")]
            for nprobe, ef_search, name in grid:
                index.set_search_params(nprobe=nprobe, ef_search=ef_search)
                ids, seconds = timed_search(index, queries)
                row = {
                    "kind": kind,
                    "setting": name,
                    "nprobe": nprobe,
                    "ef_search": ef_search,
                    "recall_at_8": round(recall_at_k(ids, exact_ids), 4),
                    "top1_in_8": round(top1_in_k(ids, exact_ids), 4),
                    "speedup_vs_exact": round(exact_seconds / seconds, 2),
                    "qps": round(args.queries / seconds, 1),
                }
                curve.append(row)
                print(
                    f"{name:40s} recall@8 {row['recall_at_8']:.3f}  top-1 in 8 {row['top1_in_8']:.3f}  "
                    f"{row['speedup_vs_exact']:6.1f}x exact  {row['qps']:9.0f} q/s",
                    flush=True,
                )
            del index
            shutil.rmtree(scratch / kind)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    default = IndexConfig.for_corpus(count)
    default_row = next(
        (row for row in curve if row["kind"] == default.kind and row.get("nprobe", default.nprobe) == default.nprobe
         and row.get("ef_search", default.ef_search) == default.ef_search),
        None,
    )
    print(json.dumps({
        "blocks": count, "shards": args.shards, "search_threads": threads, "exact_qps": round(exact_qps, 1), "default": default_row,
        "builds": builds, "curve": curve, "peak_rss_gib": round(peak_rss_gib(), 2),
    }))


if __name__ == "__main__":
    main()
