"""REALM pre-training (Guu et al. 2020, §3): salient-span MLM marginalised over retrieved blocks,
with a MIPS index that is rebuilt from snapshots of the doc tower and swapped in while training runs.

`PretrainTrainer` owns the three components (query tower, doc tower, knowledge-augmented
encoder), the optimizer and the index in use; one `train_step` masks one salient span per
example, retrieves top-k with the null document first and trivial retrievals excluded,
rescores the candidates with the current θ and minimises −log Σ_z p(y|z,x) p(z|x)
(`realm.model.training.pretrain_step`). `run` is the loop (`realm.model.training.trainer`):

    trainer = PretrainTrainer(blocks, examples, checkpoints, model_config, config, init_retriever=ict_ckpt)
    result = trainer.run(PretrainHooks(progress, evaluated, refresh), IndexRoots(index, embeddings, snapshots))

It attaches the first index (`attach_index`), asks for a refresh every `refresh_every` steps
through `hooks.refresh` (the flow's Prefect task) and swaps each one in `refresh_every` steps
after its snapshot (`realm.model.training.pretrain_index.IndexRefreshes`), checkpoints
every `checkpoint_every` steps, evaluates the held-out masked spans every `eval_every` steps
and at the end, and returns the final index. On several processes each rank reads its share of
every batch; rank 0 refreshes, evaluates and writes, and the other ranks `follow`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.mips import MipsIndex
from realm.model.index.pooled_states import PooledStates, publish_pooled_states
from realm.model.index.rebuild import fitted_block_batches, rebuild_index
from realm.model.networks.checkpoint import load_components
from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.device import autocast
from realm.model.networks.encoder import KnowledgeAugmentedEncoder, build_encoder
from realm.model.networks.marginal import LOG_ZERO
from realm.model.networks.retriever import Embedder, Retriever
from realm.model.publish import publish, staging_dir
from realm.model.training.example_order import batch_rows, heldout_split, untrained_rows
from realm.model.training.masked_span_accuracy import MaskedSpanTally, marginal_predictions, span_correct
from realm.model.training.optimization import apply_update, build_optimizer, build_scheduler
from realm.model.training.distributed import ONE_PROCESS, World, broadcast
from realm.model.training.pretrain_index import IndexRefreshes, IndexRoots, RefreshFn, first_index, rank_zeros_swap
from realm.model.training.pretrain_step import (
    PretrainBatch,
    StepOutputs,
    candidate_embeddings,
    candidates_holding_span,
    encoder_log_probs,
    make_pretrain_batch,
    pretrain_loss,
    retrieval_logits,
    retrieve,
    salient_examples,
)
from realm.model.training.refresh_shares import (
    EmbedShare,
    ShareEmbedder,
    embed_on_every_rank,
    share_embedder,
    stop_share_embedders,
)
from realm.model.training.stage_inputs import stage_inputs
from realm.model.training.stage_settings import PretrainConfig
from realm.model.training.trainer import ProgressFn, Trainer
from realm.schemas import PRETRAIN_EXAMPLES, read_table

log = logging.getLogger(__name__)

EXAMPLE_COLUMNS = ["example_id", "origin_block_id", "forbidden_block_ids", "token_ids", "masked_token_positions"]
# The examples `run` evaluates on: never trained on by construction, and (with
# `untrained_eval_examples`) training examples no step has drawn yet.
HELD_OUT = "held-out"
NEVER_TRAINED_ON = "never trained on"
# The optimizer's modules are [query tower, doc tower, encoder BERT, MLM head], two parameter
# groups each (`build_optimizer`); these are the decay groups whose rates the log reports.
_QUERY_TOWER_GROUP, _ENCODER_GROUP = 0, 4


@dataclass(frozen=True)
class PretrainHooks:
    """What the loop calls out to; the flow supplies Prefect's logging, artifacts and refresh task."""

    progress: ProgressFn  # `train_step`'s dict, every `log_every` steps and at the last
    evaluated: Callable[[int, str, dict], None]  # (step, HELD_OUT or NEVER_TRAINED_ON, `evaluate_masked_spans`' dict)
    refresh: RefreshFn


@dataclass(frozen=True)
class PretrainResult:
    step: int
    checkpoint: str
    index: str  # built by the final doc tower: what fine-tuning reads
    evaluations: dict[str, dict]  # by the examples evaluated (HELD_OUT, NEVER_TRAINED_ON)
    outcomes: dict[str, list[dict]]  # the same evaluations, one MASKED_SPAN_OUTCOMES row per example
    refreshes: list[dict]  # one per swap (`IndexRefreshes.records`)


class PretrainTrainer(Trainer):
    """REALM pre-training state, step and loop (module docstring).

    Resumes from the newest checkpoint under `checkpoint_root` (components, optimizer,
    scheduler, RNG, in `extra` the index snapshot step in use and in `paths` the snapshot of
    the refresh in flight); otherwise the towers come from `init_retriever` (an ICT checkpoint
    dir) or fresh from `model_config`, and the encoder fresh (BERT warm start). The batch of
    step s is a function of (seed, s).
    """

    def __init__(
        self, blocks_path: str, examples_path: str, checkpoint_root: str, model_config: ModelConfig, config: PretrainConfig,
        init_retriever: str | None = None, device: torch.device | None = None, seed: int = 0, world: World = ONE_PROCESS,
    ):
        super().__init__(checkpoint_root, config, device, seed, world)
        self.blocks_path, self.model_config = blocks_path, model_config
        self.tokenizer = model_config.tokenizer()
        self.blocks = BlockStore(pa.Table.from_batches(list(fitted_block_batches(blocks_path, config.max_block_wordpieces))))
        self.examples = salient_examples(
            read_table(examples_path, PRETRAIN_EXAMPLES, columns=EXAMPLE_COLUMNS).to_pylist(), examples_path
        )
        self.train_rows, self.heldout_rows = heldout_split([e["example_id"] for e in self.examples], config.heldout_examples)

        inputs = stage_inputs(config, seed, {"blocks": blocks_path, "examples": examples_path, "init_retriever": init_retriever})
        components = self._start_components(lambda: self._fresh_components(init_retriever), inputs)
        self.retriever = Retriever(
            components["query_embedder"], components["doc_embedder"], freeze_doc_tower=config.doc_tower != "whole"
        ).to(self.device)
        self.encoder: KnowledgeAugmentedEncoder = components["encoder"].to(self.device)
        # The encoder's BERT before its head: the same parameter order as the encoder's own, and
        # the tied decoder (the input embedding) goes with the body at the body's rate.
        modules = [self.retriever.query_embedder, self.retriever.doc_embedder, self.encoder.bert, self.encoder.cls]
        optimizer = build_optimizer(
            modules, config.learning_rate, start_steps=[self._retriever_start_step] * 2 + [0, 0],
            learning_rates=[config.retriever_learning_rate] * 2 + [config.learning_rate, config.mlm_head_learning_rate],
        )
        scheduler = build_scheduler(optimizer, config.warmup_steps, config.steps, config.retriever_warmup_steps)
        state = self._restore(optimizer, scheduler, config.steps)
        self.index_snapshot_step: int | None = state.extra.get("index_snapshot_step")
        # The snapshot of the refresh in flight: a resumed run restarts it, due at the same step.
        self.refresh_in_flight: str | None = state.paths.get("refresh_in_flight")
        # Every checkpoint uses it, so retention keeps the checkpoint this stage started from.
        self.init_retriever = init_retriever
        self._index: MipsIndex | None = None
        self._index_lock = threading.Lock()
        self._pooled_states: PooledStates | None = None  # doc_tower "projection": set by `run`
        log.info(
            "pre-training: %d blocks, %d training / %d held-out examples, from step %d",
            len(self.blocks.block_ids), len(self.train_rows), len(self.heldout_rows), self.step,
        )

    def _fresh_components(self, init_retriever: str | None) -> dict:
        if init_retriever is not None:
            towers = load_components(init_retriever)
            missing = {"query_embedder", "doc_embedder"} - set(towers)
            if missing:
                raise ValueError(f"{init_retriever}: retriever checkpoint has no {sorted(missing)}")
        else:
            towers = {name: build_component(Embedder, self.model_config) for name in ("query_embedder", "doc_embedder")}
        towers = {name: towers[name] for name in ("query_embedder", "doc_embedder")}
        return {**towers, "encoder": build_encoder(self.model_config)}

    @property
    def _retriever_start_step(self) -> int:
        """The step the towers start training. With the null document alone (k = 1) p(z|x) is 1
        whatever they embed, so no gradient could reach them and they never start: weight decay
        alone would shrink them."""
        return self.config.retriever_frozen_steps if self.config.num_candidates > 1 else self.config.steps

    # -- the index -------------------------------------------------------------------------

    @property
    def splits_refreshes(self) -> bool:
        """Whether every rank embeds a share of each refresh's corpus (`refresh_shares`): on
        several processes, when the refresh re-embeds the whole corpus in process."""
        return self.world.size > 1 and self.config.doc_tower == "whole" and self.config.refresh_embedder == "in_process"

    def share_embedder(self) -> EmbedShare:
        """What embeds this rank's share of a refresh (`refresh_shares.share_embedder`)."""
        return share_embedder(self.blocks_path, self.model_config, self.device, self.config.max_block_wordpieces)

    def attach_index(self, roots: IndexRoots) -> str:
        """Put the first index into use (`first_index`, rank 0's on every rank, built from every
        rank's share where refreshes split); returns its published path."""
        def build() -> tuple[str, int]:
            snapshot = self.snapshot_doc_tower(roots.snapshots)
            embed = None
            if self.splits_refreshes:
                embed = partial(embed_on_every_rank, self.world, snapshot, self.step, self.share_embedder())
            return rebuild_index(
                self.blocks_path, snapshot, roots.embeddings, roots.index, self.step, self.model_config,
                self.config.keep_checkpoints, self.device, self.config.max_block_wordpieces, embed,
            ), self.step

        first = None
        if self.world.leader:
            published, snapshot_step = first_index(roots, self.index_snapshot_step, build)
            first = MipsIndex.load(published, self.model_config.retrieval_dim), snapshot_step
        self.swap_index(*rank_zeros_swap(self.world, roots, first))
        return str(self._index_in_use().path)

    def _attach_pooled_states(self, roots: IndexRoots) -> PooledStates:
        """The pooled states of the doc tower's BERT over the blocks (`publish_pooled_states`;
        rank 0 computes them once, every rank reads them)."""
        if roots.pooled_states is None:
            raise ValueError("doc_tower projection needs IndexRoots.pooled_states, where the blocks' pooled states live")
        path = None
        if self.world.leader:
            path = str(publish_pooled_states(
                self.retriever.doc_embedder, self.model_config, self.blocks_path, roots.pooled_states,
                self.config.max_block_wordpieces, self.device,
            ))
        return PooledStates.load(broadcast(self.world, path))

    def snapshot_doc_tower(self, snapshot_root: str) -> str:
        """Publish the current doc tower (`save_pretrained`, by rename with a manifest) as
        `<snapshot_root>/<step>/` for `rebuild_index`; call between steps. Returns its path.
        `IndexRefreshes` prunes old ones."""
        staging = staging_dir(snapshot_root, self.step)
        self.retriever.doc_embedder.save_pretrained(staging)
        return str(publish(staging, snapshot_root, self.step))

    def swap_index(self, index: MipsIndex, snapshot_step: int) -> int:
        """Put `index` (built from the doc tower of `snapshot_step`) into use from the next step
        on; returns its staleness, `step − snapshot_step`. Thread-safe against `train_step`,
        which reads the index once at its start."""
        if index.dim != self.model_config.retrieval_dim:
            raise ValueError(f"index has dim {index.dim}, the towers embed in {self.model_config.retrieval_dim}")
        with self._index_lock:
            self._index, self.index_snapshot_step = index, snapshot_step
        staleness = self.step - snapshot_step
        log.info("step %d: swapped in the index of step %d (staleness %d)", self.step, snapshot_step, staleness)
        return staleness

    def _index_in_use(self) -> MipsIndex:
        with self._index_lock:
            if self._index is None:
                raise RuntimeError("no index in use: call swap_index (or attach_index) before training")
            return self._index

    # -- steps -----------------------------------------------------------------------------

    def _batch(self, rows: np.ndarray) -> PretrainBatch:
        examples = [self.examples[row] for row in rows]
        if self.config.random_spans:
            examples = [{**example, "masked_token_positions": []} for example in examples]
        return make_pretrain_batch(self.tokenizer, examples, self.config.max_query_wordpieces)

    def _forward(self, index: MipsIndex, batch: PretrainBatch) -> StepOutputs:
        """The REALM forward: retrieve, rescore candidates with the current θ, read every
        candidate, marginalise (bf16 autocast where configured, loss in float32)."""
        with autocast(self.device, self.model_config.cpu_bf16_autocast):
            query_embeddings, candidates = retrieve(
                self.retriever, index, batch, self.config.num_candidates, self.device
            )  # [batch, d], [batch, k]
            learns = self._doc_tower_learns
            doc_embeddings = candidate_embeddings(
                self.retriever, self.tokenizer, self.blocks, candidates, self.device, None if learns else index,
                self.config.micro_batch, self._pooled_states if learns else None,
            )  # [batch, k, d]
            logits = retrieval_logits(query_embeddings, doc_embeddings, candidates)  # [batch, k]
            log_p_y_given_z, vocab_log_probs = encoder_log_probs(
                self.encoder, self.tokenizer, self.blocks, batch, candidates, self.device, self.config.micro_batch
            )  # [batch, k], [batch, k, max_masks, vocab]
        log_p_z_given_x = torch.log_softmax(logits.detach(), dim=-1)  # [batch, k]
        holding = candidates_holding_span(self.blocks, batch, candidates)
        return StepOutputs(
            loss=pretrain_loss(logits, log_p_y_given_z),
            log_p_z_given_x=log_p_z_given_x,
            predictions=marginal_predictions(log_p_z_given_x, vocab_log_probs),
            candidates=candidates,
            holding=holding,
            right_per_candidate=span_correct(vocab_log_probs.argmax(dim=-1), batch),
        )

    @property
    def _doc_tower_learns(self) -> bool:
        """Whether the doc tower has trained or trains this step. Before that it is the tower every
        index of the run was built with, so candidates take their vectors from the index (as in
        cached mode) instead of a doc-tower forward per step."""
        return self.config.doc_tower != "frozen" and self.step >= self._retriever_start_step

    def _train_mode(self, training: bool) -> None:
        # A doc tower whose BERT does not learn only embeds the null document; without dropout
        # that is one fixed vector, of the state the pooled states were computed in.
        self.retriever.query_embedder.train(training)
        self.retriever.doc_embedder.train(training and self._doc_tower_learns and self.config.doc_tower == "whole")
        self.encoder.train(training)

    def train_step(self) -> dict:
        """One optimizer step on batch `step`. Returns `Progress.update`'s dict with:
        loss; mlm_accuracy, the fraction of the batch's masked spans predicted exactly by the
        argmax of the per-position marginal Σ_z p(z|x) p(v|z,x) (train mode, before the
        update); retrieval_entropy, the mean entropy (nats) of p(z|x) over the candidates
        (null included, padding has p = 0; at most log k); null_document_probability, the
        mean p(null|x); span_in_candidates, the fraction of the batch whose masked wordpieces
        occur verbatim in a retrieved block (what copying could reach); examples_read, those the
        encoder read; num_random_spans;
        learning_rate, the encoder body's; retriever_learning_rate, the query tower's (0 while
        frozen); index_snapshot_step and index_age."""
        index = self._index_in_use()
        rows = batch_rows(self.train_rows, self.config.batch_size, self.seed, self.step)
        shard = self.world.shard(rows)  # this rank's share; all of it in one process
        self._train_mode(True)
        # Set from the step alone, so a resumed run freezes exactly as this one. Frozen towers
        # build no graph; AdamW keeps no state for them until their first gradient.
        retriever_trains = self.step >= self._retriever_start_step
        self.retriever.query_embedder.requires_grad_(retriever_trains)
        self.retriever.freeze_doc_tower = not (retriever_trains and self.config.doc_tower == "whole")
        self.retriever.doc_embedder.projection.requires_grad_(retriever_trains and self.config.doc_tower != "frozen")
        batch = self._batch(shard)
        outputs = self._forward(index, batch)
        loss = apply_update(
            outputs.loss, self.optimizer, self.scheduler, "pre-training", self.step + 1, self.world, len(shard) / len(rows)
        )
        self.step += 1
        p_z = outputs.log_p_z_given_x.exp()  # [batch, k]
        entropy = -(p_z * outputs.log_p_z_given_x.clamp(min=LOG_ZERO)).sum(dim=1)  # padding: 0 · LOG_ZERO = 0
        return self.meter.update(
            self.step,
            loss=loss,
            mlm_accuracy=span_correct(outputs.predictions, batch).float().mean().item(),
            retrieval_entropy=entropy.mean().item(),
            null_document_probability=p_z[:, 0].mean().item(),
            span_in_candidates=float(outputs.span_in_candidates.mean()),
            examples_read=len(rows),
            num_random_spans=batch.num_random_spans,
            learning_rate=self.scheduler.get_last_lr()[_ENCODER_GROUP],
            retriever_learning_rate=self.scheduler.get_last_lr()[_QUERY_TOWER_GROUP],
            index_snapshot_step=self.index_snapshot_step,
            index_age=self.step - self.index_snapshot_step,
        )

    def untrained_rows(self, count: int) -> np.ndarray:
        """Up to `count` training examples no step so far has drawn (`example_order.untrained_rows`)."""
        return untrained_rows(self.train_rows, self.config.batch_size, self.seed, self.step)[:count]

    @torch.no_grad()
    def evaluate_masked_spans(self, rows: np.ndarray | None = None) -> dict:
        """Exact-span accuracy on the held-out examples (never trained on; or on `rows`, e.g.
        `untrained_rows`), eval mode:
        `accuracy_with_retrieval` predicts each masked wordpiece by the argmax of the
        per-position marginal Σ_z p(z|x) p(v|z,x) over the k candidates (null included);
        `accuracy_null_only` by the encoder reading `[CLS] x [SEP] [SEP]` alone; a span counts
        only if all its wordpieces are right; the other counts are `MaskedSpanTally.summary`'s.
        Draws no random numbers, so it never changes what the next training step does."""
        return self.tally_masked_spans(rows).summary()

    @torch.no_grad()
    def tally_masked_spans(self, rows: np.ndarray | None = None) -> MaskedSpanTally:
        """`evaluate_masked_spans`' counts, with each example's outcome and candidates
        (`MaskedSpanTally.outcomes`)."""
        rows = self.heldout_rows if rows is None else rows
        index = self._index_in_use()
        self._train_mode(False)
        tally = MaskedSpanTally()
        try:
            for start in range(0, len(rows), self.config.batch_size):
                chunk = rows[start : start + self.config.batch_size]
                batch = self._batch(chunk)
                outputs = self._forward(index, batch)
                tally.add(
                    [int(self.examples[row]["example_id"]) for row in chunk],
                    span_correct(outputs.predictions, batch),
                    outputs.candidates,
                    outputs.log_p_z_given_x,
                    outputs.holding,
                    outputs.right_per_candidate,
                )
        finally:
            self._train_mode(True)
        return tally

    # -- checkpoints and the loop ----------------------------------------------------------

    def _checkpoint_components(self) -> dict:
        return {
            "query_embedder": self.retriever.query_embedder,
            "doc_embedder": self.retriever.doc_embedder,
            "encoder": self.encoder,
        }

    def _checkpoint_extra(self) -> dict:
        return {"index_snapshot_step": self.index_snapshot_step}

    def _checkpoint_paths(self) -> dict:
        return {"refresh_in_flight": self.refresh_in_flight}

    def _checkpoint_uses(self) -> list[str | None]:
        """The index in use, the snapshot of the refresh in flight and the retriever checkpoint
        the run started from live as long as the checkpoint does (`realm.model.publish.prune`)."""
        return [self._index_in_use().path, self.refresh_in_flight, self.init_retriever]

    def _evaluate(self, hooks: PretrainHooks, which: str, rows: np.ndarray | None = None) -> MaskedSpanTally:
        tally = self.tally_masked_spans(rows)
        hooks.evaluated(self.step, which, tally.summary())
        return tally

    def follow(self, roots: IndexRoots) -> None:
        """A rank > 0's pre-training: the same steps against rank 0's indexes; nothing written
        but its shares of the refreshes' embeddings."""
        self.run(None, roots)

    def run(self, hooks: PretrainHooks | None, roots: IndexRoots) -> PretrainResult | None:
        """Pre-train to `config.steps` against indexes published under `roots`; on resume,
        against the index the checkpoint was using and with the refresh it had in flight, so no
        step sees another index than the uninterrupted run's. `hooks` None: a rank > 0 (`follow`)."""
        shares = None
        if self.splits_refreshes and not self.world.leader:
            shares = ShareEmbedder(self.world, self.share_embedder())
        log.info("training against index %s on %d process(es)", self.attach_index(roots), self.world.size)
        frozen = self.config.doc_tower == "frozen" or self._retriever_start_step >= self.config.steps
        if self.config.doc_tower == "projection" and not frozen:
            self._pooled_states = self._attach_pooled_states(roots)
        refreshes = hooks and IndexRefreshes(
            hooks.refresh, roots, lambda: self.snapshot_doc_tower(roots.snapshots),
            None if frozen else self.config.refresh_every, self.config.keep_checkpoints, self.index_snapshot_step,
            None if self.step >= self.total_steps else self.refresh_in_flight, self._retriever_start_step,
        )

        def refresh_on_schedule() -> None:
            if shares is not None:
                shares.raise_if_failed()
            swapped = rank_zeros_swap(self.world, roots, refreshes.before_step(self.step) if refreshes else None)
            if swapped is not None:
                self.swap_index(*swapped)
            self.refresh_in_flight = refreshes.in_flight if refreshes else None

        def evaluate_on_schedule() -> None:
            every = self.config.eval_every
            if every and self.step % every == 0 and self.step < self.total_steps:
                self._evaluate(hooks, HELD_OUT)

        self._train(hooks and hooks.progress, refresh_on_schedule, evaluate_on_schedule if hooks else None)
        if hooks is None:
            if shares is not None:
                shares.join()
            return None
        index = refreshes.final_index(self.step, self.index_snapshot_step)
        if self.splits_refreshes:
            stop_share_embedders(self.world)
        tallies = {}
        if self.config.steps == 0:  # an untrained MLM head's accuracy would read as a result
            log.info("0 pre-training steps: no held-out masked-span evaluation")
        else:
            tallies[HELD_OUT] = self._evaluate(hooks, HELD_OUT)
        if self.config.untrained_eval_examples and self.config.steps:
            rows = self.untrained_rows(self.config.untrained_eval_examples)
            if len(rows):
                tallies[NEVER_TRAINED_ON] = self._evaluate(hooks, NEVER_TRAINED_ON, rows)
            else:
                log.warning("no training example is left undrawn after %d steps: no never-trained-on evaluation", self.step)
        return PretrainResult(
            self.step, self.last_checkpoint, index,
            {which: tally.summary() for which, tally in tallies.items()},
            {which: tally.outcomes(self.step) for which, tally in tallies.items()},
            refreshes.records,
        )
