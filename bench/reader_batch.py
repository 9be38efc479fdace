"""The batch the reader benchmarks time (`reader_dropout.py`, `weight_average.py`): random
ordinary wordpieces shaped like a fine-tuning batch's read blocks, 40 sequences (8 questions x
5 read blocks) of 192 wordpieces (about a question plus a typical vital-article block) by
default, on the preset's model and the machine's device."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from realm.model.networks.config import ModelConfig, set_transformers_verbosity_error
from realm.model.networks.device import select_device

FIRST_ORDINARY_WORDPIECE = 1000  # below are [unused] and special tokens


@dataclass
class ReaderBatch:
    preset: str
    config: ModelConfig
    device: torch.device
    ids: torch.Tensor
    reps: int


def reader_batch(description: str, reps: int) -> ReaderBatch:
    """Parse `--preset --sequences --length --reps` and draw the batch (seeded)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--sequences", type=int, default=40)
    parser.add_argument("--length", type=int, default=192)
    parser.add_argument("--reps", type=int, default=reps)
    args = parser.parse_args()
    set_transformers_verbosity_error()  # every build warm-starts without a span head: expected, not news
    device = select_device()
    torch.manual_seed(0)
    config = ModelConfig.preset(args.preset)
    ids = torch.randint(FIRST_ORDINARY_WORDPIECE, config.vocab_size, (args.sequences, args.length), device=device)
    return ReaderBatch(args.preset, config, device, ids, args.reps)


def median_after_warmup(times: list[float]) -> float:
    """The median of `times` without the first (the warm-up)."""
    kept = sorted(times[1:])
    return kept[len(kept) // 2]
