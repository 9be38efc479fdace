"""Each fine-tuning question's candidate blocks, retrieved once before the first step (the
dense index through the starting query tower, or BM25), and their gold spans: where a
question's answer occurs among them (`realm.model.qa.gold_spans`: text answers match by
wordpieces, CuratedTrec's regex answers the block text of whole-word spans). A question read
over its passage first (`realm.model.training.passage_candidates`) has the answers marked in
the passage there instead, the occurrences its annotators chose rather than every match of
their text. A resumed run rebuilds the cache from the block ids its checkpoint recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from realm.model.index.block_store import BlockStore
from realm.model.networks.config import ModelConfig
from realm.model.qa.answering import question_wordpieces
from realm.model.qa.gold_spans import gold_spans
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import QuestionRetriever
from realm.model.tokenization import WordPieceTokenizer
from realm.model.training.passage_candidates import Passage
from realm.model.training.stage_settings import FinetuneConfig


@dataclass
class Candidates:
    """Some questions' candidate blocks and their gold spans."""

    block_ids: np.ndarray  # [questions, candidates] int64, best first; -1 past the corpus's end
    found: np.ndarray  # [questions, candidates] bool
    gold: list[list[list[tuple[int, int]]]]  # [questions][candidates] body-relative (start, end)
    holds_answer: np.ndarray = field(init=False)  # [questions, candidates] bool: has a gold span

    def __post_init__(self) -> None:
        self.holds_answer = np.array(
            [[bool(spans) for spans in row] for row in self.gold], dtype=bool
        ).reshape(self.found.shape)


class CandidateCache(Candidates):
    """Each training question's candidates, retrieved once, and their gold spans."""

    def batch(self, rows: np.ndarray) -> Candidates:
        """The cached candidates of questions `rows`."""
        return Candidates(self.block_ids[rows], self.found[rows], [self.gold[r] for r in rows])

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
        passages: Mapping[str, Passage] | None = None,
    ) -> CandidateCache:
        """Retrieve each example's top `config.num_candidates` other than its
        `excluded_block_ids` (or take `retrieved`, the (block_ids, found) a checkpoint
        recorded) and find their gold spans; with `passages` (each example's, by question, the
        first of its candidates), the spans marked in the passage there (`_candidate_spans`)."""
        if retrieved is None:
            retrieved = retrieve_candidates(retriever, tokenizer, examples, config.num_candidates, config, batch_size)
        block_ids, found = retrieved
        gold = [
            _candidate_spans(
                tokenizer, blocks, example, row_ids, row_found, model_config.max_span_wordpieces,
                None if passages is None else passages[example.question],
            )
            for example, row_ids, row_found in zip(examples, block_ids, found)
        ]
        return cls(block_ids, found, gold)


def _candidate_spans(
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    example: QAExample,
    block_ids: np.ndarray,
    found: np.ndarray,
    max_span_wordpieces: int,
    passage: Passage | None = None,
) -> list[list[tuple[int, int]]]:
    """The gold spans of a question's candidates `block_ids` [candidates] (`found` [candidates]):
    where its answers occur in each (`gold_spans`). With its `passage`, which must be the
    first, the passage's marked answers there; a retrieved block holding an answer's text
    (the paragraph cut otherwise, in the corpus) is a gold block too, as in fine-tuning, not a
    negative that would teach the reader the answer is wrong."""
    if passage is not None and (not len(block_ids) or block_ids[0] != passage.block_id):
        raise ValueError(f"candidates {block_ids[:1].tolist()}... do not start with the question's passage {passage.block_id}")
    marked = [] if passage is None else [list(passage.spans)]
    return marked + [
        gold_spans(tokenizer, blocks, int(b), example, max_span_wordpieces) if ok else []
        for b, ok in zip(block_ids[len(marked) :], found[len(marked) :])
    ]


def retrieve_candidates(
    retriever: QuestionRetriever,
    tokenizer: WordPieceTokenizer,
    examples: Sequence[QAExample],
    k: int,
    config: FinetuneConfig,
    batch_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """Each example's top `k` blocks other than its `excluded_block_ids`, best first ([n, k]
    block ids and found flags, -1 / False where fewer exist)."""
    depth = k + max((len(e.excluded_block_ids) for e in examples), default=0)
    hits = [
        retriever.retrieve(
            [e.question for e in batch],
            question_wordpieces(tokenizer, [e.question for e in batch], config.max_question_wordpieces),
            depth,
        )
        for batch in (examples[start : start + batch_size] for start in range(0, len(examples), batch_size))
    ]
    return _without_excluded(np.concatenate([h.block_ids for h in hits]), np.concatenate([h.found for h in hits]), examples, k)


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
