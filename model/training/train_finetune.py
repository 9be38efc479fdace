"""Open-QA fine-tuning as REALM does it (ORQA's recipe): the doc index stays fixed; the query
tower and the reader learn.

Retrieval runs once: each training question's top `num_candidates` blocks (the dense index
through the starting query tower, or BM25) and their gold spans are cached before the first
step (`CandidateCache`); a question none of whose candidates holds an answer can teach
neither the retriever nor the reader, so it is counted and left out of the batch stream,
which then holds only questions that carry a loss (ORQA and DPR likewise train on questions
whose answer was retrieved). Each step rescores a batch's cached candidates with the current
query tower (graph into it; BM25: uniform) and adds, per question:
- ORQA's early update (dense only): −log Σ_{candidates holding an answer} p(z|x), p(z|x) a
  softmax over the cached candidates (`early_update_loss`);
- the reader's loss over the `num_read` best-scored candidates, as ORQA's reader: one
  softmax over every span of every read block with the block's retrieval logit added to each
  span's score, marginalised over all gold spans (`joint_span_logits`, `joint_reader_loss`);
  blocks read without the answer are the question's negatives. When none of the read blocks
  holds an answer, the best-ranked candidate that does takes the last read slot, so every
  question has a positive beside its hard negatives (DPR's reader: 1 positive + negatives).
"Holds an answer" means has a gold span (`realm.model.qa.gold_spans`: text answers match by
wordpieces, CuratedTrec's regex answers the block text of whole-word spans).

`validation_fraction` of the questions (chosen by a hash of the question, so the same ones on
every run and machine) is never trained on: every `checkpoint_every` steps the model answers
them exactly as `realm evaluate` does, and the checkpoint with the best exact match is kept
in `<root>/best/<step>/` (`realm.model.networks.checkpoint.best_checkpoint` finds it). The training length is given in
epochs over the questions that carry a loss; the span MLP, which starts from scratch, has
its own learning rate.

A fresh run starts the query tower from `init_checkpoint`'s, and the reader's BERT from the
knowledge-augmented encoder of `reader_init` (default: `init_checkpoint`) when it has one, as
REALM does; whatever they lack (or all, without them) starts from the model config's warm
start. Mixing the two gives the paper's ablations (REALM retriever + baseline encoder and the
reverse). Checkpoints `checkpoints/<step>/` hold the reader (and query_embedder, dense) and
resume exactly (the batch of step s is a function of (seed, s)).
`FinetuneTrainer(...).run(progress)` trains (`realm.model.training.trainer` holds its loop);
the Prefect flows call it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from realm.model.index.block_store import BlockStore
from realm.model.networks.checkpoint import BEST_DIR, checkpoint_extra, load_components, save_checkpoint
from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.device import autocast
from realm.model.networks.marginal import early_update_loss
from realm.model.networks.reader import (
    Reader,
    build_reader,
    joint_reader_loss,
    joint_span_logits,
    reader_inputs,
)
from realm.model.networks.retriever import Embedder
from realm.model.qa.answer_metrics import exact_match
from realm.model.qa.answering import Answerer, question_wordpieces
from realm.model.qa.gold_spans import gold_spans
from realm.model.qa.qa_data import QAExample, hash_chosen
from realm.model.qa.question_retrieval import QuestionRetriever, is_bm25_index, load_question_retriever
from realm.model.tokenization import WordPieceTokenizer
from realm.model.training.example_order import batch_rows
from realm.model.training.optimization import apply_update, build_optimizer, build_scheduler
from realm.model.training.progress import ProgressFn
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.training.trainer import Trainer

log = logging.getLogger(__name__)

# `reader_init` value: the reader starts from the model config's warm start, whatever
# `init_checkpoint` holds (the ablations' "baseline encoder").
WARM_START = "warm-start"

# Questions counted over a run (kept in the checkpoint, so a resumed run goes on counting).
COUNTS = ("examples_seen", "without_answer_in_read")


def is_validation_question(question: str, fraction: float) -> bool:
    """Whether a question is held out for validation (chosen by hash, salted apart from
    `realm reproduce`'s held-out tenths)."""
    return hash_chosen(f"finetune-validation:{question}", fraction)


@dataclass
class CandidateCache:
    """Each question's candidates, retrieved once, and their gold spans."""

    block_ids: np.ndarray  # [questions, candidates] int64, best first; -1 past the corpus's end
    found: np.ndarray  # [questions, candidates] bool
    gold: list[list[list[tuple[int, int]]]]  # [questions][candidates] body-relative (start, end)
    holds_answer: np.ndarray = field(init=False)  # [questions, candidates] bool: has a gold span

    def __post_init__(self) -> None:
        self.holds_answer = np.array(
            [[bool(spans) for spans in row] for row in self.gold], dtype=bool
        ).reshape(self.found.shape)

    @classmethod
    @torch.no_grad()
    def build(
        cls,
        retriever: QuestionRetriever,
        tokenizer: WordPieceTokenizer,
        blocks: BlockStore,
        examples: Sequence[QAExample],
        model_config: ModelConfig,
        config: FinetuneConfig,
        retrieved: tuple[np.ndarray, np.ndarray] | None = None,
        batch_size: int = 64,
    ) -> CandidateCache:
        """Retrieve each example's top `config.num_candidates` other than its
        `excluded_block_ids` (or take `retrieved`, the (block_ids, found) a checkpoint
        recorded) and find their gold spans."""
        if retrieved is None:
            k = config.num_candidates
            depth = k + max((len(e.excluded_block_ids) for e in examples), default=0)
            hits = [
                retriever.retrieve(
                    [e.question for e in batch],
                    question_wordpieces(tokenizer, [e.question for e in batch], config.max_question_wordpieces),
                    depth,
                )
                for batch in (examples[start : start + batch_size] for start in range(0, len(examples), batch_size))
            ]
            retrieved = _without_excluded(
                np.concatenate([h.block_ids for h in hits]), np.concatenate([h.found for h in hits]), examples, k
            )
        block_ids, found = retrieved
        gold = [
            [
                gold_spans(tokenizer, blocks, int(b), example, model_config.max_span_wordpieces) if ok else []
                for b, ok in zip(row_ids, row_found)
            ]
            for example, row_ids, row_found in zip(examples, block_ids, found)
        ]
        return cls(block_ids, found, gold)


def _without_excluded(
    block_ids: np.ndarray, found: np.ndarray, examples: Sequence[QAExample], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first `k` of each row's retrieved blocks that its example does not exclude, in
    retrieval order ([n, k] block ids and found flags, -1 / False where fewer remain)."""
    kept_ids = np.full((len(examples), k), -1, dtype=np.int64)
    kept_found = np.zeros((len(examples), k), dtype=bool)
    for row, example in enumerate(examples):
        excluded = set(example.excluded_block_ids)
        keep = [c for c in range(block_ids.shape[1]) if int(block_ids[row, c]) not in excluded][:k]
        kept_ids[row, : len(keep)] = block_ids[row, keep]
        kept_found[row, : len(keep)] = found[row, keep]
    return kept_ids, kept_found


@dataclass
class StepStats:
    retriever_loss: float
    reader_loss: float
    without_answer_in_read: int  # questions whose best-scored read blocks held no answer (a gold block was swapped in)


def read_slots(logits: torch.Tensor, holds_answer: torch.Tensor, num_read: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(candidate indices the reader reads [batch, num_read], rows where a gold block had to be
    swapped in [batch]): the `num_read` best-scored candidates, the last replaced by the
    best-scored one holding an answer when none of them does.

    logits, holds_answer: [batch, candidates]; ties keep the retrieval order (BM25's uniform
    logits read its top `num_read`).
    """
    order = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices  # [batch, candidates]
    read = order[:, :num_read].clone()
    ordered_gold = holds_answer.gather(1, order)  # [batch, candidates]
    swapped = ~ordered_gold[:, :num_read].any(dim=-1) & ordered_gold.any(dim=-1)
    first_gold = ordered_gold.float().argmax(dim=-1)  # first True in score order
    read[swapped, -1] = order[swapped, first_gold[swapped]]
    return read, swapped


def finetune_loss(
    retriever: QuestionRetriever,
    reader: Reader,
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    examples: Sequence[QAExample],
    candidates: CandidateCache,
    rows: np.ndarray,
    model_config: ModelConfig,
    config: FinetuneConfig,
    device: torch.device,
) -> tuple[torch.Tensor, StepStats]:
    """Early-update retriever loss + joint reader loss of the questions `rows` (module
    docstring), each a mean over the questions it is defined for; float32 scalar with graph."""
    size, read = len(rows), config.num_read
    question_ids = question_wordpieces(tokenizer, [examples[r].question for r in rows], config.max_question_wordpieces)
    block_ids, found = candidates.block_ids[rows], candidates.found[rows]  # [batch, candidates] x2
    logits = retriever.score(question_ids, block_ids, found)  # [batch, candidates]; graph into the query tower
    found_mask = torch.from_numpy(found).to(device)
    holds_answer = torch.from_numpy(candidates.holds_answer[rows]).to(device)  # [batch, candidates]
    if retriever.trainable_modules():
        retriever_loss = early_update_loss(logits, holds_answer, found_mask)
    else:  # BM25: nothing to train
        retriever_loss = logits.new_zeros(())

    slots, swapped = read_slots(logits, holds_answer & found_mask, read)  # [batch, read], [batch]
    slot_rows = slots.cpu().numpy()
    bodies = [
        [blocks.body_ids(int(block_ids[i, c])) if found[i, c] else [] for c in slot_rows[i]] for i in range(size)
    ]
    joint, spans = reader_inputs(
        tokenizer, [(q, body) for q, row in zip(question_ids, bodies) for body in row], model_config.max_span_wordpieces
    )
    gold_mask = spans.gold_mask(
        [candidates.gold[r][c] for i, r in enumerate(rows) for c in slot_rows[i]]
    ).to(device)  # [batch * read, spans]
    with autocast(device, model_config.cpu_bf16_autocast):
        span_logits = reader.span_logits(joint.to(device), spans.to(device))  # [batch * read, spans]
    joint_logits = joint_span_logits(
        span_logits.view(size, read, -1), logits.gather(1, slots), found_mask.gather(1, slots)
    )  # [batch, read * spans]
    per_question, answerable = joint_reader_loss(joint_logits, gold_mask.view(size, -1))
    reader_loss = per_question.sum() / answerable.sum().clamp(min=1)

    stats = StepStats(
        retriever_loss=retriever_loss.item(),
        reader_loss=reader_loss.item(),
        without_answer_in_read=int(swapped.sum()),
    )
    return retriever_loss + reader_loss, stats


def validation_exact_match(answerer: Answerer, examples: Sequence[QAExample], num_read: int) -> float:
    """Exact match of `answerer` on `examples`, answered as `realm evaluate` answers; leaves
    the retriever and reader in eval mode."""
    predictions = answerer.answer([e.question for e in examples], num_read=num_read, num_retrieve=num_read)
    return float(np.mean([exact_match(p.answer, e.answers, e.answer_type) for p, e in zip(predictions, examples)]))


def initial_components(
    init_checkpoint: str | None,
    model_config: ModelConfig,
    device: torch.device,
    reader_init: str | None = None,
    with_query_embedder: bool = True,
    reader_dropout: float | None = None,
) -> dict[str, PreTrainedModel]:
    """reader (and query_embedder when `with_query_embedder`) of a fresh run (module
    docstring): a `reader_init` holding a reader (a warm-up's) gives the whole reader, span MLP
    included; one holding an encoder gives the reader's BERT, under a fresh span MLP. The
    reader's hidden states drop out at `reader_dropout` (None: the preset's dropout); its saved
    config keeps that rate, so a resumed run trains with it too."""
    reader_config = model_config if reader_dropout is None else dataclasses.replace(model_config, hidden_dropout=reader_dropout)
    components: dict[str, PreTrainedModel] = {"reader": build_reader(reader_config)}
    reader_init = None if reader_init == WARM_START else reader_init or init_checkpoint
    if with_query_embedder:
        if init_checkpoint is None:
            components["query_embedder"] = build_component(Embedder, model_config)
        else:
            init = load_components(init_checkpoint)
            if "query_embedder" not in init:
                raise ValueError(f"{init_checkpoint}: no query_embedder to fine-tune")
            source = init["query_embedder"]
            # Depth and pooling are the checkpoint's (a sentence-encoder start may be deeper
            # than the preset, and must embed questions as its doc tower embedded the index);
            # dropout and precision stay the preset's.
            tower_config = dataclasses.replace(
                model_config, num_layers=source.config.num_hidden_layers, retrieval_pooling=source.pooling
            )
            components["query_embedder"] = build_component(Embedder, tower_config)
            _load_into(components["query_embedder"], source, init_checkpoint, "query_embedder")
    if reader_init is not None:
        init = load_components(reader_init)
        if "reader" in init:
            _load_into(components["reader"], init["reader"], reader_init, "reader")
        elif "encoder" in init:
            _load_into(components["reader"].bert, init["encoder"].bert, reader_init, "encoder")
        else:
            log.info("%s has no encoder; the reader starts from %s", reader_init, model_config.model_dir or "random init")
    return {name: component.to(device) for name, component in components.items()}


def _load_into(target: torch.nn.Module, source: torch.nn.Module, checkpoint: str, name: str) -> None:
    try:
        target.load_state_dict(source.state_dict())
    except RuntimeError as error:
        raise ValueError(f"{checkpoint}: {name} does not match the model config: {error}") from error


def _questions_digest(training: Sequence[QAExample], config: FinetuneConfig) -> str:
    """What the candidate cache depends on besides the index: the training questions, their
    answers and the candidate settings."""
    text = json.dumps(
        [[e.question, list(e.answers), e.answer_type, list(e.excluded_block_ids)] for e in training]
        + [config.num_candidates, config.max_question_wordpieces, config.validation_fraction]
    )
    return hashlib.sha256(text.encode()).hexdigest()


class FinetuneTrainer(Trainer):
    """Fine-tuning against the published index `index_path` (a dense `index/<step>/`, or a
    BM25 index), resuming from the newest checkpoint under `checkpoint_root`, else starting
    from `initial_components`; `run` trains its epochs (module docstring)."""

    def __init__(
        self,
        examples: list[QAExample],
        blocks_path: str,
        index_path: str,
        init_checkpoint: str | None,
        checkpoint_root: str,
        model_config: ModelConfig,
        config: FinetuneConfig,
        device: torch.device | None = None,
        reader_init: str | None = None,
        seed: int = 0,
    ):
        super().__init__(checkpoint_root, config, device, seed)
        self.validation = [e for e in examples if is_validation_question(e.question, config.validation_fraction)]
        self.training = [e for e in examples if not is_validation_question(e.question, config.validation_fraction)]
        if not self.training:
            raise ValueError(f"no training questions (of {len(examples)}, all held out for validation)")
        self.model_config = model_config
        self.tokenizer = model_config.tokenizer()
        self.blocks = BlockStore.from_parquet(blocks_path, with_text=True)
        dense = not is_bm25_index(index_path)

        needed = {"query_embedder", "reader"} if dense else {"reader"}
        components = self._start_components(
            lambda: initial_components(
                init_checkpoint, model_config, self.device, reader_init=reader_init, with_query_embedder=dense,
                reader_dropout=config.reader_dropout,
            )
        )
        if self.resume and set(components) != needed:
            raise ValueError(
                f"{self.resume.checkpoint}: holds {sorted(components)}, but fine-tuning against {index_path} trains "
                f"{sorted(needed)}; a run root fine-tunes one retriever kind (use another root for the other)"
            )
        self.reader = components["reader"]
        self.retriever = load_question_retriever(index_path, components.get("query_embedder"), model_config, self.device)
        self.trained = {name: components[name] for name in sorted(needed)}
        # For validation; sets eval mode.
        self.answerer = Answerer(self.retriever, self.reader, self.blocks, self.tokenizer, model_config, self.device)

        # The candidates come from the starting query tower; a resumed run reads the ones its
        # checkpoint recorded, so it trains on the same stream an uninterrupted run would, and
        # refuses other questions or settings than those it started with.
        self.questions_digest = _questions_digest(self.training, config)
        retrieved = None
        if self.resume:
            started = checkpoint_extra(self.resume.checkpoint)
            if started["questions_digest"] != self.questions_digest:
                raise ValueError(
                    f"{self.resume.checkpoint}: was fine-tuned on other questions or candidate settings than these; "
                    "use a new run root (or the files and settings it started with)"
                )
            retrieved = started["candidates"]["block_ids"].numpy(), started["candidates"]["found"].numpy()
        self.candidates = CandidateCache.build(
            self.retriever, self.tokenizer, self.blocks, self.training, model_config, config, retrieved
        )
        self.rows = np.flatnonzero(self.candidates.holds_answer.any(axis=1))
        if len(self.rows) == 0:
            raise ValueError(
                f"none of the {len(self.training)} training questions has an answer in its top {config.num_candidates} blocks"
            )
        total_steps = math.ceil(config.epochs * len(self.rows) / config.batch_size)

        head = torch.nn.ModuleList(self.reader.span_head())
        modules = [head, *self.retriever.trainable_modules(), self.reader]
        rates = [config.span_head_learning_rate] + [config.learning_rate] * (len(modules) - 1)
        optimizer = build_optimizer(modules, config.learning_rate, config.weight_decay, learning_rates=rates)
        scheduler = build_scheduler(optimizer, round(config.warmup_fraction * total_steps), total_steps)
        extra = self._restore(optimizer, scheduler, total_steps)
        if self.resume:
            self.counts, self.final_loss, self.best = extra["counts"], extra["loss"], extra["best"]
            # The checkpoints a fresh run started from, carried through resumes: every checkpoint
            # names them and its index as used, so retention never removes them (`realm.model.publish`).
            self.started_from = extra.get("started_from", [])
        else:
            self.counts, self.final_loss, self.best = dict.fromkeys(COUNTS, 0), None, None
            self.started_from = [path for path in (init_checkpoint, reader_init) if path not in (None, WARM_START)]
        self.index_path = str(index_path)
        log.info(
            "fine-tuning on %d of %d questions (%d without an answer in their top %d blocks, %d held out for validation), "
            "%.3g epochs = %d steps from step %d",
            len(self.rows), len(examples), len(self.training) - len(self.rows), config.num_candidates,
            len(self.validation), config.epochs, total_steps, self.step,
        )

    def train_step(self) -> dict:
        for module in [*self.retriever.trainable_modules(), self.reader]:
            module.train()
        batch = batch_rows(self.rows, self.config.batch_size, self.seed, self.step)
        loss, stats = finetune_loss(
            self.retriever, self.reader, self.tokenizer, self.blocks, self.training, self.candidates, batch,
            self.model_config, self.config, self.device,
        )
        self.final_loss = apply_update(loss, self.optimizer, self.scheduler, "fine-tuning", self.step + 1)
        self.step += 1
        self.counts["examples_seen"] += len(batch)
        self.counts["without_answer_in_read"] += stats.without_answer_in_read
        return self.meter.update(
            self.step,
            loss=self.final_loss,
            retriever_loss=stats.retriever_loss,
            reader_loss=stats.reader_loss,
            epoch=self.step * self.config.batch_size / len(self.rows),
            fraction_without_answer_in_read=self.counts["without_answer_in_read"] / self.counts["examples_seen"],
            learning_rate=self.scheduler.get_last_lr()[-1],
        )

    def _checkpoint_components(self) -> dict[str, PreTrainedModel]:
        return self.trained

    def _checkpoint_extra(self) -> dict:
        candidates = {"block_ids": torch.from_numpy(self.candidates.block_ids), "found": torch.from_numpy(self.candidates.found)}
        return {
            "loss": self.final_loss, "counts": self.counts, "index_path": self.index_path, "best": self.best,
            "candidates": candidates, "questions_digest": self.questions_digest, "started_from": self.started_from,
        }

    def _checkpoint_uses(self) -> list[str]:
        return [self.index_path, *self.started_from]

    def _checkpoint(self) -> dict:
        """Validate, then publish the checkpoint (which records the best validation so far)."""
        validated = self._validate()
        self.save_checkpoint()
        return validated

    def _validate(self) -> dict:
        """Answer the validation questions; publish the model as the best when it is."""
        if not self.validation:
            return {}
        em = validation_exact_match(self.answerer, self.validation, self.config.num_read)
        if self.best is None or em > self.best["exact_match"]:
            published = save_checkpoint(
                Path(self.checkpoint_root) / BEST_DIR, self.step, self.trained, extra=self._checkpoint_extra(), keep=1,
                uses=self._checkpoint_uses(),
            )
            self.best = {"step": self.step, "exact_match": em, "checkpoint": str(published)}
        return {"validation_exact_match": em}

    def run(self, progress: ProgressFn | None = None) -> dict:
        """Train to the end; returns {step, checkpoint (the best validated, else the last),
        best_validation_em, steps_per_s, final_loss (the last step trained, here or before a
        resume), training_questions, validation_questions, without_answer_in_candidates,
        examples_seen, examples_without_answer_in_read} (counts over the whole run, resumes
        included)."""
        self._train(progress)
        return {
            "step": self.step,
            "checkpoint": self.best["checkpoint"] if self.best else self.last_checkpoint,
            "best_validation_em": self.best["exact_match"] if self.best else None,
            "steps_per_s": self.meter.steps_per_s(),
            "final_loss": self.final_loss,
            "training_questions": len(self.rows),
            "validation_questions": len(self.validation),
            "without_answer_in_candidates": len(self.training) - len(self.rows),
            "examples_seen": self.counts["examples_seen"],
            "examples_without_answer_in_read": self.counts["without_answer_in_read"],
        }

