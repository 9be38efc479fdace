"""`predictions/`: one row per evaluated question, with the evidence the answer came from."""

import pyarrow as pa

PREDICTIONS = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("answers", pa.list_(pa.string()), nullable=False),
        pa.field("prediction", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),  # log-probability of the predicted span
        pa.field("block_ids", pa.list_(pa.int64()), nullable=False),  # retrieved, best first
        pa.field("block_probs", pa.list_(pa.float32()), nullable=False),  # p(z|x) over the retrieved
        pa.field("exact_match", pa.bool_(), nullable=False),
        # 0-based rank of the first retrieved block holding an answer; null when none does
        pa.field("answer_rank", pa.int32(), nullable=True),
        pa.field("num_read", pa.int32(), nullable=False),  # blocks the reader read (the top ones)
    ]
)
