import numpy as np
import pytest
import torch

from realm.model.index.embed_corpus import load_embeddings
from realm.model.index.pooled_states import PooledStates, publish_pooled_states, reproject_index
from realm.model.index.rebuild import rebuild_index
from realm.model.networks.config import build_component
from realm.model.networks.retriever import Embedder
from realm.schemas import BLOCKS, write_table
from tests.model.corpus_fixture import CORPUS

CPU = torch.device("cpu")
LENGTH = 24


@pytest.fixture
def published(tmp_path, tiny_config, blocks_table):
    """A random tiny doc tower saved as a snapshot, and the blocks it embeds."""
    torch.manual_seed(0)
    tower = build_component(Embedder, tiny_config).eval()
    snapshot = tmp_path / "snapshots" / "0"
    tower.save_pretrained(snapshot)
    blocks = write_table(str(tmp_path / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    return tower, str(snapshot), blocks


def test_a_reprojected_index_holds_the_vectors_the_tower_embeds(published, tmp_path, tiny_config):
    tower, snapshot, blocks = published
    states = publish_pooled_states(tower, tiny_config, blocks, str(tmp_path / "pooled_states"), LENGTH, CPU)
    embedded = rebuild_index(blocks, snapshot, str(tmp_path / "a" / "embeddings"), str(tmp_path / "a" / "index"), 0,
                             tiny_config, None, CPU, LENGTH)
    projected = reproject_index(str(tmp_path / "pooled_states"), snapshot, str(tmp_path / "b" / "embeddings"),
                                str(tmp_path / "b" / "index"), 0, None, LENGTH)
    ids_a, vectors_a = load_embeddings(str(tmp_path / "a" / "embeddings" / "0"))
    ids_b, vectors_b = load_embeddings(str(tmp_path / "b" / "embeddings" / "0"))
    order_a, order_b = np.argsort(ids_a), np.argsort(ids_b)
    assert ids_a[order_a].tolist() == ids_b[order_b].tolist() == sorted(block_id for block_id, _, _ in CORPUS)
    np.testing.assert_allclose(vectors_b[order_b], vectors_a[order_a], rtol=1e-4, atol=1e-5)
    assert projected.endswith("/index/0") and embedded.endswith("/index/0")
    # Published once per BERT and block length: asked again, the same states, not recomputed.
    assert publish_pooled_states(tower, tiny_config, blocks, str(tmp_path / "pooled_states"), LENGTH, CPU) == states
    assert PooledStates.load(states).states.shape == (len(CORPUS), tiny_config.hidden_size)


def test_states_of_another_bert_or_block_length_are_never_read(published, tmp_path, tiny_config):
    tower, snapshot, blocks = published
    publish_pooled_states(tower, tiny_config, blocks, str(tmp_path / "pooled_states"), LENGTH, CPU)
    with pytest.raises(FileNotFoundError, match="no pooled states of the BERT of .* at 16 wordpieces"):
        reproject_index(str(tmp_path / "pooled_states"), snapshot, str(tmp_path / "e"), str(tmp_path / "i"), 0, None, 16)
    with torch.no_grad():
        tower.bert.embeddings.word_embeddings.weight[0, 0] += 1.0
    tower.save_pretrained(tmp_path / "snapshots" / "1")
    with pytest.raises(FileNotFoundError, match=f"at {LENGTH} wordpieces"):
        reproject_index(str(tmp_path / "pooled_states"), str(tmp_path / "snapshots" / "1"), str(tmp_path / "e"),
                        str(tmp_path / "i"), 1, None, LENGTH)


def test_a_block_without_a_state_is_named():
    states = PooledStates(np.array([3, 7], dtype=np.int64), np.zeros((2, 4), dtype=np.float32))
    assert states.lookup(np.array([7, 3])).shape == (2, 4)
    with pytest.raises(KeyError, match="block 5 has no pooled state"):
        states.lookup(np.array([3, 5]))
