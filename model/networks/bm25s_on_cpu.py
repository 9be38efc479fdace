"""The `bm25s` package, imported with JAX kept off the GPU: import bm25s through this module.

bm25s runs a JAX top-k when it is imported wherever JAX is installed (`bm25s.selection`), and
a first JAX computation on a CUDA machine preallocates most of the GPU's memory for JAX, so a
training process on a machine whose image ships JAX runs out of memory beside a second one.
Every process that reads blocks imports bm25s
(the question-match feature uses its stop words), and BM25's top-k is CPU work, so JAX is
pinned to the CPU here unless the user has chosen its platforms (`JAX_PLATFORMS`).
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import bm25s  # noqa: E402  (after the environment above)
from bm25s.stopwords import STOPWORDS_EN  # noqa: E402

__all__ = ["STOPWORDS_EN", "bm25s"]
