"""The CLI tests' fixture: an Answerer over the tiny test corpus, with fresh tiny towers."""

import pytest
import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.mips import MipsIndex
from realm.model.networks.config import build_component
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
from realm.model.qa.answering import Answerer
from realm.model.qa.question_retrieval import DenseRetriever


@pytest.fixture
def answerer(qa_corpus, tokenizer, tiny_config) -> Answerer:
    torch.manual_seed(0)
    blocks_path, index_path = qa_corpus
    retriever = DenseRetriever(
        build_component(Embedder, tiny_config).eval(), MipsIndex.load(index_path), tokenizer, tiny_config, torch.device("cpu")
    )
    blocks = BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True)
    return Answerer(retriever, build_reader(tiny_config).eval(), blocks, tokenizer, tiny_config, torch.device("cpu"))
