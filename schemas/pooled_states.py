"""`pooled_states/`: the doc tower's pooled final states of every block, before its projection."""

import pyarrow as pa

from realm.schemas.io import ordered_by

POOLED_STATES = ordered_by(pa.schema(
    [
        pa.field("block_id", pa.int64(), nullable=False),
        # The BERT's hidden size: 384 for the shipped MiniLM, 768 for bert-base.
        pa.field("state", pa.list_(pa.float32()), nullable=False),
    ]
), "block_id")
