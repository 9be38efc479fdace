import torch

from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.retriever import build_retriever
from realm.model.training.optimization import build_optimizer
from realm.model.training.trainer import latest_resume_point


def test_resume_point_loads_components_then_restores_optimizer_and_rng(tmp_path, tiny_config):
    assert latest_resume_point(tmp_path) is None
    retriever = build_retriever(tiny_config)
    optimizer = build_optimizer([retriever.query_embedder], 1e-3)
    ones = torch.ones(1, 3, dtype=torch.long)
    retriever.query_embedder(input_ids=ones, attention_mask=ones, token_type_ids=ones).sum().backward()
    optimizer.step()
    components = {"query_embedder": retriever.query_embedder, "doc_embedder": retriever.doc_embedder}
    save_checkpoint(tmp_path, 7, components, optimizer, extra={"note": 1})
    expected_draw = torch.rand(3)

    resume = latest_resume_point(tmp_path)
    assert set(resume.components) == {"query_embedder", "doc_embedder"}
    restored = build_optimizer([resume.components["query_embedder"]], 1e-3)
    state = resume.restore(restored, None)
    assert (state.step, state.extra) == (7, {"note": 1})
    assert torch.equal(torch.rand(3), expected_draw)
    assert restored.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()
