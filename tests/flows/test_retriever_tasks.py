import logging

import torch

from realm.flows.retriever_tasks import build_retriever_index
from realm.model.index.lineage import doc_tower_fingerprint, read_lineage
from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.retriever import build_retriever
from realm.schemas.manifest import read_manifest


def _retriever_checkpoint(root, seed: int, tiny_config) -> str:
    """A retriever checkpoint at step 0, as ICT's 0 steps publish one, its towers drawn from `seed`."""
    torch.manual_seed(seed)
    retriever = build_retriever(tiny_config)
    components = {"query_embedder": retriever.query_embedder, "doc_embedder": retriever.doc_embedder}
    return str(save_checkpoint(root / "checkpoints" / "ict", 0, components))


def test_an_index_is_reused_only_while_built_from_the_same_doc_tower_and_block_length(run_root, tiny_config, caplog):
    checkpoint = _retriever_checkpoint(run_root, 0, tiny_config)
    index = build_retriever_index(str(run_root), "tiny", checkpoint, 64, 2, None)
    built = read_manifest(index)
    assert build_retriever_index(str(run_root), "tiny", checkpoint, 64, 2, None) == index
    assert read_manifest(index) == built  # reused, not built again

    # The retriever trained again (another seed, other settings) publishes the same step.
    retrained = _retriever_checkpoint(run_root, 1, tiny_config)
    with caplog.at_level(logging.WARNING):
        assert build_retriever_index(str(run_root), "tiny", retrained, 64, 2, None) == index
    assert read_lineage(index)["doc_tower"] == doc_tower_fingerprint(f"{retrained}/doc_embedder", 0)
    assert read_lineage(index)["doc_tower"] != built["lineage"]["doc_tower"]
    assert "built from another doc tower: building it again" in caplog.text

    build_retriever_index(str(run_root), "tiny", retrained, 32, 2, None)
    assert read_lineage(index)["max_block_wordpieces"] == 32
