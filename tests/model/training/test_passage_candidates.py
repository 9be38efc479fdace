import re

import numpy as np
import pytest
import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.mips import MipsIndex
from realm.model.networks.config import build_component
from realm.model.networks.retriever import Embedder
from realm.model.qa.answering import question_wordpieces
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import DenseRetriever
from realm.model.training.passage_candidates import Passage, PassageRetriever
from realm.model.training.question_candidates import CandidateCache
from realm.model.training.stage_settings import FinetuneConfig
from tests.model.corpus_fixture import CORPUS

CPU = torch.device("cpu")
QUESTIONS = ["Where does the Seine flow into the sea?", "What is the capital of France?"]
OUTSIDE_THE_INDEX = 123456789


def _retrievers(index_path, tokenizer, tiny_config):
    """A random tiny query tower over the index, and the passage retriever over it: the first
    question's passage is in no index, the second's is the second block the index returns for it."""
    inner = DenseRetriever(build_component(Embedder, tiny_config), MipsIndex.load(index_path), tokenizer, tiny_config, CPU)
    passages = {QUESTIONS[0]: Passage(OUTSIDE_THE_INDEX, ((0, 1),))}
    retriever = PassageRetriever(inner, passages)
    second = int(inner.retrieve(QUESTIONS, question_wordpieces(tokenizer, QUESTIONS), 2).block_ids[1, 1])
    passages[QUESTIONS[1]] = Passage(second, ((2, 2),))
    return inner, retriever


def test_a_question_reads_its_passage_then_the_other_retrieved_blocks_all_scored_alike(
    tokenizer, tiny_config, distinct_vectors_index
):
    ids = question_wordpieces(tokenizer, QUESTIONS)
    inner, retriever = _retrievers(distinct_vectors_index, tokenizer, tiny_config)
    assert not inner.query_embedder.training  # frozen: no dropout draws, the same negatives each time
    top = inner.retrieve(QUESTIONS, ids, 4).block_ids  # [2, 4]
    second = retriever.passages[QUESTIONS[1]].block_id

    read = retriever.retrieve(QUESTIONS, ids, 4)
    assert read.block_ids[0].tolist() == [OUTSIDE_THE_INDEX, *top[0, :3].tolist()]
    assert second == top[1, 1] and read.block_ids[1].tolist() == [second, top[1, 0], top[1, 2], top[1, 3]]  # once
    assert read.found.all() and torch.equal(read.logits, torch.zeros(2, 4))
    assert retriever.trainable_modules() == [] and retriever.index is inner.index
    assert retriever.retrieve(QUESTIONS, ids, 1).block_ids.tolist() == [[OUTSIDE_THE_INDEX], [second]]
    with pytest.raises(KeyError, match=re.escape("no passage for the question 'Who painted the Mona Lisa?'")):
        retriever.retrieve(["Who painted the Mona Lisa?"], question_wordpieces(tokenizer, ["Who painted the Mona Lisa?"]), 2)


def test_retrieved_blocks_holding_an_answers_text_are_gold_there_and_the_passage_keeps_its_marked_spans(
    qa_corpus, tokenizer, tiny_config, distinct_vectors_index
):
    """Every corpus block is read beside each passage. The Seine block holds "Le Havre" at
    wordpieces 10-11 and "Paris" at 4; the Paris block is the second question's passage, read
    once, with its marked span; no other block holds either answer."""
    inner = DenseRetriever(build_component(Embedder, tiny_config), MipsIndex.load(distinct_vectors_index), tokenizer,
                           tiny_config, CPU)
    passages = {QUESTIONS[0]: Passage(OUTSIDE_THE_INDEX, ((0, 1),)), QUESTIONS[1]: Passage(-7, ((0, 0),))}
    retriever = PassageRetriever(inner, passages)
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True)
    examples = [QAExample(QUESTIONS[0], ["Le Havre"], "squad"), QAExample(QUESTIONS[1], ["Paris"], "squad")]
    config = FinetuneConfig(num_read=9, num_candidates=9)  # the passage and all 8 corpus blocks
    cache = CandidateCache.build(retriever, tokenizer, blocks, examples, tiny_config, config, passages=passages)

    corpus_ids = {block_id for block_id, _, _ in CORPUS}
    gold = [
        {int(b): spans for b, ok, spans in zip(ids, found, row) if ok}
        for ids, found, row in zip(cache.block_ids, cache.found, cache.gold)
    ]
    assert cache.block_ids[:, 0].tolist() == [OUTSIDE_THE_INDEX, -7] and cache.found.sum(axis=1).tolist() == [9, 8]
    assert gold[0] == {OUTSIDE_THE_INDEX: [(0, 1)], 11: [(10, 11)]} | dict.fromkeys(corpus_ids - {11}, [])
    assert gold[1] == {-7: [(0, 0)], 11: [(4, 4)]} | dict.fromkeys(corpus_ids - {-7, 11}, [])
    holders = [set(ids[held].tolist()) for ids, held in zip(cache.block_ids, cache.holds_answer)]
    assert holders == [{OUTSIDE_THE_INDEX, 11}, {-7, 11}]

    recorded = (np.roll(cache.block_ids, 1, axis=1), cache.found)
    with pytest.raises(ValueError, match=f"do not start with the question's passage {OUTSIDE_THE_INDEX}"):
        CandidateCache.build(retriever, tokenizer, blocks, examples, tiny_config, config, recorded, passages=passages)
