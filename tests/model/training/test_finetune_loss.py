import math

import numpy as np
import pytest
import torch

from realm.model.index.block_store import BlockStore
from realm.model.networks.config import build_component
from realm.model.networks.inputs import pad_batch, padded_length
from realm.model.index.mips import MipsIndex
from realm.model.qa.entity_types import BlockEntityTypes
from realm.model.qa.qa_data import QAExample
from realm.model.qa.question_retrieval import DenseRetriever
from realm.model.networks.reader import build_reader, reader_inputs
from realm.model.qa.gold_spans import find_gold_spans
from realm.model.networks.retriever import Embedder
from realm.model.tokenization import join
from realm.model.qa.corpus_holders import answer_holders
from realm.model.training.finetune_loss import CorpusPositives, finetune_loss, read_slots
from tests.model.corpus_fixture import CORPUS_QUESTIONS as EXAMPLES
from tests.model.training.finetune_fixture import CPU, CONFIG, cache as _cache


def test_loss_is_early_update_plus_the_joint_reader_loss_computed_by_brute_force(qa_corpus, tokenizer, tiny_config):
    """One question, every block a candidate and read: retriever term −log Σ_{z with an answer}
    p(z|x); reader term −log of the gold spans' share of one softmax over every (block, span),
    each scored f(x,z) + its span score; f from the query tower and the stored vectors."""
    blocks_path, index_path = qa_corpus
    blocks, index = BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True), MipsIndex.load(index_path)
    query_embedder, reader = build_component(Embedder, tiny_config).eval(), build_reader(tiny_config).eval()
    example = EXAMPLES[0]
    retriever = DenseRetriever(query_embedder, index, tokenizer, tiny_config, CPU)
    candidates = _cache(retriever, tokenizer, blocks, [example], tiny_config)
    entity_types = BlockEntityTypes(blocks, tokenizer)
    loss, stats = finetune_loss(
        retriever, reader, tokenizer, blocks, entity_types, [example], candidates.batch(np.array([0])), tiny_config, CONFIG, CPU
    )

    question_ids = tokenizer.encode(example.question)
    with torch.no_grad():
        query = query_embedder(**pad_batch([join(tokenizer, question_ids)], tokenizer.pad_id).as_kwargs())[0]
        retrieval_logits, holds_answer, span_scores = [], [], []
        for block_id in index.block_ids:
            logit = float(query @ torch.from_numpy(index.lookup([block_id])[0]))
            body = blocks.body_ids(int(block_id))
            gold = find_gold_spans(tokenizer, body, example.answers)
            joint, spans = reader_inputs(tokenizer, [(question_ids, body)], [entity_types(int(block_id))])
            gold_mask = spans.gold_mask([gold])[0]
            span_logits = reader.span_logits(joint, spans)[0]
            span_scores += [(logit + float(span_logits[i]), bool(gold_mask[i])) for i in range(len(span_logits)) if spans.valid[0, i]]
            retrieval_logits.append(logit)
            holds_answer.append(bool(gold))
    log_p_z = torch.log_softmax(torch.tensor(retrieval_logits, dtype=torch.float64), 0)
    retriever_loss = -torch.logsumexp(log_p_z[torch.tensor(holds_answer)], 0)
    scores = torch.tensor([score for score, _ in span_scores], dtype=torch.float64)
    gold_scores = torch.tensor([score for score, is_gold in span_scores if is_gold], dtype=torch.float64)
    reader_loss = torch.logsumexp(scores, 0) - torch.logsumexp(gold_scores, 0)
    assert sum(holds_answer) == 2  # "Paris" is in the Paris and the Seine blocks
    assert candidates.holds_answer.sum() == 2
    assert stats.retriever_loss == pytest.approx(float(retriever_loss), rel=1e-4)
    assert stats.reader_loss == pytest.approx(float(reader_loss), rel=1e-4)
    assert loss.item() == pytest.approx(float(retriever_loss + reader_loss), rel=1e-4)


def test_the_corpus_early_update_is_a_softmax_over_every_block_with_every_holder_a_positive(
    qa_corpus, distinct_vectors_index, tokenizer, tiny_config
):
    """With `corpus`, the retriever term is the mean over its questions (the batch's, then the
    retriever-only ones) of −log Σ_{z holding the answer} p(z|x), p(z|x) a softmax over every
    block of the index less the question's excluded ones; the reader term is unchanged."""
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True, with_entities=True)
    index = MipsIndex.load(distinct_vectors_index)
    torch.manual_seed(0)
    query_embedder, reader = build_component(Embedder, tiny_config).eval(), build_reader(tiny_config).eval()
    retriever = DenseRetriever(query_embedder, index, tokenizer, tiny_config, CPU)
    config = CONFIG.model_copy(update={"num_candidates": 2, "num_read": 2})
    batch = [EXAMPLES[0]]
    retriever_only = QAExample("Which river flows through Paris?", ["Seine"], "test", excluded_block_ids=(11,))
    questions = [*batch, retriever_only]
    holders = answer_holders(tokenizer, blocks, index.block_ids, questions, tiny_config.max_span_wordpieces)
    assert [h.tolist() for h in holders] == [[-7, 11], [-7]]  # the Seine block excluded
    candidates = _cache(retriever, tokenizer, blocks, batch, tiny_config, config).batch(np.array([0]))
    entity_types = BlockEntityTypes(blocks, tokenizer)

    def loss(corpus):
        return finetune_loss(
            retriever, reader, tokenizer, blocks, entity_types, batch, candidates, tiny_config, config, CPU, corpus=corpus
        )

    total, stats = loss(CorpusPositives(questions, holders))
    _, candidates_only = loss(None)

    with torch.no_grad():
        expected = []
        for question, held in zip(questions, holders):
            query = query_embedder(**pad_batch([join(tokenizer, tokenizer.encode(question.question))], tokenizer.pad_id).as_kwargs())[0]
            kept = [int(b) for b in index.block_ids if int(b) not in question.excluded_block_ids]
            logits = torch.tensor([float(query @ torch.from_numpy(index.lookup([b])[0])) for b in kept], dtype=torch.float64)
            log_p = torch.log_softmax(logits, 0)
            expected.append(-float(torch.logsumexp(log_p[[kept.index(int(b)) for b in held]], 0)))
    assert stats.retriever_loss == pytest.approx(np.mean(expected), rel=1e-4)
    assert stats.retriever_loss != pytest.approx(candidates_only.retriever_loss, rel=1e-3)  # over 2 candidates before
    assert stats.reader_loss == candidates_only.reader_loss
    assert total.item() == pytest.approx(stats.retriever_loss + stats.reader_loss, rel=1e-5)


def test_each_read_block_is_read_at_its_own_padded_length_with_the_padded_batchs_loss_and_gradients(
    qa_corpus, tokenizer, tiny_config, monkeypatch
):
    """The reader's forwards in a step are one per padded length among the read blocks (not one
    padded to the longest), and the loss and every gradient are those of the one padded forward."""
    blocks_path, index_path = qa_corpus
    blocks, index = BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True), MipsIndex.load(index_path)
    # A long question puts its (question, block) pairs past the short ones' padded length.
    examples = [*EXAMPLES[:2], QAExample(
        "Which river, known to the ancient Egyptians and to every traveller since, flows north into the Mediterranean?",
        ["the Nile"], "test",
    )]
    rows = np.arange(len(examples))

    def loss_and_gradients(widths, lengths):
        torch.manual_seed(0)
        query_embedder, reader = build_component(Embedder, tiny_config).eval(), build_reader(tiny_config).eval()

        def record(module, args, kwargs):
            widths.append(kwargs["inputs_embeds"].shape[1])
            lengths.extend(kwargs["attention_mask"].sum(dim=1).tolist())

        hook = reader.bert.register_forward_pre_hook(record, with_kwargs=True)
        retriever = DenseRetriever(query_embedder, index, tokenizer, tiny_config, CPU)
        candidates = _cache(retriever, tokenizer, blocks, examples, tiny_config)
        loss, _ = finetune_loss(
            retriever, reader, tokenizer, blocks, BlockEntityTypes(blocks, tokenizer), examples, candidates.batch(rows),
            tiny_config, CONFIG, CPU,
        )
        loss.backward()
        hook.remove()
        gradients = {
            f"{name}.{key}": p.grad.clone() for name, model in (("query", query_embedder), ("reader", reader))
            for key, p in model.named_parameters() if p.grad is not None
        }
        return loss.item(), gradients

    grouped_widths, padded_widths, lengths = [], [], []
    grouped = loss_and_gradients(grouped_widths, [])
    monkeypatch.setattr(
        "realm.model.training.finetune_loss.span_logits_by_length", lambda reader, joint, spans: reader.span_logits(joint, spans)
    )
    padded = loss_and_gradients(padded_widths, lengths)

    assert len(lengths) == len(examples) * CONFIG.num_read and padded_widths == [max(lengths)]
    assert grouped_widths == sorted({padded_length(n) for n in lengths}) and len(grouped_widths) > 1
    assert grouped[0] == pytest.approx(padded[0], rel=1e-5)
    assert grouped[1].keys() == padded[1].keys() and len(grouped[1]) > 0
    for name, gradient in grouped[1].items():
        assert torch.allclose(gradient, padded[1][name], rtol=1e-4, atol=1e-6), name


def test_read_slots_are_the_best_scored_with_a_gold_block_swapped_in_when_none_is():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    holds_answer = torch.tensor([[False, True, False, False], [False, False, True, True], [False, False, False, False]])
    read, swapped = read_slots(logits, holds_answer, 2)
    assert read.tolist() == [[0, 1], [0, 2], [0, 1]]  # ties (BM25's uniform logits) keep the retrieval order
    assert swapped.tolist() == [False, True, False]  # the last row has no gold block to swap in


def test_gradients_reach_only_the_trained_towers_and_a_swapped_in_gold_block_is_counted(qa_corpus, tokenizer, tiny_config):
    blocks_path, index_path = qa_corpus
    blocks, index = BlockStore.from_parquet(blocks_path, with_text=True, with_entities=True), MipsIndex.load(index_path)
    # The tower in eval mode: the ranking checked below is scored again after the loss's, and
    # dropout would draw another one (gradients reach it all the same).
    query_embedder, reader = build_component(Embedder, tiny_config).eval(), build_reader(tiny_config)
    retriever = DenseRetriever(query_embedder, index, tokenizer, tiny_config, CPU)
    config = CONFIG.model_copy(update={"num_read": 1})
    candidates = _cache(retriever, tokenizer, blocks, EXAMPLES, tiny_config, config)
    # The Curie block is the only one holding 1903/1911; with one block read, it is read
    # whatever the untrained tower ranks first.
    loss, stats = finetune_loss(
        retriever, reader, tokenizer, blocks, BlockEntityTypes(blocks, tokenizer), [EXAMPLES[3]], candidates.batch(np.array([3])),
        tiny_config, config, CPU,
    )
    first = int(np.argmax(retriever.score([tokenizer.encode(EXAMPLES[3].question)], candidates.block_ids[[3]], candidates.found[[3]]).detach().numpy()))
    assert stats.without_answer_in_read == int(not candidates.holds_answer[3, first])
    assert math.isfinite(loss.item()) and stats.reader_loss > 0
    loss.backward()
    for model in (query_embedder, reader):
        assert model.bert.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0
