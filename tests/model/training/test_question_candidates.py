import numpy as np
import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.bm25 import Bm25Index
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import Bm25Retriever
from realm.model.training.question_candidates import CandidateCache, join_candidates, retrieve_candidates
from realm.model.training.stage_settings import FinetuneConfig

CONFIG = FinetuneConfig(num_read=1, num_candidates=2)


def test_joined_candidates_append_the_second_list_without_its_repeats():
    first = np.array([[5, 7], [1, -1]]), np.array([[True, True], [True, False]])
    second = np.array([[7, 9, 4], [-1, 1, 3]]), np.array([[True, True, True], [False, True, True]])
    ids, found = join_candidates(first, second)
    assert ids.tolist() == [[5, 7, -1, 9, 4], [1, -1, -1, -1, 3]]
    assert found.tolist() == [[True, True, False, True, True], [True, False, False, False, True]]


def test_bm25_candidates_joined_to_others_find_the_answers_those_miss(qa_corpus, tokenizer, tiny_config):
    blocks_path = qa_corpus[0]
    blocks = BlockStore.from_parquet(blocks_path, with_text=True)
    bm25 = Bm25Retriever(Bm25Index.from_blocks(blocks_path), torch.device("cpu"))
    examples = [
        QAExample("Which river flows north into the Mediterranean Sea?", ["the Nile"], "test"),
        QAExample("Who wrote the first algorithm for the Analytical Engine?", ["Ada Lovelace"], "test"),
    ]
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
