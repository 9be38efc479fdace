import numpy as np
import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.bm25 import Bm25Index
from realm.model.index.mips import MipsIndex
from realm.model.networks.config import build_component
from realm.model.networks.retriever import Embedder
from realm.model.qa.gold_spans import gold_spans
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import Bm25Retriever, DenseRetriever
from realm.model.training.question_candidates import (
    CandidateCache, FreshCandidates, join_candidates, retrieve_candidates,
)
from realm.model.training.stage_settings import FinetuneConfig
from tests.model.corpus_fixture import CORPUS, CORPUS_QUESTIONS

CPU = torch.device("cpu")
CONFIG = FinetuneConfig(num_read=1, num_candidates=2)
EVERY_BLOCK = FinetuneConfig(num_read=8, num_candidates=8)  # the tiny corpus has 8 blocks


def _random_dense_retriever(index_path: str, tokenizer, tiny_config) -> DenseRetriever:
    """A random tiny query tower over `index_path`."""
    return DenseRetriever(build_component(Embedder, tiny_config).eval(), MipsIndex.load(index_path), tokenizer, tiny_config, CPU)


def test_joined_candidates_append_the_second_list_without_its_repeats():
    first = np.array([[5, 7], [1, -1]]), np.array([[True, True], [True, False]])
    second = np.array([[7, 9, 4], [-1, 1, 3]]), np.array([[True, True, True], [False, True, True]])
    ids, found = join_candidates(first, second)
    assert ids.tolist() == [[5, 7, -1, 9, 4], [1, -1, -1, -1, 3]]
    assert found.tolist() == [[True, True, False, True, True], [True, False, False, False, True]]


def test_bm25_candidates_joined_to_others_find_the_answers_those_miss(qa_corpus, tokenizer, tiny_config):
    blocks_path = qa_corpus[0]
    blocks = BlockStore.from_parquet(blocks_path, with_text=True)
    bm25 = Bm25Retriever(Bm25Index.from_blocks(blocks_path), CPU)
    examples = [CORPUS_QUESTIONS[2], CORPUS_QUESTIONS[1]]  # the Nile, Ada Lovelace
    # Stand-ins for a query tower that misses: each question's candidates are two blocks without its answer.
    missed = np.array([[9001, -3], [23, -7]]), np.ones((2, 2), dtype=bool)
    alone = CandidateCache.build(bm25, tokenizer, blocks, examples, tiny_config, CONFIG, missed)
    joined = CandidateCache.build(
        bm25, tokenizer, blocks, examples, tiny_config, CONFIG,
        join_candidates(missed, retrieve_candidates(bm25, tokenizer, examples, 1, CONFIG)),
    )
    assert not alone.holds_answer.any()
    assert joined.block_ids.tolist() == [[9001, -3, 68], [23, -7, 57]]
    assert joined.holds_answer.tolist() == [[False, False, True], [False, False, True]]


def test_a_questions_excluded_blocks_are_never_among_its_candidates(qa_corpus, tokenizer, tiny_config, distinct_vectors_index):
    """A cloze question's own block (Paris's) is no candidate: the other seven are, in
    retrieval order, and the answer it holds is found only where another block repeats it."""
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True)
    retriever = _random_dense_retriever(distinct_vectors_index, tokenizer, tiny_config)
    question = "what is the capital and largest city of France, on the river Seine."
    free, excluded = QAExample(question, ["Paris"], "cloze"), QAExample(question, ["Paris"], "cloze", excluded_block_ids=(-7,))
    everything, cloze = (CandidateCache.build(retriever, tokenizer, blocks, [e], tiny_config, EVERY_BLOCK) for e in (free, excluded))

    assert sorted(everything.block_ids[0].tolist()) == sorted(b for b, _, _ in CORPUS)
    assert cloze.block_ids[0].tolist() == [b for b in everything.block_ids[0].tolist() if b != -7] + [-1]
    assert cloze.found[0].tolist() == [True] * 7 + [False]
    holding = {int(b) for b, held in zip(cloze.block_ids[0], cloze.holds_answer[0]) if held}
    assert holding == {11}  # "The Seine flows through Paris ..."


def test_fresh_candidates_are_the_cached_ones_then_the_current_towers_top_blocks_the_cache_lacks(
    qa_corpus, tokenizer, tiny_config, distinct_vectors_index
):
    """The cache holds the 2 blocks the tower ranks last; each step adds its 2 best, with their
    gold spans; a block the cache already holds is not added twice."""
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True)
    retriever = _random_dense_retriever(distinct_vectors_index, tokenizer, tiny_config)
    config = FinetuneConfig(num_read=2, num_candidates=2)
    ranked, _ = retrieve_candidates(retriever, tokenizer, CORPUS_QUESTIONS, 8, config)  # all 8 blocks, best first
    last_two = ranked[:, :-3:-1].copy()
    cache = CandidateCache.build(
        retriever, tokenizer, blocks, CORPUS_QUESTIONS, tiny_config, config, (last_two, np.ones_like(last_two, dtype=bool))
    )
    fresh = FreshCandidates(cache, tokenizer, blocks, CORPUS_QUESTIONS, tiny_config, config).batch(retriever, np.array([0, 3]))
    assert fresh.block_ids.tolist() == [[*last_two[r], *ranked[r, :2]] for r in (0, 3)]
    assert fresh.found.all()
    for i, r in enumerate((0, 3)):
        expected = [gold_spans(tokenizer, blocks, int(b), CORPUS_QUESTIONS[r], tiny_config.max_span_wordpieces) for b in fresh.block_ids[i]]
        assert fresh.gold[i] == expected
        assert fresh.holds_answer[i].tolist() == [bool(g) for g in expected]

    top_two = ranked[:, :2].copy()
    cache = CandidateCache.build(
        retriever, tokenizer, blocks, CORPUS_QUESTIONS, tiny_config, config, (top_two, np.ones_like(top_two, dtype=bool))
    )
    again = FreshCandidates(cache, tokenizer, blocks, CORPUS_QUESTIONS, tiny_config, config).batch(retriever, np.array([1]))
    assert again.block_ids.tolist() == [[*top_two[1], -1, -1]] and again.found.tolist() == [[True, True, False, False]]
