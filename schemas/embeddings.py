"""`embeddings/`: the doc tower's 128-d vector of every block, tagged with the checkpoint step."""

import pyarrow as pa

from realm.schemas.io import ordered_by

EMBEDDING_DIM = 128

EMBEDDINGS = ordered_by(pa.schema(
    [
        pa.field("block_id", pa.int64(), nullable=False),
        pa.field("embedding", pa.list_(pa.float32(), EMBEDDING_DIM), nullable=False),
        pa.field("checkpoint_step", pa.int64(), nullable=False),
    ]
), "block_id")
