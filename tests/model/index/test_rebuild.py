import pyarrow as pa

from realm.model.index.rebuild import fit_block_batch
from realm.schemas import BLOCKS


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
