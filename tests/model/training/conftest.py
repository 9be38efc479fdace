"""The training tests' shared fixtures."""

import numpy as np
import pytest

from realm.model.index.mips import MipsIndex
from realm.schemas import BLOCKS, PRETRAIN_EXAMPLES, write_table
from tests.model.corpus_fixture import CORPUS
from tests.model.training.pretrain_fixture import OUTSIDE_CORPUS


@pytest.fixture(scope="module")
def distinct_vectors_index(tmp_path_factory, qa_corpus, blocks_table) -> str:
    """An index of random Gaussian vectors: a random tiny doc tower embeds every block almost
    alike, which leaves the query tower nothing to learn to rank by."""
    vectors = np.random.default_rng(0).normal(size=(blocks_table.num_rows, 128)).astype(np.float32)
    return str(MipsIndex.build(vectors, blocks_table["block_id"].to_numpy()).save(tmp_path_factory.mktemp("index"), 0))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tokenizer, blocks_table) -> tuple[str, str]:
    """(blocks path, examples path): each corpus sentence twice as a pre-training example, its
    title's wordpieces masked (or, for the second copy of the first two, no salient span)."""
    root = tmp_path_factory.mktemp("pretrain")
    blocks_path = write_table(str(root / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    rows = []
    for copy in range(2):
        for i, (_, title, text) in enumerate(CORPUS):
            token_ids, title_ids = tokenizer.encode(text), tokenizer.encode(title)
            start = next(s for s in range(len(token_ids)) if token_ids[s : s + len(title_ids)] == title_ids)
            salient = copy == 0 or i >= 2
            rows.append(
                {
                    "example_id": len(rows),
                    "origin_block_id": OUTSIDE_CORPUS + i,
                    "forbidden_block_ids": [OUTSIDE_CORPUS + i],
                    "text": text,
                    "token_ids": token_ids,
                    "spans": [],
                    "masked_token_positions": list(range(start, start + len(title_ids))) if salient else [],
                }
            )
    examples_path = write_table(str(root / "examples" / "part-0.parquet"), rows, PRETRAIN_EXAMPLES)
    return blocks_path, examples_path
