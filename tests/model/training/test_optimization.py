import pytest
import torch
from torch import nn

from realm.model.training.optimization import build_optimizer, build_scheduler


def test_optimizer_skips_decay_on_biases_and_layer_norm_and_holds_shared_parameters_once():
    linear, norm = nn.Linear(3, 4), nn.LayerNorm(4)
    optimizer = build_optimizer([nn.Sequential(linear, norm), linear], 1e-3, weight_decay=0.1)
    decay, no_decay, *second_module = optimizer.param_groups
    assert [p is linear.weight for p in decay["params"]] == [True] and decay["weight_decay"] == 0.1
    assert {id(p) for p in no_decay["params"]} == {id(linear.bias), id(norm.weight), id(norm.bias)}
    assert no_decay["weight_decay"] == 0.0
    # The second module's parameters were the first's: its groups hold none of them again.
    assert [group["params"] for group in second_module] == [[], []]


def test_each_module_has_its_own_groups_at_its_own_rate_even_when_rates_are_equal():
    first, second, third = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)
    optimizer = build_optimizer([first, second, third], 1e-3, learning_rates=[1e-3, 1e-3, 5e-3])
    assert [group["lr"] for group in optimizer.param_groups] == [1e-3, 1e-3, 1e-3, 1e-3, 5e-3, 5e-3]
    assert [group["params"] for group in optimizer.param_groups[2:4]] == [[second.weight], [second.bias]]


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


def test_a_group_that_starts_later_warms_up_from_zero_on_the_schedule_the_others_follow():
    optimizer = torch.optim.SGD(
        [{"params": [nn.Parameter(torch.zeros(1))]}, {"params": [nn.Parameter(torch.zeros(1))], "start_step": 3}], lr=1.0
    )
    scheduler = build_scheduler(optimizer, warmup_steps=0, total_steps=10, start_warmup_steps=2)
    rates = []
    for _ in range(6):
        rates.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    assert [early for early, _ in rates] == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    assert [late for _, late in rates] == pytest.approx([0.0, 0.0, 0.0, 0.7 / 3, 0.6 * 2 / 3, 0.5])


def test_start_steps_must_name_every_module_and_reach_their_groups():
    with pytest.raises(ValueError, match="2 start steps for 1 modules"):
        build_optimizer([nn.Linear(2, 2)], 1e-3, start_steps=[0, 3])
    optimizer = build_optimizer([nn.Linear(2, 2), nn.Linear(2, 2)], 1e-3, start_steps=[3, 0])
    assert [group["start_step"] for group in optimizer.param_groups] == [3, 3, 0, 0]
