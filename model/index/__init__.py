"""The corpus's indexes: block store, corpus embedding, MIPS (faiss), BM25, and when to refresh."""

# How the corpus is embedded, wherever it is (a refresh in-process, pooled states, the Beam
# pipeline): batches of 64 blocks, each sorted by length within a window of 4,096, where a batch
# of vital blocks carries ~2% padding (~9% within 1,024: docs/measurements.md).
EMBED_BATCH_BLOCKS = 64
EMBED_WINDOW_BLOCKS = 4096
