"""An exponential moving average of the weights being trained (Polyak averaging), which
fine-tuning validates and publishes in place of the last step's weights.

Fine-tuning sees a few thousand questions in small batches: each step's weights carry that
batch's noise, and the best of a few checkpoints is picked by few validation questions. An average
of the steps' weights sits nearer the middle of where SGD wanders and generalises at least as
well (Polyak & Juditsky 1992; Izmailov et al. 2018). The decay at update t is
min(MAX_DECAY, (1 + t) / (3 + t)): each step i taken so far weighs in proportion to i + 2
(Shamir & Zhang 2013's polynomial-decay averaging with eta = 1), so the average leans to the
later steps and the freshly initialised span head's first steps fade out of it; it beat
TensorFlow's `num_updates` ramp (docs/measurements.md, "A longer weight average").

The average lives in float32 beside the parameters (one more copy of the trained weights) and
is saved with each step checkpoint, so a resumed run averages on as an uninterrupted one would
(not with `best/<step>/`, whose components are the average itself).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch

# Past ~2,000 updates the ramp gives way to a fixed horizon of 1,000 steps.
MAX_DECAY = 0.999


def decay_at(update: int) -> float:
    """The share of the old average kept at the `update`-th update (1-based)."""
    return min(MAX_DECAY, (1 + update) / (3 + update))


class WeightAverage:
    """The moving average of `modules`' trainable parameters (named `<module>.<parameter>`)."""

    def __init__(self, modules: Mapping[str, torch.nn.Module]):
        self.names, self.parameters = [], []
        for module_name in sorted(modules):
            for name, parameter in modules[module_name].named_parameters():
                if parameter.requires_grad:
                    self.names.append(f"{module_name}.{name}")
                    self.parameters.append(parameter)
        self.averages = [p.detach().float().clone() for p in self.parameters]
        self.updates = 0

    @torch.no_grad()
    def update(self) -> None:
        """Fold the parameters' current values in; call after each optimizer step."""
        self.updates += 1
        weight = 1.0 - decay_at(self.updates)
        torch._foreach_lerp_(self.averages, [p.detach().float() for p in self.parameters], weight)

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """Inside the block the modules hold the averaged weights; after it, their own again."""
        with torch.no_grad():
            own = [p.detach().clone() for p in self.parameters]
            for parameter, average in zip(self.parameters, self.averages):
                parameter.copy_(average)
        try:
            yield
        finally:
            with torch.no_grad():
                for parameter, value in zip(self.parameters, own):
                    parameter.copy_(value)

    def state_dict(self) -> dict:
        return {"updates": self.updates, "averages": dict(zip(self.names, self.averages))}

    def load_state_dict(self, state: dict) -> None:
        """Take a checkpoint's average; its parameters must be these modules'."""
        averages = state["averages"]
        if sorted(averages) != sorted(self.names):
            missing, unexpected = set(self.names) - set(averages), set(averages) - set(self.names)
            raise ValueError(
                f"the checkpoint's weight average is over other parameters (missing {sorted(missing)[:3]}, "
                f"unexpected {sorted(unexpected)[:3]})"
            )
        self.averages = [averages[name].to(p.device, torch.float32).clone() for name, p in zip(self.names, self.parameters)]
        self.updates = int(state["updates"])
