from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from realm.model.index.lineage import corpus_fingerprint, doc_tower_fingerprint, read_lineage
from realm.model.index.mips import MipsIndex
from realm.model.index.embed_corpus import load_embeddings
from realm.model.index.rebuild import embed_share, fit_block_batch, rebuild_index
from realm.model.networks.config import build_component
from realm.model.networks.retriever import Embedder
from realm.model.publish import read_manifest
from realm.schemas import BLOCKS, write_table

CPU = torch.device("cpu")
LENGTH = 32  # wordpieces a block is cut to, as pre-training's max_block_wordpieces would


def test_fit_block_batch_cuts_bodies_to_the_block_budget_like_join():
    batch = pa.RecordBatch.from_pylist(
        [{"block_id": 1, "title_token_ids": [5, 6], "body_token_ids": list(range(10, 20))},
         {"block_id": 2, "title_token_ids": list(range(30, 40)), "body_token_ids": [7]}],
        schema=pa.schema([BLOCKS.field(n) for n in ("block_id", "title_token_ids", "body_token_ids")]),
    ).slice(0)
    fitted = fit_block_batch(batch, 8).to_pylist()  # 3 specials: 5 wordpieces for title + body
    assert fitted[0]["title_token_ids"] == [5, 6] and fitted[0]["body_token_ids"] == [10, 11, 12]
    assert fitted[1]["title_token_ids"] == [30, 31, 32, 33, 34] and fitted[1]["body_token_ids"] == []
    assert fit_block_batch(batch, 288) is batch


def test_a_refresh_asked_for_three_shards_builds_them_from_a_file_each_and_searches_as_one_exact_index(
    tmp_path, tiny_config, blocks_table
):
    torch.manual_seed(0)
    snapshot = tmp_path / "snapshots" / "5"
    build_component(Embedder, tiny_config).save_pretrained(snapshot)
    blocks = write_table(str(tmp_path / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    one, three = (
        Path(rebuild_index(blocks, str(snapshot), str(tmp_path / name / "embeddings"), str(tmp_path / name / "index"), 5,
                           tiny_config, None, CPU, LENGTH, index_shards=shards))
        for name, shards in (("one", None), ("three", 3))
    )
    # One shard, the default for 8 blocks: one file, one index, no shards listed.
    assert [path.name for path in (tmp_path / "one" / "embeddings" / "5").glob("*.parquet")] == ["part-00000.parquet"]
    assert "shards" not in read_manifest(one)
    # Three: a file a shard, in block-id order (the embedder's), each shard listing its file.
    embeddings = tmp_path / "three" / "embeddings" / "5"
    files = read_manifest(embeddings)["files"]
    assert sorted(files) == [f"part-0000{n}.parquet" for n in range(3)]
    ids = np.sort(blocks_table["block_id"].to_numpy())
    shards = read_manifest(three)["shards"]
    assert [shard["dir"] for shard in shards] == [f"shard-0000{n}" for n in range(3)]
    for number, (shard, (start, stop)) in enumerate(zip(shards, [(0, 3), (3, 5), (5, 8)])):
        name = f"part-0000{number}.parquet"
        assert shard["count"] == stop - start
        assert shard["lineage"] == {"corpus": corpus_fingerprint(ids[start:stop]), "embeddings": {name: files[name]["sha256"]}}
    assert {key: read_lineage(three)[key] for key in ("doc_tower", "corpus", "max_block_wordpieces")} == {
        "doc_tower": doc_tower_fingerprint(snapshot, 5), "corpus": corpus_fingerprint(ids), "max_block_wordpieces": LENGTH,
    }
    exact, sharded = MipsIndex.load(one), MipsIndex.load(three)
    assert (exact.config.shards, sharded.config.shards) == (1, 3)
    queries = np.random.default_rng(0).standard_normal((6, tiny_config.retrieval_dim)).astype(np.float32)
    scores, top = sharded.search(queries, 5)
    exact_scores, exact_top = exact.search(queries, 5)
    np.testing.assert_array_equal(top, exact_top)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-6)


def test_shares_of_the_corpus_embedded_apart_are_the_whole_corpus_embedded_at_once(tmp_path, tiny_config, blocks_table):
    torch.manual_seed(0)
    snapshot = tmp_path / "snapshot"
    build_component(Embedder, tiny_config).save_pretrained(snapshot)
    blocks = write_table(str(tmp_path / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    embed_share(blocks, str(snapshot), str(tmp_path / "whole"), 5, tiny_config, CPU, LENGTH)
    for share in range(3):  # a rank each, in any order
        embed_share(blocks, str(snapshot), str(tmp_path / "shares"), 5, tiny_config, CPU, LENGTH, share, 3)
    # 8 blocks in three near-equal runs of block-id order: 2, 3 and 3.
    parts = sorted(path.name for path in (tmp_path / "shares").glob("*.parquet"))
    assert parts == [f"part-0000{n}.parquet" for n in range(3)]
    assert [len(load_embeddings(str(tmp_path / "shares" / name))[0]) for name in parts] == [2, 3, 3]
    whole_ids, whole = load_embeddings(str(tmp_path / "whole"))
    ids, vectors = load_embeddings(str(tmp_path / "shares"))
    assert list(ids) == list(whole_ids) == sorted(blocks_table["block_id"].to_pylist())
    np.testing.assert_allclose(vectors, whole, rtol=1e-5, atol=1e-6)
