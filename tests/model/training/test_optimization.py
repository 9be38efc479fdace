import pytest
import torch
from torch import nn

from realm.model.training.optimization import build_optimizer, build_scheduler


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
