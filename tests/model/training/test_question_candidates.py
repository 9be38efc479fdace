import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.mips import MipsIndex
from realm.model.networks.config import build_component
from realm.model.networks.retriever import Embedder
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import DenseRetriever
from realm.model.training.question_candidates import CandidateCache
from realm.model.training.stage_settings import FinetuneConfig
from tests.model.corpus_fixture import CORPUS

CPU = torch.device("cpu")
CONFIG = FinetuneConfig(num_read=1, num_candidates=2)
EVERY_BLOCK = FinetuneConfig(num_read=8, num_candidates=8)  # the tiny corpus has 8 blocks


def _random_dense_retriever(index_path: str, tokenizer, tiny_config) -> DenseRetriever:
    """A random tiny query tower over `index_path`."""
    return DenseRetriever(build_component(Embedder, tiny_config).eval(), MipsIndex.load(index_path), tokenizer, tiny_config, CPU)


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

