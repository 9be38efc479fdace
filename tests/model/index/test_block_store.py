import numpy as np
import pyarrow as pa
import pytest

from realm.model.index import block_store
from realm.model.index.block_store import BLOCK_COLUMNS, BlockStore, iter_block_batches
from realm.schemas import BLOCKS, UnreadableArtifactError, write_table


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


def test_a_damaged_shard_is_named(blocks_table, tmp_path):
    path = _reshuffled_into_shards(blocks_table, tmp_path / "blocks", [5, 3])
    shard = tmp_path / "blocks" / "part-1.parquet"
    shard.write_bytes(shard.read_bytes()[:-40])
    with pytest.raises(UnreadableArtifactError, match=f"^{shard}: not readable as Parquet"):
        BlockStore.from_parquet(path)
