"""What fine-tuning trains on, fixed before its first step: each training question's cached
candidates (`realm.model.training.question_candidates`; a reading-comprehension question's
passage first), the questions that carry a reader loss, and, with the early update over the
whole corpus, every block holding each question's answer and the questions that train the
query tower alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from realm.model.index.block_store import BlockStore
from realm.model.networks.config import ModelConfig
from realm.model.qa.corpus_holders import answer_holders
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import QuestionRetriever
from realm.model.tokenization import WordPieceTokenizer
from realm.model.training.passage_candidates import Passage
from realm.model.training.question_candidates import CandidateCache
from realm.model.training.stage_settings import FinetuneConfig


@dataclass(frozen=True)
class TrainingCandidates:
    cache: CandidateCache
    rows: np.ndarray  # the questions with an answer among their candidates: the reader's batches
    holders: list[np.ndarray] | None  # with retriever_corpus_softmax: each question's blocks holding an answer
    retriever_only_rows: np.ndarray  # questions no candidate answers but some block does: the query tower alone


def training_candidates(
    retriever: QuestionRetriever,
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    questions: Sequence[QAExample],
    model_config: ModelConfig,
    config: FinetuneConfig,
    recorded: tuple[np.ndarray, np.ndarray] | None,
    passages: Mapping[str, Passage] | None = None,
) -> TrainingCandidates:
    """The candidates of `questions` from `retriever`, or the (block_ids, found) a checkpoint
    `recorded`, so a resumed stage trains on the stream an uninterrupted one would; with
    `passages`, each question's passage first with its marked answers as its gold spans."""
    cache = CandidateCache.build(retriever, tokenizer, blocks, questions, model_config, config, recorded, passages=passages)
    answered = cache.holds_answer.any(axis=1)
    rows = np.flatnonzero(answered)
    if len(rows) == 0:
        raise ValueError(f"none of the {len(questions)} training questions has an answer among its candidate blocks")
    if not config.retriever_corpus_softmax:
        return TrainingCandidates(cache, rows, None, np.empty(0, dtype=np.int64))
    holders = answer_holders(tokenizer, blocks, retriever.index.block_ids, questions, model_config.max_span_wordpieces)
    held = np.array([len(h) > 0 for h in holders], dtype=bool)
    return TrainingCandidates(cache, rows, holders, np.flatnonzero(held & ~answered))
