"""What keeping freed host memory mapped (`realm.model.networks.host_memory`) saves a real
fine-tuning step: the same trainer, from the same start of a prepared run, trained for the
same steps in fresh processes, one with glibc's default allocation (each large buffer a new
`mmap`), one as every trainer now runs; the processes alternate, `--rounds` of each, and the
ratio is default / reused. The allocator is a process's own, so the two cannot share one.

    python bench/host_memory.py --run runs/<run> [--steps 12] [--rounds 2] [--questions 400]

The run needs what `realm run` leaves before fine-tuning: blocks (with their entities), the
published index and the pre-training checkpoint; trainers checkpoint into a temporary folder,
never into the run. `--questions`: the first N shipped training questions, which is what the
trainer's start-up costs (the steps cost the same whatever N is). Each process's first step
is a warm-up; medians of the rest are reported, then the time each process took to answer
the main job's validation slice once after its steps (forwards only, as at each checkpoint),
each way's peak resident size, and whether the two ways' losses were the same bits at every
step (they must be: the allocator moves no arithmetic).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from unittest import mock

from realm.model.networks.config import set_transformers_verbosity_error
from realm.model.networks.device import select_device
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.training.train_finetune import FinetuneTrainer, is_validation_question, validation_exact_match

from finetune_step import finetune_start, shipped_training_questions

WAYS = ("default", "reused")


def train(run: str, way: str, steps: int, questions: int) -> dict:
    """One process's measurement: `steps` fine-tuning steps' times and losses, peak RSS."""
    set_transformers_verbosity_error()
    layout, index, start, model_config = finetune_start(run)
    shipped = shipped_training_questions()
    examples, config = shipped[:questions], FinetuneConfig()
    # The main job's whole validation slice (not only that of the first `questions`).
    validation = [e for e in shipped if is_validation_question(e.question, config.validation_fraction)]
    # The default way leaves glibc as it starts; the trainer would otherwise set it at once.
    allocation = mock.patch("realm.model.training.trainer.reuse_freed_memory") if way == "default" else contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as scratch, allocation:
        trainer = FinetuneTrainer(
            examples, layout.blocks, index, start, scratch, model_config, config,
            device=select_device(None),
        )
        times, losses = [], []
        for _ in range(steps):
            started = time.perf_counter()
            trainer.train_step()
            times.append(time.perf_counter() - started)
            losses.append(trainer.final_loss)
        # Validation as at each checkpoint: forwards only, the allocator's other use.
        started = time.perf_counter()
        validation_exact_match(trainer.answerer, validation, config.num_read)
        validation_s = time.perf_counter() - started
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    return {
        "way": way, "times": times, "losses": losses, "validation_questions": len(validation), "validation_s": validation_s,
        "peak_gib": peak_gib,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run root prepared by `realm run`")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # a child process's
    args = parser.parse_args()
    if args.way:
        print(json.dumps(train(args.run, args.way, args.steps, args.questions)))
        return

    results = {way: [] for way in WAYS}
    for round_ in range(args.rounds):
        for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:
            child = subprocess.run(
                [sys.executable, __file__, *sys.argv[1:], "--way", way], capture_output=True, text=True, check=True,
            )
            results[way].append(json.loads(child.stdout.strip().splitlines()[-1]))
    # Every process's steps but its first (the warm-up), pooled.
    step_s = {way: statistics.median(t for r in runs for t in r["times"][1:]) for way, runs in results.items()}
    validation_s = {way: statistics.median(r["validation_s"] for r in runs) for way, runs in results.items()}
    peak = {way: max(r["peak_gib"] for r in runs) for way, runs in results.items()}
    same_bits = len({tuple(r["losses"]) for runs in results.values() for r in runs}) == 1
    print(f"default allocation: {step_s['default']:.3f} s a step, peak {peak['default']:.2f} GiB resident")
    print(
        f"freed memory reused: {step_s['reused']:.3f} s a step ({step_s['default'] / step_s['reused']:.2f}x faster), "
        f"peak {peak['reused']:.2f} GiB resident"
    )
    print(
        f"validation ({results['default'][0]['validation_questions']} questions answered): medians: {validation_s['default']:.2f} vs "
        f"{validation_s['reused']:.2f} s ({validation_s['default'] / validation_s['reused']:.2f}x)"
    )
    print(f"losses the same bits at each of {args.steps} steps in all {2 * args.rounds} processes: {same_bits}")
    print(json.dumps({
        "run": args.run, "steps": args.steps, "rounds": args.rounds, "questions": args.questions,
        "step_s": step_s, "validation_s": validation_s, "peak_gib": peak, "same_losses": same_bits,
    }))


if __name__ == "__main__":
    main()
