"""`pretrain_examples/` (salient-span MLM) and `ict_examples/` (Inverse Cloze Task).

A span carries both char offsets into `text` and wordpiece offsets into `token_ids`
(end-exclusive both). `masked_token_positions` is the one span chosen (seeded per example)
for masking, at most 10 wordpieces; it is empty when the sentence has no salient span, and
the trainer then falls back to a random span and counts it.
`forbidden_block_ids` holds every block that contains the sentence verbatim, the origin block
included: retrieving any of them would let the model copy instead of reason.
"""

import pyarrow as pa

from realm.schemas.io import ordered_by

SPAN = pa.struct(
    [
        pa.field("start", pa.int32(), nullable=False),
        pa.field("end", pa.int32(), nullable=False),
        pa.field("token_start", pa.int32(), nullable=False),
        pa.field("token_end", pa.int32(), nullable=False),
        pa.field("label", pa.string(), nullable=False),  # spaCy entity label, or DATE for regex dates
        pa.field("source", pa.string(), nullable=False),  # "ner" | "date_regex"
    ]
)

PRETRAIN_EXAMPLES = ordered_by(pa.schema(
    [
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("origin_block_id", pa.int64(), nullable=False),
        pa.field("forbidden_block_ids", pa.list_(pa.int64()), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),  # wordpieces of text, no specials
        pa.field("spans", pa.list_(SPAN), nullable=False),
        pa.field("masked_token_positions", pa.list_(pa.int32()), nullable=False),
    ]
), "example_id")

ICT_EXAMPLES = ordered_by(pa.schema(
    [
        pa.field("example_id", pa.int64(), nullable=False),
        pa.field("query_text", pa.string(), nullable=False),
        pa.field("query_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("context_block_id", pa.int64(), nullable=False),
        pa.field("context_title", pa.string(), nullable=False),
        pa.field("context_text", pa.string(), nullable=False),  # the block, query removed unless kept
        pa.field("context_title_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("context_body_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("query_kept_in_context", pa.bool_(), nullable=False),
    ]
), "example_id")
