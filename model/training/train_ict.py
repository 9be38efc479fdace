"""Inverse Cloze Task warm start of both retriever towers (ORQA, Lee et al. 2019; REALM §3.4).

A sentence of a block is the query, the block (that sentence removed 90% of the time, done
by the Beam ICT pipeline) is its context; each query must pick its own context among the
batch's contexts: scores = q @ dᵀ [batch, batch], cross-entropy to the diagonal, gradients
into both towers. The `heldout_examples` whose ids hash lowest are never trained on;
`heldout_accuracy` is top-1 of a held-out query's own context among groups of
`HELDOUT_GROUP_SIZE` held-out contexts. Fresh towers are the model preset's, or (`tower_layers`,
`retrieval_pooling`, `projection_init`, `tower_scale`) a sentence-encoder start: all of MiniLM's
layers, mean-pooled, projected by PCA of pooled contexts, scored by 20 × cosine; with
`steps = 0` that start is published as it is, a retriever with no ICT training. Checkpoints (`checkpoints/<step>/` with
query_embedder and doc_embedder) resume exactly: the batch of step s is a function of
(seed, s). `IctTrainer(...).run(progress)` trains (`realm.model.training.trainer` holds
its loop); the Prefect flow calls it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.device import autocast
from realm.model.networks.inputs import length_sorted_groups, pad_batch
from realm.model.networks.marginal import mask_log_scores
from realm.model.networks.retriever import Embedder, Retriever, fit_projection_pca
from realm.model.tokenization import WordPieceTokenizer, join
from realm.model.training.distributed import ONE_PROCESS, World, gather_rows, sum_loss
from realm.model.training.example_order import batch_rows, heldout_split
from realm.model.training.optimization import apply_update, build_optimizer, build_scheduler
from realm.model.training.stage_inputs import stage_inputs
from realm.model.training.stage_settings import IctConfig
from realm.model.training.trainer import ProgressFn, Trainer
from realm.schemas import ICT_EXAMPLES, read_table

log = logging.getLogger(__name__)

ICT_COLUMNS = ["example_id", "query_token_ids", "context_block_id", "context_title_token_ids", "context_body_token_ids"]
# Held-out queries pick their context among this many held-out contexts (ORQA's eval batch).
HELDOUT_GROUP_SIZE = 512
# Sequences per forward when embedding held-out queries and contexts.
EMBED_MICRO_BATCH = 64


def fresh_towers(
    model_config: ModelConfig, config: IctConfig, tokenizer: WordPieceTokenizer, examples: Sequence[Mapping],
    device: torch.device, seed: int = 0,
) -> dict[str, Embedder]:
    """Both towers as `config` asks for them, before any ICT step (see the module docstring)."""
    tower_config = dataclasses.replace(
        model_config,
        num_layers=config.tower_layers or model_config.num_layers,
        retrieval_pooling=config.retrieval_pooling,
        retrieval_scale=config.tower_scale,
    )
    towers = {name: build_component(Embedder, tower_config).to(device) for name in ("query_embedder", "doc_embedder")}
    if config.projection_init == "pca":
        rows = np.random.default_rng(seed).permutation(len(examples))[: config.projection_sample]
        _, contexts = ict_sequences(tokenizer, [examples[row] for row in np.sort(rows)], config)
        doc_tower = towers["doc_embedder"].eval()
        with torch.no_grad(), autocast(device, model_config.cpu_bf16_autocast):
            pooled = _embed(lambda inputs: doc_tower.pooled(**inputs.as_kwargs()), contexts, tokenizer.pad_id, device)
        fit_projection_pca(list(towers.values()), pooled)  # [sample, hidden]
        log.info("ICT: projection initialised by PCA of %d pooled contexts", len(pooled))
    return towers


def ict_sequences(
    tokenizer: WordPieceTokenizer, examples: Sequence[Mapping], config: IctConfig
) -> tuple[list[tuple[list[int], list[int]]], list[tuple[list[int], list[int]]]]:
    """(queries `[CLS] sentence [SEP]`, contexts `[CLS] title [SEP] body [SEP]`) of ICT rows,
    cut to the configured lengths (a context loses the end of its body first)."""
    queries = [join(tokenizer, list(e["query_token_ids"]), None, config.max_query_wordpieces) for e in examples]
    contexts = [
        join(
            tokenizer, list(e["context_title_token_ids"]), list(e["context_body_token_ids"]), config.max_block_wordpieces
        )
        for e in examples
    ]
    return queries, contexts


def ict_scores(
    query_embeddings: torch.Tensor, context_embeddings: torch.Tensor, context_block_ids: np.ndarray,
    own: np.ndarray | None = None,
) -> torch.Tensor:
    """In-batch scores [queries, contexts] float32, query i against context j; query i's own
    context is context `own[i]` (default: context i).

    Other contexts cut from the same block as the query's own (two sentences of one block in a
    batch, or one example twice where a batch wraps an epoch) are masked out: they would be
    near-copies of the right answer scored as wrong ones.
    """
    own = np.arange(len(query_embeddings)) if own is None else own
    scores = query_embeddings @ context_embeddings.T  # [queries, contexts]
    same_block = context_block_ids[own][:, None] == context_block_ids[None, :]
    is_own = np.arange(len(context_block_ids))[None, :] == own[:, None]
    return mask_log_scores(scores, torch.from_numpy(is_own | ~same_block).to(scores.device))


def ict_loss(scores: torch.Tensor, own: np.ndarray | None = None) -> tuple[torch.Tensor, float]:
    """(cross-entropy of each query to its own context (`ict_scores`' `own`), mean over the
    queries; top-1 accuracy)."""
    target = torch.arange(len(scores)) if own is None else torch.from_numpy(own)
    target = target.to(scores.device)
    return F.cross_entropy(scores, target), (scores.argmax(dim=1) == target).float().mean().item()


def _embed(embed, sequences: list[tuple[list[int], list[int]]], pad_id: int, device: torch.device) -> torch.Tensor:
    """`embed(inputs) -> [n, d]` over length-sorted micro-batches, rows back in input order."""
    groups = length_sorted_groups([len(ids) for ids, _ in sequences], EMBED_MICRO_BATCH)
    out = torch.cat([embed(pad_batch([sequences[r] for r in rows], pad_id).to(device)) for rows in groups])
    return out[torch.from_numpy(np.argsort(np.concatenate(groups))).to(device)]


@torch.no_grad()
def heldout_accuracy(
    retriever: Retriever,
    tokenizer: WordPieceTokenizer,
    examples: Sequence[Mapping],
    config: IctConfig,
    device: torch.device,
    cpu_bf16_autocast: bool,
) -> float:
    """Top-1 accuracy of each query's own context among its group of `HELDOUT_GROUP_SIZE`
    held-out contexts (the last group may be smaller); eval mode, no dropout."""
    was_training = retriever.training
    retriever.eval()
    correct = 0
    try:
        for start in range(0, len(examples), HELDOUT_GROUP_SIZE):
            group = examples[start : start + HELDOUT_GROUP_SIZE]
            queries, contexts = ict_sequences(tokenizer, group, config)
            with autocast(device, cpu_bf16_autocast):
                q = _embed(retriever.embed_queries, queries, tokenizer.pad_id, device)  # [n, d]
                d = _embed(retriever.embed_passages, contexts, tokenizer.pad_id, device)  # [n, d]
            scores = ict_scores(q, d, np.array([e["context_block_id"] for e in group]))
            correct += (scores.argmax(dim=1) == torch.arange(len(group), device=device)).sum().item()
    finally:
        retriever.train(was_training)
    return correct / len(examples)


class IctTrainer(Trainer):
    """ICT of both towers (module docstring): resumes from the newest checkpoint under
    `checkpoint_root`, else starts from `fresh_towers`; `run` trains to `config.steps`."""

    def __init__(
        self,
        ict_examples_path: str,
        checkpoint_root: str,
        model_config: ModelConfig,
        config: IctConfig,
        device: torch.device | None = None,
        seed: int = 0,
        world: World = ONE_PROCESS,
    ):
        super().__init__(checkpoint_root, config, device, seed, world)
        self.model_config = model_config
        self.tokenizer = model_config.tokenizer()
        self.examples = read_table(ict_examples_path, ICT_EXAMPLES, columns=ICT_COLUMNS).to_pylist()
        self.train_rows, self.heldout_rows = heldout_split([e["example_id"] for e in self.examples], config.heldout_examples)
        towers = self._start_components(  # the PCA projection sees training contexts only
            lambda: fresh_towers(
                model_config, config, self.tokenizer, [self.examples[row] for row in self.train_rows], self.device, seed
            ),
            stage_inputs(config, seed, {"examples": ict_examples_path}),
        )
        self.retriever = Retriever(towers["query_embedder"], towers["doc_embedder"]).to(self.device).train()
        optimizer = build_optimizer([self.retriever.query_embedder, self.retriever.doc_embedder], config.learning_rate)
        state = self._restore(optimizer, build_scheduler(optimizer, config.warmup_steps, config.steps), config.steps)
        self.final_loss: float | None = state.extra.get("loss")  # of the last step trained, here or before a resume
        log.info(
            "ICT: %d training / %d held-out examples, from step %d to %d",
            len(self.train_rows), len(self.heldout_rows), self.step, config.steps,
        )

    def train_step(self) -> dict:
        rows = batch_rows(self.train_rows, self.config.batch_size, self.seed, self.step)
        shard = self.world.shard(rows)  # this rank's share; all of it in one process
        batch = [self.examples[row] for row in shard]
        queries, contexts = ict_sequences(self.tokenizer, batch, self.config)
        pad_id = self.tokenizer.pad_id
        with autocast(self.device, self.model_config.cpu_bf16_autocast):
            q = self.retriever.embed_queries(pad_batch(queries, pad_id).to(self.device))  # [shard, d]
            d = self.retriever.embed_passages(pad_batch(contexts, pad_id).to(self.device))  # [shard, d]
        # Each query is scored against every rank's contexts, so N ranks see the one-process
        # negatives; the contexts are stacked rank by rank, rows r, r + N, ... of the batch each.
        shards = [World(rank, self.world.size).shard(rows) for rank in range(self.world.size)]
        gathered = np.concatenate(shards)
        own = sum(map(len, shards[: self.world.rank])) + np.arange(len(shard))
        block_ids = np.array([self.examples[row]["context_block_id"] for row in gathered])
        loss, batch_accuracy = ict_loss(ict_scores(q, gather_rows(self.world, d), block_ids, own), own)
        share = len(shard) / len(rows)
        # Each rank's loss reaches the other ranks' contexts through `gather_rows`, whose
        # backward sums over ranks: weighting the loss by its share × N and the summed
        # gradients by 1 / N gives the gradient of the whole batch's mean (`apply_update`).
        self.final_loss = apply_update(
            loss * (share * self.world.size), self.optimizer, self.scheduler, "ICT", self.step + 1, self.world,
            1 / self.world.size,
        )
        self.step += 1
        return self.meter.update(
            self.step, loss=self.final_loss, batch_accuracy=sum_loss(self.world, batch_accuracy, share),
            learning_rate=self.scheduler.get_last_lr()[0],
        )

    def _checkpoint_components(self) -> dict[str, Embedder]:
        return {"query_embedder": self.retriever.query_embedder, "doc_embedder": self.retriever.doc_embedder}

    def _checkpoint_extra(self) -> dict:
        return {"loss": self.final_loss}

    def run(self, progress: ProgressFn | None = None) -> dict:
        """Train to `config.steps`, then evaluate on the held-out examples; returns {step,
        checkpoint, heldout_accuracy, heldout_examples, steps_per_s, final_loss}."""
        self._train(progress)
        heldout = [self.examples[row] for row in self.heldout_rows]
        accuracy = heldout_accuracy(
            self.retriever, self.tokenizer, heldout, self.config, self.device, self.model_config.cpu_bf16_autocast
        )
        return {
            "step": self.step,
            "checkpoint": self.last_checkpoint,
            "heldout_accuracy": accuracy,
            "heldout_examples": len(heldout),
            "steps_per_s": self.meter.steps_per_s(),
            "final_loss": self.final_loss,
        }

