"""How every trainer updates its weights: AdamW with BERT's no-decay rule, a linear
warmup/decay schedule, and one clipped update that refuses a non-finite loss."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from realm.model.training.distributed import ONE_PROCESS, World, sum_gradients, sum_loss


def build_optimizer(
    modules_in_order: Sequence[nn.Module],
    learning_rate: float,
    weight_decay: float = 0.01,
    learning_rates: Sequence[float] | None = None,
    start_steps: Sequence[int] | None = None,
) -> torch.optim.AdamW:
    """AdamW over the parameters of `modules_in_order`, biases and LayerNorm weights (every
    parameter with < 2 dims) without weight decay, as BERT trains; `learning_rates`, one per
    module, gives a module its own peak rate (a fresh head beside a warm-started body).

    `start_steps`, one per module: the step a module frozen until then starts training (0:
    from the first), kept as its groups' `start_step` for `build_scheduler`. Each module has
    its own pair of parameter groups, decay then no-decay, in module order (module i: groups
    2i and 2i + 1), so a schedule can treat a module on its own.

    Frozen parameters are in the groups too: they never get a gradient, so AdamW neither moves
    them nor keeps state for them, and the groups have the same size whichever parts are
    frozen, so a run can resume with its doc tower frozen after training it (or the reverse).

    The order of the modules fixes the order of the optimizer's parameters, which its saved
    state refers to: pass them in the same order on resume. A parameter shared by two modules
    (tied embeddings, or a head listed before the model holding it) is optimised once, in the
    groups of its first module (a later module's groups may be empty). Parameters must be on
    CPU or CUDA (fused AdamW).
    """
    rates = list(learning_rates) if learning_rates is not None else [learning_rate] * len(modules_in_order)
    if len(rates) != len(modules_in_order):
        raise ValueError(f"{len(rates)} learning rates for {len(modules_in_order)} modules")
    starts = list(start_steps) if start_steps is not None else [0] * len(modules_in_order)
    if len(starts) != len(modules_in_order):
        raise ValueError(f"{len(starts)} start steps for {len(modules_in_order)} modules")
    seen: set[int] = set()
    param_groups = []
    for module, rate, start in zip(modules_in_order, rates, starts):
        decay, no_decay = [], []
        for parameter in module.parameters():
            if id(parameter) in seen:
                continue
            seen.add(id(parameter))
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
        param_groups += [
            {"params": decay, "weight_decay": weight_decay, "lr": rate, "start_step": start},
            {"params": no_decay, "weight_decay": 0.0, "lr": rate, "start_step": start},
        ]
    # fused: one kernel per parameter group instead of ~10 ops per tensor, a large share of a CPU step.
    return torch.optim.AdamW(param_groups, lr=learning_rate, fused=True)


# BERT's and ORQA's optimizers clip the global gradient norm at 1.0; a fresh head (MLM, span
# scorer, projection) otherwise sends a few huge early updates into the warm-started body.
MAX_GRAD_NORM = 1.0


def apply_update(
    loss: torch.Tensor, optimizer: torch.optim.Optimizer, scheduler, what: str, step: int,
    world: World = ONE_PROCESS, weight: float = 1.0,
) -> float:
    """One optimizer update from `loss`: backward, clip to MAX_GRAD_NORM, step, schedule.

    With several processes (`world`), losses and gradients are summed across ranks, each
    rank's times `weight` (`distributed.sum_gradients`), before the clip, so every rank takes
    the update of the whole batch. `weight` is what makes Σ over ranks of weight × loss the
    batch's loss: the rank's share of the batch where `loss` is its shard's mean (pre-training),
    1 where `loss` already divides by the whole batch's count (fine-tuning), 1/N where each
    rank's loss reaches every rank's rows and is scaled by its share × N (ICT).

    A non-finite loss raises before any weight changes, naming `what` and the `step` it would
    have become, so the last checkpoint is still a good one. Returns the loss value (the whole
    batch's).
    """
    value = sum_loss(world, loss.item(), weight)
    if not math.isfinite(value):
        raise FloatingPointError(f"{what} loss is {value} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    sum_gradients(world, [p for group in optimizer.param_groups for p in group["params"]], weight)
    torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], MAX_GRAD_NORM)
    optimizer.step()
    scheduler.step()
    return value


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    total_steps: int,
    start_warmup_steps: int = 0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning rate rising linearly from 0 over `warmup_steps`, then falling linearly to 0 at
    `total_steps` (BERT's and REALM's schedule).

    A parameter group with a `start_step` (`build_optimizer`'s `start_steps`) later than 0 has
    rate 0 before it, then rising linearly over `start_warmup_steps` to the schedule's: AdamW's
    first updates after a start are ~lr per weight whatever the gradient, so a tower unfrozen
    mid-run at the full rate takes its largest steps first."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)  # never exactly 0: the first step moves
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    starts = [group.get("start_step", 0) for group in optimizer.param_groups]
    if not any(starts):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def started(start: int):
        def group_factor(step: int) -> float:
            if step < start:
                return 0.0
            ramp = min(1.0, (step - start + 1) / (start_warmup_steps + 1)) if start else 1.0
            return factor(step) * ramp

        return group_factor

    return torch.optim.lr_scheduler.LambdaLR(optimizer, [started(start) for start in starts])
