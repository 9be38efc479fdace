"""Fixtures shared across the test packages: the tokenizer, the tiny preset, a tiny blocks
table (tests/model/corpus_fixture.py) and its published artifacts."""

import pyarrow as pa
import pytest
import torch

from realm.model.index.embed_corpus import embed_window
from realm.model.index.mips import MipsIndex
from realm.model.index.rebuild import rebuild_index
from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
from realm.model.tokenization import load_tokenizer
from realm.pipelines.entities import tag_blocks
from realm.pipelines.ner import load_ner
from realm.schemas import BLOCK_ENTITIES, BLOCKS
from realm.schemas.run_layout import RunLayout
from tests.model.corpus_fixture import CORPUS, write_corpus


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


@pytest.fixture(scope="session")
def block_entities_table(blocks_table) -> pa.Table:
    """The test corpus's entities, as `realm prepare`'s entities stage tags them (real spaCy)."""
    return pa.Table.from_pylist(list(tag_blocks(load_ner(), blocks_table.to_pylist())), schema=BLOCK_ENTITIES)


@pytest.fixture(scope="session")
def qa_corpus(tmp_path_factory, tokenizer, blocks_table, block_entities_table, tiny_config) -> tuple[str, str]:
    """(blocks/ artifact, published index/0/) of the test corpus, embedded by a fresh tiny doc
    tower (seeded: the same vectors whichever test builds it first)."""
    root = tmp_path_factory.mktemp("qa")
    write_corpus(str(root / "blocks"), blocks_table, block_entities_table)
    torch.manual_seed(1)
    doc_embedder = build_component(Embedder, tiny_config).eval()
    vectors = embed_window(doc_embedder, tokenizer, blocks_table, 4, torch.device("cpu"), False)
    index_path = MipsIndex.build(vectors, blocks_table["block_id"].to_numpy()).save(root / "index", 0)
    return str(root / "blocks"), str(index_path)


@pytest.fixture
def trained_run(tmp_path, blocks_table, block_entities_table, tiny_config) -> RunLayout:
    """A run root as the main job leaves it: blocks, the doc-tower snapshot of step 0 and the
    index it embedded (blocks cut to 64 wordpieces), a fine-tuned query tower and reader, the model preset."""
    layout = RunLayout.at(tmp_path / "run")
    layout.record_model_preset("random-2l")
    write_corpus(layout.blocks, blocks_table, block_entities_table)
    snapshot = layout.snapshots / "0"
    build_component(Embedder, tiny_config).save_pretrained(snapshot)
    index = rebuild_index(layout.blocks, str(snapshot), layout.embeddings, layout.index, 0, tiny_config,
                          keep=2, device=torch.device("cpu"), max_block_wordpieces=64)
    components = {"query_embedder": build_component(Embedder, tiny_config), "reader": build_reader(tiny_config)}
    save_checkpoint(layout.checkpoints("finetune"), 4, components, extra={"index_path": index})
    return layout
