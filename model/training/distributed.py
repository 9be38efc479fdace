"""Training on N processes (torchrun): who this process is, the share of a batch it reads, the
gradients and losses it averages with the others, and how rank 0 hands the other ranks a stage.

One world, one leader. Rank 0 runs the command as in one process (the Prefect flow, its
tasks, every file written); when it builds a trainer it first hands the same trainer's recipe
to every other rank (`lead`), and those ranks, waiting in `follow`, build it and train beside
it, writing nothing but their shares of a refresh's embeddings (`refresh_shares`). The control
messages (recipes, the checkpoint to resume, each step's index swap) travel over a gloo group
whatever the device, so a rank waiting for rank 0 to finish preparing the corpus blocks on a
socket, not a GPU kernel; gradients over the default group (nccl on CUDA, gloo on CPU).

Each step's global batch is `example_order.batch_rows`' for one process; rank r reads rows
r, r + N, ... of it (`World.shard`), so N ranks read exactly the one-process batch. Gradients
are summed across ranks, each rank's weighted so that the sum is the gradient of the
one-process batch's loss (`sum_gradients`; `optimization.apply_update` says which weight each
stage passes); clipping, AdamW and the schedule then run on the same numbers on every rank, so
the weights stay identical without being sent again. At the start of every step the ranks meet
on the control group (`barrier`), so while rank 0 alone validates, evaluates or publishes, the
others wait on its long timeout rather than in a gradient all-reduce's.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

# How long a rank waits for rank 0's next message: rank 0 may prepare a corpus for hours
# between two stages. A rank that dies does not make the others wait: torchrun stops them.
CONTROL_TIMEOUT = timedelta(days=7)
# Gradients travel in flat buffers of at most this many elements (100 MB of float32).
BUCKET_ELEMENTS = 25_000_000


@dataclass(frozen=True)
class World:
    """This process's rank among `size` training processes (rank 0 leads; size 1: one process)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def shard(self, rows: np.ndarray) -> np.ndarray:
        """This rank's rows of a global batch: every `size`-th, from its rank."""
        if len(rows) < self.size:
            raise ValueError(f"a batch of {len(rows)} examples cannot be shared by {self.size} processes")
        return rows[self.rank :: self.size]

    def device(self, device: torch.device) -> torch.device:
        """A CUDA device becomes this rank's GPU (its local rank's)."""
        return torch.device("cuda", self.local_rank) if self.size > 1 and device.type == "cuda" else device


ONE_PROCESS = World()
_control: dist.ProcessGroup | None = None
_background: dist.ProcessGroup | None = None


def world_from_environment() -> World:
    """The world torchrun describes in RANK, WORLD_SIZE and LOCAL_RANK (one process without them)."""
    return World(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)))


def backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def join(world: World, device: torch.device) -> None:
    """Join torchrun's process group (its rendezvous: MASTER_ADDR/PORT in the environment)."""
    global _control, _background
    if world.size == 1 or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(world.local_rank)
    dist.init_process_group(backend(device))
    _control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    _background = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)


def background_group() -> dist.ProcessGroup:
    """The gloo group of the work ranks do in a thread beside training (a refresh's shares of the
    corpus, `realm.model.training.refresh_shares`): a group of its own, as the collectives of one
    group must come in the same order on every rank, which two threads sharing it could not promise."""
    if _background is None:
        raise RuntimeError("not joined to a process group of several ranks")
    return _background


def barrier(world: World) -> None:
    """Every rank waits here until all have arrived, on the control group's timeout."""
    if world.size > 1:
        dist.barrier(group=_control)


def leave() -> None:
    global _control, _background
    if dist.is_initialized():
        dist.destroy_process_group()
    _control = _background = None


def broadcast(world: World, value=None):
    """Rank 0's `value` (any picklable object), on every rank."""
    if world.size == 1:
        return value
    message = [value if world.leader else None]
    dist.broadcast_object_list(message, src=0, group=_control)
    return message[0]


def sum_loss(world: World, value: float, weight: float) -> float:
    """Σ over ranks of `weight` × `value`: with each weight a rank's share of the batch, the
    loss of the whole batch, the same float on every rank."""
    if world.size == 1:
        return value
    total = torch.tensor([value * weight], dtype=torch.float64)
    dist.all_reduce(total, group=_control)
    return float(total.item())


def sum_gradients(world: World, parameters: Iterable[torch.nn.Parameter], weight: float) -> None:
    """Replace every gradient by Σ over ranks of `weight` × the rank's gradient. A parameter
    with a gradient on some rank and none on another (a block only one rank's examples
    reached) counts as zero there; one with a gradient on no rank keeps none, so AdamW skips
    it as it does in one process."""
    if world.size == 1:
        return
    parameters = [p for p in parameters if p.requires_grad]
    if not parameters:
        return
    device = parameters[0].device
    has_gradient = torch.tensor([p.grad is not None for p in parameters], dtype=torch.int32, device=device)
    dist.all_reduce(has_gradient)
    reached = [p for p, count in zip(parameters, has_gradient.tolist()) if count]
    for parameter in reached:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    for bucket in _buckets(reached):
        grads = [p.grad for p in bucket]
        flat = torch._utils._flatten_dense_tensors(grads).mul_(weight)
        dist.all_reduce(flat)
        for grad, summed in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
            grad.copy_(summed)


def sum_counts(world: World, count: torch.Tensor) -> torch.Tensor:
    """Σ over ranks of `count` (a tensor on this rank's device), e.g. the questions a loss is a
    mean over, so each rank can divide its share's sum by the whole batch's count."""
    if world.size == 1:
        return count
    total = count.detach().clone()
    dist.all_reduce(total)
    return total


def gather_rows(world: World, rows: torch.Tensor) -> torch.Tensor:
    """Every rank's `rows` [n_r, ...] stacked in rank order, on every rank, with the gradient
    flowing back to the rank that owns each row: what a loss over the whole batch's rows (ICT's
    in-batch negatives) needs when each rank embeds only its shard. The shards may differ in
    length by one (`World.shard`)."""
    if world.size == 1:
        return rows
    return _GatherRows.apply(rows, world)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows: torch.Tensor, world: World) -> torch.Tensor:
        counts = torch.tensor([len(rows)], dtype=torch.int64, device=rows.device)
        gathered_counts = [torch.zeros_like(counts) for _ in range(world.size)]
        dist.all_gather(gathered_counts, counts)
        counts = [int(c.item()) for c in gathered_counts]
        padded = rows.new_zeros((max(counts), *rows.shape[1:]))
        padded[: len(rows)] = rows
        gathered = [torch.empty_like(padded) for _ in range(world.size)]
        dist.all_gather(gathered, padded.contiguous())
        ctx.world, ctx.counts = world, counts
        return torch.cat([part[:count] for part, count in zip(gathered, counts)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # Each rank's loss reached every gathered row: a row's gradient is the sum over ranks.
        total = grad.contiguous().clone()
        dist.all_reduce(total)
        start = sum(ctx.counts[: ctx.world.rank])
        return total[start : start + ctx.counts[ctx.world.rank]], None


def _buckets(parameters: list[torch.nn.Parameter]) -> Iterable[list[torch.nn.Parameter]]:
    bucket, size = [], 0
    for parameter in parameters:
        if bucket and (size + parameter.numel() > BUCKET_ELEMENTS or parameter.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(parameter)
        size += parameter.numel()
    if bucket:
        yield bucket


def same_parameters(world: World, parameters: Iterable[torch.nn.Parameter]) -> None:
    """Every rank takes rank 0's values (they start equal: the same seed or checkpoint; this
    makes sure)."""
    if world.size == 1:
        return
    with torch.no_grad():
        for parameter in parameters:
            dist.broadcast(parameter.data, src=0)


def seed_step(world: World, seed: int, step: int) -> None:
    """With several ranks, seed every random stream from (seed, rank, step) before a step, so
    a step's draws (dropout) are the same whichever checkpoint the run resumed from, with no
    per-rank RNG state to save. One process keeps its single stream and its saved state."""
    if world.size == 1:
        return
    from realm.model.training.example_order import id_hashes

    mixed = int(id_hashes([(seed * 1_000_003 + world.rank) * 1_000_003 + step])[0] >> np.uint64(1))
    torch.manual_seed(mixed)
    random.seed(mixed)
    np.random.seed(mixed % 2**32)


# -- handing stages to the other ranks -------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A trainer's recipe: `build(world=...)` makes it; the other ranks then call
    `trainer.follow(*follow_args)`."""

    build: Callable
    follow_args: tuple = ()


def lead(world: World, build: Callable, *follow_args):
    """Rank 0: hand `build` (a picklable `functools.partial` of a trainer class) to the other
    ranks, then build it here; returns the trainer."""
    if world.size > 1:
        broadcast(world, Job(build, follow_args))
    return build(world=world)


def finish(world: World) -> None:
    """Rank 0: no more stages; the other ranks' `follow` returns."""
    broadcast(world, None)


def follow(world: World) -> None:
    """Ranks > 0: build and follow every trainer rank 0 hands over, until it finishes."""
    while (job := broadcast(world)) is not None:
        job.build(world=world).follow(*job.follow_args)
