import copy

import torch

from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.device import autocast, cast_linears_for_autocast
from realm.model.networks.retriever import Embedder


def test_linears_cast_once_give_the_bit_identical_autocast_forward(tokenizer):
    config = ModelConfig.preset("random-2l", dropout=0.0, cpu_bf16_autocast=True)
    torch.manual_seed(0)
    tower = build_component(Embedder, config).eval()
    cast = copy.deepcopy(tower)
    cpu = torch.device("cpu")
    cast_linears_for_autocast(cast, cpu, config.cpu_bf16_autocast)
    ids = torch.tensor([[tokenizer.cls_id, *tokenizer.encode("who wrote the first algorithm"), tokenizer.sep_id]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    with torch.inference_mode(), autocast(cpu, config.cpu_bf16_autocast):
        assert torch.equal(tower(**inputs), cast(**inputs))
    assert cast.projection.weight.dtype == torch.bfloat16 and cast.bert.embeddings.LayerNorm.weight.dtype == torch.float32


def test_without_autocast_nothing_is_cast():
    config = ModelConfig.preset("random-2l", cpu_bf16_autocast=False)
    tower = build_component(Embedder, config)
    cast_linears_for_autocast(tower, torch.device("cpu"), config.cpu_bf16_autocast)
    assert {p.dtype for p in tower.parameters()} == {torch.float32}
