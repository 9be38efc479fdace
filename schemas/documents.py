"""`documents/`: one row per source document, whatever the corpus format it was read from."""

import pyarrow as pa

from realm.schemas.io import ordered_by

DOCUMENTS = ordered_by(pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),  # unique within a corpus: "<source>:<native id>"
        pa.field("source", pa.string(), nullable=False),  # vital | wikipedia | wikiextractor | ccnews | warc | documents
        pa.field("title", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),  # plain text, paragraphs separated by "\n"
        pa.field("url", pa.string()),
        pa.field("date", pa.string()),  # ISO-8601 when the source has one
    ]
), "doc_id")
