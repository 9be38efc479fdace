"""The fine-tuning loss of a batch of questions, over their cached candidates (ORQA's recipe):
- ORQA's early update (dense only): −log Σ_{candidates holding an answer} p(z|x), p(z|x) a
  softmax over the cached candidates, rescored by the current query tower (`early_update_loss`);
  with `retriever_corpus_softmax`, a softmax over every block of the index instead, every block
  holding an answer a positive, over the batch's questions and its retriever-only ones
  (`CorpusPositives`, `corpus_early_update_loss`);
- the reader's loss over the `num_read` best-scored candidates, as ORQA's reader: one
  softmax over every span of every read block with the block's retrieval logit added to each
  span's score, marginalised over all gold spans (`joint_span_logits`, `joint_reader_loss`);
  blocks read without the answer are the question's negatives. When none of the read blocks
  holds an answer, the best-ranked candidate that does takes the last read slot, so every
  question has a positive beside its hard negatives (DPR's reader: 1 positive + negatives).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from realm.model.index.block_store import BlockStore
from realm.model.networks.config import ModelConfig
from realm.model.networks.device import autocast
from realm.model.networks.marginal import early_update_loss
from realm.model.networks.reader import (
    Reader, joint_reader_loss, joint_span_logits, reader_inputs, span_logits_by_length,
)
from realm.model.qa.answering import question_wordpieces
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import DenseRetriever, QuestionRetriever
from realm.model.tokenization import WordPieceTokenizer
from realm.model.training.question_candidates import Candidates
from realm.model.training.stage_settings import FinetuneConfig


@dataclass
class StepStats:
    retriever_loss: float
    reader_loss: float
    without_answer_in_read: int  # questions whose best-scored read blocks held no answer (a gold block was swapped in)


@dataclass
class CorpusPositives:
    """Questions whose retriever loss is taken over the whole corpus: a step's batch, then
    questions trained through the query tower alone, each with the ids of the blocks holding
    its answer (`realm.model.qa.corpus_holders`)."""

    examples: Sequence[QAExample]
    holders: Sequence[np.ndarray]


def corpus_early_update_loss(
    retriever: DenseRetriever, tokenizer: WordPieceTokenizer, corpus: CorpusPositives, config: FinetuneConfig,
    count_all: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The early update with p(z|x) a softmax over every block of the index, less the blocks
    each question excludes; float32 scalar with graph into the query tower (`count_all`:
    `early_update_loss`'s)."""
    question_ids = question_wordpieces(tokenizer, [e.question for e in corpus.examples], config.max_question_wordpieces)
    logits = retriever.corpus_scores(question_ids)  # [n, blocks]
    index_ids = retriever.index.block_ids
    gold = np.stack([np.isin(index_ids, holders) for holders in corpus.holders])  # [n, blocks]
    allowed = np.stack([~np.isin(index_ids, list(e.excluded_block_ids)) for e in corpus.examples])  # [n, blocks]
    return early_update_loss(
        logits, torch.from_numpy(gold).to(logits.device), torch.from_numpy(allowed).to(logits.device), count_all
    )


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
    entity_types: Callable[[int], list[int]],
    examples: Sequence[QAExample],
    candidates: Candidates,
    model_config: ModelConfig,
    config: FinetuneConfig,
    device: torch.device,
    corpus: CorpusPositives | None = None,
    count_all: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, StepStats]:
    """Early-update retriever loss + joint reader loss of the questions `examples`, whose
    candidates are `candidates` (module docstring), each a mean over the questions it is
    defined for; float32 scalar with graph.
    `entity_types`: a block's body wordpieces' entity types (`realm.model.qa.entity_types`).
    `corpus`: where given (dense only), the early update is taken over the whole corpus for
    its questions (`examples` first) instead of over the candidates.
    `count_all`: where `examples` are one process's share of a batch, a count of its questions →
    the whole batch's; each mean then divides by the whole batch's count, so the processes'
    losses (and gradients) sum to the one-process batch's."""
    size, read = len(examples), config.num_read
    question_ids = question_wordpieces(tokenizer, [e.question for e in examples], config.max_question_wordpieces)
    block_ids, found = candidates.block_ids, candidates.found  # [batch, candidates] x2
    logits = retriever.score(question_ids, block_ids, found)  # [batch, candidates]; graph into the query tower
    found_mask = torch.from_numpy(found).to(device)
    holds_answer = torch.from_numpy(candidates.holds_answer).to(device)  # [batch, candidates]
    slots, swapped = read_slots(logits, holds_answer & found_mask, read)  # [batch, read], [batch]
    slot_rows = slots.cpu().numpy()
    bodies = [
        [blocks.body_ids(int(block_ids[i, c])) if found[i, c] else [] for c in slot_rows[i]] for i in range(size)
    ]
    read_types = [
        entity_types(int(block_ids[i, c])) if found[i, c] else [] for i in range(size) for c in slot_rows[i]
    ]
    joint, spans = reader_inputs(
        tokenizer, [(q, body) for q, row in zip(question_ids, bodies) for body in row], read_types,
        model_config.max_span_wordpieces,
    )
    gold_mask = spans.gold_mask(
        [candidates.gold[i][c] for i in range(size) for c in slot_rows[i]]
    ).to(device)  # [batch * read, spans]
    # Read as answering reads: each block with those of its padded length, not all padded to the
    # longest (short blocks would spend most of a padded forward on padding).
    with autocast(device, model_config.cpu_bf16_autocast):
        span_logits = span_logits_by_length(reader, joint.to(device), spans.to(device))  # [batch * read, spans]
    joint_logits = joint_span_logits(
        span_logits.view(size, read, -1), logits.gather(1, slots), found_mask.gather(1, slots)
    )  # [batch, read * spans]
    per_question, answerable = joint_reader_loss(joint_logits, gold_mask.view(size, -1))
    answerable_count = answerable.sum() if count_all is None else count_all(answerable.sum())
    reader_loss = per_question.sum() / answerable_count.clamp(min=1)
    # After the reader's forward: a step's reader then reads with the random state a run without
    # `corpus` would have at that point (under dropout the streams part after the first step).
    if corpus is not None:
        retriever_loss = corpus_early_update_loss(retriever, tokenizer, corpus, config, count_all)
    elif retriever.trainable_modules():
        retriever_loss = early_update_loss(logits, holds_answer, found_mask, count_all)
    else:  # BM25: nothing to train
        retriever_loss = logits.new_zeros(())

    stats = StepStats(
        retriever_loss=retriever_loss.item(),
        reader_loss=reader_loss.item(),
        without_answer_in_read=int(swapped.sum()),
    )
    return retriever_loss + reader_loss, stats
