"""Open-QA inference: retrieve the top blocks, read the best of them, answer with the span
that wins ORQA's joint softmax over every span of every read block, each span's score plus
its block's retrieval logit (REALM §3.2, `realm.model.networks.reader`).

`Answerer.answer` serves the evaluate flow and `realm ask`. A question (64 wordpieces) goes
to a `QuestionRetriever`, the query tower over the fixed MIPS index (exact scores
f(x,z) = Embed_input(x)ᵀ Embed_doc(z) against the stored doc vectors, the scores fine-tuning
trained the query tower on) or BM25, which returns its top `num_retrieve` blocks. p(z|x) is a
softmax over the retrieved blocks' logits; all of them come back as evidence (recall@k is
measured over them, `answer_rank`), and the reader reads the top `num_read`. The answer's
probability shown is calibrated where the run holds a calibrator for the checkpoint
(`realm.model.qa.calibration`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from realm.model.qa.answer_metrics import answer_in_text, normalize_answer
from realm.model.qa.calibration import Calibrator, run_calibrator
from realm.model.qa.entity_types import BlockEntityTypes
from realm.model.index.block_store import BlockStore
from realm.model.networks.checkpoint import load_components
from realm.model.networks.config import ModelConfig
from realm.model.networks.device import autocast, cast_linears_for_autocast, select_device
from realm.model.qa.question_retrieval import QuestionRetriever, load_question_retriever
from realm.model.qa.trained_run import TrainedRun
from realm.model.networks.reader import (
    Reader, SpanTable, body_offsets, joint_span_logits, reader_inputs, span_at, span_logits_by_length,
)
from realm.model.tokenization import MAX_QUESTION_WORDPIECES, WordPieceTokenizer
from realm.schemas import ArtifactError


@dataclass
class Evidence:
    block_id: int
    title: str
    text: str
    probability: float  # p(z|x) over the retrieved blocks


@dataclass
class Prediction:
    question: str
    answer: str  # the block's text at the answer span, as written
    score: float  # log of the answer's share of the joint softmax over the read blocks' spans
    # The chance the answer is right: exp(score) mapped by the run's calibrator, exp(score) without one.
    probability: float
    evidence: list[Evidence]  # every retrieved block, best first
    block_id: int | None  # the block the answer was read from
    # Character offsets of the answer in that block's text (None: nothing read, or a block
    # whose text does not re-tokenize to its body, where the answer is decoded wordpieces).
    answer_offsets: tuple[int, int] | None = None

    @property
    def retrieved_block_ids(self) -> list[int]:
        return [e.block_id for e in self.evidence]


# The best spans of the joint softmax whose shares are summed per answer string. The reader's
# loss is the marginal over every span of the gold answer (all its occurrences in all read
# blocks), so the prediction is the string with the largest marginal, not the single best span.
ANSWER_CANDIDATES = 32


@dataclass(frozen=True)
class Answer:
    candidate: int  # the read block (its position in the retrieval order) of the answer's best span
    start: int  # body-relative wordpieces of that span
    end: int
    text: str  # the block's text at the span, as written
    offsets: tuple[int, int] | None  # its character offsets in the block's text (None: text is not the body's)
    log_prob: float  # log of the summed share of every span with this text (normalised)


def best_answer(
    tokenizer: WordPieceTokenizer,
    log_probs: torch.Tensor,
    valid: torch.Tensor,
    spans: SpanTable,
    read: dict[int, tuple[list[int], str, list[int]]],
) -> Answer | None:
    """The answer string with the largest summed probability among the `ANSWER_CANDIDATES`
    best spans of one question's joint softmax (`log_probs` and `valid`, [read · spans]);
    `read` maps each read block's position to its (body wordpieces, text, sentence starts).
    Spans that start or end inside a word (next to a `##` wordpiece) or run across a sentence
    boundary ("Amazon or the Congo. The Nile") are answers only when every candidate does;
    strings compare after the exact-match normalisation. None when no span is valid."""
    top = torch.topk(log_probs.masked_fill(~valid, float("-inf")), min(ANSWER_CANDIDATES, log_probs.numel()))
    offsets = {candidate: body_offsets(tokenizer, body, text) for candidate, (body, text, _) in read.items()}
    totals: dict[str, float] = {}
    first: dict[str, Answer] = {}
    fallback = None
    for log_prob, flat in zip(top.values.tolist(), top.indices.tolist()):
        if log_prob == float("-inf"):
            break
        candidate, span_index = divmod(flat, spans.valid.shape[1])
        start, end = spans.body_span(span_index)
        body, text, sentence_starts = read[candidate]
        answer = Answer(candidate, start, end, *span_at(tokenizer, body, text, offsets[candidate], start, end), log_prob)
        if answer.offsets is not None and (
            cuts_a_word(text, *answer.offsets) or crosses_a_sentence(sentence_starts, *answer.offsets)
        ):
            fallback = fallback or answer
            continue
        key = _answer_key(answer.text)
        totals[key] = float(np.logaddexp(totals.get(key, float("-inf")), log_prob))
        first.setdefault(key, answer)
    if not first:
        return fallback
    key = max(totals, key=totals.__getitem__)
    return dataclasses.replace(first[key], log_prob=totals[key])


def _answer_key(text: str) -> str:
    return normalize_answer(text) or text


def cuts_a_word(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] begins or ends inside a word."""
    def inside(i: int) -> bool:
        return 0 < i < len(text) and text[i - 1].isalnum() and text[i].isalnum()

    return inside(start) or inside(end)


def crosses_a_sentence(sentence_starts: Sequence[int], start: int, end: int) -> bool:
    """Whether a sentence begins inside text[start:end] (`sentence_starts`: the block's, as the
    chunker split it). Answers lie within a sentence: over the 404 dev and demo questions, the
    5 answers that ran across a boundary were all wrong."""
    return any(start < sentence_start < end for sentence_start in sentence_starts)


def answer_rank(evidence: Sequence[Evidence], answers: Sequence[str], answer_type: str = "text") -> int | None:
    """0-based rank of the first retrieved block whose text holds an answer (None: none does).
    Recall@k of a question set is the fraction of questions ranked below k."""
    return next((rank for rank, e in enumerate(evidence) if answer_in_text(e.text, answers, answer_type)), None)


def question_wordpieces(
    tokenizer: WordPieceTokenizer, questions: Sequence[str], max_wordpieces: int = MAX_QUESTION_WORDPIECES
) -> list[list[int]]:
    """Each question's wordpieces, cut so that `[CLS] x [SEP]` fits `max_wordpieces`; the
    reader reads the same cut question."""
    return [ids[: max_wordpieces - 2] for ids in tokenizer.encode_batch(list(questions))]


def check_index_covered(index_block_ids: np.ndarray, blocks: BlockStore, index_path: str, blocks_path: str) -> None:
    """`ArtifactError` naming both when the index returns blocks the corpus does not hold (a
    shard of blocks/ lost, or an index built over another corpus): answering would otherwise
    fail at the first such block retrieved, or show evidence it cannot read."""
    missing = index_block_ids[~np.isin(index_block_ids, blocks.block_ids)]
    if len(missing):
        raise ArtifactError(
            f"{index_path}: {len(missing)} of its {len(index_block_ids)} blocks (block {missing[0]} first) are not in "
            f"{blocks_path}; it indexes another corpus, or blocks were lost"
        )


class Answerer:
    """Retriever + reader; see the module docstring."""

    def __init__(
        self,
        retriever: QuestionRetriever,
        reader: Reader,
        blocks: BlockStore,
        tokenizer: WordPieceTokenizer,
        model_config: ModelConfig,
        device: torch.device | None = None,
        calibrator: Calibrator | None = None,
    ):
        """`blocks` must hold title, text, sentence starts and entities
        (`BlockStore.from_parquet(path, with_text=True, with_entities=True)`). The reader runs on
        `device` (default: the retriever's); `calibrator` maps its answers' probabilities (None:
        they are shown as the reader gives them)."""
        self.device = device or retriever.device
        self.retriever = retriever
        for module in retriever.trainable_modules():
            module.eval()
        self.reader = reader.to(self.device).eval()
        self.blocks = blocks
        self.tokenizer = tokenizer
        self.model_config = model_config
        self.entity_types = BlockEntityTypes(blocks, tokenizer)
        self.calibrator = calibrator

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_dir: str,
        index_path: str,
        blocks_path: str,
        model_config: ModelConfig,
        device: torch.device | None = None,
        bf16_reader: bool = False,
        calibrator: Calibrator | None = None,
    ) -> Answerer:
        """From a fine-tuning checkpoint `checkpoints/<step>/` (a reader, and the query tower
        when `index_path` is a dense index), a published index directory (`index/<step>/`, or
        a BM25 index), the `blocks/` artifact and the checkpoint's `calibrator` (None: the
        reader's own probabilities). `bf16_reader`: the reader's BERT entirely in bf16, its
        layer norms and residual sums too (less CPU per question, a few answers differ from
        autocast's); its span head stays float32."""
        device = device or select_device()
        components = load_components(checkpoint_dir, device)
        if "reader" not in components:
            raise ValueError(f"{checkpoint_dir}: no reader; not a fine-tuning checkpoint")
        # The span head runs in float32 outside autocast (`Reader.span_logits`); the towers inside it.
        for module in (components["reader"].bert, components.get("query_embedder")):
            if module is not None:
                cast_linears_for_autocast(module, device, model_config.cpu_bf16_autocast)
        if bf16_reader:
            components["reader"].bert.to(torch.bfloat16)
        try:
            retriever = load_question_retriever(index_path, components.get("query_embedder"), model_config, device)
        except ValueError as error:  # a dense index and a checkpoint without a query tower
            raise ValueError(f"{checkpoint_dir}: {error}") from None
        blocks = BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True)
        check_index_covered(retriever.index.block_ids, blocks, index_path, blocks_path)
        return cls(retriever, components["reader"], blocks, model_config.tokenizer(), model_config, device, calibrator)

    @classmethod
    def from_run(
        cls, root: str | Path, device: torch.device | None = None, corpus: str | None = None, bf16_reader: bool = False
    ) -> Answerer:
        """The Answerer of a trained run root (`realm.model.qa.trained_run`), calibrated by the
        run's calibrator for its checkpoint where it has one; with `corpus`, it answers from that
        corpus indexed for the run (`realm index`) instead of its own; `bf16_reader` as in
        `from_checkpoint`."""
        run = TrainedRun.at(root, corpus=corpus)
        config = ModelConfig.preset(run.model_preset, bert_dir=run.bert_dir)
        return cls.from_checkpoint(
            str(run.checkpoint), str(run.index), run.blocks, config, device, bf16_reader, run_calibrator(root, run.checkpoint)
        )

    def why_unreadable(self, question: str) -> str | None:
        """Why the towers cannot read `question` (text that is not UTF-8, or only characters
        that give no wordpiece: zero-width spaces, controls), None when they can."""
        try:
            question.encode("utf-8")
        except UnicodeEncodeError:  # a command line's undecodable bytes, kept as lone surrogates
            return "the question is not UTF-8 text"
        return None if self.tokenizer.encode(question) else "the question has no word the model reads"

    @torch.inference_mode()
    def answer(
        self,
        questions: Sequence[str],
        num_read: int = 5,
        num_retrieve: int = 20,
        batch_size: int = 16,
        progress: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        """One prediction per question, in order. `batch_size` questions share a query-tower
        forward and a reader forward over their batch_size · num_read blocks; `progress` is
        told each batch's question count once it is answered."""
        empty = [index for index, question in enumerate(questions) if not question.strip()]
        if empty:
            raise ValueError(f"question {empty[0]} is empty: nothing to retrieve or read for")
        if not 1 <= num_read <= num_retrieve:
            raise ValueError(f"need 1 <= num_read <= num_retrieve, got {num_read} and {num_retrieve}")
        predictions = []
        for start in range(0, len(questions), batch_size):
            batch = questions[start : start + batch_size]
            predictions += self._answer_batch(batch, num_read, num_retrieve)
            if progress is not None:
                progress(len(batch))
        return predictions

    def _answer_batch(self, questions: Sequence[str], num_read: int, num_retrieve: int) -> list[Prediction]:
        question_ids = question_wordpieces(self.tokenizer, questions)
        hits = self.retriever.retrieve(questions, question_ids, num_retrieve)
        block_ids = hits.block_ids  # [batch, retrieve]
        retrieved = torch.from_numpy(hits.found)  # [batch, retrieve]; False past the corpus's end
        log_p_z = torch.log_softmax(hits.logits.float().cpu(), dim=-1)  # [batch, retrieve]

        # Read slots past the corpus's end get an empty body: no spans, and no share of the joint softmax.
        bodies = [
            [self.blocks.body_ids(int(block_id)) if ok else [] for block_id, ok in zip(row_ids, row_ok)]
            for row_ids, row_ok in zip(block_ids[:, :num_read], retrieved[:, :num_read].tolist())
        ]
        entity_types = [
            self.entity_types(int(block_id)) if ok else []
            for row_ids, row_ok in zip(block_ids[:, :num_read], retrieved[:, :num_read].tolist())
            for block_id, ok in zip(row_ids, row_ok)
        ]
        joint, spans = reader_inputs(
            self.tokenizer,
            [(q, body) for q, row in zip(question_ids, bodies) for body in row],
            entity_types,
            self.model_config.max_span_wordpieces,
        )
        with autocast(self.device, self.model_config.cpu_bf16_autocast):
            span_logits = span_logits_by_length(self.reader, joint.to(self.device), spans.to(self.device))  # [batch * read, spans]
        joint_logits = joint_span_logits(
            span_logits.cpu().view(len(questions), num_read, -1), hits.logits.float().cpu()[:, :num_read],
            retrieved[:, :num_read],
        )  # [batch, read * spans]

        log_probs = torch.log_softmax(joint_logits, dim=-1)  # [batch, read * spans]
        valid = spans.valid.view(len(questions), -1)  # [batch, read * spans], block-major as joint_logits
        predictions = []
        for row, question in enumerate(questions):
            texts = [self.blocks.text(int(block_id)) if ok else "" for block_id, ok in zip(block_ids[row], retrieved[row])]
            evidence = [
                Evidence(int(block_id), self.blocks.title(int(block_id)), text, float(log_p.exp()))
                for block_id, text, log_p, ok in zip(block_ids[row], texts, log_p_z[row], retrieved[row])
                if ok
            ]
            read_ids = zip(block_ids[row, :num_read], retrieved[row, :num_read])
            sentence_starts = [self.blocks.sentence_starts(int(block_id)) if ok else [] for block_id, ok in read_ids]
            read = {
                candidate: (body, texts[candidate], starts)
                for candidate, (body, starts) in enumerate(zip(bodies[row], sentence_starts))
            }
            best = best_answer(self.tokenizer, log_probs[row], valid[row], spans, read)
            if best is None:  # nothing retrieved (an empty corpus), or no read block with a body
                predictions.append(Prediction(question, "", float("-inf"), 0.0, evidence, None))
                continue
            probability = float(np.exp(best.log_prob))
            if self.calibrator is not None:
                probability = self.calibrator.apply(probability)
            predictions.append(
                Prediction(question, best.text, best.log_prob, probability, evidence, int(block_ids[row, best.candidate]),
                           best.offsets)
            )
        return predictions


@torch.inference_mode()
def retrieval_ranks(
    retriever: QuestionRetriever,
    blocks: BlockStore,
    tokenizer: WordPieceTokenizer,
    examples: Sequence,
    k: int,
    batch_size: int = 64,
) -> list[int | None]:
    """`answer_rank` of each `examples` item (a QAExample) among its top-k retrieved blocks,
    with no reader: what a retriever finds before fine-tuning (zero-shot recall@k)."""
    for module in retriever.trainable_modules():
        module.eval()
    ranks: list[int | None] = []
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        questions = [e.question for e in batch]
        hits = retriever.retrieve(questions, question_wordpieces(tokenizer, questions), k)
        for example, row_ids, row_found in zip(batch, hits.block_ids, hits.found):
            evidence = [Evidence(int(b), "", blocks.text(int(b)), 0.0) for b, ok in zip(row_ids, row_found) if ok]
            ranks.append(answer_rank(evidence, example.answers, example.answer_type))
    return ranks
