"""`masked_spans/<examples>.parquet`: pre-training's last evaluation, one row per example.

Whether the encoder got the example's masked salient span right (every wordpiece) with
retrieval (the top-k marginal) and with the null document alone, whether the span occurs
verbatim in a retrieved block, and whether reading one such block alone gets it right
(`realm.model.training.masked_span_accuracy`). Rows are keyed by the pre-training example's
id, so two runs evaluated on the same examples compare example by example (`realm compare`).

Each row also lists the candidates read, as retrieved (the null document first, block id
-1; padding left out), with log p(z|x), whether each holds the span and whether the encoder
reading it alone gets the span right: where p(z|x) ranks the blocks that could be copied
from, which `realm compare` breaks down. Files written before these columns were added read
back with them null.
"""

import pyarrow as pa

from realm.schemas.io import added_on

_PER_CANDIDATE = "2026-11-28"

MASKED_SPAN_OUTCOMES = pa.schema(
    [
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),  # the pre-training step evaluated
        pa.field("right_with_retrieval", pa.bool_(), nullable=False),
        pa.field("right_null_only", pa.bool_(), nullable=False),
        pa.field("span_in_candidates", pa.bool_(), nullable=False),
        pa.field("right_reading_holder", pa.bool_(), nullable=False),
        added_on(pa.field("candidate_block_ids", pa.list_(pa.int64()), nullable=True), _PER_CANDIDATE),
        added_on(pa.field("retrieval_log_probs", pa.list_(pa.float32()), nullable=True), _PER_CANDIDATE),
        added_on(pa.field("candidates_holding_span", pa.list_(pa.bool_()), nullable=True), _PER_CANDIDATE),
        added_on(pa.field("candidates_right", pa.list_(pa.bool_()), nullable=True), _PER_CANDIDATE),
    ]
)
