import dataclasses
import logging
import random
import shutil

import numpy as np
import pytest
import torch
import transformers

from realm.model.networks.checkpoint import (
    best_checkpoint,
    checkpoint_inputs,
    checkpoint_paths,
    latest_checkpoint,
    load_components,
    restore_training_state,
    save_checkpoint,
)
from realm.model.networks.encoder import build_encoder
from realm.model.networks.inputs import BertInputs
from realm.model.networks.marginal import marginal_log_likelihood
from realm.model.networks.retriever import Retriever, build_retriever, relevance_scores

BATCH, K, LENGTH = 2, 3, 12


@pytest.fixture
def small_vocab_config(tiny_config):
    """The tiny preset with a 2k vocabulary: AdamW over 3 x 30522-row embeddings is most of the cost."""
    return dataclasses.replace(tiny_config, vocab_size=2048)


def _fresh_components(config):
    torch.manual_seed(0)
    retriever = build_retriever(config)
    return {
        "query_embedder": retriever.query_embedder,
        "doc_embedder": retriever.doc_embedder,
        "encoder": build_encoder(config),
    }


def _optimizer(components):
    params = [p for model in components.values() for p in model.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))
    return optimizer, scheduler


def _inputs(n: int) -> BertInputs:
    ids = torch.randint(1000, 2000, (n, LENGTH))
    return BertInputs(ids, torch.ones_like(ids), torch.zeros_like(ids))


def _train_step(components, optimizer, scheduler) -> float:
    """A REALM-shaped step whose data and dropout draw on all three RNGs."""
    for model in components.values():
        model.train()
    retriever = Retriever(components["query_embedder"], components["doc_embedder"])
    queries, docs, joint = _inputs(BATCH), _inputs(BATCH * K), _inputs(BATCH * K)
    position = int(np.random.randint(1, LENGTH - 1))
    targets = torch.full((BATCH * K, 1), random.randrange(1000, 2000))
    joint.input_ids[:, position] = 103  # [MASK]
    f = relevance_scores(retriever.embed_queries(queries), retriever.embed_passages(docs).view(BATCH, K, -1))
    log_p = components["encoder"].masked_log_likelihood(
        joint, torch.full((BATCH * K, 1), position), targets, torch.ones(BATCH * K, 1, dtype=torch.bool)
    )
    loss = -marginal_log_likelihood(f, log_p.view(BATCH, K)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_resume_gives_the_same_losses_as_an_uninterrupted_run(small_vocab_config, tmp_path):
    assert small_vocab_config.dropout > 0  # dropout on, so the torch RNG state matters

    components = _fresh_components(small_vocab_config)
    optimizer, scheduler = _optimizer(components)
    _seed_all(7)
    uninterrupted = [_train_step(components, optimizer, scheduler) for _ in range(4)]

    components = _fresh_components(small_vocab_config)
    optimizer, scheduler = _optimizer(components)
    _seed_all(7)
    first_half = [_train_step(components, optimizer, scheduler) for _ in range(2)]
    save_checkpoint(tmp_path, 2, components, optimizer, scheduler, extra={"examples_seen": 4})

    _seed_all(12345)  # the restarted process starts from other RNG states
    path = latest_checkpoint(tmp_path)
    components = load_components(path)
    optimizer, scheduler = _optimizer(components)
    state = restore_training_state(path, optimizer, scheduler)
    assert state.step == 2 and state.extra == {"examples_seen": 4}
    second_half = [_train_step(components, optimizer, scheduler) for _ in range(2)]

    assert first_half + second_half == uninterrupted


def test_round_trip_restores_every_component_exactly(small_vocab_config, tmp_path):
    components = _fresh_components(small_vocab_config)
    path = save_checkpoint(tmp_path, 5, components)
    assert path == tmp_path / "5"
    loaded = load_components(path)
    assert set(loaded) == set(components)
    for name, model in components.items():
        assert type(loaded[name]) is type(model)
        for (key, want), (_, got) in zip(model.state_dict().items(), loaded[name].state_dict().items()):
            assert torch.equal(want, got), f"{name}.{key}"


def test_components_saved_in_half_precision_load_as_float32(small_vocab_config, tmp_path):
    """transformers 5 would load them in the files' float16: trained on, AdamW's small updates vanish."""
    components = _fresh_components(small_vocab_config)
    path = save_checkpoint(tmp_path, 1, {name: model.half() for name, model in components.items()})
    loaded = load_components(path)
    for name, model in loaded.items():
        assert {p.dtype for p in model.parameters()} == {torch.float32}, name
        for (key, want), (_, got) in zip(components[name].state_dict().items(), model.state_dict().items()):
            assert torch.equal(want.float(), got), f"{name}.{key}"


def test_loading_a_checkpoint_prints_no_library_progress_bars(small_vocab_config, tmp_path, capfd):
    """`realm evaluate` and `realm ask` load checkpoints: transformers' "Loading weights" bars
    are noise in a user's output and in the flow logs."""
    transformers.utils.logging.enable_progress_bar()
    path = save_checkpoint(tmp_path, 1, _fresh_components(small_vocab_config))
    capfd.readouterr()
    load_components(path)
    assert "Loading weights" not in capfd.readouterr().err


def test_latest_checkpoint_ignores_incomplete_ones(small_vocab_config, tmp_path):
    components = {"query_embedder": _fresh_components(small_vocab_config)["query_embedder"]}
    save_checkpoint(tmp_path, 1, components)
    (tmp_path / ".tmp-9-1234" / "query_embedder").mkdir(parents=True)  # a crash mid-save
    (tmp_path / "7").mkdir()  # no training state: incomplete
    assert latest_checkpoint(tmp_path) == tmp_path / "1"
    assert latest_checkpoint(tmp_path / "missing") is None


def _truncate(path):
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    return f"{path}: size {size // 2}, manifest.json says {size}"


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))  # same size: only the sha256 can tell
    return f"{path}: sha256 does not match manifest.json (corrupt)"


def _delete(path):
    path.unlink()
    return f"{path}: missing, manifest.json lists it"


@pytest.mark.parametrize("damage", [_truncate, _flip_a_byte, _delete])
def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning_naming_the_file(small_vocab_config, tmp_path, caplog, damage):
    components = {"query_embedder": _fresh_components(small_vocab_config)["query_embedder"]}
    for step in (1, 2):
        save_checkpoint(tmp_path, step, components)
    expected = damage(tmp_path / "2" / "query_embedder" / "model.safetensors")
    with caplog.at_level(logging.WARNING, logger="realm.model.publish"):
        assert latest_checkpoint(tmp_path) == tmp_path / "1"
    assert [record.getMessage() for record in caplog.records] == [f"{expected}; falling back to an older step"]


def test_a_damaged_best_checkpoint_falls_back_to_the_newest(small_vocab_config, tmp_path, caplog):
    components = {"query_embedder": _fresh_components(small_vocab_config)["query_embedder"]}
    save_checkpoint(tmp_path, 4, components)
    best = save_checkpoint(tmp_path / "best", 2, components)
    assert best_checkpoint(tmp_path) == best
    size = (best / "training_state.pt").stat().st_size
    (best / "training_state.pt").write_bytes(b"")
    assert best_checkpoint(tmp_path) == tmp_path / "4"
    assert f"{best}/training_state.pt: size 0, manifest.json says {size}" in caplog.text


def test_a_checkpoint_written_before_manifests_counts_by_its_training_state(small_vocab_config, tmp_path):
    components = {"query_embedder": _fresh_components(small_vocab_config)["query_embedder"]}
    save_checkpoint(tmp_path, 1, components)
    older_layout = save_checkpoint(tmp_path, 2, components)
    (older_layout / "manifest.json").unlink()
    assert latest_checkpoint(tmp_path) == older_layout
    (older_layout / "training_state.pt").unlink()  # nor manifest nor training state: never complete
    assert latest_checkpoint(tmp_path) == tmp_path / "1"



def test_recorded_paths_resolve_inside_a_copied_run_and_inputs_are_read_from_the_manifest(tmp_path, tiny_config):
    run = tmp_path / "run"
    (run / "index" / "3").mkdir(parents=True)
    components = {"query_embedder": build_retriever(tiny_config).query_embedder}
    paths = {"index": run / "index" / "3", "started_from": [run / "checkpoints" / "ict" / "0"], "none": None}
    save_checkpoint(run / "checkpoints" / "finetune", 4, components, paths=paths, inputs={"seed": 1})
    save_checkpoint(run / "checkpoints" / "finetune" / "best", 2, components, paths=paths)
    shutil.copytree(run, tmp_path / "copy")
    shutil.rmtree(run)

    copy = tmp_path / "copy"
    expected = {"index": str(copy / "index" / "3"), "started_from": [str(copy / "checkpoints" / "ict" / "0")], "none": None}
    assert checkpoint_paths(copy / "checkpoints" / "finetune" / "4") == expected
    assert checkpoint_paths(copy / "checkpoints" / "finetune" / "best" / "2") == expected
    assert restore_training_state(copy / "checkpoints" / "finetune" / "4").paths == expected
    assert checkpoint_inputs(copy / "checkpoints" / "finetune" / "4") == {"seed": 1}
    assert checkpoint_inputs(copy / "checkpoints" / "finetune" / "best" / "2") is None
