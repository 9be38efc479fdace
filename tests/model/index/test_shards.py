import json

import faiss
import numpy as np
import pytest

from realm.model.index.embed_corpus import embedding_arrays, embedding_batches, write_embeddings
from realm.model.index.lineage import corpus_fingerprint
from realm.model.index.mips import BruteForceIndex, IndexConfig, MipsIndex
from realm.model.index.shards import build_sharded_index, group_files, split_embeddings
from realm.model.publish import publish, staging_dir
from realm.schemas.io import parquet_files_under
from realm.schemas import EMBEDDING_DIM
from realm.schemas.manifest import read_manifest

FILE_ROWS = [300, 250, 350, 100, 200]  # the embeddings artifact's files, as Beam might shard it


def _embeddings_artifact(root) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """A published embeddings/0/ of clustered unit vectors in FILE_ROWS files; returns its path,
    the block ids and vectors in file order, and queries."""
    rng = np.random.default_rng(0)
    count = sum(FILE_ROWS)
    centres = rng.standard_normal((20, EMBEDDING_DIM))
    vectors = centres[rng.integers(0, 20, count)] + 0.3 * rng.standard_normal((count, EMBEDDING_DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    block_ids = np.sort(rng.choice(10**9, count, replace=False)).astype(np.int64)  # each file reads back sorted
    staging = staging_dir(root, 0)
    for part, (start, stop) in enumerate(zip(np.cumsum([0, *FILE_ROWS[:-1]]), np.cumsum(FILE_ROWS))):
        write_embeddings(str(staging), block_ids[start:stop], vectors[start:stop], 0, part)
    queries = (vectors[rng.integers(0, count, 40)] + 0.1 * rng.standard_normal((40, EMBEDDING_DIM))).astype(np.float32)
    return str(publish(staging, root, 0)), block_ids, vectors, queries


def test_files_group_into_consecutive_runs_of_near_equal_rows():
    assert group_files([1, 1, 1, 1], 4) == [[0], [1], [2], [3]]
    assert group_files(FILE_ROWS, 2) == [[0, 1], [2, 3, 4]]  # 550 / 650 rows
    assert group_files([1000, 1, 1], 3) == [[0], [1], [2]]  # every shard gets a file
    assert group_files([1, 1, 1, 1000], 2) == [[0, 1, 2], [3]]
    with pytest.raises(ValueError, match="2 embeddings files cannot make 3 shards"):
        group_files([5, 5], 3)


@pytest.mark.slow  # a spawned process per shard
def test_shards_built_in_parallel_from_embeddings_files_match_one_exact_index(tmp_path):
    embeddings_dir, block_ids, vectors, queries = _embeddings_artifact(tmp_path / "embeddings")
    built = build_sharded_index(embeddings_dir, tmp_path / "index", 7, IndexConfig(shards=4), workers=2)
    assert built.path == tmp_path / "index" / "7"
    assert [shard.blocks for shard in built.shards] == [300, 250, 350, 300] and all(
        shard.peak_rss_bytes > vectors.nbytes for shard in built.shards
    )
    index = MipsIndex.load(built.path, expected_dim=EMBEDDING_DIM)
    scores, ids = index.search(queries, 10)
    one_scores, one_ids = MipsIndex.build(vectors, block_ids).search(queries, 10)
    np.testing.assert_array_equal(ids, one_ids)
    np.testing.assert_allclose(scores, one_scores, rtol=1e-5, atol=1e-6)


def test_ivf_shards_from_files_share_one_trained_quantizer_and_list_their_files(tmp_path):
    embeddings_dir, block_ids, vectors, queries = _embeddings_artifact(tmp_path / "embeddings")
    config = IndexConfig(kind="ivf", nlist=16, nprobe=4, shards=2)
    built = build_sharded_index(embeddings_dir, tmp_path / "index", 0, config)
    files = read_manifest(embeddings_dir)["files"]
    shards = json.loads((built.path / "manifest.json").read_text())["shards"]
    assert shards[1] == {
        "dir": "shard-00001",
        "count": 650,
        "lineage": {
            "corpus": corpus_fingerprint(block_ids[550:]),
            "embeddings": {f"part-0000{part}.parquet": files[f"part-0000{part}.parquet"]["sha256"] for part in (2, 3, 4)},
        },
    }
    index = MipsIndex.load(built.path)
    centroids = [faiss.extract_index_ivf(shard.index).quantizer.reconstruct_n(0, 16) for shard in index.shards]
    np.testing.assert_array_equal(centroids[0], centroids[1])
    scores, ids = index.search(queries, 8)
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, index.lookup(ids)), rtol=1e-5, atol=1e-6)
    _, oracle_ids = BruteForceIndex.build(vectors, block_ids).search(queries, 8)
    assert np.mean([len(set(a) & set(b)) / 8 for a, b in zip(ids, oracle_ids)]) > 0.9


def test_staged_files_are_rewritten_as_one_file_a_shard_in_the_files_row_order(tmp_path):
    rng = np.random.default_rng(1)
    count = sum(FILE_ROWS)
    block_ids = rng.permutation(10**6)[:count].astype(np.int64)  # unsorted: the files' order is what is kept
    vectors = rng.standard_normal((count, EMBEDDING_DIM)).astype(np.float32)
    for part, (start, stop) in enumerate(zip(np.cumsum([0, *FILE_ROWS[:-1]]), np.cumsum(FILE_ROWS))):
        write_embeddings(str(tmp_path), block_ids[start:stop], vectors[start:stop], 3, part)

    split = split_embeddings(tmp_path, 3)
    assert split == parquet_files_under(str(tmp_path)) == [str(tmp_path / f"part-0000{n}.parquet") for n in range(3)]
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"part-0000{n}.parquet" for n in range(3)]
    shards = [[embedding_arrays(table) for table in embedding_batches([file], batch_rows=128)] for file in split]
    assert [sum(len(ids) for ids, _ in shard) for shard in shards] == [400, 400, 400]  # 1,200 rows cut across the files
    np.testing.assert_array_equal(np.concatenate([ids for shard in shards for ids, _ in shard]), block_ids)
    np.testing.assert_array_equal(np.concatenate([v for shard in shards for _, v in shard]), vectors)
