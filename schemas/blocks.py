"""`blocks/`: the knowledge corpus Z, documents split into retrieval units of <= 288 wordpieces.

`num_tokens` counts the doc-tower input `[CLS] title [SEP] body [SEP]`, so
3 + len(title_token_ids) + len(body_token_ids) == num_tokens <= 288.
`sentence_starts` are char offsets into `text` where each sentence of the block begins; the
salient-span, ICT and trivial-retrieval stages reuse the chunker's sentence split through it.
"""

import pyarrow as pa

from realm.schemas.io import ordered_by

BLOCKS = ordered_by(pa.schema(
    [
        pa.field("block_id", pa.int64(), nullable=False),  # stable hash of title + body
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("block_index", pa.int32(), nullable=False),  # position of the block within its document
        pa.field("title", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("sentence_starts", pa.list_(pa.int32()), nullable=False),
        pa.field("title_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("body_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("num_tokens", pa.int32(), nullable=False),
    ]
), "block_id")
