import dataclasses
import math

import numpy as np
import pytest
import torch

from realm.model.qa.answer_metrics import normalize_answer
from realm.model.qa.answering import (
    ANSWER_CANDIDATES, Answerer, Evidence, answer_rank, best_answer, crosses_a_sentence, cuts_a_word,
)
from realm.model.index.block_store import BlockStore
from realm.model.networks.checkpoint import save_checkpoint
from realm.model.networks.config import build_component
from realm.model.networks.inputs import pad_batch
from realm.model.index.bm25 import Bm25Index
from realm.model.index.mips import BruteForceIndex, MipsIndex
from realm.model.qa.question_retrieval import DenseRetriever
from realm.model.networks.reader import body_offsets, build_reader, reader_inputs, span_text
from realm.model.networks.retriever import Embedder
from realm.model.tokenization import join
from realm.schemas import BLOCKS, ArtifactError, read_table, write_table
from tests.model.corpus_fixture import CORPUS, write_corpus

CPU = torch.device("cpu")
QUESTIONS = [
    "What is the capital of France?",
    "Who wrote the first algorithm for the Analytical Engine?",
    "Which river flows north into the Mediterranean Sea?",
]


@pytest.fixture
def models(tiny_config):
    return build_component(Embedder, tiny_config).eval(), build_reader(tiny_config).eval()


@pytest.fixture
def answerer(models, qa_corpus, tokenizer, tiny_config) -> Answerer:
    blocks_path, index_path = qa_corpus
    blocks = BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True)
    query_embedder, reader = models
    retriever = DenseRetriever(query_embedder, MipsIndex.load(index_path), tokenizer, tiny_config, CPU)
    return Answerer(retriever, reader, blocks, tokenizer, tiny_config, CPU)


@pytest.fixture(scope="module")
def bm25_path(qa_corpus, tmp_path_factory) -> str:
    return str(Bm25Index.from_blocks(qa_corpus[0]).save(tmp_path_factory.mktemp("bm25")))


def _spans_of(tokenizer, blocks, block_id, max_span=10) -> set[str]:
    body_ids, text = blocks.body_ids(block_id), blocks.text(block_id)
    return {
        span_text(tokenizer, body_ids, text, start, end)
        for start in range(len(body_ids))
        for end in range(start, min(start + max_span, len(body_ids)))
    }


def test_evidence_is_the_mips_top_k_with_probabilities_summing_to_one(answerer, tokenizer):
    predictions = answerer.answer(QUESTIONS, num_read=3, num_retrieve=6, batch_size=2)
    queries = pad_batch([join(tokenizer, tokenizer.encode(q)) for q in QUESTIONS], tokenizer.pad_id)
    with torch.no_grad():
        query_embeddings = answerer.retriever.query_embedder(**queries.as_kwargs()).numpy()
    index = answerer.retriever.index
    oracle = BruteForceIndex(np.asarray(index.vectors), index.block_ids)
    _, oracle_ids = oracle.search(query_embeddings, 6)
    texts = {block_id: (title, text) for block_id, title, text in CORPUS}

    assert [p.question for p in predictions] == QUESTIONS
    for prediction, expected_ids in zip(predictions, oracle_ids):
        assert prediction.retrieved_block_ids == expected_ids.tolist()
        probabilities = [e.probability for e in prediction.evidence]
        assert sum(probabilities) == pytest.approx(1.0, abs=1e-5)
        assert probabilities == sorted(probabilities, reverse=True)  # best first
        assert all((e.title, e.text) == texts[e.block_id] for e in prediction.evidence)


def test_answer_is_the_string_with_the_largest_share_of_one_softmax_over_the_read_blocks_spans(answerer, tokenizer):
    """Brute force: each read block through the reader alone (no batching, no padding); every
    (block, span) scores log p(z|x) + span score, p(z|x) over the retrieved blocks (a constant
    away from the retrieval logit), normalised in one softmax over all of them. Among the
    ANSWER_CANDIDATES best spans that neither cut a word nor cross a sentence, the answer is the string (after
    exact-match normalisation) with the largest summed share, its text the block's own at its
    best span, its score the log of that sum."""
    num_read = 3
    for prediction in answerer.answer(QUESTIONS, num_read=num_read, num_retrieve=6):
        question_ids = tokenizer.encode(prediction.question)
        scores, answers = [], []
        for evidence in prediction.evidence[:num_read]:
            body = answerer.blocks.body_ids(evidence.block_id)
            joint, spans = reader_inputs(
                tokenizer, [(question_ids, body)], [answerer.entity_types(evidence.block_id)]
            )
            with torch.no_grad():
                span_logits = answerer.reader.span_logits(joint, spans)[0]  # [spans]
            offsets = body_offsets(tokenizer, body, evidence.text)
            sentence_starts = answerer.blocks.sentence_starts(evidence.block_id)
            for span_index in spans.valid[0].nonzero().flatten().tolist():
                start, end = spans.body_span(span_index)
                scores.append(math.log(evidence.probability) + float(span_logits[span_index]))
                char_start, char_end = offsets[start][0], offsets[end][1]
                answers.append((evidence.block_id, evidence.text[char_start:char_end],
                                cuts_a_word(evidence.text, char_start, char_end)
                                or crosses_a_sentence(sentence_starts, char_start, char_end)))
        log_shares = torch.log_softmax(torch.tensor(scores, dtype=torch.float64), 0).tolist()
        top = sorted(range(len(scores)), key=lambda i: -scores[i])[:ANSWER_CANDIDATES]
        totals: dict[str, float] = {}
        for i in top:
            if not answers[i][2]:
                totals[_key(answers[i][1])] = totals.get(_key(answers[i][1]), 0.0) + math.exp(log_shares[i])
        winner = max(totals, key=totals.__getitem__)
        best = next(i for i in top if not answers[i][2] and _key(answers[i][1]) == winner)
        assert prediction.score == pytest.approx(math.log(totals[winner]), abs=1e-4)
        assert (prediction.block_id, prediction.answer) == answers[best][:2]
        assert prediction.probability == pytest.approx(math.exp(prediction.score))
        assert prediction.answer in _spans_of(tokenizer, answerer.blocks, prediction.block_id)


def _key(text: str) -> str:
    """An answer string as the brute force groups it: normalised, except that strings that
    normalise to nothing ("the", ",") stay apart."""
    return normalize_answer(text) or text


def _one_block(tokenizer, text: str, max_span: int):
    """(body wordpieces, span table, wordpiece offsets, wordpiece texts) of `text` read alone."""
    body = tokenizer.encode(text)
    _, spans = reader_inputs(tokenizer, [(tokenizer.encode("q"), body)], [[0] * len(body)], max_span)
    offsets = body_offsets(tokenizer, body, text)
    return body, spans, offsets, [text[s:e] for s, e in offsets]


def test_answers_sum_over_the_spans_of_one_string_and_never_cut_a_word(tokenizer):
    text = "Paris, not Lyon; Lyon is in Zyxtrelland."
    body, spans, offsets, pieces = _one_block(tokenizer, text, 3)
    assert pieces[:6] == ["Paris", ",", "not", "Lyon", ";", "Lyon"] and pieces[8:10] == ["Z", "yx"]  # a word of several pieces
    log_probs = torch.full((spans.valid.shape[1],), -30.0)
    for (start, end), p in {(0, 0): 0.2, (3, 3): 0.16, (5, 5): 0.14, (9, 9): 0.5}.items():
        log_probs[spans.index(start, end)] = math.log(p)
    read = {0: (body, text, [0])}
    best = best_answer(tokenizer, torch.log_softmax(log_probs, 0), spans.valid[0], spans, read)
    # "yx" (0.5) cuts a word; Lyon's two spans (0.3) beat Paris's one (0.2).
    assert (best.text, best.start, best.offsets) == ("Lyon", 3, offsets[3])
    assert best.log_prob == pytest.approx(math.log(0.3), abs=1e-3)
    assert cuts_a_word("Bonaparte", 0, 4) and cuts_a_word("Bonaparte", 4, 9) and not cuts_a_word("Jay-Z", 0, 3)


def test_answers_never_run_across_a_sentence_unless_every_candidate_does(tokenizer):
    text = "It flows into the Nile. The Congo is long."
    body, spans, _, pieces = _one_block(tokenizer, text, 4)
    assert pieces[4:8] == ["Nile", ".", "The", "Congo"]
    sentence_starts = [0, text.index("The")]
    log_probs = torch.full((spans.valid.shape[1],), -30.0)
    log_probs[spans.index(4, 7)] = math.log(0.6)  # "Nile. The Congo"
    log_probs[spans.index(7, 7)] = math.log(0.3)  # "Congo"
    read = {0: (body, text, sentence_starts)}
    assert best_answer(tokenizer, torch.log_softmax(log_probs, 0), spans.valid[0], spans, read).text == "Congo"
    log_probs[spans.index(7, 7)] = -30.0
    only = torch.zeros_like(spans.valid[0])
    only[spans.index(4, 7)] = True  # the one valid span crosses: it is still the answer
    assert best_answer(tokenizer, torch.log_softmax(log_probs, 0), only, spans, read).text == "Nile. The Congo"
    assert crosses_a_sentence([0, 24], 18, 30) and not crosses_a_sentence([0, 24], 24, 30)


def test_retrieving_more_than_the_corpus_returns_every_block_once(answerer):
    (prediction,) = answerer.answer(QUESTIONS[:1], num_read=5, num_retrieve=20)
    assert sorted(prediction.retrieved_block_ids) == sorted(b for b, _, _ in CORPUS)
    assert sum(e.probability for e in prediction.evidence) == pytest.approx(1.0, abs=1e-5)


def test_answering_reports_each_batch_once_it_is_answered(answerer):
    answered = []
    predictions = answerer.answer(QUESTIONS[:3] * 2, num_read=2, num_retrieve=2, batch_size=4, progress=answered.append)
    assert len(predictions) == 6 and answered == [4, 2]


def test_from_checkpoint_answers_as_the_models_it_was_saved_from(
    answerer, models, qa_corpus, block_entities_table, tiny_config, tmp_path
):
    blocks_path, index_path = qa_corpus
    query_embedder, reader = models
    checkpoint = save_checkpoint(tmp_path, 3, {"query_embedder": query_embedder, "reader": reader})
    loaded = Answerer.from_checkpoint(str(checkpoint), index_path, blocks_path, tiny_config, CPU)
    for want, got in zip(answerer.answer(QUESTIONS), loaded.answer(QUESTIONS)):
        assert (got.answer, got.retrieved_block_ids) == (want.answer, want.retrieved_block_ids)
        assert got.score == pytest.approx(want.score, abs=1e-5)

    not_finetuned = save_checkpoint(tmp_path / "ict", 1, {"query_embedder": query_embedder})
    with pytest.raises(ValueError, match="no reader"):
        Answerer.from_checkpoint(str(not_finetuned), index_path, blocks_path, tiny_config, CPU)
    other_corpus = tmp_path / "blocks"  # the index's corpus less one block
    write_corpus(str(other_corpus), read_table(blocks_path, BLOCKS).slice(1), block_entities_table)
    with pytest.raises(ArtifactError, match=f"^{index_path}: 1 of its 8 blocks .* are not in {other_corpus}"):
        Answerer.from_checkpoint(str(checkpoint), index_path, str(other_corpus), tiny_config, CPU)
    reader_only = save_checkpoint(tmp_path / "bm25-reader", 1, {"reader": reader})
    with pytest.raises(ValueError, match="no query_embedder to retrieve from the dense index"):
        Answerer.from_checkpoint(str(reader_only), index_path, blocks_path, tiny_config, CPU)


def test_loaded_under_autocast_it_answers_as_autocast_over_the_saved_models_and_in_bf16_close_to_it(
    models, qa_corpus, tokenizer, tiny_config, tmp_path
):
    """Loading casts the towers' Linear layers to bf16 once: the same scores, to the bit, as
    autocast casting them on every call. The opt-in bf16 reader scores within bf16's rounding."""
    blocks_path, index_path = qa_corpus
    config = dataclasses.replace(tiny_config, cpu_bf16_autocast=True)
    query_embedder, reader = models
    checkpoint = save_checkpoint(tmp_path, 3, {"query_embedder": query_embedder, "reader": reader})
    retriever = DenseRetriever(query_embedder, MipsIndex.load(index_path), tokenizer, config, CPU)
    autocast = Answerer(retriever, reader, BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True), tokenizer, config, CPU)
    want = autocast.answer(QUESTIONS)
    loaded = Answerer.from_checkpoint(str(checkpoint), index_path, blocks_path, config, CPU).answer(QUESTIONS)
    assert [(p.answer, p.score, p.retrieved_block_ids) for p in loaded] == [
        (p.answer, p.score, p.retrieved_block_ids) for p in want
    ]
    bf16 = Answerer.from_checkpoint(str(checkpoint), index_path, blocks_path, config, CPU, bf16_reader=True)
    got = bf16.answer(QUESTIONS)
    assert [p.retrieved_block_ids for p in got] == [p.retrieved_block_ids for p in want]
    assert [p.score for p in got] != [p.score for p in want]
    assert [p.score for p in got] == pytest.approx([p.score for p in want], abs=0.05)


def test_bm25_answerer_reads_the_bm25_top_k_with_a_uniform_retrieval_distribution(
    models, qa_corpus, bm25_path, tiny_config, tmp_path
):
    blocks_path, _ = qa_corpus
    checkpoint = save_checkpoint(tmp_path, 1, {"reader": models[1]})
    answerer = Answerer.from_checkpoint(str(checkpoint), bm25_path, blocks_path, tiny_config, CPU)
    predictions = answerer.answer(QUESTIONS, num_read=2, num_retrieve=4)
    _, expected_ids = Bm25Index.load(bm25_path).search_texts(QUESTIONS, 4)
    for prediction, expected in zip(predictions, expected_ids):
        assert prediction.retrieved_block_ids == expected.tolist()
        assert [e.probability for e in prediction.evidence] == pytest.approx([0.25] * 4)
        assert prediction.block_id in prediction.retrieved_block_ids[:2]
        assert prediction.answer in _spans_of(answerer.tokenizer, answerer.blocks, prediction.block_id)
    capital = dict(zip(QUESTIONS, predictions))["What is the capital of France?"]
    assert "Paris" in capital.evidence[0].text  # the only block with both "capital" and "France"


def test_answer_rank_finds_the_first_block_holding_an_answer():
    evidence = [Evidence(1, "Nile", "The Nile is long.", 0.5), Evidence(2, "Curie", "Prizes in 1903 and 1911.", 0.5)]
    assert answer_rank(evidence, ["the Nile"]) == 0
    assert answer_rank(evidence, ["1911"]) == 1
    assert answer_rank(evidence, [r"19(03|11)"], "regex") == 1
    assert answer_rank(evidence, ["Amazon"]) is None
