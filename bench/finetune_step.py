"""What reading each block at its own padded length saves a real fine-tuning step: two
trainers from the same start of a prepared run train the same batches, one reading every
question's read blocks as `finetune_loss` does (`span_logits_by_length`: one forward per padded
length), the other as one forward padded to the batch's longest (`Reader.span_logits`, as
fine-tuning did before), alternating in one run; the ratio is padded / by length.

    python bench/finetune_step.py --run runs/<run> [--steps 8] [--seed 0]

The run needs what `realm run` leaves before fine-tuning: blocks (with their entities), the
published index and the pre-training checkpoint; the trainers checkpoint into a temporary
folder, never into the run. The first step of each is a warm-up; medians of the rest are
reported, with the largest difference between the two trainers' losses (bf16 rounds
differently at other padded widths) and the share of the padded positions that are real
wordpieces.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from unittest import mock

import numpy as np

import realm.model.training.finetune_loss as finetune_loss_module
from realm.flows.demo import training_qa_paths
from realm.model.index.mips import latest_published
from realm.model.networks.checkpoint import latest_checkpoint
from realm.model.networks.config import ModelConfig, set_transformers_verbosity_error
from realm.model.networks.device import select_device
from realm.model.networks.reader import Reader
from realm.model.qa.qa_data import QAExample, read_qa_file
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.training.train_finetune import FinetuneTrainer
from realm.schemas.run_layout import RunLayout

from reader_batch import median_after_warmup


class OnePaddedForward:
    """In place of `span_logits_by_length`: the batch's read blocks padded to its longest, in
    one forward, counting the real wordpieces and the padded positions it reads."""

    def __init__(self):
        self.real, self.positions = 0, 0

    def __call__(self, reader: Reader, joint, spans):
        self.real += int(joint.attention_mask.sum())
        self.positions += joint.attention_mask.numel()
        return reader.span_logits(joint, spans)


def finetune_start(run: str) -> tuple[RunLayout, str, str, ModelConfig]:
    """(layout, published index, pre-training checkpoint, model config) of a run prepared by
    `realm run`, as the fine-tuning flow finds them; exits naming what the run lacks."""
    layout = RunLayout.at(run)
    index, start = latest_published(layout.index), latest_checkpoint(layout.checkpoints("pretrain"))
    if index is None or start is None:
        raise SystemExit(f"{run}: no published index or pre-training checkpoint (run `realm run` first)")
    return layout, str(index), str(start), ModelConfig.preset(layout.model_preset())


def shipped_training_questions() -> list[QAExample]:
    """The shipped training questions, in the order fine-tuning reads them when given no files."""
    return [example for path in training_qa_paths() for example in read_qa_file(path)]


def alternate_steps(
    trainers: dict[str, FinetuneTrainer], steps: int, reading: Callable[[str], AbstractContextManager] = lambda way: nullcontext()
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(seconds, final loss) of each trainer's `steps` steps, taken in turn with the order
    flipped each step (neither always runs after the other); each step is timed inside
    `reading(way)`."""
    ways = list(trainers)
    times: dict[str, list[float]] = {way: [] for way in ways}
    losses: dict[str, list[float]] = {way: [] for way in ways}
    for step in range(steps):
        for way in ways if step % 2 == 0 else ways[::-1]:
            with reading(way):
                started = time.perf_counter()
                trainers[way].train_step()
                times[way].append(time.perf_counter() - started)
            losses[way].append(trainers[way].final_loss)
    return times, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run root prepared by `realm run`")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    set_transformers_verbosity_error()
    layout, index, start, model_config = finetune_start(args.run)
    examples = shipped_training_questions()
    device = select_device(None)

    one_padded_forward = OnePaddedForward()
    readings = {"by_length": finetune_loss_module.span_logits_by_length, "padded": one_padded_forward}
    with tempfile.TemporaryDirectory() as scratch:
        trainers = {
            way: FinetuneTrainer(
                examples, layout.blocks, index, start, f"{scratch}/{way}", model_config, FinetuneConfig(),
                device=device, seed=args.seed,
            )
            for way in readings
        }
        times, losses = alternate_steps(
            trainers, args.steps, lambda way: mock.patch.object(finetune_loss_module, "span_logits_by_length", readings[way])
        )
    by_length, one_forward = median_after_warmup(times["by_length"]), median_after_warmup(times["padded"])
    gap = float(np.max(np.abs(np.array(losses["by_length"]) - np.array(losses["padded"]))))
    share = one_padded_forward.real / one_padded_forward.positions
    print(f"padded to the batch's longest: {one_forward:.3f} s a step ({share:.0%} of its positions real wordpieces)")
    print(f"each block at its padded length: {by_length:.3f} s a step ({one_forward / by_length:.2f}x faster)")
    print(f"largest loss difference over {args.steps} steps: {gap:.2e}")
    print(json.dumps({
        "device": str(device), "run": args.run, "steps": args.steps, "step_s": {"padded": one_forward, "by_length": by_length},
        "real_share": share, "max_loss_difference": gap,
    }))


if __name__ == "__main__":
    main()
