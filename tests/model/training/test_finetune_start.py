import dataclasses

import torch

from realm.model.networks.checkpoint import load_components, save_checkpoint
from realm.model.networks.config import build_component
from realm.model.networks.encoder import build_encoder
from realm.model.networks.retriever import Embedder
from realm.model.training.finetune_start import WARM_START
from tests.model.training.finetune_fixture import CONFIG, train as _train, warmed_up as _warmed_up


def test_a_fresh_run_starts_from_the_pretrained_query_tower_and_encoder(qa_corpus, tmp_path, tiny_config):
    pretrained = {
        "query_embedder": build_component(Embedder, tiny_config),
        "doc_embedder": build_component(Embedder, tiny_config),
        "encoder": build_encoder(tiny_config),
    }
    init = save_checkpoint(tmp_path / "pretrain", 100, pretrained)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init)
    )
    started = load_components(result["checkpoint"])
    assert sorted(started) == ["query_embedder", "reader"]
    for key, value in pretrained["query_embedder"].state_dict().items():
        assert torch.equal(started["query_embedder"].state_dict()[key], value), key
    for key, value in pretrained["encoder"].bert.state_dict().items():
        assert torch.equal(started["reader"].bert.state_dict()[key], value), key


def test_the_checkpoint_fine_tuning_started_from_outlives_pretraining_retention(qa_corpus, tmp_path, tiny_config):
    pretrained = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    init = save_checkpoint(tmp_path / "pretrain", 100, pretrained)
    _train(qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init))
    for step in (200, 300):  # pre-training resumed later, keeping one checkpoint
        save_checkpoint(tmp_path / "pretrain", step, pretrained, keep=1)
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == ["100", "300"]


def test_the_query_tower_keeps_the_depth_pooling_and_scale_of_its_checkpoint(qa_corpus, tmp_path, tiny_config):
    """A sentence-encoder start (deeper than the preset, mean-pooled, scaled) fine-tunes as it was built."""
    tower_config = dataclasses.replace(tiny_config, num_layers=3, retrieval_pooling="mean", retrieval_scale=20.0, dropout=0.0)
    towers = {name: build_component(Embedder, tower_config) for name in ("query_embedder", "doc_embedder")}
    init = save_checkpoint(tmp_path / "ict", 0, towers)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init)
    )
    query_tower = load_components(result["checkpoint"])["query_embedder"]
    assert query_tower.pooling == "mean" and query_tower.scale == 20.0 and query_tower.config.num_hidden_layers == 3
    assert query_tower.config.hidden_dropout_prob == tiny_config.dropout  # the preset's, not the checkpoint's


def test_reader_init_gives_the_ablations_their_mixed_starting_points(qa_corpus, tmp_path, tiny_config):
    """REALM retriever + baseline encoder: the query tower from one checkpoint, the reader from
    another's encoder, or from the warm start when that one (ICT's) has no encoder."""
    realm = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    other_encoder = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    ict = {"query_embedder": build_component(Embedder, tiny_config), "doc_embedder": build_component(Embedder, tiny_config)}
    paths = {name: str(save_checkpoint(tmp_path / name, 1, components))
             for name, components in (("realm", realm), ("other", other_encoder), ("ict", ict))}
    no_steps = CONFIG.model_copy(update={"epochs": 0})

    mixed, _ = _train(qa_corpus, tmp_path / "mixed", tiny_config, no_steps, init_checkpoint=paths["realm"], reader_init=paths["other"])
    started = load_components(mixed["checkpoint"])
    for key, value in realm["query_embedder"].state_dict().items():
        assert torch.equal(started["query_embedder"].state_dict()[key], value), key
    for key, value in other_encoder["encoder"].bert.state_dict().items():
        assert torch.equal(started["reader"].bert.state_dict()[key], value), key

    for name, reader_init in (("from-ict", paths["ict"]), ("warm-start", WARM_START)):
        baseline, _ = _train(qa_corpus, tmp_path / name, tiny_config, no_steps, init_checkpoint=paths["realm"], reader_init=reader_init)
        reader = load_components(baseline["checkpoint"])["reader"].bert.state_dict()
        assert not all(torch.equal(reader[k], v) for k, v in realm["encoder"].bert.state_dict().items()), name


def test_a_warmed_up_reader_starts_fine_tuning_whole_span_head_included(qa_corpus, tmp_path, tiny_config):
    warmed = _warmed_up(tiny_config)
    init = save_checkpoint(tmp_path / "warmup", 7, warmed)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init)
    )
    started = load_components(result["checkpoint"])
    for name in ("query_embedder", "reader"):
        for key, value in warmed[name].state_dict().items():
            assert torch.equal(started[name].state_dict()[key], value), f"{name}.{key}"


def test_reader_dropout_sets_the_readers_hidden_dropout_alone_and_is_saved_with_it(qa_corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update={"epochs": 0, "reader_dropout": 0.3})
    result, _ = _train(qa_corpus, tmp_path, dataclasses.replace(tiny_config, dropout=0.05), config)
    saved = load_components(result["checkpoint"])
    assert saved["reader"].config.hidden_dropout_prob == 0.3
    assert saved["reader"].config.attention_probs_dropout_prob == 0.05
    assert saved["query_embedder"].config.hidden_dropout_prob == 0.05
    assert {m.p for m in saved["reader"].bert.encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.3, 0.05}
