"""Open-QA fine-tuning as REALM does it (ORQA's recipe): the doc index stays fixed; the query
tower and the reader learn.

Per batch of questions: the retriever (`realm.model.question_retrieval`) returns the top
`num_retrieve` blocks. For the dense retriever the query tower embeds `[CLS] x [SEP]` (64
wordpieces) and f(x,z) = query embedding · the block's stored index vector, so gradients
reach the query tower and never the documents; BM25 (the BERT-Baseline) has nothing to train
and a uniform p(z|x). The loss adds, per question, where each is defined:
- ORQA's early update (dense only): −log Σ_{z among the top num_retrieve holding an answer}
  p(z|x), p(z|x) a softmax over the top num_retrieve (`early_update_loss`);
- the reader's marginal: −log Σ_{z among the top num_read} p(z|x) p(y|z,x), p(z|x)
  renormalised over the read blocks and p(y|z,x) summed over every gold span of z (zero for a
  block without one; `reader_log_likelihood`, `marginal_log_likelihood`).
A question whose retrieved (or read) blocks hold no answer contributes no retriever (or
reader) term; both cases are counted and logged. "Holds an answer" means has a gold span:
text answers match by wordpieces (`find_gold_spans`); CuratedTrec's regex answers match
candidate spans' text (`regex_gold_spans`).

A fresh run starts the query tower from `init_checkpoint`'s, and the reader's BERT from the
knowledge-augmented encoder of `reader_init` (default: `init_checkpoint`) when it has one, as
REALM does; whatever they lack (or all, without them) starts from the model config's warm
start, and the span MLP is always fresh. Mixing the two gives the paper's ablations (REALM
retriever + baseline encoder and the reverse). Checkpoints `checkpoints/<step>/` hold the
reader (and query_embedder, dense) and resume exactly (the batch of step s is a function of
(seed, s)).
The Prefect flow calls `train_finetune`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from realm.model.answering import question_wordpieces
from realm.model.block_store import BlockStore
from realm.model.checkpoint import load_components, save_checkpoint
from realm.model.config import ModelConfig, build_component
from realm.model.device import autocast, select_device
from realm.model.marginal import early_update_loss, marginal_log_likelihood
from realm.model.qa_data import QAExample
from realm.model.question_retrieval import QuestionRetriever, is_bm25_index, load_question_retriever
from realm.model.reader import Reader, build_reader, find_gold_spans, reader_inputs, reader_log_likelihood, span_text
from realm.model.retriever import Embedder
from realm.model.tokenization import MAX_QUESTION_WORDPIECES, WordPieceTokenizer
from realm.model.training import (
    Progress,
    ProgressFn,
    apply_update,
    batch_rows,
    build_optimizer,
    build_scheduler,
    latest_resume_point,
    seed_everything,
    set_transformers_verbosity_error,
)

log = logging.getLogger(__name__)

# `reader_init` value: the reader starts from the model config's warm start, whatever
# `init_checkpoint` holds (the ablations' "baseline encoder").
WARM_START = "warm-start"

# Questions counted over a run (kept in the checkpoint, so a resumed run goes on counting).
COUNTS = ("examples_seen", "without_answer_in_retrieval", "without_answer_in_read")


@dataclass(frozen=True)
class FinetuneConfig:
    steps: int = 1000
    batch_size: int = 8
    # BERT's fine-tuning range is 2e-5..5e-5 (Devlin et al.); ORQA used 1e-5 with one question
    # per step over many more steps. Eight questions a step for ~1k steps, with a span MLP that
    # starts from scratch, take the middle of BERT's range.
    learning_rate: float = 3e-5
    warmup_steps: int = 100
    weight_decay: float = 0.01
    checkpoint_every: int = 200
    log_every: int = 10
    num_read: int = 5  # blocks the reader reads (REALM and ORQA: 5)
    num_retrieve: int = 5  # blocks the early-update retriever loss ranges over (ORQA: up to 5000)
    seed: int = 0
    max_question_wordpieces: int = MAX_QUESTION_WORDPIECES

    def __post_init__(self) -> None:
        if not 1 <= self.num_read <= self.num_retrieve:
            raise ValueError(f"need 1 <= num_read <= num_retrieve, got {self.num_read} and {self.num_retrieve}")


def regex_gold_spans(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    patterns: Sequence[str],
    max_span_wordpieces: int = 10,
) -> list[tuple[int, int]]:
    """(start, end) body-relative, end inclusive, of every whole-word body span of at most
    `max_span_wordpieces` whose `span_text` a pattern matches in full, case-insensitively.

    Why the span's text: evaluation scores exactly that string (the reader's answer) with the
    pattern, so these are the spans an exact match rewards; in full, not DrQA's prefix match,
    so "1903 and 1911" is no target for "1903". A pattern that does not compile matches
    nothing. Blocks whose decoded body no pattern matches anywhere are skipped before the
    (~10 decodes per wordpiece) span enumeration.
    """
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern, flags=re.IGNORECASE | re.UNICODE))
        except re.error:
            continue
    body_ids = list(body_ids)
    if not any(c.search(tokenizer.decode(body_ids)) for c in compiled):
        return []
    continues_word = [t.startswith("##") for t in tokenizer.convert_ids_to_tokens(body_ids)] + [False]
    spans = []
    for start in range(len(body_ids)):
        if continues_word[start]:
            continue
        for end in range(start, min(start + max_span_wordpieces, len(body_ids))):
            if not continues_word[end + 1]:
                text = span_text(tokenizer, body_ids, start, end)
                if any(c.fullmatch(text) for c in compiled):
                    spans.append((start, end))
    return spans


def gold_spans(
    tokenizer: WordPieceTokenizer, body_ids: Sequence[int], example: QAExample, max_span_wordpieces: int
) -> list[tuple[int, int]]:
    """The example's answer spans in a block body, by its answer type."""
    if example.answer_type == "regex":
        return regex_gold_spans(tokenizer, body_ids, example.answers, max_span_wordpieces)
    return find_gold_spans(tokenizer, body_ids, example.answers, max_span_wordpieces)


@dataclass
class StepStats:
    retriever_loss: float
    reader_loss: float
    without_answer_in_retrieval: int  # questions none of whose retrieved blocks holds an answer
    without_answer_in_read: int  # ... none of whose read blocks does (the reader term is left out)


def finetune_loss(
    retriever: QuestionRetriever,
    reader: Reader,
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    examples: Sequence[QAExample],
    model_config: ModelConfig,
    config: FinetuneConfig,
    device: torch.device,
) -> tuple[torch.Tensor, StepStats]:
    """Early-update retriever loss + reader marginal loss of a batch (module docstring), each
    a mean over the questions it is defined for; float32 scalar with graph."""
    size, read = len(examples), config.num_read
    questions = [e.question for e in examples]
    question_ids = question_wordpieces(tokenizer, questions, config.max_question_wordpieces)
    hits = retriever.retrieve(questions, question_ids, config.num_retrieve)
    block_ids, retrieved = hits.block_ids, hits.found  # [batch, retrieve] x2
    retrieved_mask = torch.from_numpy(retrieved).to(device)
    retrieval_logits = hits.logits  # [batch, retrieve]; graph into the query tower when dense

    bodies = [
        [blocks.body_ids(int(b)) if ok else [] for b, ok in zip(row_ids, row_ok)]
        for row_ids, row_ok in zip(block_ids, retrieved)
    ]
    golds = [
        [gold_spans(tokenizer, body, example, model_config.max_span_wordpieces) for body in row]
        for row, example in zip(bodies, examples)
    ]  # [batch][retrieve] lists of (start, end)
    holds_answer = torch.tensor([[bool(spans) for spans in row] for row in golds], device=device)  # [batch, retrieve]
    if retriever.trainable_modules():
        retriever_loss = early_update_loss(retrieval_logits, holds_answer, retrieved_mask)
    else:  # BM25: nothing to train
        retriever_loss = retrieval_logits.new_zeros(())

    joint, spans = reader_inputs(
        tokenizer,
        [(q, body) for q, row in zip(question_ids, bodies) for body in row[:read]],
        model_config.max_span_wordpieces,
    )
    gold_mask = spans.gold_mask([g for row in golds for g in row[:read]]).to(device)  # [batch * read, spans]
    with autocast(device, model_config.cpu_bf16_autocast):
        span_logits = reader.span_logits(joint.to(device), spans.to(device))  # [batch * read, spans]
    log_p_y_given_z = reader_log_likelihood(span_logits, gold_mask).view(size, read)  # [batch, read]
    log_p_y = marginal_log_likelihood(retrieval_logits[:, :read], log_p_y_given_z, retrieved_mask[:, :read])  # [batch]
    answerable = gold_mask.view(size, -1).any(dim=-1)  # [batch]
    reader_loss = torch.where(answerable, -log_p_y, torch.zeros_like(log_p_y)).sum() / answerable.sum().clamp(min=1)

    stats = StepStats(
        retriever_loss=retriever_loss.item(),
        reader_loss=reader_loss.item(),
        without_answer_in_retrieval=int((~holds_answer.any(dim=-1)).sum()),
        without_answer_in_read=int((~answerable).sum()),
    )
    return retriever_loss + reader_loss, stats


def initial_components(
    init_checkpoint: str | None,
    model_config: ModelConfig,
    device: torch.device,
    reader_init: str | None = None,
    with_query_embedder: bool = True,
) -> dict[str, PreTrainedModel]:
    """reader (and query_embedder when `with_query_embedder`) of a fresh run (module
    docstring); the reader's span MLP is always freshly initialised."""
    components: dict[str, PreTrainedModel] = {"reader": build_reader(model_config)}
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
        if "encoder" in init:
            _load_into(components["reader"].bert, init["encoder"].bert, reader_init, "encoder")
        else:
            log.info("%s has no encoder; the reader starts from %s", reader_init, model_config.model_dir or "random init")
    return {name: component.to(device) for name, component in components.items()}


def _load_into(target: torch.nn.Module, source: torch.nn.Module, checkpoint: str, name: str) -> None:
    try:
        target.load_state_dict(source.state_dict())
    except RuntimeError as error:
        raise ValueError(f"{checkpoint}: {name} does not match the model config: {error}") from error


def train_finetune(
    examples: list[QAExample],
    blocks_path: str,
    index_path: str,
    init_checkpoint: str | None,
    checkpoint_root: str,
    model_config: ModelConfig,
    config: FinetuneConfig,
    progress: ProgressFn | None = None,
    device: torch.device | None = None,
    reader_init: str | None = None,
) -> dict:
    """Fine-tune to `config.steps` against the published index `index_path` (a dense
    `index/<step>/`, or a BM25 index), resuming from the newest checkpoint under `checkpoint_root`. Returns {step, checkpoint,
    steps_per_s, final_loss (the last step trained, here or before a resume), examples_seen,
    examples_without_answer_in_retrieval, examples_without_answer_in_read,
    fraction_without_answer_in_retrieval} (counts over the whole run, resumes included)."""
    if not examples:
        raise ValueError("no training questions")
    set_transformers_verbosity_error()
    device = device or select_device()
    tokenizer = model_config.tokenizer()
    blocks = BlockStore.from_parquet(blocks_path)
    dense = not is_bm25_index(index_path)
    rows = np.arange(len(examples))

    seed_everything(config.seed)
    resume = latest_resume_point(checkpoint_root, device)
    needed = {"query_embedder", "reader"} if dense else {"reader"}
    if resume and set(resume.components) != needed:
        raise ValueError(
            f"{resume.checkpoint}: holds {sorted(resume.components)}, but fine-tuning against {index_path} trains "
            f"{sorted(needed)}; a run root fine-tunes one retriever kind (use another root for the other)"
        )
    components = resume.components if resume else initial_components(
        init_checkpoint, model_config, device, reader_init=reader_init, with_query_embedder=dense
    )
    reader = components["reader"].train()
    retriever = load_question_retriever(index_path, components.get("query_embedder"), model_config, device)
    trained = {name: components[name] for name in sorted(needed)}
    for module in retriever.trainable_modules():
        module.train()
    optimizer = build_optimizer([*retriever.trainable_modules(), reader], config.learning_rate, config.weight_decay)
    scheduler = build_scheduler(optimizer, config.warmup_steps, config.steps)
    state = resume.restore(optimizer, scheduler) if resume else None
    step = state.step if state else 0
    counts = state.extra["counts"] if state else dict.fromkeys(COUNTS, 0)
    final_loss = state.extra["loss"] if state else None
    checkpoint = resume.checkpoint if resume else None
    meter = Progress(config.steps, start_step=step)
    log.info("fine-tuning on %d questions from step %d to %d", len(examples), step, config.steps)

    def save() -> str:
        extra = {"loss": final_loss, "counts": counts, "index_path": str(index_path)}
        return str(save_checkpoint(checkpoint_root, step, trained, optimizer, scheduler, extra=extra))

    while step < config.steps:
        batch = [examples[row] for row in batch_rows(rows, config.batch_size, config.seed, step)]
        loss, stats = finetune_loss(retriever, reader, tokenizer, blocks, batch, model_config, config, device)
        final_loss = apply_update(loss, optimizer, scheduler, "fine-tuning", step + 1)
        step += 1
        counts["examples_seen"] += len(batch)
        counts["without_answer_in_retrieval"] += stats.without_answer_in_retrieval
        counts["without_answer_in_read"] += stats.without_answer_in_read
        metrics = meter.update(
            step,
            loss=final_loss,
            retriever_loss=stats.retriever_loss,
            reader_loss=stats.reader_loss,
            fraction_without_answer_in_retrieval=counts["without_answer_in_retrieval"] / counts["examples_seen"],
            learning_rate=scheduler.get_last_lr()[0],
        )
        if progress is not None and (step % config.log_every == 0 or step == config.steps):
            progress(metrics)
        if step % config.checkpoint_every == 0 or step == config.steps:
            checkpoint = save()
    if checkpoint is None:  # steps == 0 on a fresh run: still publish the starting components
        checkpoint = save()

    return {
        "step": step,
        "checkpoint": str(checkpoint),
        "steps_per_s": meter.steps_per_s(),
        "final_loss": final_loss,
        "examples_seen": counts["examples_seen"],
        "examples_without_answer_in_retrieval": counts["without_answer_in_retrieval"],
        "examples_without_answer_in_read": counts["without_answer_in_read"],
        "fraction_without_answer_in_retrieval": counts["without_answer_in_retrieval"] / max(1, counts["examples_seen"]),
    }
