"""Open-QA fine-tuning as REALM does it (ORQA's recipe): the doc index stays fixed; the query
tower and the reader learn.

Retrieval runs once: each training question's candidates and their gold spans are cached
before the first step (`realm.model.training.question_candidates`); a question none of whose
candidates holds an answer gives the reader nothing to learn, so it is counted and left out
of the batch stream, which then holds only questions that carry a reader loss (ORQA and DPR
likewise train on questions whose answer was retrieved). Each step minimises the early update plus the joint reader loss of a
batch (`realm.model.training.finetune_loss`). With `retriever_corpus_softmax` (on by default
with a dense index), the early update is taken over the whole corpus, and the questions left
out for want of a candidate holding the answer, where some block of the corpus holds it
(`realm.model.qa.corpus_holders`), join each step through the query tower alone: a stream of
their own, as many a step as the batch, so the batches the reader reads are unchanged.

`validation_fraction` of the questions (chosen by a hash of the question, so the same ones on
every run and machine) is never trained on: every `checkpoint_every` steps the model answers
them exactly as `realm evaluate` does, and the checkpoint with the best exact match is kept
in `<root>/best/<step>/` (`realm.model.networks.checkpoint.best_checkpoint` finds it); with
`average_weights` (the default), the model validated and kept is the moving average of the
steps' weights, leaning to the later ones (`realm.model.training.weight_average`), and
without validation questions the newest average is kept. The same questions then calibrate the
kept checkpoint's answer probabilities (`realm.flows.calibrate`). The training length is given in
epochs over the questions that carry a loss; the span MLP, which starts from scratch, has
its own learning rate.

A fresh run starts from `realm.model.training.finetune_start.initial_components`.
Checkpoints `checkpoints/<step>/` hold the reader (and query_embedder, dense) and resume
exactly (the batch of step s is a function of (seed, s)). `FinetuneTrainer(...).run(progress)`
trains (`realm.model.training.trainer` holds its loop); the Prefect flows call it.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from realm.model.index.block_store import BlockStore
from realm.model.networks.checkpoint import BEST_DIR, WEIGHT_AVERAGE_EXTRA, checkpoint_extra, save_checkpoint
from realm.model.networks.config import ModelConfig
from realm.model.qa.answer_metrics import exact_match
from realm.model.qa.answering import Answerer
from realm.model.qa.qa_data import QAExample, hash_chosen
from realm.model.qa.question_retrieval import is_bm25_index, load_question_retriever
from realm.model.training.distributed import ONE_PROCESS, World, broadcast, sum_counts, sum_loss
from realm.model.training.example_order import batch_rows
from realm.model.training.finetune_loss import CorpusPositives, finetune_loss
from realm.model.training.finetune_start import WARM_START, initial_components
from realm.model.training.optimization import apply_update, build_optimizer, build_scheduler
from realm.model.training.finetune_candidates import training_candidates
from realm.model.training.passage_candidates import PassageRetriever, Passages
from realm.model.training.stage_inputs import json_digest, stage_inputs
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.training.trainer import ProgressFn, Trainer
from realm.model.training.weight_average import WeightAverage
from realm.schemas.run_layout import entities_beside

log = logging.getLogger(__name__)

# Questions counted over a run (kept in the checkpoint, so a resumed run goes on counting).
COUNTS = ("examples_seen", "without_answer_in_read")


def is_validation_question(question: str, fraction: float) -> bool:
    """Whether a question is held out for validation (chosen by hash, salted apart from
    `realm reproduce`'s held-out tenths)."""
    return hash_chosen(f"finetune-validation:{question}", fraction)


def validation_exact_match(answerer: Answerer, examples: Sequence[QAExample], num_read: int) -> float:
    """Exact match of `answerer` on `examples`, answered as `realm evaluate` answers; leaves
    the retriever and reader in eval mode."""
    predictions = answerer.answer([e.question for e in examples], num_read=num_read, num_retrieve=num_read)
    return float(np.mean([exact_match(p.answer, e.answers, e.answer_type) for p, e in zip(predictions, examples)]))


def questions_digest(examples: Sequence[QAExample]) -> str:
    """The questions a stage trains and validates on, with their answers and the blocks each excludes."""
    return json_digest([[e.question, list(e.answers), e.answer_type, list(e.excluded_block_ids)] for e in examples])


class FinetuneTrainer(Trainer):
    """Fine-tuning against the published index `index_path` (a dense `index/<step>/`, or a
    BM25 index), resuming from the newest checkpoint under `checkpoint_root`, else starting
    from `initial_components`; `run` trains its epochs (module docstring). With `passages` (the
    reader's SQuAD warm-up), each question is read over its passage and the blocks the index
    retrieves for it, scored alike (`realm.model.training.passage_candidates`): the reader
    alone trains, validated on reading them, and the query tower is left as it was."""

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
        passages: Passages | None = None,
        world: World = ONE_PROCESS,
    ):
        dense = not is_bm25_index(index_path)
        if config.retriever_corpus_softmax is None:
            # Recorded as it runs: a checkpoint then matches a rerun that names the setting and one that leaves it.
            config = config.model_copy(update={"retriever_corpus_softmax": dense and passages is None})
        elif config.retriever_corpus_softmax and not dense:  # before any work: nothing would use it
            raise ValueError("retriever_corpus_softmax needs a dense index: BM25 has no query tower to train")
        elif config.retriever_corpus_softmax and passages is not None:
            raise ValueError("retriever_corpus_softmax trains the query tower, which questions read over passages leave as it is")
        super().__init__(checkpoint_root, config, device, seed, world)
        self.validation = [e for e in examples if is_validation_question(e.question, config.validation_fraction)]
        self.training = [e for e in examples if not is_validation_question(e.question, config.validation_fraction)]
        if not self.training:
            raise ValueError(f"no training questions (of {len(examples)}, all held out for validation)")
        self.model_config = model_config
        self.tokenizer = model_config.tokenizer()
        read_blocks = [blocks_path] if passages is None else [blocks_path, passages.blocks_path]
        self.blocks = BlockStore.from_parquet(read_blocks, with_text=True, with_entities=True)

        # The checkpoints a fresh stage starts from: every checkpoint names them and its index as
        # used, so retention never removes them (`realm.model.publish`).
        self.started_from = [path for path in (init_checkpoint, reader_init) if path not in (None, WARM_START)]
        data = {
            "blocks": blocks_path, "block_entities": entities_beside(blocks_path), "index": index_path,
            "init_checkpoint": init_checkpoint,
        }
        values = {"questions": questions_digest(examples)}
        if reader_init == WARM_START:  # not a path: the model config's warm start
            values["reader_init"] = WARM_START
        else:
            data["reader_init"] = reader_init
        if passages is not None:
            data |= {"passages": passages.blocks_path, "passage_entities": entities_beside(passages.blocks_path)}
            values["passage_spans"] = passages.digest()
        inputs = stage_inputs(config, seed, data, values)
        components = self._start_components(
            lambda: initial_components(
                init_checkpoint, model_config, self.device, reader_init=reader_init, with_query_embedder=dense,
                reader_dropout=config.reader_dropout, span_features=config.span_features,
            ),
            inputs,
        )
        self.reader = components["reader"]
        self.retriever = load_question_retriever(index_path, components.get("query_embedder"), model_config, self.device)
        if passages is not None:  # the reader alone trains, reading each question's passage and retrieved blocks
            self.retriever = PassageRetriever(self.retriever, passages.by_question)
        self.trained = {name: components[name] for name in sorted(components)}  # reader (and query_embedder, dense)
        # For validation; sets eval mode.
        self.answerer = Answerer(self.retriever, self.reader, self.blocks, self.tokenizer, model_config, self.device)
        # One mapping of each block's entities to its wordpieces serves training and validation.
        self.entity_types = self.answerer.entity_types

        # A resumed stage (same questions, index and settings) reads the candidates its checkpoint recorded.
        recorded = None
        if not self.world.leader:  # every rank trains on rank 0's retrieval
            recorded = broadcast(self.world)
        elif self.resume:
            saved = checkpoint_extra(self.resume.checkpoint)["candidates"]
            recorded = (saved["block_ids"].numpy(), saved["found"].numpy())
        trained_on = training_candidates(
            self.retriever, self.tokenizer, self.blocks, self.training, model_config, config, recorded,
            passages=None if passages is None else passages.by_question,
        )
        if self.world.leader and self.world.size > 1:
            broadcast(self.world, (trained_on.cache.block_ids, trained_on.cache.found))
        self.candidates, self.rows, self.holders = trained_on.cache, trained_on.rows, trained_on.holders
        self.retriever_only_rows = trained_on.retriever_only_rows
        total_steps = math.ceil(config.epochs * len(self.rows) / config.batch_size)

        head = torch.nn.ModuleList(self.reader.fresh_modules())
        modules = [head, *self.retriever.trainable_modules(), self.reader]
        rates = [config.span_head_learning_rate] + [config.learning_rate] * (len(modules) - 1)
        optimizer = build_optimizer(modules, config.learning_rate, config.weight_decay, learning_rates=rates)
        scheduler = build_scheduler(optimizer, round(config.warmup_fraction * total_steps), total_steps)
        extra = self._restore(optimizer, scheduler, total_steps).extra
        if self.resume:
            self.counts, self.final_loss, self.best = extra["counts"], extra["loss"], extra["best"]
        else:
            self.counts, self.final_loss, self.best = dict.fromkeys(COUNTS, 0), None, None
        self.average = WeightAverage(self.trained) if config.average_weights else None
        if self.average is not None and self.resume:
            self.average.load_state_dict(extra[WEIGHT_AVERAGE_EXTRA])
        self.index_path = str(index_path)
        log.info(
            "fine-tuning on %d of %d questions (%d without an answer among their %d candidate blocks, %d held out for "
            "validation), %.3g epochs = %d steps from step %d on %d process(es)",
            len(self.rows), len(self.training) + len(self.validation), len(self.training) - len(self.rows),
            self.candidates.block_ids.shape[1], len(self.validation), config.epochs, total_steps, self.step,
            self.world.size,
        )
        if self.holders is not None:
            log.info(
                "the early update over all %d blocks; %d questions without an answer among their candidates train the "
                "query tower alone", self.retriever.index.count, len(self.retriever_only_rows),
            )

    def train_step(self) -> dict:
        for module in [*self.retriever.trainable_modules(), self.reader]:
            module.train()
        batch = batch_rows(self.rows, self.config.batch_size, self.seed, self.step)
        shard = self.world.shard(batch)  # this rank's share; all of it in one process
        candidates = self.candidates.batch(shard)
        corpus = None
        if self.holders is not None:
            # no more than there are, so none is counted twice in a step's mean
            count = min(self.config.batch_size, len(self.retriever_only_rows))
            retriever_only = batch_rows(self.retriever_only_rows, count, self.seed, self.step) if count else []
            rows = [*shard, *retriever_only[self.world.rank :: self.world.size]]
            corpus = CorpusPositives([self.training[r] for r in rows], [self.holders[r] for r in rows])
        # Each mean divides by the whole batch's count of questions, so the ranks' losses and
        # gradients sum to the one-process batch's.
        loss, stats = finetune_loss(
            self.retriever, self.reader, self.tokenizer, self.blocks, self.entity_types, [self.training[r] for r in shard],
            candidates, self.model_config, self.config, self.device, corpus=corpus,
            count_all=partial(sum_counts, self.world),
        )
        self.final_loss = apply_update(loss, self.optimizer, self.scheduler, "fine-tuning", self.step + 1, self.world)
        if self.average is not None:
            self.average.update()
        self.step += 1
        self.counts["examples_seen"] += len(batch)
        self.counts["without_answer_in_read"] += round(sum_loss(self.world, stats.without_answer_in_read, 1.0))
        return self.meter.update(
            self.step,
            loss=self.final_loss,
            retriever_loss=sum_loss(self.world, stats.retriever_loss, 1.0),
            reader_loss=sum_loss(self.world, stats.reader_loss, 1.0),
            epoch=self.step * self.config.batch_size / len(self.rows),
            fraction_without_answer_in_read=self.counts["without_answer_in_read"] / self.counts["examples_seen"],
            learning_rate=self.scheduler.get_last_lr()[-1],
        )

    def _checkpoint_components(self) -> dict[str, PreTrainedModel]:
        return self.trained

    def _checkpoint_extra(self) -> dict:
        candidates = {"block_ids": torch.from_numpy(self.candidates.block_ids), "found": torch.from_numpy(self.candidates.found)}
        extra = {"loss": self.final_loss, "counts": self.counts, "best": self.best, "candidates": candidates}
        if self.average is not None:
            extra[WEIGHT_AVERAGE_EXTRA] = self.average.state_dict()
        return extra

    def _checkpoint_paths(self) -> dict:
        """The index it trains against, which `realm ask` and `realm evaluate` answer with."""
        return {"index": self.index_path}

    def _checkpoint_uses(self) -> list[str]:
        return [self.index_path, *self.started_from]

    def _best_checkpoint(self) -> str:
        return str(Path(self.checkpoint_root) / BEST_DIR / str(self.best["step"]))

    def _validate(self) -> dict:
        """Answer the validation questions (with the averaged weights, when averaging); publish
        the model as the best when it is. Averaging without validation questions publishes the
        newest average at each checkpoint."""
        if not self.validation and self.average is None:
            return {}
        with self.average.swapped_in() if self.average is not None else contextlib.nullcontext():
            if not self.validation:
                self._publish_best(None)
                return {}
            em = validation_exact_match(self.answerer, self.validation, self.config.num_read)
            if self.best is None or em > self.best["exact_match"]:
                self._publish_best(em)
        return {"validation_exact_match": em}

    def _publish_best(self, exact_match: float | None) -> None:
        """Publish the components as they are now (the average, swapped in) as `best/<step>/`.
        Its extra leaves the average out: its components are that average, and training
        resumes from the step checkpoints, never from best/."""
        extra = {key: value for key, value in self._checkpoint_extra().items() if key != WEIGHT_AVERAGE_EXTRA}
        save_checkpoint(
            Path(self.checkpoint_root) / BEST_DIR, self.step, self.trained, extra=extra, keep=1,
            uses=self._checkpoint_uses(), paths=self._checkpoint_paths(), inputs=self.inputs,
        )
        self.best = {"step": self.step, "exact_match": exact_match}

    def run(self, progress: ProgressFn | None = None) -> dict:
        """Train to the end; returns {step, checkpoint (the best validated, else the last),
        best_validation_em, steps_per_s, final_loss (the last step trained, here or before a
        resume), training_questions, validation_questions, without_answer_in_candidates,
        retriever_only_questions (of those, the ones training the query tower alone),
        examples_seen, examples_without_answer_in_read} (counts over the whole run, resumes
        included)."""
        self._train(progress)
        return {
            "step": self.step,
            "checkpoint": self._best_checkpoint() if self.best else self.last_checkpoint,
            "best_validation_em": self.best["exact_match"] if self.best else None,
            "steps_per_s": self.meter.steps_per_s(),
            "final_loss": self.final_loss,
            "training_questions": len(self.rows),
            "validation_questions": len(self.validation),
            "without_answer_in_candidates": len(self.training) - len(self.rows),
            "retriever_only_questions": len(self.retriever_only_rows),
            "examples_seen": self.counts["examples_seen"],
            "examples_without_answer_in_read": self.counts["without_answer_in_read"],
        }

