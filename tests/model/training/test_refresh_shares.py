"""The refresh's shares on 2 real gloo processes: rank 0 asks, rank 1's thread answers beside its
main thread, a failed share fails the refresh with its rank and reason, and the retry is answered."""

import json
import os
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from realm.model.training import distributed
from realm.model.training.refresh_shares import ShareEmbedder, embed_on_every_rank, stop_share_embedders


def _write_share(request, share: int, shares: int) -> None:
    if request.snapshot_step == 1 and share == 1:
        raise ValueError("snapshot unreadable")
    Path(request.staging, f"part-{share}").write_text(f"{request.snapshot_dir} {share}/{shares}")


def _rank(rank: int, folder: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    world = distributed.world_from_environment()
    distributed.join(world, torch.device("cpu"))
    try:
        if world.leader:
            outcomes = {}
            for step in (1, 2):  # the first fails on rank 1, as a refresh task's first try would
                staging = Path(folder, str(step))
                staging.mkdir()
                try:
                    embed_on_every_rank(world, f"snapshots/{step}", step, _write_share, str(staging))
                    outcomes[step] = sorted(p.read_text() for p in staging.iterdir())
                except RuntimeError as error:
                    outcomes[step] = str(error)
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
    assert outcomes["1"] == "the refresh of step 1 failed on 1 rank(s): rank 1: ValueError: snapshot unreadable"
    assert outcomes["2"] == ["snapshots/2 0/2", "snapshots/2 1/2"]
