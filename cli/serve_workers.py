"""`realm serve`'s server processes: each loads the model once from the run folder (read, never
written) and answers the connections it accepts, batching the questions that arrive together
on them (`realm.cli.http_app.AnswerQueue`).

With `--workers N` above 1, the command's process binds N sets of listening sockets with
SO_REUSEPORT (the kernel spreads new connections over them) and starts N processes, one set
each. None serves before all have loaded: the first one up would otherwise take every early
connection and keep it. A worker that stops stops the server; a supervisor (systemd,
Kubernetes) restarts it whole.
"""

from __future__ import annotations

import multiprocessing
import socket
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait


@dataclass(frozen=True)
class ServeSettings:
    """What each server process loads, and the share of the cores it answers on."""

    run: str
    device: str | None  # None: CUDA when present, else the CPU
    index: str | None
    bf16_reader: bool
    workers: int
    cores: int
    log_level: str


def thread_counts(workers: int, cores: int, on_gpu: bool) -> tuple[int, int]:
    """(answer threads, torch threads) of each of `workers` server processes on `cores`. On a
    CPU, one answer thread per core of the process's share, each forward on one torch thread: a
    forward split across cores waits at every op for the slowest one. On a GPU, one answer
    thread (the GPU runs one batch at a time anyway), its CPU share left to torch for the
    retrieval and the span search around the forwards."""
    share = max(1, cores // workers)
    return (1, share) if on_gpu else (share, 1)


def load_app(settings: ServeSettings):
    """The FastAPI app over the run's Answerer, loaded in this process."""
    import torch

    from realm.cli.answering import run_answerer
    from realm.cli.http_app import create_app

    answerer = run_answerer(settings.run, settings.device, settings.index, settings.bf16_reader)
    answer_threads, torch_threads = thread_counts(settings.workers, settings.cores, answerer.device.type == "cuda")
    # After loading: faiss's threads at load are torch's too (one OpenMP).
    torch.set_num_threads(torch_threads)
    return create_app(answerer, settings.run, threads=answer_threads)


def listen(sockets) -> None:
    """Accept connections on `sockets` from now on: they wait in the backlog until the server
    takes them, where a bound socket not listening refuses them."""
    for sock in sockets:
        sock.listen()


def serve(app, sockets: list[socket.socket], log_level: str) -> bool:
    """Serve `app` on the bound `sockets` until stopped; False if it never started."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level))
    server.run(sockets=sockets)
    return server.started


def serve_in_processes(settings: ServeSettings, socket_sets: list[list[socket.socket]], started) -> int:
    """One server process per set of sockets, until a signal stops this process (the workers are
    stopped with it) or a worker ends on its own (then 1, the others stopped). `started()` is
    called once all have loaded and the sockets listen; a worker's loading error is raised
    here, as a one-process server would raise it."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold OpenMP or CUDA state
    go = context.Event()
    processes, loading = [], {}
    try:
        for sockets in socket_sets:
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(settings, sockets, writer, go), name="realm-serve-worker")
            process.start()
            writer.close()
            processes.append(process)
            loading[reader] = process
        while loading:
            for reader in wait(list(loading)):
                process = loading.pop(reader)
                try:
                    error = reader.recv()
                except EOFError:  # it ended without a word (killed, out of memory)
                    raise SystemExit(f"realm serve: a worker exited with status {_exit_status(process)} while loading") from None
                if error is not None:
                    raise error
        listen(sock for sockets in socket_sets for sock in sockets)
        go.set()
        started()
        (ended, *_) = wait([p.sentinel for p in processes])
        process = next(p for p in processes if p.sentinel == ended)
        print(f"realm serve: a worker exited with status {_exit_status(process)}; stopping the others", file=sys.stderr)
        return 1
    finally:
        for sock in (sock for sockets in socket_sets for sock in sockets):  # the workers hold their own copies
            sock.close()
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def _exit_status(process) -> int | None:
    process.join()
    return process.exitcode


def _worker(settings: ServeSettings, sockets: list[socket.socket], ready: Connection, go) -> None:
    try:
        try:
            app = load_app(settings)
        except (Exception, SystemExit) as error:  # handed to the parent, which reports it in one line
            try:
                ready.send(error)
            except Exception:  # an exception that does not pickle
                ready.send(SystemExit(f"realm serve: {type(error).__name__}: {error}"))
            return
        ready.send(None)
        go.wait()
        serve(app, sockets, settings.log_level)
    except KeyboardInterrupt:  # Ctrl-C reaches every process of the terminal; the command reports it
        pass
