import numpy as np
import pyarrow as pa
import pytest

from realm.model.index import block_store
from realm.model.index.block_store import BLOCK_COLUMNS, BlockStore, iter_block_batches
from realm.schemas import BLOCK_ENTITIES, BLOCKS, ArtifactError, UnreadableArtifactError, write_table


def _reshuffled_into_shards(blocks_table: pa.Table, directory, sizes: list[int]) -> str:
    """The blocks in a seeded order, cut into shards of `sizes` rows, as Beam's workers may write them."""
    table = blocks_table.take(np.random.default_rng(len(sizes)).permutation(blocks_table.num_rows))
    start = 0
    for number, size in enumerate(sizes):
        write_table(str(directory / f"part-{number}.parquet"), table.slice(start, size), BLOCKS)
        start += size
    return str(directory)


@pytest.mark.parametrize("pass_blocks", [1 << 20, 3])  # one pass; three passes over id ranges
def test_blocks_come_in_id_order_however_the_shards_split_and_order_them(blocks_table, tmp_path, monkeypatch, pass_blocks):
    monkeypatch.setattr(block_store, "ORDER_PASS_BLOCKS", pass_blocks)
    expected = blocks_table.sort_by("block_id").select(BLOCK_COLUMNS)
    for layout, sizes in {"one": [8], "two": [5, 3], "three": [1, 4, 3]}.items():
        path = _reshuffled_into_shards(blocks_table, tmp_path / layout, sizes)
        batches = list(iter_block_batches(path, batch_rows=3))
        assert [batch.num_rows for batch in batches[:2]] == [3, 3]
        assert pa.Table.from_batches(batches).equals(expected), layout
        for start, stop in [(2, 7), (0, 3), (5, 8), (4, 4)]:  # a share of the order, within and at its ends
            share = list(iter_block_batches(path, batch_rows=3, rows=(start, stop)))
            assert sum(batch.num_rows for batch in share) == stop - start, (layout, start, stop)
            if share:
                assert pa.Table.from_batches(share).equals(expected.slice(start, stop - start)), (layout, start, stop)


def test_a_damaged_shard_is_named(blocks_table, tmp_path):
    path = _reshuffled_into_shards(blocks_table, tmp_path / "blocks", [5, 3])
    shard = tmp_path / "blocks" / "part-1.parquet"
    shard.write_bytes(shard.read_bytes()[:-40])
    with pytest.raises(UnreadableArtifactError, match=f"^{shard}: not readable as Parquet"):
        BlockStore.from_parquet(path)


def test_entities_are_read_from_beside_the_blocks_in_any_shard_order(blocks_table, block_entities_table, tmp_path):
    path = _reshuffled_into_shards(blocks_table, tmp_path / "blocks", [5, 3])
    shuffled = block_entities_table.take(np.random.default_rng(7).permutation(block_entities_table.num_rows))
    write_table(str(tmp_path / "block_entities" / "part-0.parquet"), shuffled, BLOCK_ENTITIES)
    store = BlockStore.from_parquet(path, with_text=True, with_entities=True)
    for row in block_entities_table.to_pylist():
        assert store.entities(row["block_id"]) == [(e["start"], e["end"], e["label"]) for e in row["entities"]]
    text = store.text(-42)  # Marie Curie's block
    assert ("Marie Curie", "PERSON") in [(text[start:end], label) for start, end, label in store.entities(-42)]
    with pytest.raises(ValueError, match="holds no entities"):
        BlockStore.from_parquet(path, with_text=True).entities(-42)


def test_entities_that_are_missing_or_tag_other_blocks_are_refused_naming_them(blocks_table, block_entities_table, tmp_path):
    path = _reshuffled_into_shards(blocks_table, tmp_path / "blocks", [8])
    entities = tmp_path / "block_entities"
    with pytest.raises(FileNotFoundError, match=f"^{entities}: no block entities .* --blocks {path} --output {tmp_path}$"):
        BlockStore.from_parquet(path, with_text=True, with_entities=True)
    write_table(str(entities / "part-0.parquet"), block_entities_table.sort_by("block_id").slice(1), BLOCK_ENTITIES)
    with pytest.raises(ArtifactError, match=f"^{entities}: block -42 has no row \\(7 rows for 8 blocks\\)"):
        BlockStore.from_parquet(path, with_text=True, with_entities=True)


def test_several_artifacts_are_read_together_and_a_block_two_hold_is_read_once(blocks_table, block_entities_table, tmp_path):
    """A corpus of the first five blocks by id and passages of the last four: Mount Everest's (23) in both."""
    ordered, tags = blocks_table.sort_by("block_id"), block_entities_table.sort_by("block_id")
    corpus, passages = tmp_path / "corpus" / "blocks", tmp_path / "passages" / "blocks"
    for path, rows in ((corpus, slice(0, 5)), (passages, slice(4, 8))):
        write_table(str(path / "part-0.parquet"), ordered[rows], BLOCKS)
        write_table(str(path.parent / "block_entities" / "part-0.parquet"), tags[rows], BLOCK_ENTITIES)
    store = BlockStore.from_parquet([str(corpus), str(passages)], with_text=True, with_entities=True)
    assert sorted(store.block_ids.tolist()) == sorted(blocks_table["block_id"].to_pylist())
    for row, tagged in zip(ordered.to_pylist(), tags.to_pylist()):
        assert store.text(row["block_id"]) == row["text"] and store.body_ids(row["block_id"]) == row["body_token_ids"]
        assert store.entities(row["block_id"]) == [(e["start"], e["end"], e["label"]) for e in tagged["entities"]]
