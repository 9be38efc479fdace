"""What dropout costs the reader's training step on this machine: the 6-layer reader's
forward and backward over a fine-tuning batch's read blocks, timed with no dropout, hidden-state
dropout alone (`FinetuneConfig.reader_dropout`, `ModelConfig.hidden_dropout`), and hidden plus
attention dropout (`ModelConfig.dropout`), side by side in one run; ratios to no dropout.

    python bench/reader_dropout.py [--preset default] [--sequences 40] [--length 192] [--reps 4]

40 sequences are a fine-tuning batch (8 questions x 5 read blocks); 192 wordpieces is about a
question plus a typical vital-article block. Under bf16 autocast where the preset uses it, as
fine-tuning runs. The first repetition is a warm-up; the median of the rest is reported.
"""

from __future__ import annotations

import json
import time

import torch

from realm.model.networks.config import ModelConfig
from realm.model.networks.device import autocast
from realm.model.networks.reader import build_reader

from reader_batch import median_after_warmup, reader_batch

SETTINGS = {"none": (0.0, 0.0), "hidden 0.1": (0.1, 0.0), "hidden + attention 0.1": (0.1, 0.1)}


def step_seconds(config: ModelConfig, ids: torch.Tensor, device: torch.device, reps: int) -> float:
    reader = build_reader(config).to(device).train()
    mask = torch.ones_like(ids)
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        with autocast(device, config.cpu_bf16_autocast):
            hidden = reader.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        hidden.float().sum().backward()
        times.append(time.perf_counter() - start)
    return median_after_warmup(times)


def main() -> None:
    batch = reader_batch(__doc__.split("\n\n")[0], reps=4)
    seconds = {
        name: step_seconds(
            ModelConfig.preset(batch.preset, dropout=attention, hidden_dropout=hidden), batch.ids, batch.device, batch.reps
        )
        for name, (hidden, attention) in SETTINGS.items()
    }
    for name, value in seconds.items():
        print(f"{name:>24}: {value:.3f} s  ({value / seconds['none']:.2f}x no dropout)")
    print(json.dumps({"device": str(batch.device), "preset": batch.preset, "seconds": seconds}))


if __name__ == "__main__":
    main()
