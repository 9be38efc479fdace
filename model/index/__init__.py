"""The corpus's indexes: block store, corpus embedding, MIPS (faiss), BM25, and when to refresh."""
