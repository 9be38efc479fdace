"""`realm serve` under load: latency and throughput over loopback at 1, 4 and 16 concurrent
clients, beside the same questions answered in-process.

    python bench/serve.py --run runs/main [--requests 160] [--concurrency 1 4 16] [--port 8765] [--bf16-reader]

The server is a separate process (`realm serve`, what a user runs); clients are threads of this
process, each sending POST /ask from a shared list of questions (the demo set and the held-out
tenths) as fast as answers come back. In-process, one `Answerer` on one torch thread (as each
of the server's workers) answers the same questions one at a time and in batches of 16 (what
a worker does with 16 waiting). Printed: p50 / p99 latency, questions/s and CPU time per
question (the answering process's, so it holds when another process shares the cores and
wall-clock figures do not) for each; ratios measured in this run (in-process batches vs one
at a time; server at 1 client vs in-process one at a time; server at 16 clients vs in-process
batches); and the throughput the server's CPU time allows on these cores alone. Target
(issue 15): p99 <= 250 ms at 16 concurrent clients on the 2-core CPU. Ends with one JSON line
of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import torch

from realm.flows.demo import evaluation_qa_paths
from realm.model.networks.device import usable_cores
from realm.model.qa.answering import Answerer
from realm.model.qa.qa_data import read_qa_file


def _figures(latencies: list[float], seconds: float, cpu_seconds: float) -> dict:
    ms = np.array(latencies) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1),
            "questions_per_s": round(len(latencies) / seconds, 2), "n": len(latencies),
            "cpu_ms_per_question": round(1000 * cpu_seconds / len(latencies), 1)}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux: /proc/PID/stat, fields 14 and 15)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, questions: list[str], concurrency: int, server_pid: int) -> dict:
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    pending = iter(questions)

    def client() -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            while True:
                with lock:
                    question = next(pending, None)
                if question is None:
                    return
                started = time.perf_counter()
                response = http.post("/ask", json={"question": question})
                elapsed = time.perf_counter() - started
                with lock:
                    (latencies if response.status_code == 200 else failures).append(
                        elapsed if response.status_code == 200 else f"{response.status_code}: {response.text[:100]}"
                    )

    started, cpu = time.perf_counter(), _cpu_seconds(server_pid)
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return _figures(latencies, time.perf_counter() - started, _cpu_seconds(server_pid) - cpu)


def in_process(answerer: Answerer, questions: list[str], batch: int) -> dict:
    latencies = []
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(questions), batch):
        asked = time.perf_counter()
        answerer.answer(questions[start : start + batch], num_read=5, num_retrieve=5)
        latencies += [time.perf_counter() - asked] * len(questions[start : start + batch])
    return _figures(latencies, time.perf_counter() - started, time.process_time() - cpu)


def _serve(run: str, port: int, options: list[str]) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "realm.cli.main", "serve", "--run", run, "--port", str(port), *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"realm serve exited {server.returncode}: {server.stderr.read().decode()[-500:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("realm serve did not answer /health within 300 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a trained run root")
    parser.add_argument("--requests", type=int, default=160, help="questions asked in each configuration")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--bf16-reader", action="store_true", help="as `realm serve --bf16-reader`, in-process too")
    args = parser.parse_args()

    pool = [e.question for path in evaluation_qa_paths() for e in read_qa_file(path)]
    questions = [pool[i % len(pool)] for i in range(args.requests)]
    results: dict[str, dict] = {}

    answerer = Answerer.from_run(args.run, bf16_reader=args.bf16_reader)
    torch.set_num_threads(1)  # as `realm serve` runs each of its workers
    answerer.answer(questions[:16], num_read=5, num_retrieve=5)  # warm-up: first-call allocations
    results["in-process, one at a time"] = in_process(answerer, questions, 1)
    results["in-process, batches of 16"] = in_process(answerer, questions, 16)
    del answerer

    server = _serve(args.run, args.port, ["--bf16-reader"] if args.bf16_reader else [])
    try:
        url = f"http://127.0.0.1:{args.port}"
        load(url, questions[:16], 4, server.pid)  # warm-up
        for concurrency in args.concurrency:
            results[f"server, {concurrency} client{'s' if concurrency > 1 else ''}"] = load(
                url, questions, concurrency, server.pid
            )
    finally:
        server.terminate()
        server.wait(timeout=60)

    reader = "reader in bf16" if args.bf16_reader else "reader under bf16 autocast"
    print(f"{len(questions)} questions per configuration, run {args.run}, {reader}\n")
    print(f"{'configuration':<28} {'p50 ms':>8} {'p99 ms':>8} {'questions/s':>12} {'CPU ms/question':>16}")
    for name, f in results.items():
        print(f"{name:<28} {f['p50_ms']:>8.1f} {f['p99_ms']:>8.1f} {f['questions_per_s']:>12.2f} {f['cpu_ms_per_question']:>16.1f}")
    one, alone = results.get("server, 1 client"), results["in-process, one at a time"]
    many, batched = results.get("server, 16 clients"), results["in-process, batches of 16"]
    ratios = {"in_process_batches_vs_one_at_a_time_throughput": round(batched["questions_per_s"] / alone["questions_per_s"], 2)}
    if one:
        ratios["server_1_vs_in_process_p50"] = round(one["p50_ms"] / alone["p50_ms"], 2)
    if many:
        ratios["server_16_vs_in_process_batches_throughput"] = round(many["questions_per_s"] / batched["questions_per_s"], 2)
        print(f"\np99 at 16 clients: {many['p99_ms']:.0f} ms (target <= 250 ms: {'met' if many['p99_ms'] <= 250 else 'not met'})")
        # What the server's CPU time per question allows on these cores with nothing else running.
        print(f"CPU-bound ceiling at 16 clients: {usable_cores()} cores / {many['cpu_ms_per_question']:.0f} CPU ms "
              f"= {usable_cores() * 1000 / many['cpu_ms_per_question']:.0f} questions/s")
    for name, ratio in ratios.items():
        print(f"{name}: {ratio}x")
    print(json.dumps({"results": results, "ratios": ratios}))


if __name__ == "__main__":
    main()
