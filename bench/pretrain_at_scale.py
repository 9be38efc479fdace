"""REALM pre-training at a GPU's scale, then REALM against ORQA fine-tuned alike: does it pay?

Target 3 of the quality issue asks whether retrieval helps the masked LM (held-out masked-span
accuracy with retrieval against the null document alone) and whether fine-tuning from REALM's
pre-trained encoder and query tower beats fine-tuning from their start (ORQA). A CPU affords
pre-training few steps of a small batch; this script spends a wall-clock budget
on a CUDA machine instead, with the `gpu` run preset's lengths (queries 96, blocks 288
wordpieces) and batch, the retriever frozen for the first half as the stage's default:

1. a short probe times the step at each of `--micro_batches` (sequences per encoder forward)
   in turn on one trainer; the fastest sizes the step count to `--pretrain_seconds`;
2. pre-training from the run's retriever start (`checkpoints/ict/<newest>/`) and the BERT warm
   start, then masked-span accuracy on `--heldout` held-out examples;
3. for each seed, fine-tuning (the main job's recipe, with any `--finetune_param` overrides)
   from the pre-trained checkpoint (`realm`) and from the retriever start with a fresh reader
   (`orqa`), each evaluated on the evaluation sets with the paired test between the two.

It drives the trainers directly, without Prefect (a rented GPU machine need not have it), on a
prepared run root (`realm prepare` and the ICT stage: blocks/, block_entities/,
pretrain_examples/, checkpoints/ict/). Everything it measures lands in `<output>/results.json`,
written after each step so a run cut short keeps what it finished.

    python bench/pretrain_at_scale.py --run runs/demo --output runs/scale --pretrain_seconds 240 \
        --qa ../shared/data/qa/nq.dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import torch

from realm.cli.settings import with_overrides
from realm.flows.demo import evaluation_qa_paths, training_qa_paths
from realm.model.networks.checkpoint import latest_checkpoint
from realm.model.networks.config import ModelConfig
from realm.model.networks.device import select_device
from realm.model.qa.answering import Answerer
from realm.model.analysis.paired_stats import mcnemar_exact_p_value
from realm.model.qa.qa_data import read_qa_file
from realm.model.qa.scoring import RECALL_AT, score_predictions
from realm.model.training.pretrain_index import IndexRoots
from realm.model.training.stage_settings import CPU_MICRO_BATCH, FinetuneConfig, PretrainConfig
from realm.model.training.train_finetune import FinetuneTrainer
from realm.model.training.train_pretrain import HELD_OUT, PretrainHooks, PretrainTrainer
from realm.schemas.run_layout import RunLayout

# The `gpu` run preset's pre-training shape (realm.flows.params).
GPU_LENGTHS = {"max_query_wordpieces": 96, "max_block_wordpieces": 288}
# Steps timed at each micro-batch size; the first third of them pay CUDA's warm-up.
PROBE_STEPS = 12
SYSTEMS = ("realm", "orqa")
# Steps after the retriever unfreezes also back-propagate through the query tower.
UNFROZEN_STEP_COST = 1.15


class Results:
    """`<output>/results.json`, rewritten whole after each measurement."""

    def __init__(self, path: Path):
        self.path, self.data = path, {}

    def put(self, key: str, value) -> None:
        self.data[key] = value
        self.path.write_text(json.dumps(self.data, indent=1, default=float))
        print(f"[{time.strftime('%H:%M:%S')}] {key}: {json.dumps(value, default=float)[:600]}", flush=True)


def pretrain_config(steps: int, batch_size: int, heldout: int, micro_batch: int, overrides: list[str]) -> PretrainConfig:
    """This script's pre-training settings, then each `FIELD=VALUE` of `overrides` applied and
    validated as `realm train --param` does."""
    return with_overrides(PretrainConfig(
        steps=steps, batch_size=batch_size, warmup_steps=max(1, steps // 10), checkpoint_every=max(1, steps),
        log_every=50, heldout_examples=heldout, retriever_frozen_steps=steps // 2, keep_checkpoints=1,
        micro_batch=micro_batch, **GPU_LENGTHS,
    ), overrides)


def no_refresh(snapshot_dir: str, snapshot_step: int):
    raise AssertionError("cached doc embeddings: the doc tower is frozen and no index is refreshed")


def pretrain_trainer(layout: RunLayout, start: str, root: Path, steps: int, micro_batch: int, args, device,
                     model_config) -> PretrainTrainer:
    """A pre-training run under `root` from the retriever start `start`."""
    return PretrainTrainer(
        layout.blocks, layout.pretrain_examples, str(root / "checkpoints"), model_config,
        pretrain_config(steps, args.batch_size, args.heldout, micro_batch, args.pretrain_param), init_retriever=start,
        device=device, seed=args.seed,
    )


def index_roots(root: Path) -> IndexRoots:
    return IndexRoots(str(root / "index"), str(root / "embeddings"), str(root / "snapshots"))


def run_pretraining(trainer: PretrainTrainer, root: Path, progress) -> tuple[str, str, dict]:
    """Run `trainer` to its last step; returns (checkpoint, index, held-out evaluation)."""
    evaluations: dict[str, dict] = {}
    result = trainer.run(PretrainHooks(progress, lambda step, which, e: evaluations.update({which: e}), no_refresh),
                         index_roots(root))
    return result.checkpoint, result.index, evaluations[HELD_OUT]


def probe_micro_batches(probe: PretrainTrainer, micro_batches: list[int], device) -> dict[int, dict]:
    """Median step time (and CUDA peak memory) at each micro-batch size, one trainer stepping
    on (the size changes how a step is computed, not what it computes)."""
    timings = {}
    for micro_batch in micro_batches:
        probe.config.micro_batch = micro_batch
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        step_times = []
        try:
            for _ in range(PROBE_STEPS):
                t = time.perf_counter()
                probe.train_step()  # its metrics read values back to the host: the step has finished
                step_times.append(time.perf_counter() - t)
        except torch.cuda.OutOfMemoryError:
            timings[micro_batch] = {"median_step_s": float("inf"), "out_of_memory": True}
            torch.cuda.empty_cache()
            continue
        warm = sorted(step_times[PROBE_STEPS // 3:])
        timings[micro_batch] = {"median_step_s": warm[len(warm) // 2]}
        if device.type == "cuda":
            timings[micro_batch]["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return timings


def pretrain(layout: RunLayout, start: str, out: Path, args, device, model_config, results: Results) -> tuple[str, str]:
    """Probe, size and run pre-training; returns (checkpoint, index) paths."""
    started = time.perf_counter()
    # Sized as the longest run, so the retriever stays frozen through every probe step.
    probe = pretrain_trainer(layout, start, out / "probe", args.max_steps, args.micro_batches[0],
                             args, device, model_config)
    probe.attach_index(index_roots(out / "probe"))
    setup_s = time.perf_counter() - started
    timings = probe_micro_batches(probe, args.micro_batches, device)
    micro_batch = min(timings, key=lambda size: timings[size]["median_step_s"])
    step_s = timings[micro_batch]["median_step_s"]
    steps = min(args.max_steps, int(args.pretrain_seconds / (step_s * (1 + UNFROZEN_STEP_COST) / 2)))
    results.put("pretrain_probe", {"micro_batches": timings, "micro_batch": micro_batch,
                                   "speedup_over_first": timings[args.micro_batches[0]]["median_step_s"] / step_s,
                                   "setup_s": setup_s, "steps": steps})
    del probe

    log: list[dict] = []

    def progress(metrics: dict) -> None:
        log.append(metrics)
        if len(log) % 10 == 0:
            print(json.dumps({k: metrics[k] for k in ("step", "loss", "mlm_accuracy", "retrieval_entropy",
                                                          "null_document_probability", "span_in_candidates")}), flush=True)

    began = time.perf_counter()
    trainer = pretrain_trainer(layout, start, out / "pretrain", steps, micro_batch, args, device, model_config)
    checkpoint, index, heldout = run_pretraining(trainer, out / "pretrain", progress)
    results.put("pretrain", {
        "steps": trainer.step, "batch_size": args.batch_size, "seconds": time.perf_counter() - began,
        "config": trainer.config.model_dump(), "heldout": heldout, "log": log,
    })
    return checkpoint, index


def start_index(layout: RunLayout, start: str, out: Path, args, device, model_config, results: Results) -> str:
    """The index of the retriever start's doc tower (what pre-training's cached doc vectors
    are: the doc tower never trains), from a pre-training run of 0 steps, and the untrained
    encoder's held-out masked-span accuracy beside it."""
    trainer = pretrain_trainer(layout, start, out / "start", 0, max(args.micro_batches), args, device, model_config)
    _, index, heldout = run_pretraining(trainer, out / "start", lambda metrics: None)
    results.put("start", {"heldout": heldout})
    return index


def finetune_and_evaluate(name: str, init: str, index: str, seed: int, config: FinetuneConfig, layout: RunLayout,
                          out: Path, device, model_config, training, questions, results: Results) -> list[bool]:
    """Fine-tune from `init` on the `training` questions, answer `questions`; returns whether
    each answer is right, in the order of `score_predictions`' rows (the same for every system)."""
    start = time.perf_counter()
    trainer = FinetuneTrainer(training, layout.blocks, index, init, str(out / f"{name}-{seed}"), model_config,
                              config, device=device, seed=seed)
    trained = trainer.run()
    answerer = Answerer.from_checkpoint(trained["checkpoint"], index, layout.blocks, model_config, device=device)
    predictions = answerer.answer([e.question for e in questions], num_read=5, num_retrieve=max(RECALL_AT))
    metrics, rows = score_predictions(questions, predictions, num_read=5)
    results.put(f"{name}-{seed}", {"finetune": trained, "metrics": metrics, "seconds": time.perf_counter() - start,
                                   "answers": [p.answer for p in predictions]})
    return [row["exact_match"] for dataset_rows in rows.values() for row in dataset_rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a prepared run root with its ICT (retriever start) checkpoint")
    parser.add_argument("--output", required=True)
    parser.add_argument("--pretrain_seconds", type=float, default=240.0)
    parser.add_argument("--max_steps", type=int, default=3000, help="the `gpu` preset's pre-training steps")
    parser.add_argument("--batch_size", type=int, default=32, help="the `gpu` preset's pre-training batch")
    parser.add_argument("--micro_batches", type=int, nargs="+", default=[CPU_MICRO_BATCH, 64, 128, 256],
                        help="sequences per encoder forward, timed in turn (the first is the baseline)")
    parser.add_argument("--heldout", type=int, default=4096, help="held-out examples (target 3: at least 4,096)")
    parser.add_argument("--finetune_epochs", type=float, default=FinetuneConfig().epochs)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0], help="fine-tuning seeds (none: pre-train only)")
    parser.add_argument("--seed", type=int, default=0, help="pre-training seed")
    parser.add_argument("--pretrain_param", action="append", default=[], type=str, metavar="FIELD=VALUE",
                        help="override a PretrainConfig field, e.g. retriever_frozen_steps=0 (repeatable)")
    parser.add_argument("--finetune_param", action="append", default=[], type=str, metavar="FIELD=VALUE",
                        help="override a FinetuneConfig field for every system, e.g. span_features=false (repeatable)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="orqa alone needs no pre-training")
    parser.add_argument("--results", help="where the measurements go (default: <output>/results.json)")
    parser.add_argument("--qa", nargs="*", default=[], help="evaluation files beside the shipped demo set and held-out tenths")
    args = parser.parse_args()
    finetune_config = with_overrides(FinetuneConfig(epochs=args.finetune_epochs), args.finetune_param)  # fails before any training
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    results = Results(Path(args.results) if args.results else out / "results.json")
    device, model_config = select_device(), ModelConfig.preset("bf16-6l")
    layout = RunLayout.at(args.run)
    results.put("device", str(device))
    start = str(latest_checkpoint(layout.checkpoints("ict")))
    if "realm" in args.systems:
        checkpoint, index = pretrain(layout, start, out, args, device, model_config, results)
    else:
        index = start_index(layout, start, out, args, device, model_config, results)
    training = [e for path in training_qa_paths() for e in read_qa_file(path)]
    questions = [e for path in [*evaluation_qa_paths(), *args.qa] for e in read_qa_file(path)]
    inits = {"realm": checkpoint if "realm" in args.systems else None, "orqa": start}
    for seed in args.seeds:
        right = {name: finetune_and_evaluate(name, inits[name], index, seed, finetune_config, layout, out, device,
                                             model_config, training, questions, results)
                 for name in args.systems}
        if len(right) == 2:
            only_realm = sum(r and not o for r, o in zip(right["realm"], right["orqa"]))
            only_orqa = sum(o and not r for r, o in zip(right["realm"], right["orqa"]))
            results.put(f"paired-{seed}", {"right_only_realm": only_realm, "right_only_orqa": only_orqa,
                                           "p": mcnemar_exact_p_value(only_realm, only_orqa)})


if __name__ == "__main__":
    main()
