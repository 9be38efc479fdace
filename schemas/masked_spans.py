"""`masked_spans/<examples>.parquet`: pre-training's last evaluation, one row per example.

Whether the encoder got the example's masked salient span right (every wordpiece) with
retrieval (the top-k marginal) and with the null document alone, whether the span occurs
verbatim in a retrieved block, and whether reading one such block alone gets it right
(`realm.model.training.masked_span_accuracy`). Rows are keyed by the pre-training example's
id, so two runs evaluated on the same examples compare example by example (`realm compare`).
"""

import pyarrow as pa

MASKED_SPAN_OUTCOMES = pa.schema(
    [
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),  # the pre-training step evaluated
        pa.field("right_with_retrieval", pa.bool_(), nullable=False),
        pa.field("right_null_only", pa.bool_(), nullable=False),
        pa.field("span_in_candidates", pa.bool_(), nullable=False),
        pa.field("right_reading_holder", pa.bool_(), nullable=False),
    ]
)
