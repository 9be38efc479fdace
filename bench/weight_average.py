"""What the moving average of the weights (`FinetuneConfig.average_weights`) costs a
fine-tuning step on this machine: the 6-layer reader's forward and backward over a batch's
read blocks plus the AdamW step over the reader and the query tower, timed without and with
`WeightAverage.update` after it, alternating in one run; the ratio is with / without.

    python bench/weight_average.py [--preset default] [--sequences 40] [--length 192] [--reps 6]

The batch is `reader_batch.py`'s. The step leaves out the query tower's forward and backward
over the questions and their candidates, so a real step is longer and the ratio an upper
bound. The first repetition of each is a warm-up; medians of the rest are reported.
"""

from __future__ import annotations

import json
import time

import torch

from realm.model.networks.config import build_component
from realm.model.networks.device import autocast
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
from realm.model.training.optimization import build_optimizer
from realm.model.training.weight_average import WeightAverage

from reader_batch import median_after_warmup, reader_batch


def main() -> None:
    batch = reader_batch(__doc__.split("\n\n")[0], reps=6)
    config = batch.config
    reader = build_reader(config).to(batch.device).train()
    modules = {"reader": reader, "query_embedder": build_component(Embedder, config).to(batch.device)}
    optimizer = build_optimizer(list(modules.values()), 5e-5)
    average = WeightAverage(modules)
    mask = torch.ones_like(batch.ids)

    def step(averaging: bool) -> tuple[float, float]:
        start = time.perf_counter()
        with autocast(batch.device, config.cpu_bf16_autocast):
            hidden = reader.bert(input_ids=batch.ids, attention_mask=mask).last_hidden_state
        hidden.float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        trained = time.perf_counter()
        if averaging:
            average.update()
        end = time.perf_counter()
        return end - start, end - trained

    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(batch.reps + 1):
        for averaging in (False, True):
            times[averaging].append(step(averaging))
    without, with_average = (median_after_warmup([t[0] for t in times[a]]) for a in (False, True))
    update = median_after_warmup([t[1] for t in times[True]])
    weights = sum(a.numel() for a in average.averages)
    print(f"step without the average: {without:.3f} s")
    print(f"step with the average:    {with_average:.3f} s  ({with_average / without:.3f}x)")
    print(f"the update alone:         {update * 1000:.1f} ms over {weights / 1e6:.1f}M float32 weights")
    print(json.dumps({
        "device": str(batch.device), "preset": batch.preset, "weights": weights,
        "step_s": {"without": without, "with": with_average}, "update_s": update,
    }))


if __name__ == "__main__":
    main()
