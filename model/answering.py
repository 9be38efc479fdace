"""Open-QA inference: retrieve with the query tower over the fixed MIPS index, read the best
blocks, answer with the most probable span under p(z|x) p(span|z,x) (REALM §3.2, ORQA).

`Answerer.answer` serves the evaluate flow and `realm ask`. A question `[CLS] x [SEP]` (64
wordpieces) is embedded and the index returns its top `num_retrieve` blocks with their exact
scores f(x,z) = Embed_input(x)ᵀ Embed_doc(z) against the stored doc vectors, the same
scores fine-tuning trained the query tower on. p(z|x) is a softmax over those retrieved
blocks; all of them come back as evidence (recall@k is measured over them, `answer_rank`),
and the reader reads the top `num_read`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from realm.model.answer_metrics import answer_in_text
from realm.model.block_store import BlockStore
from realm.model.checkpoint import load_components
from realm.model.config import ModelConfig
from realm.model.device import autocast, select_device
from realm.model.inputs import pad_batch
from realm.model.marginal import mask_log_scores
from realm.model.mips import MipsIndex
from realm.model.reader import Reader, best_span, reader_inputs, span_text
from realm.model.retriever import Embedder
from realm.model.tokenization import MAX_QUESTION_WORDPIECES, WordPieceTokenizer, join


@dataclass
class Evidence:
    block_id: int
    title: str
    text: str
    probability: float  # p(z|x) over the retrieved blocks


@dataclass
class Prediction:
    question: str
    answer: str  # the span's wordpieces detokenized (lowercase: the vocabulary is uncased)
    score: float  # log p(z|x) + log p(span|z,x) of the answer span, p(z|x) as in `evidence`
    probability: float  # exp(score)
    evidence: list[Evidence]  # every retrieved block, best first

    @property
    def retrieved_block_ids(self) -> list[int]:
        return [e.block_id for e in self.evidence]


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


def embed_questions(
    query_embedder: Embedder,
    tokenizer: WordPieceTokenizer,
    question_ids: Sequence[Sequence[int]],
    device: torch.device,
    cpu_bf16_autocast: bool,
) -> torch.Tensor:
    """Embed_input(x) of `[CLS] x [SEP]` per question, [n, d] float32 (with graph unless the
    caller runs under no_grad)."""
    queries = pad_batch([join(tokenizer, list(ids)) for ids in question_ids], tokenizer.pad_id).to(device)
    with autocast(device, cpu_bf16_autocast):
        return query_embedder(**queries.as_kwargs()).float()


class Answerer:
    """Query tower + fixed index + reader; see the module docstring."""

    def __init__(
        self,
        query_embedder: Embedder,
        reader: Reader,
        index: MipsIndex,
        blocks: BlockStore,
        tokenizer: WordPieceTokenizer,
        model_config: ModelConfig,
        device: torch.device | None = None,
    ):
        """`blocks` must hold title and text (`BlockStore.from_parquet(path, with_text=True)`)."""
        self.device = device or select_device()
        self.query_embedder = query_embedder.to(self.device).eval()
        self.reader = reader.to(self.device).eval()
        self.index = index
        self.blocks = blocks
        self.tokenizer = tokenizer
        self.model_config = model_config

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_dir: str,
        index_path: str,
        blocks_path: str,
        model_config: ModelConfig,
        device: torch.device | None = None,
    ) -> Answerer:
        """From a fine-tuning checkpoint `checkpoints/<step>/` (components query_embedder and
        reader), a published index directory `index/<step>/` and the `blocks/` artifact."""
        device = device or select_device()
        components = load_components(checkpoint_dir, device)
        missing = {"query_embedder", "reader"} - set(components)
        if missing:
            raise ValueError(f"{checkpoint_dir}: no {', '.join(sorted(missing))}; not a fine-tuning checkpoint")
        return cls(
            components["query_embedder"],
            components["reader"],
            MipsIndex.load(index_path, expected_dim=model_config.retrieval_dim),
            BlockStore.from_parquet(blocks_path, with_text=True),
            model_config.tokenizer(),
            model_config,
            device,
        )

    @torch.inference_mode()
    def answer(
        self, questions: Sequence[str], num_read: int = 5, num_retrieve: int = 20, batch_size: int = 16
    ) -> list[Prediction]:
        """One prediction per question, in order. `batch_size` questions share a query-tower
        forward and a reader forward over their batch_size · num_read blocks."""
        if not 1 <= num_read <= num_retrieve:
            raise ValueError(f"need 1 <= num_read <= num_retrieve, got {num_read} and {num_retrieve}")
        predictions = []
        for start in range(0, len(questions), batch_size):
            predictions += self._answer_batch(questions[start : start + batch_size], num_read, num_retrieve)
        return predictions

    def _answer_batch(self, questions: Sequence[str], num_read: int, num_retrieve: int) -> list[Prediction]:
        question_ids = question_wordpieces(self.tokenizer, questions)
        query_embeddings = embed_questions(
            self.query_embedder, self.tokenizer, question_ids, self.device, self.model_config.cpu_bf16_autocast
        )  # [batch, d]
        scores, block_ids = self.index.search(query_embeddings.cpu().numpy(), num_retrieve)  # [batch, retrieve] x2
        retrieved = torch.from_numpy(np.isfinite(scores))  # [batch, retrieve]; False past the corpus's end
        log_p_z = torch.log_softmax(mask_log_scores(torch.from_numpy(scores), retrieved), dim=-1)  # [batch, retrieve]

        # Read slots past the corpus's end get an empty body: no spans, and p(z|x) = 0 below.
        bodies = [
            [self.blocks.body_ids(int(block_id)) if ok else [] for block_id, ok in zip(row_ids, row_ok)]
            for row_ids, row_ok in zip(block_ids[:, :num_read], retrieved[:, :num_read].tolist())
        ]
        joint, spans = reader_inputs(
            self.tokenizer,
            [(q, body) for q, row in zip(question_ids, bodies) for body in row],
            self.model_config.max_span_wordpieces,
        )
        with autocast(self.device, self.model_config.cpu_bf16_autocast):
            span_logits = self.reader.span_logits(joint.to(self.device), spans.to(self.device))  # [batch * read, spans]
        span_logits = span_logits.cpu().view(len(questions), num_read, -1)  # [batch, read, spans]

        predictions = []
        for row, question in enumerate(questions):
            read_log_p_z = log_p_z[row, :num_read]  # [read]
            best = best_span(read_log_p_z, span_logits[row], spans, retrieved[row, :num_read])
            # best_span renormalises p(z|x) over the read blocks; add their share of the
            # retrieved mass back, so the score uses the p(z|x) shown in the evidence.
            score = best.log_prob + float(torch.logsumexp(read_log_p_z, dim=0))
            evidence = [
                Evidence(
                    int(block_id), self.blocks.title(int(block_id)), self.blocks.text(int(block_id)), float(log_p.exp())
                )
                for block_id, log_p, ok in zip(block_ids[row], log_p_z[row], retrieved[row])
                if ok
            ]
            answer = span_text(self.tokenizer, bodies[row][best.candidate], best.start, best.end)
            predictions.append(Prediction(question, answer, score, float(np.exp(score)), evidence))
        return predictions
