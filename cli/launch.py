"""`--nproc N`: a `realm run` or `realm train` on N processes, launched by torchrun's elastic agent.

    realm train pretrain --output runs/tiny --nproc 2                      # 2 processes on this host
    realm run --preset gpu --output runs/g --nproc 8 --torchrun-args "--nnodes 2 --node-rank 0 \
        --rdzv-backend c10d --rdzv-endpoint host0:29400 --rdzv-id realm-g"   # and the same on host1, --node-rank 1

The command re-executes itself under `torch.distributed.run` (torchrun, run in this process as
its agent) without `--nproc`; each worker runs the same `realm` command line with RANK,
WORLD_SIZE and LOCAL_RANK set. Rank 0 runs it as one process does (the Prefect flow, one flow
run for the job); the other ranks join the process group and follow the trainers rank 0 hands
them (`realm.model.training.distributed`). Without rendezvous options torchrun runs standalone
on this host (a free port). When a rank dies the agent stops the others and this command
prints one line naming the rank and its exit status, and exits non-zero; the same command
again resumes from the last checkpoint.

For a Prefect worker (deploy/prefect.yaml's GPU deployment) the worker's flow-run command is
wrapped instead, so the deployment's own flow run is the one rank 0 executes:

    python -m realm.cli.launch --nproc 8          # runs `python -m prefect.engine` on rank 0
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable

# torchrun's options that choose a rendezvous other than this host's standalone one.
_RENDEZVOUS_OPTIONS = ("--nnodes", "--rdzv", "--master", "--node-rank", "--node_rank", "--standalone")


def add_launch_options(parser: argparse.ArgumentParser) -> None:
    from realm.cli.options import positive_int

    parser.add_argument("--nproc", type=positive_int, default=1, metavar="N",
                        help="train on N processes per host with torchrun (gloo on CPU, nccl on CUDA; default 1)")
    parser.add_argument("--torchrun-args", type=shlex.split, default=[], metavar='"ARGS"',
                        help='torchrun options for several hosts, e.g. "--nnodes 2 --node-rank 0 --rdzv-backend c10d '
                        '--rdzv-endpoint HOST:PORT --rdzv-id ID" (default: this host alone)')


def without_launch_options(argv: list[str]) -> list[str]:
    """`argv` less --nproc and --torchrun-args (spelled `--flag value` or `--flag=value`)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--nproc", "--torchrun-args"):
            skip = True
        elif not arg.startswith(("--nproc=", "--torchrun-args=")):
            kept.append(arg)
    return kept


def torchrun_argv(nproc: int, torchrun_args: list[str], module: str, module_args: list[str]) -> list[str]:
    """torch.distributed.run's arguments for `python -m module module_args` on `nproc` processes per host."""
    standalone = [] if any(arg.startswith(_RENDEZVOUS_OPTIONS) for arg in torchrun_args) else ["--standalone"]
    return ["--nproc-per-node", str(nproc), *standalone, *torchrun_args, "-m", module, *module_args]


def relaunch(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run this `realm` command line (`sys.argv`) on `args.nproc` processes; the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if "--nproc" not in " ".join(argv).replace("=", " ").split():
        raise SystemExit("realm: --nproc re-executes the realm command line; run it from the shell")
    return launch(args.nproc, args.torchrun_args, "realm.cli.main", without_launch_options(argv), args.verbose)


def launch(nproc: int, torchrun_args: list[str], module: str, module_args: list[str], verbose: bool = False) -> int:
    """torchrun's agent in this process; a failed rank is one line on stderr and its exit status."""
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    # One thread per process unless told otherwise: N processes share this host's cores.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    if not verbose:  # the agent's own logging would bury the one line below
        for name in list(logging.root.manager.loggerDict):
            if name.startswith("torch.distributed"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
    parsed = torchrun.parse_args(torchrun_argv(nproc, torchrun_args, module, module_args))
    print(f"realm: {nproc} processes per host (torchrun {' '.join(torchrun_args) or '--standalone'})", file=sys.stderr)
    try:
        torchrun.run(parsed)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        print(f"realm: rank {rank} failed ({exit_text(failure.exitcode)}); the other ranks were stopped and the same "
              "command again resumes from the last checkpoint", file=sys.stderr)
        return failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode
    return 0


def exit_text(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def on_every_rank(handle: Callable[[], int], device: str | None) -> int:
    """Run a command's `handle` as torchrun's worker: on one process (no torchrun) just
    `handle()`; else rank 0 runs it, leading the trainers it builds, and the other ranks follow."""
    from realm.model.networks.device import select_device
    from realm.model.training import distributed

    world = distributed.world_from_environment()
    if world.size == 1:
        return handle()
    distributed.join(world, select_device(device))
    logging.getLogger(__name__).info("rank %d of %d (%s)", world.rank, world.size, distributed.backend(select_device(device)))
    try:
        if not world.leader:
            distributed.follow(world)
            return 0
        status = handle()
        distributed.finish(world)
        return status
    finally:
        distributed.leave()


def _run_prefect_flow_run() -> int:
    """A Prefect worker's flow run (PREFECT__FLOW_RUN_ID) on rank 0 of this torchrun worker."""
    import runpy

    def engine() -> int:
        runpy.run_module("prefect.engine", run_name="__main__")
        return 0

    return on_every_rank(engine, os.environ.get("REALM_DEVICE"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realm.cli.launch", allow_abbrev=False,
                                     description="a Prefect worker's flow run on N processes (rank 0 runs it)")
    add_launch_options(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # inside torchrun
    args = parser.parse_args(argv)
    if args.worker:
        return _run_prefect_flow_run()
    return launch(args.nproc, args.torchrun_args, "realm.cli.launch", ["--worker"])


if __name__ == "__main__":
    sys.exit(main())
