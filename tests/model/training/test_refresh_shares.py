"""The refresh's shares on 2 real gloo processes: rank 0 asks, rank 1's thread answers beside its
main thread, a failed share (rank 1's or rank 0's own) fails the refresh with its rank and
reason, and the task's retry of the same refresh is answered. A share thread that fails fails
its rank's training loop."""

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from realm.model.training import distributed
from realm.model.training.refresh_shares import ShareEmbedder, embed_on_every_rank, stop_share_embedders

# (step, try): a refresh task's tries, in order.
TRIES = ((1, "a"), (1, "b"), (3, "a"))


def _write_share(request, share: int, shares: int) -> None:
    tried = Path(request.staging).parent / f"tried-{request.snapshot_step}-{share}"
    if request.snapshot_step == 1 and share == 1 and not tried.exists():  # its first try only
        tried.touch()
        raise ValueError("snapshot unreadable")
    if request.snapshot_step == 3 and share == 0:
        raise OSError("disk full")
    Path(request.staging, f"part-{share}").write_text(f"{request.snapshot_dir} {share}/{shares}")


def _rank(rank: int, folder: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    world = distributed.world_from_environment()
    distributed.join(world, torch.device("cpu"))
    try:
        if world.leader:
            outcomes = {}
            for step, attempt in TRIES:
                staging = Path(folder, f"{step}{attempt}")  # a try's fresh staging folder
                staging.mkdir()
                try:
                    embed_on_every_rank(world, f"snapshots/{step}", step, _write_share, str(staging))
                    outcomes[f"{step}{attempt}"] = sorted(p.read_text() for p in staging.iterdir())
                except RuntimeError as error:
                    outcomes[f"{step}{attempt}"] = str(error)
            stop_share_embedders(world)
            Path(folder, "outcomes.json").write_text(json.dumps(outcomes))
            distributed.barrier(world)
        else:
            shares = ShareEmbedder(world, _write_share)
            distributed.barrier(world)  # the main thread waits on the control group while its share thread answers
            shares.join()
    finally:
        distributed.leave()


def test_every_rank_embeds_its_share_and_a_failed_share_fails_the_refresh_naming_its_rank(tmp_path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    mp.spawn(_rank, args=(str(tmp_path), port), nprocs=2, join=True)
    outcomes = json.loads((tmp_path / "outcomes.json").read_text())
    assert outcomes == {
        "1a": "the refresh of step 1 failed on 1 rank(s): rank 1: ValueError: snapshot unreadable",
        "1b": ["snapshots/1 0/2", "snapshots/1 1/2"],
        "3a": "the refresh of step 3 failed on 1 rank(s): rank 0: OSError: disk full",
    }


def test_a_share_thread_that_fails_fails_its_ranks_training_loop():
    # Never joined to a group: the thread's first wait for a request raises.
    shares = ShareEmbedder(distributed.World(rank=1, size=2), _write_share)
    shares.join()
    with pytest.raises(RuntimeError, match=r"^rank 1: its refresh-share thread failed: RuntimeError: not joined"):
        shares.raise_if_failed()
