"""The training tests' shared fixture."""

import numpy as np
import pytest

from realm.model.index.mips import MipsIndex


@pytest.fixture(scope="module")
def distinct_vectors_index(tmp_path_factory, qa_corpus, blocks_table) -> str:
    """An index of random Gaussian vectors: a random tiny doc tower embeds every block almost
    alike, which leaves the query tower nothing to learn to rank by."""
    vectors = np.random.default_rng(0).normal(size=(blocks_table.num_rows, 128)).astype(np.float32)
    return str(MipsIndex.build(vectors, blocks_table["block_id"].to_numpy()).save(tmp_path_factory.mktemp("index"), 0))
