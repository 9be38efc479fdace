"""What the reader's span features (`FinetuneConfig.span_features`, the default) cost a real
fine-tuning step: two trainers from the same start of a prepared run, one with the features and
one without, the same seed and so the same batches, taking steps in turn (the order flipped
each step); the ratio is with / without.

    python bench/span_features.py --run runs/<run> [--steps 12] [--questions 400] [--seed 0]

The run needs what `realm run` leaves before fine-tuning: blocks (with their entities), the
published index and the pre-training checkpoint; the trainers checkpoint into a temporary
folder, never into the run. `--questions`: the first N shipped training questions, which is
what the trainers' start-up costs (the steps cost the same whatever N is). The first step of
each is a warm-up; medians of the rest are reported, and whether the first step's losses are
the same bits (they must be: the features start at zero, so they change nothing until the
first update moves them).
"""

from __future__ import annotations

import argparse
import json
import tempfile

from realm.model.networks.config import set_transformers_verbosity_error
from realm.model.networks.device import select_device
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.training.train_finetune import FinetuneTrainer

from finetune_step import alternate_steps, finetune_start, shipped_training_questions
from reader_batch import median_after_warmup

WAYS = ("without", "with")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run root prepared by `realm run`")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    set_transformers_verbosity_error()
    layout, index, start, model_config = finetune_start(args.run)
    shipped = shipped_training_questions()
    device = select_device(None)
    with tempfile.TemporaryDirectory() as scratch:
        trainers = {
            way: FinetuneTrainer(
                shipped[: args.questions], layout.blocks, index, start, f"{scratch}/{way}", model_config,
                FinetuneConfig(span_features=way == "with"), device=device, seed=args.seed,
            )
            for way in WAYS
        }
        times, losses = alternate_steps(trainers, args.steps)
    without, featured = median_after_warmup(times["without"]), median_after_warmup(times["with"])
    first_step_same = losses["without"][0] == losses["with"][0]
    print(f"without the span features: {without:.3f} s a step")
    print(f"with them: {featured:.3f} s a step ({featured / without:.3f}x)")
    print(f"first step's losses the same bits: {first_step_same} ({losses['without'][0]!r}, {losses['with'][0]!r})")
    print(json.dumps({
        "device": str(device), "run": args.run, "steps": args.steps, "questions": args.questions,
        "step_s": {"without": without, "with": featured}, "ratio": featured / without,
        "first_step_losses_equal": first_step_same,
    }))


if __name__ == "__main__":
    main()
