import pytest
import torch

from realm.model.training.weight_average import MAX_DECAY, WeightAverage, decay_at


def _modules() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    frozen = torch.nn.Linear(2, 2)
    frozen.weight.requires_grad_(False)
    return {"b": torch.nn.Linear(3, 1), "a": frozen}


def test_the_decay_ramps_as_polynomial_decay_averaging_and_is_capped():
    assert decay_at(1) == pytest.approx(2 / 4)
    assert decay_at(97) == pytest.approx(98 / 100)
    assert decay_at(10**6) == MAX_DECAY


def test_every_step_weighs_in_proportion_to_its_number():
    """After t updates the average is (6 · x_0 + Σ 2(i + 2) · x_i over the steps i = 1..t) /
    ((t + 2)(t + 3)), x_0 the starting weights: the weights sum to 1."""
    modules = _modules()
    average = WeightAverage(modules)
    weight = modules["b"].weight
    start = weight.detach().clone()
    values = [3.0, -1.0, 0.5, 2.0, -4.0]
    for value in values:
        with torch.no_grad():
            weight.fill_(value)
        average.update()
    t = len(values)
    expected = (6 * start + sum(2 * (i + 2) * v for i, v in enumerate(values, start=1))) / ((t + 2) * (t + 3))
    assert torch.allclose(average.averages[1], expected)


def test_the_average_is_the_ramped_moving_average_of_the_trainable_parameters():
    modules = _modules()
    average = WeightAverage(modules)
    assert average.names == ["a.bias", "b.weight", "b.bias"]  # by module name; frozen weights left out
    weight = modules["b"].weight
    expected = weight.detach().clone()
    for update, value in enumerate([1.0, -2.0, 4.0], start=1):
        with torch.no_grad():
            weight.fill_(value)
        average.update()
        expected = decay_at(update) * expected + (1 - decay_at(update)) * value
    assert torch.allclose(average.averages[1], expected)


def test_the_modules_hold_the_average_inside_the_block_and_their_own_weights_after_it_even_on_error():
    modules = _modules()
    average = WeightAverage(modules)
    own = {name: p.detach().clone() for name, p in modules["b"].named_parameters()}
    with torch.no_grad():
        modules["b"].weight.add_(1.0)
    average.update()
    trained = modules["b"].weight.detach().clone()
    with pytest.raises(RuntimeError, match="inside"):
        with average.swapped_in():
            assert torch.equal(modules["b"].weight, average.averages[1])
            assert not torch.equal(modules["b"].weight, trained)
            raise RuntimeError("inside")
    assert torch.equal(modules["b"].weight, trained)
    assert torch.equal(modules["b"].bias, own["bias"])


def test_a_saved_average_loads_back_and_one_over_other_parameters_is_refused():
    modules = _modules()
    average = WeightAverage(modules)
    with torch.no_grad():
        modules["b"].weight.mul_(3.0)
    average.update()
    restored = WeightAverage(modules)
    restored.load_state_dict(average.state_dict())
    assert restored.updates == 1
    assert all(torch.equal(x, y) for x, y in zip(restored.averages, average.averages))
    without_a = {"updates": 1, "averages": {"b.weight": average.averages[1], "b.bias": average.averages[2]}}
    with pytest.raises(ValueError, match=r"missing \['a.bias'\]"):
        WeightAverage(modules).load_state_dict(without_a)
