"""`realm serve` under load against the in-process batched ceiling of the same cores: latency
and throughput over loopback at 1, 4 and 16 concurrent clients.

    python bench/serve.py --run runs/main [--requests 160] [--concurrency 1 4 16] [--workers 1 2]
                          [--port 8765] [--bf16-reader] [--device cpu]

The ceiling: one in-process `Answerer` per core (per GPU with --device cuda), each in its own
process on one torch thread, all answering batches of 16 at once: what these cores do with
nothing between the questions and the model. Beside it, the same at batches of 16 / cores
(what 16 clients give each core) and one question at a time. The server is a separate process
(`realm serve --workers N`, what a user runs), once per --workers value; clients are threads of
this process, each sending POST /ask on its own keep-alive connection from a shared list of
questions (the demo set and the held-out tenths) as fast as answers come back, through the
standard library's `http.client` (the lightest client, since it shares the cores).

Printed per configuration: p50 / p99 latency, questions/s, CPU time per question of the
answering processes (server: every process of it; it holds when another process shares the
cores and wall-clock figures do not) and, for the server, of the clients. Targets at 16
clients, each --workers value: throughput >= 0.9x the ceiling, and p99 <= 2 x 16 / throughput
(twice the mean latency a closed loop of 16 clients has at that throughput). Ends with one
JSON line of the figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np

from realm.flows.demo import evaluation_qa_paths
from realm.model.networks.device import select_device, usable_cores
from realm.model.qa.qa_data import read_qa_file

CLIENTS = 16  # the concurrency the targets are stated at
CEILING_BATCH = 16  # the server's MAX_BATCH: what one answer thread does with 16 waiting
THROUGHPUT_TARGET = 0.9


def _figures(latencies: list[float], seconds: float, cpu_seconds: float, client_cpu_seconds: float | None = None) -> dict:
    ms = np.array(latencies) * 1000
    figures = {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1),
               "questions_per_s": round(len(latencies) / seconds, 2), "n": len(latencies),
               "cpu_ms_per_question": round(1000 * cpu_seconds / len(latencies), 1)}
    if client_cpu_seconds is not None:
        figures["client_cpu_ms_per_question"] = round(1000 * client_cpu_seconds / len(latencies), 1)
    return figures


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and every process under it (Linux: /proc,
    fields 4, 14 and 15 of each stat)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            stats[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    tree = {pid}
    while added := {p for p, (parent, _) in stats.items() if parent in tree and p not in tree}:
        tree |= added
    return sum(stats[p][1] for p in tree if p in stats) / os.sysconf("SC_CLK_TCK")


def load(port: int, questions: list[str], concurrency: int, server_pid: int) -> dict:
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    pending = iter(questions)

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            while True:
                with lock:
                    question = next(pending, None)
                if question is None:
                    return
                body = json.dumps({"question": question}).encode()
                started = time.perf_counter()
                connection.request("POST", "/ask", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                text = response.read()
                elapsed = time.perf_counter() - started
                with lock:
                    if response.status == 200:
                        latencies.append(elapsed)
                    else:
                        failures.append(f"{response.status}: {text[:100]!r}")
        finally:
            connection.close()

    started, cpu, client_cpu = time.perf_counter(), _cpu_seconds(server_pid), time.process_time()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return _figures(latencies, time.perf_counter() - started, _cpu_seconds(server_pid) - cpu,
                    time.process_time() - client_cpu)


def _answer_in_process(run, device, bf16_reader, questions, batch, start, results) -> None:
    """One answering process of `in_process`: loads, warms up, waits for the others, answers
    `questions` in batches of `batch` and puts (latencies, start, end, CPU seconds)."""
    import torch

    from realm.model.qa.answering import Answerer

    answerer = Answerer.from_run(run, device=device, bf16_reader=bf16_reader)
    torch.set_num_threads(1)  # as each of the server's answer threads
    answerer.answer(questions[:CEILING_BATCH], num_read=5, num_retrieve=5)  # warm-up: first-call allocations
    start.wait()
    began, cpu, latencies = time.monotonic(), time.process_time(), []
    for first in range(0, len(questions), batch):
        asked = time.perf_counter()
        answerer.answer(questions[first : first + batch], num_read=5, num_retrieve=5)
        latencies += [time.perf_counter() - asked] * len(questions[first : first + batch])
    results.put((latencies, began, time.monotonic(), time.process_time() - cpu))


def in_process(run: str, device, bf16_reader: bool, questions: list[str], batch: int, processes: int) -> dict:
    """`processes` answering processes at once, each answering all of `questions` (from its own
    place in them) in batches of `batch`."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_answer_in_process, args=(
            run, device, bf16_reader, questions[n * CEILING_BATCH :] + questions[: n * CEILING_BATCH], batch, start, results,
        ))
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    answered = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
        if worker.exitcode:
            raise RuntimeError(f"an answering process exited with status {worker.exitcode}")
    seconds = max(end for _, _, end, _ in answered) - min(began for _, began, _, _ in answered)
    return _figures([s for latencies, *_ in answered for s in latencies], seconds, sum(cpu for *_, cpu in answered))


def _serve(run: str, port: int, options: list[str]) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "realm.cli.main", "serve", "--run", run, "--port", str(port), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # `realm serve` prints its serving line once every worker has loaded and its sockets listen.
    line = server.stdout.readline()
    if not line.startswith("realm: serving"):
        server.kill()
        raise RuntimeError(f"realm serve exited {server.wait()}: {line}{server.stderr.read()[-500:]}")
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a trained run root")
    parser.add_argument("--requests", type=int, default=160, help="questions asked in each configuration")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, CLIENTS])
    parser.add_argument("--workers", type=int, nargs="+",
                        help="realm serve --workers values (default: 1 and one per core; on a GPU, 1)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--bf16-reader", action="store_true", help="as `realm serve --bf16-reader`, in-process too")
    parser.add_argument("--device", help="as `realm serve --device` (default: CUDA when present, else the CPU)")
    args = parser.parse_args()

    device = select_device(args.device)
    cores = 1 if device.type == "cuda" else usable_cores()
    worker_counts = args.workers or sorted({1, cores})  # on a GPU: one worker, the GPU's one model
    pool = [e.question for path in evaluation_qa_paths() for e in read_qa_file(path)]
    questions = [pool[i % len(pool)] for i in range(args.requests)]
    ceiling_name = f"in-process, batches of {CEILING_BATCH} x {cores}"
    results: dict[str, dict] = {
        "in-process, one at a time": in_process(args.run, device, args.bf16_reader, questions, 1, 1),
        ceiling_name: in_process(args.run, device, args.bf16_reader, questions, CEILING_BATCH, cores),
    }
    if cores > 1:
        name = f"in-process, batches of {CLIENTS // cores} x {cores}"
        results[name] = in_process(args.run, device, args.bf16_reader, questions, CLIENTS // cores, cores)

    options = [*(["--bf16-reader"] if args.bf16_reader else []), *(["--device", args.device] if args.device else [])]
    for workers in worker_counts:
        server = _serve(args.run, args.port, [*options, "--workers", str(workers)])
        try:
            load(args.port, questions[: 2 * CLIENTS], CLIENTS, server.pid)  # warm-up: every worker's first calls
            for concurrency in args.concurrency:
                name = f"server --workers {workers}, {concurrency} client{'s' if concurrency > 1 else ''}"
                results[name] = load(args.port, questions, concurrency, server.pid)
        finally:
            server.terminate()
            server.wait(timeout=60)

    reader = "reader in bf16" if args.bf16_reader else "reader under bf16 autocast"
    print(f"{len(questions)} questions per configuration (per process in-process), run {args.run}, {reader}, "
          f"{device.type}, {usable_cores()} cores\n")
    print(f"{'configuration':<34} {'p50 ms':>8} {'p99 ms':>8} {'questions/s':>12} {'CPU ms/question':>16} {'client CPU ms':>14}")
    for name, f in results.items():
        client = f"{f['client_cpu_ms_per_question']:>14.1f}" if "client_cpu_ms_per_question" in f else ""
        print(f"{name:<34} {f['p50_ms']:>8.1f} {f['p99_ms']:>8.1f} {f['questions_per_s']:>12.2f} "
              f"{f['cpu_ms_per_question']:>16.1f} {client}")
    ceiling = results[ceiling_name]["questions_per_s"]
    targets = {}
    print()
    for workers in worker_counts:
        many = results.get(f"server --workers {workers}, {CLIENTS} clients")
        if many is None:
            continue
        ratio = many["questions_per_s"] / ceiling
        bound_ms = 2 * CLIENTS / many["questions_per_s"] * 1000
        targets[f"workers_{workers}"] = {
            "throughput_vs_ceiling": round(ratio, 2), "throughput_met": ratio >= THROUGHPUT_TARGET,
            "p99_ms": many["p99_ms"], "p99_bound_ms": round(bound_ms), "p99_met": many["p99_ms"] <= bound_ms,
        }
        print(f"--workers {workers} at {CLIENTS} clients: {many['questions_per_s']:.1f} against {ceiling:.1f} questions/s "
              f"in-process = {ratio:.2f}x (target >= {THROUGHPUT_TARGET}x: {'met' if ratio >= THROUGHPUT_TARGET else 'not met'}); "
              f"p99 {many['p99_ms']:.0f} ms against 2 x {CLIENTS} / throughput = {bound_ms:.0f} ms "
              f"({'met' if many['p99_ms'] <= bound_ms else 'not met'})")
    one, alone = results.get(f"server --workers {worker_counts[0]}, 1 client"), results["in-process, one at a time"]
    if one:
        print(f"--workers {worker_counts[0]} at 1 client: p50 {one['p50_ms'] / alone['p50_ms']:.2f}x in-process one at a time")
    print(json.dumps({"results": results, "targets": targets}))


if __name__ == "__main__":
    main()
