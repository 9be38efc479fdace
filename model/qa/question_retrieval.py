"""Retrieving blocks for questions: one interface for the dense retriever and BM25.

Fine-tuning, answering and evaluation see a `QuestionRetriever`: `retrieve(questions,
question_ids, k)` returns the top-k block ids and relevance logits, log p(z|x) up to a
constant over the retrieved blocks, so every system shares the reader code and the metrics.
- `DenseRetriever`: the query tower over a fixed MIPS index; logits f(x,z) = Embed_input(x)ᵀ
  Embed_doc(z) against the index's stored doc vectors, with graph into the query tower
  (fine-tuning trains it) unless the caller runs under no_grad.
- `Bm25Retriever`: BM25's top-k; p(z|x) uniform over them. BM25 scores rank blocks but are not
  calibrated log-probabilities (their scale depends on the question's length and idf), so
  like the paper's BERT-Baseline the reader alone chooses among the retrieved blocks.
`load_question_retriever` opens either from a published index directory (its manifest says
which) and, for a dense index, the query tower of a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from realm.model.index.bm25 import INDEX_TYPE as BM25_INDEX_TYPE
from realm.model.index.bm25 import Bm25Index
from realm.model.networks.config import ModelConfig
from realm.model.networks.inputs import pad_batch, same_padded_length_groups
from realm.model.networks.marginal import mask_log_scores
from realm.model.networks.device import autocast
from realm.model.index.mips import MipsIndex
from realm.model.publish import read_manifest
from realm.model.networks.retriever import Embedder, relevance_scores
from realm.model.tokenization import WordPieceTokenizer, join


@dataclass
class Retrieved:
    block_ids: np.ndarray  # [n, k] int64, best first; -1 past the corpus's end
    found: np.ndarray  # [n, k] bool, False past the corpus's end
    logits: torch.Tensor  # [n, k] float32 on the model's device, LOG_ZERO where not found


class QuestionRetriever(Protocol):
    device: torch.device  # where `retrieve` puts its logits
    index: MipsIndex | Bm25Index  # its `block_ids` are every block it can return

    def retrieve(self, questions: Sequence[str], question_ids: Sequence[Sequence[int]], k: int) -> Retrieved:
        """Top-k blocks of each question (`question_ids`: its wordpieces, cut to fit)."""

    def trainable_modules(self) -> list[torch.nn.Module]:
        """What fine-tuning optimises on the retriever side (nothing for BM25)."""

    def score(self, question_ids: Sequence[Sequence[int]], block_ids: np.ndarray, found: np.ndarray) -> torch.Tensor:
        """[n, k] logits of given blocks (`retrieve`'s for the same blocks), LOG_ZERO where not
        `found`: fine-tuning rescores the candidates it retrieved once with the current tower."""


def embed_questions(
    query_embedder: Embedder,
    tokenizer: WordPieceTokenizer,
    question_ids: Sequence[Sequence[int]],
    device: torch.device,
    cpu_bf16_autocast: bool,
) -> torch.Tensor:
    """Embed_input(x) of `[CLS] x [SEP]` per question, [n, d] float32 (with graph unless the
    caller runs under no_grad); each question padded to its own `padded_length`, so its
    embedding, and what it retrieves, hardly depends on the batch it is in."""
    sequences = [join(tokenizer, list(ids)) for ids in question_ids]
    groups = same_padded_length_groups([len(ids) for ids, _ in sequences])
    with autocast(device, cpu_bf16_autocast):
        embeddings = torch.cat([
            query_embedder(**pad_batch([sequences[row] for row in rows], tokenizer.pad_id, length).to(device).as_kwargs())
            for rows, length in groups
        ]).float()  # [n, d], grouped order
    order = torch.tensor([row for rows, _ in groups for row in rows], device=embeddings.device)
    return embeddings[torch.argsort(order)]


class DenseRetriever:
    """Query tower + fixed MIPS index (see the module docstring)."""

    def __init__(
        self, query_embedder: Embedder, index: MipsIndex, tokenizer: WordPieceTokenizer,
        model_config: ModelConfig, device: torch.device,
    ):
        self.query_embedder, self.index, self.tokenizer = query_embedder, index, tokenizer
        self.model_config, self.device = model_config, device
        self._corpus_vectors: torch.Tensor | None = None

    def trainable_modules(self) -> list[torch.nn.Module]:
        return [self.query_embedder]

    def retrieve(self, questions: Sequence[str], question_ids: Sequence[Sequence[int]], k: int) -> Retrieved:
        query_embeddings = self._embed(question_ids)  # [n, d]
        scores, block_ids = self.index.search(query_embeddings.detach().cpu().numpy(), k)  # [n, k] x2
        found = np.isfinite(scores)
        return Retrieved(block_ids, found, self._logits(query_embeddings, block_ids, found))

    def score(self, question_ids: Sequence[Sequence[int]], block_ids: np.ndarray, found: np.ndarray) -> torch.Tensor:
        return self._logits(self._embed(question_ids), block_ids, found)

    def corpus_scores(self, question_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """[n, every block] logits, in `index.block_ids`' order, with graph into the query tower:
        the index's vectors are fixed, so scoring the whole corpus is one matrix product. Every
        vector is held on the device (5 MB for the vital corpus's 10k blocks; a Wikipedia-sized
        index of 13M would need 6.7 GB and [n, 13M] logits: not what this is for)."""
        if self._corpus_vectors is None:
            vectors = np.ascontiguousarray(self.index.lookup(self.index.block_ids), dtype=np.float32)
            self._corpus_vectors = torch.from_numpy(vectors).to(self.device)  # [blocks, d]
        return self._embed(question_ids) @ self._corpus_vectors.T

    def _embed(self, question_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        return embed_questions(
            self.query_embedder, self.tokenizer, question_ids, self.device, self.model_config.cpu_bf16_autocast
        )

    def _logits(self, query_embeddings: torch.Tensor, block_ids: np.ndarray, found: np.ndarray) -> torch.Tensor:
        """[n, k] the index's scores of `block_ids`, with graph into the query tower."""
        doc_vectors = np.zeros((*block_ids.shape, self.index.dim), dtype=np.float32)  # [n, k, d]
        doc_vectors[found] = self.index.lookup(block_ids[found])
        return mask_log_scores(
            relevance_scores(query_embeddings, torch.from_numpy(doc_vectors).to(self.device)),
            torch.from_numpy(found).to(self.device),
        )


class Bm25Retriever:
    """BM25's top-k with a uniform p(z|x) over them (see the module docstring)."""

    def __init__(self, index: Bm25Index, device: torch.device):
        self.index, self.device = index, device

    def trainable_modules(self) -> list[torch.nn.Module]:
        return []

    def retrieve(self, questions: Sequence[str], question_ids: Sequence[Sequence[int]], k: int) -> Retrieved:
        scores, block_ids = self.index.search_texts(questions, k)
        found = np.isfinite(scores)
        return Retrieved(block_ids, found, self.score(question_ids, block_ids, found))

    def score(self, question_ids: Sequence[Sequence[int]], block_ids: np.ndarray, found: np.ndarray) -> torch.Tensor:
        return mask_log_scores(torch.zeros(found.shape), torch.from_numpy(found)).to(self.device)


def is_bm25_index(index_path: str | Path) -> bool:
    return read_manifest(index_path).get("index_type") == BM25_INDEX_TYPE


def load_question_retriever(
    index_path: str | Path,
    query_embedder: Embedder | None,
    model_config: ModelConfig,
    device: torch.device,
) -> QuestionRetriever:
    """The retriever a published index directory stands for: BM25, or the dense index read
    with `query_embedder` (required then)."""
    if is_bm25_index(index_path):
        return Bm25Retriever(Bm25Index.load(index_path), device)
    if query_embedder is None:
        raise ValueError(f"no query_embedder to retrieve from the dense index {index_path}")
    index = MipsIndex.load(index_path, expected_dim=model_config.retrieval_dim)
    return DenseRetriever(query_embedder.to(device), index, model_config.tokenizer(), model_config, device)
