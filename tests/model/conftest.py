"""Shared fixtures of the model tests: the tokenizer, the tiny preset, a tiny blocks table."""

import pyarrow as pa
import pytest
import torch

from realm.model.config import ModelConfig
from realm.model.tokenization import load_tokenizer
from realm.schemas import BLOCKS
from tests.model.corpus_fixture import CORPUS

@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="session")
def tiny_config() -> ModelConfig:
    return ModelConfig.preset("tiny")


@pytest.fixture(scope="session")
def blocks_table(tokenizer) -> pa.Table:
    rows = []
    for block_id, title, text in CORPUS:
        title_ids, body_ids = tokenizer.encode(title), tokenizer.encode(text)
        rows.append(
            {
                "block_id": block_id,
                "doc_id": f"test:{title}",
                "block_index": 0,
                "title": title,
                "text": text,
                "sentence_starts": [0],
                "title_token_ids": title_ids,
                "body_token_ids": body_ids,
                "num_tokens": 3 + len(title_ids) + len(body_ids),
            }
        )
    return pa.Table.from_pylist(rows, schema=BLOCKS)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
