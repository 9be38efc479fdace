"""Full-REALM pre-training on 1 against N processes, with the index refreshed beside training.

Runs `realm train pretrain` (both towers learning from the first step, a refresh every
`--refresh-every` steps, each rank embedding its share of it on N processes) on fresh copies of
a prepared run (`realm prepare` and the ICT stage: blocks/, pretrain_examples/,
checkpoints/ict/), one process count after the other, and prints for each: training steps/s
(from the first logged step to the last, refreshes running beside them), seconds per refresh,
seconds waited for a refresh due before its build ended, the whole command's seconds, and the
N-process figures as ratios of the 1-process ones.

    python bench/pretrain_processes.py --run runs/demo --nproc 2 --steps 30 --refresh-every 10 --output runs/bench-procs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

# What pre-training reads of a prepared run; its indexes and embeddings are rebuilt by each copy.
PREPARED = ("blocks", "block_entities", "pretrain_examples", "checkpoints/ict", "run.json", "vocabulary.json")


def _copy_prepared(run: Path, to: Path) -> None:
    for name in PREPARED:
        source = run / name
        if source.is_dir():
            shutil.copytree(source, to / name)
        elif source.is_file():
            to.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


def _pretrain(run: Path, to: Path, nproc: int, steps: int, refresh_every: int) -> dict:
    _copy_prepared(run, to)
    settings = ["doc_tower=whole", "retriever_frozen_steps=0", f"refresh_every={refresh_every}", "log_every=1",
                f"checkpoint_every={steps}", "heldout_examples=32"]
    command = [sys.executable, "-m", "realm.cli.main", "train", "pretrain", "--output", str(to), "--steps", str(steps),
               *[arg for setting in settings for arg in ("--param", setting)], "--nproc", str(nproc)]
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(to.parent / f"prefect-{nproc}"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    (to.parent / f"log-{nproc}.txt").write_text(done.stderr)
    if done.returncode:
        sys.exit(f"{nproc} process(es) failed: {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (to / "reports" / "pretrain_metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "elapsed_s" in row]
    first, last = trained[0], trained[-1]
    return {
        "nproc": nproc,
        "steps_per_s": (last["step"] - first["step"]) / (last["elapsed_s"] - first["elapsed_s"]),
        "refresh_s": [float(s) for s in re.findall(r"published index \S+ \(snapshot step \d+\) in ([\d.]+) s", done.stderr)],
        "waited_s": sum(float(s) for s in re.findall(r"waited ([\d.]+) s for the index refresh", done.stderr)),
        "command_s": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a prepared run with an ICT checkpoint")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--refresh-every", type=int, default=10)
    parser.add_argument("--output", type=Path, required=True, help="a folder for the copies (emptied first)")
    args = parser.parse_args()
    shutil.rmtree(args.output, ignore_errors=True)
    results = [_pretrain(args.run, args.output / f"n{n}", n, args.steps, args.refresh_every) for n in (1, args.nproc)]
    for result in results:
        refreshes = ", ".join(f"{s:.0f}" for s in result["refresh_s"])
        print(f"{result['nproc']} process(es): {result['steps_per_s']:.3f} steps/s; refreshes {refreshes} s; "
              f"waited {result['waited_s']:.0f} s; command {result['command_s']:.0f} s")
    one, many = results
    mean = lambda values: sum(values) / max(len(values), 1)  # noqa: E731
    print(f"{args.nproc} / 1: steps/s {many['steps_per_s'] / one['steps_per_s']:.2f}x, "
          f"refresh {mean(many['refresh_s']) / mean(one['refresh_s']):.2f}x, command {many['command_s'] / one['command_s']:.2f}x")
    (args.output / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
