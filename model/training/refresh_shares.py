"""A refresh's corpus embedding split across the training ranks: each rank embeds its share of
the blocks beside its own training, and rank 0 publishes the shares as one index.

Under torchrun every step waits for the slowest rank, so a whole corpus embedded beside rank
0's training alone slows every rank's steps while the others' devices idle; split N ways, each
rank carries 1/N of it (docs/measurements.md, "a refresh split across ranks"). Rank 0's refresh
task (`realm.flows.realm_pretrain.refresh_index`) passes `embed_on_every_rank` to
`rebuild_index` as its `embed_into`: it asks the other ranks for their shares, embeds its own
(`realm.model.index.rebuild.embed_share`: rank r the r-th of N near-equal runs of the blocks
in block_id order, into `part-<r>.parquet` of the refresh's staging folder, which every host
sees as it sees the run folder) and waits for their answers; `rebuild_index` then publishes the
parts and builds the index over them as over one embedder's. On the other ranks a
`ShareEmbedder` thread, started with the stage, answers each request until rank 0 stops it (`stop_share_embedders`).

Requests and answers travel on the background group (`distributed.background_group`), used
by one thread on each rank, in the same order everywhere: a request, then every rank's answer.
Every request is answered, failed or not, so the task's retry finds the other ranks waiting
for its next request; a rank that failed its share fails the refresh with its reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from realm.model.index.rebuild import embed_share
from realm.model.networks.config import ModelConfig
from realm.model.training.distributed import World, background_group

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShareRequest:
    """Embed your share of the corpus with the doc tower saved in `snapshot_dir` (of `snapshot_step`) into `staging`."""

    snapshot_dir: str
    snapshot_step: int
    staging: str


# Embeds share `share` of `shares` for a request (`embed_share` with the stage's blocks, model and device bound).
EmbedShare = Callable[[ShareRequest, int, int], None]


def _answer(world: World, embed: EmbedShare, request: ShareRequest) -> str | None:
    """This rank's share of `request` embedded: None, or why it failed."""
    try:
        embed(request, world.rank, world.size)
        return None
    except Exception as error:  # reported to rank 0, which fails the refresh with it
        log.exception("rank %d: embedding its share of the refresh of step %d failed", world.rank, request.snapshot_step)
        return f"{type(error).__name__}: {error}"


def _answers(world: World, mine: str | None) -> list[str | None]:
    gathered = [None] * world.size if world.leader else None
    dist.gather_object(mine, gathered, dst=0, group=background_group())
    return gathered


def embed_on_every_rank(world: World, snapshot_dir: str, snapshot_step: int, embed: EmbedShare, staging: str) -> None:
    """Rank 0: every rank's share of the corpus embedded into `staging` (rank r's as
    `part-<r>.parquet`); raises naming each rank whose share failed."""
    request = ShareRequest(snapshot_dir, snapshot_step, staging)
    dist.broadcast_object_list([request], src=0, group=background_group())
    answers = _answers(world, _answer(world, embed, request))
    failed = [f"rank {rank}: {why}" for rank, why in enumerate(answers) if why is not None]
    if failed:
        raise RuntimeError(f"the refresh of step {snapshot_step} failed on {len(failed)} rank(s): {'; '.join(failed)}")


def stop_share_embedders(world: World) -> None:
    """Rank 0: the stage is over; the other ranks' `ShareEmbedder`s end."""
    dist.broadcast_object_list([None], src=0, group=background_group())


class ShareEmbedder:
    """A rank > 0's thread that embeds its share of every refresh rank 0 asks for, beside training."""

    def __init__(self, world: World, embed: EmbedShare):
        self.world, self.embed = world, embed
        self.failure: str | None = None
        self.thread = threading.Thread(target=self._serve, name=f"refresh-share-{world.rank}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while True:
                message = [None]
                dist.broadcast_object_list(message, src=0, group=background_group())
                if message[0] is None:
                    return
                _answers(self.world, _answer(self.world, self.embed, message[0]))
        except BaseException as error:  # rank 0 would wait for an answer that never comes
            log.exception("rank %d: the refresh-share thread failed", self.world.rank)
            self.failure = f"{type(error).__name__}: {error}"

    def raise_if_failed(self) -> None:
        """Raise in the training loop if the thread has failed: this rank fails, and torchrun
        ends the job naming it, instead of rank 0 waiting on its answer."""
        if self.failure is not None:
            raise RuntimeError(f"rank {self.world.rank}: its refresh-share thread failed: {self.failure}")

    def join(self) -> None:
        """Wait for rank 0's `stop_share_embedders`."""
        self.thread.join()


def share_embedder(
    blocks_path: str, model_config: ModelConfig, device: torch.device | None, max_block_wordpieces: int
) -> EmbedShare:
    """What embeds a rank's share of a request: `embed_share` over a stage's blocks, cut to its length, on its device."""
    def embed(request: ShareRequest, share: int, shares: int) -> None:
        embed_share(
            blocks_path, request.snapshot_dir, request.staging, request.snapshot_step, model_config, device,
            max_block_wordpieces, share, shares,
        )

    return embed
