"""MIPS speed and recall: exact faiss search vs IVF and HNSW shortlists (with exact re-scoring), side by side.

    python bench/mips.py --blocks 100000 [--queries 1000] [--kinds ivf,hnsw]

Vectors are synthetic, 128-d, from the reference distribution of design §5b: 10k unit
centres with lognormal(0, 1) weights, x = normalise(c + N(0, I/128)); queries are a data
point + N(0, 0.25·I/128). recall@8 is the fraction of the exact top-8 that an approximate
setting returns (|approximate top-8 ∩ exact top-8| / 8); top-1 in 8 is the fraction of
queries whose exact best block is among the 8 returned (faiss's 1-recall@8, a looser
measure); speedup is exact search time / its search time, on the same queries, same
threads. `--embeddings runs/<run>/embeddings/<step>` measures a corpus's real doc vectors
instead, with held-out doc vectors as queries. Each built index is freed before the next
is built, so the 13M run peaks near vectors + one index. Ends with one JSON line for the
best setting (highest speedup at recall@8 >= 0.95, else the highest recall), with exact
search's q/s and the peak resident memory in GiB.

    python bench/mips.py --blocks 13000000 --kinds ivf   # HNSW alone takes 25-40 min to build at 13M
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from realm.model.index.embed_corpus import load_embeddings
from realm.model.index.mips import IndexConfig, MipsIndex, ivf_nlist, set_faiss_threads

DIM = 128
NUM_CENTRES = 10_000
K = 8
GOOD_RECALL = 0.95


def reference_vectors(count: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((NUM_CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    weights = rng.lognormal(0.0, 1.0, NUM_CENTRES)
    vectors = np.empty((count, DIM), dtype=np.float32)
    for start in range(0, count, 1_000_000):  # chunks: the 13M run must not hold float64 copies
        stop = min(start + 1_000_000, count)
        chunk = centres[rng.choice(NUM_CENTRES, stop - start, p=weights / weights.sum())]
        chunk += rng.standard_normal((stop - start, DIM), dtype=np.float32) / np.sqrt(DIM)
        vectors[start:stop] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    picks = vectors[rng.integers(0, count, queries)]
    query_vectors = picks + rng.standard_normal((queries, DIM), dtype=np.float32) * np.sqrt(0.25 / DIM)
    return vectors, query_vectors.astype(np.float32)


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


def corpus_vectors(embeddings_dir: str, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A real `embeddings/<step>/` artifact: `queries` of its doc vectors, drawn at random,
    become the queries and leave the indexed set (no query finds itself)."""
    _, vectors = load_embeddings(embeddings_dir)
    held_out = np.zeros(len(vectors), dtype=bool)
    held_out[np.random.default_rng(seed).choice(len(vectors), queries, replace=False)] = True
    return np.ascontiguousarray(vectors[~held_out]), np.ascontiguousarray(vectors[held_out])


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--kinds", default="ivf,hnsw", help="approximate index kinds to compare with exact")
    parser.add_argument("--embeddings", help="an embeddings/<step>/ artifact to measure instead of synthetic vectors")
    args = parser.parse_args()

    threads = set_faiss_threads()
    if args.embeddings:
        vectors, queries = corpus_vectors(args.embeddings, args.queries)
        source = f"{args.embeddings}: {len(vectors)} doc vectors; {args.queries} held-out doc vectors as queries"
    else:
        vectors, queries = reference_vectors(args.blocks, args.queries)
        source = (
            f"reference distribution: {args.blocks} x {DIM}-d, {NUM_CENTRES} unit centres with lognormal(0,1) "
            f"weights, x = normalise(c + N(0, I/{DIM})); {args.queries} queries = data point + N(0, 0.25 I/{DIM})"
        )
    print(f"{source}; faiss threads {threads}", flush=True)
    count = len(vectors)  # --embeddings: the corpus's size, not --blocks
    block_ids = np.arange(count, dtype=np.int64)

    start = time.perf_counter()
    exact = MipsIndex.build(vectors, block_ids, IndexConfig(kind="flat"))
    exact_build = time.perf_counter() - start
    exact_ids, exact_seconds = timed_search(exact, queries)
    del exact  # faiss holds its own copy of the vectors: 6.7 GB at 13M
    print(f"exact  build {exact_build:6.1f}s  {args.queries / exact_seconds:9.0f} q/s", flush=True)

    builds = {
        "ivf": (IndexConfig(kind="ivf"), [(nprobe, 64) for nprobe in (8, 16, 32, 64, 128, 256)]),
        "hnsw": (IndexConfig(kind="hnsw"), [(8, ef_search) for ef_search in (32, 64, 128)]),
    }
    results = []
    for kind in [kind for kind in args.kinds.split(",") if kind]:
        config, sweep = builds[kind]
        start = time.perf_counter()
        index = MipsIndex.build(vectors, block_ids, config)
        build = time.perf_counter() - start
        print(f"{kind} built in {build:.1f}s, peak RSS {peak_rss_gib():.1f} GiB", flush=True)
        for nprobe, ef_search in sweep:
            index.set_search_params(nprobe=nprobe, ef_search=ef_search)
            ids, seconds = timed_search(index, queries)
            if kind == "ivf":
                name = f"IVF{ivf_nlist(count)}_HNSW{config.hnsw_neighbors},SQ8 nprobe {nprobe}"
            else:
                name = f"HNSW{config.hnsw_neighbors} efSearch {ef_search}"
            row = {
                "setting": name,
                "recall_at_8": round(recall_at_k(ids, exact_ids), 4),
                "top1_in_8": round(top1_in_k(ids, exact_ids), 4),
                "speedup_vs_exact": round(exact_seconds / seconds, 2),
                "qps": round(args.queries / seconds, 1),
                "build_s": round(build, 1),
            }
            results.append(row)
            print(
                f"{name:40s} recall@8 {row['recall_at_8']:.3f}  top-1 in 8 {row['top1_in_8']:.3f}  "
                f"{row['speedup_vs_exact']:6.1f}x exact  "
                f"{row['qps']:9.0f} q/s  build {row['build_s']:.1f}s",
                flush=True,
            )
        del index

    good = [r for r in results if r["recall_at_8"] >= GOOD_RECALL]
    best = max(good, key=lambda r: r["speedup_vs_exact"]) if good else max(results, key=lambda r: r["recall_at_8"])
    exact_qps = round(args.queries / exact_seconds, 1)
    print(json.dumps({"blocks": count, **best, "exact_qps": exact_qps, "peak_rss_gib": round(peak_rss_gib(), 1)}))


if __name__ == "__main__":
    main()
