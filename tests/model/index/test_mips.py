import dataclasses
import json
import logging
import os

import faiss
import numpy as np
import pytest

from realm.model.index.lineage import corpus_fingerprint
from realm.model.index.mips import (
    MAX_SHARD_BLOCKS,
    BruteForceIndex,
    IndexConfig,
    IndexIntegrityError,
    MipsIndex,
    ivf_nlist,
    latest_published,
    set_faiss_threads,
    shard_bounds,
)
from realm.model.publish import IntegrityError


def _clustered(count: int, dim: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit vectors around 20 centres (a random-Gaussian corpus defeats any IVF), ids shuffled."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    vectors = centres[rng.integers(0, 20, count)] + 0.3 * rng.standard_normal((count, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    block_ids = rng.permutation(count).astype(np.int64) * 7 - 1000  # negative ids too
    queries = vectors[rng.integers(0, count, 50)] + 0.1 * rng.standard_normal((50, dim))
    return vectors.astype(np.float32), block_ids, queries.astype(np.float32)


def test_exact_index_matches_brute_force():
    vectors, block_ids, queries = _clustered(3000)
    scores, ids = MipsIndex.build(vectors, block_ids).search(queries, 10)
    oracle_scores, oracle_ids = BruteForceIndex.build(vectors, block_ids).search(queries, 10)
    np.testing.assert_array_equal(ids, oracle_ids)
    np.testing.assert_allclose(scores, oracle_scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_return_exact_scores_and_high_recall(kind):
    vectors, block_ids, queries = _clustered(4000)
    index = MipsIndex.build(vectors, block_ids, IndexConfig(kind=kind, nlist=32, nprobe=8))
    scores, ids = index.search(queries, 8)
    exact = np.einsum("qd,qkd->qk", queries, index.lookup(ids))
    np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-6)
    _, oracle_ids = BruteForceIndex.build(vectors, block_ids).search(queries, 8)
    recall = np.mean([len(set(a) & set(b)) / 8 for a, b in zip(ids, oracle_ids)])
    assert recall > 0.9


def test_fewer_blocks_than_k_pads_with_minus_inf():
    vectors, block_ids, queries = _clustered(5)
    for index in (MipsIndex.build(vectors, block_ids), BruteForceIndex.build(vectors, block_ids)):
        scores, ids = index.search(queries[:2], 8)
        assert np.isfinite(scores[:, :5]).all() and np.isneginf(scores[:, 5:]).all()
        assert sorted(ids[0, :5]) == sorted(block_ids)


def test_lookup_returns_stored_vectors_by_block_id():
    vectors, block_ids, _ = _clustered(100)
    index = MipsIndex.build(vectors, block_ids)
    np.testing.assert_array_equal(index.lookup(block_ids[[5, 2]]), vectors[[5, 2]])
    with pytest.raises(KeyError):
        index.lookup(np.array([123456789]))


def test_lookup_of_no_block_ids_is_an_empty_batch_of_vectors():
    # A batch whose candidates are all the null document (the closed-book ablation) looks up none.
    vectors, block_ids, _ = _clustered(100)
    for index in (MipsIndex.build(vectors, block_ids), BruteForceIndex.build(vectors, block_ids)):
        assert index.lookup(np.zeros(0, dtype=np.int64)).shape == (0, vectors.shape[1])
        assert index.lookup(np.zeros((2, 0), dtype=np.int64)).shape == (2, 0, vectors.shape[1])


def test_nlist_scales_with_corpus():
    assert ivf_nlist(13_000_000) == 16384
    assert ivf_nlist(1_000_000) == 16384
    assert ivf_nlist(100_000) == 2048
    assert ivf_nlist(10) == 1


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_save_load_round_trip(tmp_path, kind):
    vectors, block_ids, queries = _clustered(2000)
    index = MipsIndex.build(vectors, block_ids, IndexConfig(kind=kind, nlist=16))
    path = index.save(tmp_path / "index", step=120)
    assert path == tmp_path / "index" / "120"
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["checkpoint_step"] == 120 and manifest["dim"] == 32 and manifest["count"] == 2000
    assert manifest["index_type"] == kind and len(manifest["files"]["index.faiss"]["sha256"]) == 64
    # .npy files: a 128-byte header, then 2000 x 32 float32 vectors and 2000 int64 ids.
    assert manifest["files"]["vectors.npy"]["size"] == 128 + 2000 * 32 * 4
    assert manifest["files"]["block_ids.npy"]["size"] == 128 + 2000 * 8
    loaded = MipsIndex.load(path, expected_dim=32)
    for got, want in zip(loaded.search(queries, 8), index.search(queries, 8)):
        np.testing.assert_array_equal(got, want)
    assert loaded.config == index.config


def test_corrupt_index_fails_naming_the_file(tmp_path):
    vectors, block_ids, _ = _clustered(500)
    path = MipsIndex.build(vectors, block_ids).save(tmp_path, step=1)
    data = bytearray((path / "index.faiss").read_bytes())
    data[-10] ^= 0xFF
    (path / "index.faiss").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{path}/index.faiss: sha256 does not match manifest.json"):
        MipsIndex.load(path)


def test_dim_and_count_mismatches_fail_clearly(tmp_path):
    vectors, block_ids, _ = _clustered(500)
    path = MipsIndex.build(vectors, block_ids).save(tmp_path, step=1)
    with pytest.raises(IndexIntegrityError, match=f"{path}: index dim is 32, the model embeds in 128"):
        MipsIndex.load(path, expected_dim=128)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "dim": 64}))
    with pytest.raises(IndexIntegrityError, match=f"{path}: index.faiss dim is 32, manifest.json says 64"):
        MipsIndex.load(path)


def test_latest_published_ignores_staging_and_unmanifested_dirs(tmp_path):
    vectors, block_ids, _ = _clustered(100)
    index = MipsIndex.build(vectors, block_ids)
    index.save(tmp_path, step=10)
    # A writer that died mid-build: staging dir with files but never renamed.
    staging = tmp_path / ".tmp-30-4242"
    staging.mkdir()
    (staging / "index.faiss").write_bytes(b"partial")
    (staging / "manifest.json").write_text("{}")
    # A step dir without a manifest (e.g. copied in by hand, incomplete).
    (tmp_path / "20").mkdir()
    assert latest_published(tmp_path) == tmp_path / "10"
    with pytest.raises(IntegrityError, match="no manifest.json"):
        MipsIndex.load(tmp_path / "20")


def test_latest_published_falls_back_from_a_truncated_newest_index_and_names_the_file(tmp_path, caplog):
    vectors, block_ids, _ = _clustered(100)
    index = MipsIndex.build(vectors, block_ids)
    index.save(tmp_path, step=10)
    newest = index.save(tmp_path, step=20)
    with open(newest / "vectors.npy", "r+b") as handle:
        handle.truncate(1000)
    with caplog.at_level(logging.WARNING, logger="realm.model.publish"):
        assert latest_published(tmp_path) == tmp_path / "10"
    assert f"{newest}/vectors.npy: size 1000, manifest.json says {128 + 100 * 32 * 4}" in caplog.text


def test_an_index_published_before_sizes_were_recorded_still_loads_and_is_still_checked(tmp_path):
    vectors, block_ids, _ = _clustered(100)
    path = MipsIndex.build(vectors, block_ids).save(tmp_path, step=1)
    manifest = json.loads((path / "manifest.json").read_text())
    files = manifest.pop("files")
    del manifest["uses"]
    manifest["sha256"] = {name: listed["sha256"] for name, listed in files.items()}  # the older layout
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert latest_published(tmp_path) == path and MipsIndex.load(path).count == 100
    with open(path / "block_ids.npy", "ab") as handle:
        handle.write(b"x")
    with pytest.raises(IntegrityError, match=f"{path}/block_ids.npy: sha256 does not match manifest.json"):
        MipsIndex.load(path)


def test_publish_keeps_last_n_and_replaces_same_step(tmp_path):
    vectors, block_ids, _ = _clustered(100)
    index = MipsIndex.build(vectors, block_ids)
    for step in (1, 2, 3, 4):
        index.save(tmp_path, step=step, keep=2)
    index.save(tmp_path, step=4, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]
    assert latest_published(tmp_path) == tmp_path / "4"


def test_an_hnsw_search_leaves_the_shared_index_as_it_was():
    # Threads answering at once (the HTTP workers) share one index: a knob set by one search
    # would be another's, sized for another k.
    vectors, block_ids, queries = _clustered(2000)
    index = MipsIndex.build(vectors, block_ids, IndexConfig(kind="hnsw", ef_search=16))
    before = index.shards[0].index.hnsw.efSearch
    scores, _ = index.search(queries, 50)
    assert np.isfinite(scores).all() and index.shards[0].index.hnsw.efSearch == before


def test_four_shards_return_the_same_top_k_as_one_exact_index():
    vectors, block_ids, queries = _clustered(3001)
    sharded = MipsIndex.build(vectors, block_ids, IndexConfig(shards=4))
    scores, ids = sharded.search(queries, 10)
    one_scores, one_ids = MipsIndex.build(vectors, block_ids).search(queries, 10)
    np.testing.assert_array_equal(ids, one_ids)
    np.testing.assert_allclose(scores, one_scores, rtol=1e-5, atol=1e-6)
    assert [len(shard.block_ids) for shard in sharded.shards] == [750, 750, 751, 750]


def test_shard_bounds_cover_every_row_once_in_near_equal_slices():
    assert shard_bounds(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert shard_bounds(8, 1) == [(0, 8)]


def test_sharded_ivf_keeps_every_candidate_one_ivf_index_finds():
    # The shards share one trained quantizer and probe the same lists; each returns its own
    # shortlist, so their union holds the single index's shortlist and the merged top-k is
    # at least as good, rank by rank.
    vectors, block_ids, queries = _clustered(4000)
    config = IndexConfig(kind="ivf", nlist=32, nprobe=2, shortlist_factor=1)
    one_scores, _ = MipsIndex.build(vectors, block_ids, config).search(queries, 8)
    sharded = MipsIndex.build(vectors, block_ids, dataclasses.replace(config, shards=4))
    scores, ids = sharded.search(queries, 8)
    assert (scores >= one_scores - 1e-6).all() and (scores > one_scores + 1e-6).any()
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, sharded.lookup(ids)), rtol=1e-5, atol=1e-6)


def test_sharded_hnsw_returns_exact_scores_and_high_recall():
    vectors, block_ids, queries = _clustered(4000)
    index = MipsIndex.build(vectors, block_ids, IndexConfig(kind="hnsw", shards=3))
    scores, ids = index.search(queries, 8)
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, index.lookup(ids)), rtol=1e-5, atol=1e-6)
    _, oracle_ids = BruteForceIndex.build(vectors, block_ids).search(queries, 8)
    assert np.mean([len(set(a) & set(b)) / 8 for a, b in zip(ids, oracle_ids)]) > 0.9


def test_a_sharded_index_round_trips_with_its_shards_and_their_lineage_in_the_manifest(tmp_path):
    vectors, block_ids, queries = _clustered(2000)
    index = MipsIndex.build(vectors, block_ids, IndexConfig(kind="ivf", nlist=16, shards=4))
    path = index.save(tmp_path / "index", step=3)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["count"] == 2000 and manifest["config"]["shards"] == 4
    assert [shard["dir"] for shard in manifest["shards"]] == [f"shard-0000{n}" for n in range(4)]
    assert [shard["count"] for shard in manifest["shards"]] == [500] * 4
    assert [shard["lineage"] for shard in manifest["shards"]] == [
        {"corpus": corpus_fingerprint(block_ids[start : start + 500])} for start in range(0, 2000, 500)
    ]
    assert manifest["files"]["shard-00002/vectors.npy"]["size"] == 128 + 500 * 32 * 4
    loaded = MipsIndex.load(path, expected_dim=32)
    for got, want in zip(loaded.search(queries, 8), index.search(queries, 8)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(loaded.lookup(block_ids[[1999, 0, 700]]), vectors[[1999, 0, 700]])
    np.testing.assert_array_equal(loaded.vectors, vectors)
    assert loaded.config == index.config


def test_a_damaged_or_miscounted_shard_fails_naming_it(tmp_path):
    vectors, block_ids, _ = _clustered(400)
    path = MipsIndex.build(vectors, block_ids, IndexConfig(shards=2)).save(tmp_path, step=1)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["shards"][1]["count"] = 199
    manifest["shards"][0]["count"] = 201
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexIntegrityError, match=f"{path}/shard-00000: index.faiss count is 200, manifest.json says 201"):
        MipsIndex.load(path)
    manifest["shards"][0]["count"] = 200
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexIntegrityError, match=f"{path}: its shards hold 399 blocks, manifest.json says 400"):
        MipsIndex.load(path)
    with open(path / "shard-00001" / "block_ids.npy", "ab") as handle:
        handle.write(b"x")
    with pytest.raises(IntegrityError, match=f"{path}/shard-00001/block_ids.npy: size"):
        MipsIndex.load(path)


def test_the_default_index_is_exact_below_a_million_blocks_and_sharded_above_max_shard_blocks():
    assert IndexConfig.for_corpus(999_999) == IndexConfig(kind="flat", shards=1)
    assert IndexConfig.for_corpus(1_000_000) == IndexConfig(kind="ivf", shards=1)
    assert IndexConfig.for_corpus(MAX_SHARD_BLOCKS).shards == 1
    assert IndexConfig.for_corpus(MAX_SHARD_BLOCKS + 1).shards == 2
    assert IndexConfig.for_corpus(13_000_000) == IndexConfig(kind="ivf", shards=4)


def test_a_shard_count_asked_for_overrides_the_default_and_each_shard_holds_a_block():
    assert IndexConfig.for_corpus(8, shards=3) == IndexConfig(kind="flat", shards=3)
    assert IndexConfig.for_corpus(13_000_000, shards=1) == IndexConfig(kind="ivf", shards=1)
    for shards in (0, 9):
        with pytest.raises(ValueError, match=f"{shards} index shards for 8 blocks: a shard holds one block or more"):
            IndexConfig.for_corpus(8, shards=shards)


@pytest.mark.parametrize(
    ("variable", "threads"), [("1", 1), ("3,1", 3), (None, "every core"), ("", "every core"), ("x", "every core")]
)
def test_faiss_takes_the_process_share_a_launcher_gave_else_every_core(monkeypatch, variable, threads):
    # torchrun sets OMP_NUM_THREADS to each rank's share; faiss, and with it torch (one OpenMP
    # runtime), must keep to it, or N ranks oversubscribe the host's cores.
    if variable is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", variable)
    expected = len(os.sched_getaffinity(0)) if threads == "every core" else threads
    before = faiss.omp_get_max_threads()
    try:
        assert set_faiss_threads() == expected == faiss.omp_get_max_threads()
    finally:
        faiss.omp_set_num_threads(before)
