import numpy as np
import pytest
import torch
from torch import nn

from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.retriever import build_retriever
from realm.model.training.loop import (
    batch_rows,
    build_optimizer,
    build_scheduler,
    heldout_split,
    untrained_rows,
    latest_resume_point,
)


def test_optimizer_skips_decay_on_biases_and_layer_norm_and_holds_shared_parameters_once():
    linear, norm = nn.Linear(3, 4), nn.LayerNorm(4)
    optimizer = build_optimizer([nn.Sequential(linear, norm), linear], 1e-3, weight_decay=0.1)
    decay, no_decay = optimizer.param_groups
    assert [p is linear.weight for p in decay["params"]] == [True] and decay["weight_decay"] == 0.1
    assert {id(p) for p in no_decay["params"]} == {id(linear.bias), id(norm.weight), id(norm.bias)}
    assert no_decay["weight_decay"] == 0.0


def test_optimizer_state_resumes_across_freezing_a_module_and_never_moves_frozen_parameters():
    trained, later_frozen = nn.Linear(3, 3), nn.Linear(3, 3)
    optimizer = build_optimizer([trained, later_frozen], 1e-2)
    (trained(torch.ones(1, 3)).sum() + later_frozen(torch.ones(1, 3)).sum()).backward()
    optimizer.step()
    state = optimizer.state_dict()

    later_frozen.requires_grad_(False)
    before = later_frozen.weight.detach().clone()
    resumed = build_optimizer([trained, later_frozen], 1e-2)
    resumed.load_state_dict(state)  # the groups match although part of the model is frozen now
    resumed.zero_grad(set_to_none=True)
    trained(torch.ones(1, 3)).sum().backward()
    resumed.step()
    assert torch.equal(later_frozen.weight, before)


def test_schedule_warms_up_linearly_then_decays_to_zero():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(optimizer, warmup_steps=4, total_steps=12)
    rates = []
    for _ in range(12):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert rates[4:] == sorted(rates[4:], reverse=True) and rates[-1] == pytest.approx(1 / 8)
    assert optimizer.param_groups[0]["lr"] == 0.0


def test_heldout_split_follows_the_example_ids_not_their_rows():
    ids = np.arange(1000, 1100)
    train, heldout = heldout_split(ids, 10)
    assert len(heldout) == 10 and not set(train) & set(heldout)
    assert sorted([*train, *heldout]) == list(range(100))
    # The same examples in another row order (a re-prepare's shards): the same ids held out.
    shuffled = np.random.default_rng(0).permutation(ids)
    assert set(shuffled[heldout_split(shuffled, 10)[1]]) == set(ids[heldout])
    # A re-prepare that adds examples holds out none the smaller set trained on.
    grown = np.arange(1000, 1200)
    assert set(grown[heldout_split(grown, 10)[1]]) <= set(ids[heldout]) | set(range(1100, 1200))
    assert len(heldout_split(ids[:5], 10)[0]) == 1  # never holds out everything


def test_batch_order_is_a_function_of_seed_and_step_and_covers_each_epoch():
    train = np.arange(10, 17)  # 7 rows, batches of 3 straddle epochs
    stream = np.concatenate([batch_rows(train, 3, seed=1, step=s) for s in range(7)])  # 3 epochs
    for epoch in range(3):
        assert sorted(stream[epoch * 7 : (epoch + 1) * 7]) == list(train)
    assert np.array_equal(batch_rows(train, 3, seed=1, step=4), stream[12:15])
    assert not np.array_equal(stream, np.concatenate([batch_rows(train, 3, seed=2, step=s) for s in range(7)]))


def test_untrained_rows_are_exactly_the_training_rows_no_batch_has_drawn_yet():
    train_rows = np.arange(100, 150)
    drawn = np.concatenate([batch_rows(train_rows, 4, 7, step) for step in range(5)])
    untrained = untrained_rows(train_rows, 4, 7, 5)
    assert len(untrained) == 30 and not set(untrained) & set(drawn)
    assert set(untrained) | set(drawn) == set(train_rows)
    assert len(untrained_rows(train_rows, 4, 7, 13)) == 0  # the first epoch is complete


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
