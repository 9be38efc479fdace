"""One REALM pre-training step, timed by phase: retrieval, encoder forward/backward, the rest.

    python bench/pretrain_step.py [--preset default] [--batch 8] [--k 8] [--query-len 96]
        [--block-len 288] [--bf16 | --no-bf16] [--dropout P] [--cached] [--steps 3]

Runs the project's step (`realm.model.training.pretrain_step`: masked queries, MIPS with trivial
retrievals excluded, null document first, k candidates, marginal likelihood, AdamW) on a
synthetic corpus: `--blocks` blocks of random wordpieces with exactly the requested
lengths, and random unit vectors in the index. The MIPS search runs for real, but its hits
are then swapped for random distinct blocks per query: an untrained tower sends every query
to the same few blocks, and the doc tower, which embeds each distinct candidate once, would
look cheaper than it is on real data. "Full" re-embeds the candidates with the doc tower (gradients reach both
towers); `--cached` takes candidate vectors from the index and freezes the doc tower.
The backward pass is split in two (encoder, then towers) from the same loss, so each part
is timed on its own. Target: everything but the encoder <= 20% of the step. The first step
is a warm-up and is not counted. Ends with one JSON line of the mean figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict

import numpy as np
import pyarrow as pa
import torch
import transformers

from realm.model.index.block_store import BlockStore
from realm.model.networks.config import ModelConfig
from realm.model.networks.device import autocast, select_device
from realm.model.networks.encoder import build_encoder
from realm.model.index.mips import MipsIndex
from realm.model.training.pretrain_step import (
    candidate_embeddings,
    encoder_log_likelihood,
    make_pretrain_batch,
    pretrain_loss,
    retrieval_logits,
    retrieve,
)
from realm.model.networks.retriever import build_retriever
from realm.model.tokenization import BLOCK_SPECIAL_TOKENS

TITLE_WORDPIECES = 4
MASKED_SPAN_WORDPIECES = 4
FIRST_ORDINARY_WORDPIECE = 1000  # below are [unused] and special tokens


class RandomHitsIndex:
    """The real index for search cost and vector lookup; random distinct hits per query."""

    def __init__(self, index: MipsIndex, rng: np.random.Generator):
        self.index, self.rng = index, rng

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, _ = self.index.search(queries, k)
        hits = np.stack([self.rng.choice(self.index.block_ids, k, replace=False) for _ in queries])
        return scores, hits

    def lookup(self, block_ids: np.ndarray) -> np.ndarray:
        return self.index.lookup(block_ids)


def synthetic_corpus(count: int, block_len: int, dim: int, rng: np.random.Generator, vocab: int):
    body_len = block_len - BLOCK_SPECIAL_TOKENS - TITLE_WORDPIECES
    block_ids = np.arange(count, dtype=np.int64)
    table = pa.table(
        {
            "block_id": block_ids,
            "title_token_ids": pa.array(rng.integers(FIRST_ORDINARY_WORDPIECE, vocab, (count, TITLE_WORDPIECES)).tolist(), pa.list_(pa.int32())),
            "body_token_ids": pa.array(rng.integers(FIRST_ORDINARY_WORDPIECE, vocab, (count, body_len)).tolist(), pa.list_(pa.int32())),
        }
    )
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return BlockStore(table), RandomHitsIndex(MipsIndex.build(vectors, block_ids), rng)


def synthetic_examples(batch: int, query_len: int, num_blocks: int, rng: np.random.Generator, vocab: int) -> list[dict]:
    x_len = query_len - 2  # [CLS] x [SEP]
    examples = []
    for _ in range(batch):
        start = int(rng.integers(0, x_len - MASKED_SPAN_WORDPIECES))
        origin = int(rng.integers(0, num_blocks))
        examples.append(
            {
                "example_id": int(rng.integers(0, 2**62)),
                "origin_block_id": origin,
                "forbidden_block_ids": [origin],
                "token_ids": rng.integers(FIRST_ORDINARY_WORDPIECE, vocab, x_len).tolist(),
                "masked_token_positions": list(range(start, start + MASKED_SPAN_WORDPIECES)),
            }
        )
    return examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--query-len", type=int, default=96)
    parser.add_argument("--block-len", type=int, default=288)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="CPU bf16 autocast (default: the preset's)")
    parser.add_argument("--dropout", type=float, default=None, help="default: the preset's")
    parser.add_argument("--cached", action="store_true", help="candidate vectors from the index, doc tower frozen")
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3, help="including one warm-up step")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    overrides = {k: v for k, v in {"cpu_bf16_autocast": args.bf16, "dropout": args.dropout}.items() if v is not None}
    config = ModelConfig.preset(args.preset, **overrides)
    device = select_device()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    tokenizer = config.tokenizer()
    retriever = build_retriever(config, freeze_doc_tower=args.cached).to(device).train()
    encoder = build_encoder(config).to(device).train()
    params = [p for p in [*retriever.parameters(), *encoder.parameters()] if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    blocks, index = synthetic_corpus(args.blocks, args.block_len, config.retrieval_dim, rng, tokenizer.vocab_size)
    print(
        f"preset {args.preset} ({encoder.config.num_hidden_layers} layers, hidden {encoder.config.hidden_size}), "
        f"{'cached' if args.cached else 'full'}, bf16 autocast {config.cpu_bf16_autocast}, dropout {config.dropout}, "
        f"batch {args.batch} x k {args.k}, query/block/joint {args.query_len}/{args.block_len}/"
        f"{args.query_len + args.block_len - TITLE_WORDPIECES - 3}, device {device}, torch threads {torch.get_num_threads()}"
    )

    totals = defaultdict(float)
    for step in range(args.steps):
        examples = synthetic_examples(args.batch, args.query_len, args.blocks, rng, tokenizer.vocab_size)
        batch = make_pretrain_batch(tokenizer, examples, args.query_len)
        times = {}
        start = time.perf_counter()
        with autocast(device, config.cpu_bf16_autocast):
            query_embeddings, candidates = retrieve(retriever, index, batch, args.k, device)
            times["retrieval"] = time.perf_counter() - start
            mark = time.perf_counter()
            doc_embeddings = candidate_embeddings(
                retriever, tokenizer, blocks, candidates, device, index=index if args.cached else None
            )
            logits = retrieval_logits(query_embeddings, doc_embeddings, candidates)
            times["doc_tower_forward"] = time.perf_counter() - mark
            mark = time.perf_counter()
            log_p = encoder_log_likelihood(encoder, tokenizer, blocks, batch, candidates, device)
            times["encoder_forward"] = time.perf_counter() - mark
        # One loss, backward split at its two inputs so the encoder's share is timed alone.
        logits_leaf = logits.detach().requires_grad_()
        log_p_leaf = log_p.detach().requires_grad_()
        loss = pretrain_loss(logits_leaf, log_p_leaf)
        loss.backward()
        mark = time.perf_counter()
        log_p.backward(log_p_leaf.grad)
        times["encoder_backward"] = time.perf_counter() - mark
        mark = time.perf_counter()
        logits.backward(logits_leaf.grad)
        times["towers_backward"] = time.perf_counter() - mark
        mark = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times["optimizer"] = time.perf_counter() - mark
        times["step"] = time.perf_counter() - start
        print(f"step {step}{' (warm-up)' if step == 0 else ''}: loss {loss.item():.3f}  " + "  ".join(f"{k} {v:.2f}s" for k, v in times.items()))
        if step > 0:
            for name, seconds in times.items():
                totals[name] += seconds / (args.steps - 1)

    encoder_s = totals["encoder_forward"] + totals["encoder_backward"]
    rest_s = totals["step"] - totals["retrieval"] - encoder_s
    non_encoder = 1 - encoder_s / totals["step"]
    print(
        f"mean step {totals['step']:.2f}s: retrieval {totals['retrieval']:.2f}s, encoder fwd+bwd {encoder_s:.2f}s, "
        f"rest {rest_s:.2f}s (doc tower fwd {totals['doc_tower_forward']:.2f}s, towers bwd {totals['towers_backward']:.2f}s, "
        f"optimizer {totals['optimizer']:.2f}s); everything but the encoder {non_encoder:.0%} (target <= 20%)"
    )
    print(json.dumps({
        "preset": args.preset,
        "mode": "cached" if args.cached else "full",
        "bf16": config.cpu_bf16_autocast,
        "dropout": config.dropout,
        "batch": args.batch,
        "k": args.k,
        "query_len": args.query_len,
        "block_len": args.block_len,
        "step_s": round(totals["step"], 3),
        "retrieval_s": round(totals["retrieval"], 3),
        "encoder_s": round(encoder_s, 3),
        "rest_s": round(rest_s, 3),
        "non_encoder_fraction": round(non_encoder, 3),
    }))


if __name__ == "__main__":
    main()
