import dataclasses
import hashlib
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from realm.model.qa.answering import Answerer
from realm.model.index.block_store import BlockStore
from realm.model.index.bm25 import Bm25Index
from realm.model.networks.checkpoint import (
    WEIGHT_AVERAGE_EXTRA, best_checkpoint, checkpoint_extra, load_components, save_checkpoint,
)
from realm.model.networks.config import build_component
from realm.model.networks.encoder import build_encoder
from realm.model.training.stage_settings import FinetuneConfig
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
from realm.model.training.finetune_start import WARM_START
from realm.model.training.question_candidates import CandidateCache
from realm.model.training.train_finetune import FinetuneTrainer, is_validation_question, validation_exact_match
from tests.model.corpus_fixture import CORPUS_QUESTIONS as EXAMPLES

CPU = torch.device("cpu")
UNANSWERABLE = QAExample("Who painted the Mona Lisa?", ["Leonardo da Vinci"], "test")
# Every block of the 8-block corpus is a candidate and is read, so every answerable question
# is answerable in its read blocks; no validation and no weight averaging unless a test asks for them.
CONFIG = FinetuneConfig(
    epochs=1, batch_size=3, learning_rate=1e-3, span_head_learning_rate=1e-3, warmup_fraction=0.25,
    checkpoint_every=2, log_every=1, num_read=8, num_candidates=8, validation_fraction=0, average_weights=False,
)


def _train(qa_corpus, root, tiny_config, config=CONFIG, examples=EXAMPLES, init_checkpoint=None, reader_init=None):
    blocks_path, index_path = qa_corpus
    logged = []
    trainer = FinetuneTrainer(
        examples, blocks_path, index_path, init_checkpoint, str(root), tiny_config, config, CPU, reader_init=reader_init
    )
    result = trainer.run(logged.append)
    return result, logged


def _weights(checkpoint) -> dict[str, torch.Tensor]:
    return {
        f"{name}.{key}": value
        for name, model in load_components(checkpoint).items()
        for key, value in model.state_dict().items()
    }


def _answers_from_its_blocks(checkpoint, qa_corpus, tiny_config) -> None:
    """The checkpoint answers a question with a span of a block it read, as that block's text has it."""
    answerer = Answerer.from_checkpoint(checkpoint, qa_corpus[1], qa_corpus[0], tiny_config, CPU)
    prediction = answerer.answer([EXAMPLES[0].question], num_read=3)[0]
    read_from = next(e for e in prediction.evidence if e.block_id == prediction.block_id)
    assert prediction.answer and read_from.text[slice(*prediction.answer_offsets)] == prediction.answer


def _warmed_up(tiny_config) -> dict[str, torch.nn.Module]:
    """A warm-up's components, its reader built with the span features as CONFIG's fine-tuning
    builds it (the flow refuses a warm-up and a fine-tuning that set them differently), the
    features away from their zero start so that a fresh table would not pass for the warm-up's."""
    reader = build_reader(dataclasses.replace(tiny_config, span_features=CONFIG.span_features))
    with torch.no_grad():
        for table in reader.span_features.parameters():
            table.normal_()
    return {"query_embedder": build_component(Embedder, tiny_config), "reader": reader}


def _digests(path: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(path).iterdir()}


def _cache(retriever, tokenizer, blocks, examples, tiny_config, config=CONFIG) -> CandidateCache:
    return CandidateCache.build(retriever, tokenizer, blocks, examples, tiny_config, config)


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


def test_questions_without_an_answer_among_their_candidates_train_the_query_tower_alone(
    qa_corpus, distinct_vectors_index, tmp_path, tiny_config, monkeypatch
):
    """Two candidates a question, and the default setting (on with a dense index): the ones
    whose answer neither holds train through the corpus early update only, in a stream of their
    own, so the reader's batches are those of a run without it, and the corpus p(z|x) of their
    answers' blocks rises."""
    import realm.model.training.train_finetune as train_finetune

    steps = []  # (the reader's questions, the corpus early update's) of each step with the setting

    def recording(*args, corpus=None, **kwargs):
        if corpus is not None:
            steps.append(([e.question for e in args[5]], [e.question for e in corpus.examples]))
        return finetune_loss(*args, corpus=corpus, **kwargs)

    monkeypatch.setattr(train_finetune, "finetune_loss", recording)
    blocks = BlockStore.from_parquet(qa_corpus[0], with_text=True)
    index = MipsIndex.load(distinct_vectors_index)
    examples = [*EXAMPLES, QAExample("Where does the Seine flow into the English Channel?", ["Le Havre"], "test"), UNANSWERABLE]
    config = CONFIG.model_copy(update={"num_candidates": 2, "num_read": 2, "epochs": 40, "batch_size": 8, "checkpoint_every": 100})
    runs = {}
    for corpus_softmax in (False, None):  # None, the default: on with a dense index
        trainer = FinetuneTrainer(
            examples, qa_corpus[0], distinct_vectors_index, None, str(tmp_path / str(corpus_softmax)), tiny_config,
            config.model_copy(update={"retriever_corpus_softmax": corpus_softmax}), CPU,
        )
        logged = []
        runs[corpus_softmax] = (trainer, trainer.run(logged.append), logged)
    trainer, result, logged = runs[None]
    _, baseline, baseline_logged = runs[False]
    named = FinetuneTrainer(
        examples, qa_corpus[0], distinct_vectors_index, None, str(tmp_path / "None"), tiny_config,
        config.model_copy(update={"retriever_corpus_softmax": True}), CPU,
    )
    assert named.step == result["step"]  # recorded as it ran: naming the default resumes the default's checkpoint

    holders = answer_holders(trainer.tokenizer, blocks, index.block_ids, trainer.training, tiny_config.max_span_wordpieces)
    reachable = trainer.candidates.holds_answer.any(axis=1)
    expected_only = [i for i, held in enumerate(holders) if len(held) and not reachable[i]]
    assert 0 < len(expected_only) and result["retriever_only_questions"] == len(expected_only)
    assert result["training_questions"] == baseline["training_questions"] == int(reachable.sum())
    assert result["step"] == baseline["step"]
    assert logged[0]["reader_loss"] == baseline_logged[0]["reader_loss"]  # the same first batch, the same weights
    only = {trainer.training[i].question for i in expected_only}
    assert len(steps) == result["step"]
    for read, scored in steps:
        assert scored[: len(read)] == read and not only & set(read)  # never read, ...
        assert set(scored[len(read):]) <= only and len(scored[len(read):]) == min(8, len(only))  # ... each once a step
        assert len(set(scored[len(read):])) == len(scored[len(read):])
    assert {q for _, scored in steps for q in scored} >= only

    def holder_probability(run_trainer) -> float:
        with torch.no_grad():
            run_trainer.retriever.query_embedder.eval()
            ids = [run_trainer.tokenizer.encode(trainer.training[i].question) for i in expected_only]
            log_p = torch.log_softmax(run_trainer.retriever.corpus_scores(ids), dim=-1)
            gold = torch.from_numpy(np.stack([np.isin(index.block_ids, holders[i]) for i in expected_only]))
            return float(torch.exp(log_p).masked_fill(~gold, 0).sum(-1).mean())

    assert holder_probability(trainer) > holder_probability(runs[False][0]) + 0.1


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


def test_validation_questions_are_chosen_by_question_hash():
    questions = [f"question number {i}" for i in range(2000)]
    held = [q for q in questions if is_validation_question(q, 0.1)]
    assert 150 < len(held) < 250  # ~10%
    assert held == [q for q in reversed(questions) if is_validation_question(q, 0.1)][::-1]  # order-free
    assert not any(is_validation_question(q, 0.0) for q in questions)


def test_both_terms_fall_on_a_memorisable_set_and_questions_without_an_answer_are_left_out(
    qa_corpus, distinct_vectors_index, tmp_path, tiny_config
):
    before = _digests(distinct_vectors_index)
    config = CONFIG.model_copy(update={"epochs": 20, "batch_size": 4, "checkpoint_every": 20})
    result, logged = _train(
        (qa_corpus[0], distinct_vectors_index), tmp_path, tiny_config, config, examples=[*EXAMPLES, UNANSWERABLE]
    )

    assert len(logged) == 20 and all(math.isfinite(m["loss"]) for m in logged)
    for term in ("retriever_loss", "reader_loss"):
        losses = [m[term] for m in logged]
        assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), term
    # 4 answerable questions x 20 epochs / 4 a batch; the Mona Lisa question is in no block.
    assert result["step"] == 20 and result["examples_seen"] == 80
    assert result["training_questions"] == 4 and result["without_answer_in_candidates"] == 1
    assert result["examples_without_answer_in_read"] == 0  # every block is read
    assert sorted(p.name for p in Path(result["checkpoint"]).iterdir() if p.is_dir()) == ["query_embedder", "reader"]
    assert _digests(distinct_vectors_index) == before


def test_the_best_validated_checkpoint_is_published_and_its_exact_match_is_what_it_scores(
    qa_corpus, tmp_path, tokenizer, tiny_config
):
    examples = [*EXAMPLES, QAExample("Where does the Seine flow into the English Channel?", ["Le Havre"], "test")]
    fraction = next(f for f in np.arange(0.05, 1, 0.05) if 1 <= sum(is_validation_question(e.question, f) for e in examples) <= 2)
    validation = [e for e in examples if is_validation_question(e.question, fraction)]
    config = CONFIG.model_copy(update={"epochs": 6, "batch_size": 2, "validation_fraction": float(fraction)})
    result, logged = _train(qa_corpus, tmp_path, tiny_config, config, examples=examples)

    assert result["validation_questions"] == len(validation)
    validated = {m["step"]: m["validation_exact_match"] for m in logged if "validation_exact_match" in m}
    assert sorted(validated) == list(range(2, result["step"], 2)) + [result["step"]]  # at every checkpoint
    assert max(validated.values()) == result["best_validation_em"]
    best = Path(result["checkpoint"])
    assert best.parent.name == "best" and best_checkpoint(tmp_path) == best
    answerer = Answerer.from_checkpoint(str(best), qa_corpus[1], qa_corpus[0], tiny_config, CPU)
    assert validation_exact_match(answerer, validation, config.num_read) == result["best_validation_em"]


def test_resume_continues_exactly_where_it_stopped(qa_corpus, tmp_path, tiny_config):
    """A crash after the step-2 checkpoint (step 4's removed) and a rerun give the same steps
    3-4 as the uninterrupted run: same batches, dropout masks, optimizer and schedule."""
    config = CONFIG.model_copy(update={"epochs": 3})  # 4 questions x 3 epochs / 3 a batch = 4 steps
    straight, straight_log = _train(qa_corpus, tmp_path, tiny_config, config)
    straight_weights = _weights(straight["checkpoint"])
    shutil.rmtree(straight["checkpoint"])

    resumed, resumed_log = _train(qa_corpus, tmp_path, tiny_config, config)
    assert [m["step"] for m in resumed_log] == [3, 4]
    assert [m["loss"] for m in resumed_log] == [m["loss"] for m in straight_log[2:]]
    resumed_weights = _weights(resumed["checkpoint"])
    assert all(torch.equal(resumed_weights[key], value) for key, value in straight_weights.items())
    assert resumed["examples_seen"] == straight["examples_seen"] == 12


def test_other_questions_start_a_new_stage_and_the_previous_one_is_kept_beside_it(qa_corpus, tmp_path, tiny_config, caplog):
    """4 questions, 3 a batch: 2 steps, checkpoint 2; then 3 of them: a new stage of 1 step."""
    root = tmp_path / "finetune"
    _train(qa_corpus, root, tiny_config)
    with caplog.at_level(logging.WARNING, logger="realm.model.training.trainer"):
        again, logged = _train(qa_corpus, root, tiny_config, examples=EXAMPLES[:3])
    assert f"{root} was trained on other inputs (questions): a new stage starts there" in caplog.text
    assert [m["step"] for m in logged] == [1] and again["examples_seen"] == 3
    assert again["checkpoint"] == str(root / "1")
    assert sorted(p.name for p in (tmp_path / "finetune.superseded-1").iterdir()) == ["2"]


def test_a_fresh_run_starts_from_the_pretrained_query_tower_and_encoder(qa_corpus, tmp_path, tiny_config):
    pretrained = {
        "query_embedder": build_component(Embedder, tiny_config),
        "doc_embedder": build_component(Embedder, tiny_config),
        "encoder": build_encoder(tiny_config),
    }
    init = save_checkpoint(tmp_path / "pretrain", 100, pretrained)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init)
    )
    started = load_components(result["checkpoint"])
    assert sorted(started) == ["query_embedder", "reader"]
    for key, value in pretrained["query_embedder"].state_dict().items():
        assert torch.equal(started["query_embedder"].state_dict()[key], value), key
    for key, value in pretrained["encoder"].bert.state_dict().items():
        assert torch.equal(started["reader"].bert.state_dict()[key], value), key


def test_the_checkpoint_fine_tuning_started_from_outlives_pretraining_retention(qa_corpus, tmp_path, tiny_config):
    pretrained = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    init = save_checkpoint(tmp_path / "pretrain", 100, pretrained)
    _train(qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init))
    for step in (200, 300):  # pre-training resumed later, keeping one checkpoint
        save_checkpoint(tmp_path / "pretrain", step, pretrained, keep=1)
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == ["100", "300"]


def test_the_query_tower_keeps_the_depth_pooling_and_scale_of_its_checkpoint(qa_corpus, tmp_path, tiny_config):
    """A sentence-encoder start (deeper than the preset, mean-pooled, scaled) fine-tunes as it was built."""
    tower_config = dataclasses.replace(tiny_config, num_layers=3, retrieval_pooling="mean", retrieval_scale=20.0, dropout=0.0)
    towers = {name: build_component(Embedder, tower_config) for name in ("query_embedder", "doc_embedder")}
    init = save_checkpoint(tmp_path / "ict", 0, towers)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init)
    )
    query_tower = load_components(result["checkpoint"])["query_embedder"]
    assert query_tower.pooling == "mean" and query_tower.scale == 20.0 and query_tower.config.num_hidden_layers == 3
    assert query_tower.config.hidden_dropout_prob == tiny_config.dropout  # the preset's, not the checkpoint's


def test_reader_init_gives_the_ablations_their_mixed_starting_points(qa_corpus, tmp_path, tiny_config):
    """REALM retriever + baseline encoder: the query tower from one checkpoint, the reader from
    another's encoder, or from the warm start when that one (ICT's) has no encoder."""
    realm = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    other_encoder = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    ict = {"query_embedder": build_component(Embedder, tiny_config), "doc_embedder": build_component(Embedder, tiny_config)}
    paths = {name: str(save_checkpoint(tmp_path / name, 1, components))
             for name, components in (("realm", realm), ("other", other_encoder), ("ict", ict))}
    no_steps = CONFIG.model_copy(update={"epochs": 0})

    mixed, _ = _train(qa_corpus, tmp_path / "mixed", tiny_config, no_steps, init_checkpoint=paths["realm"], reader_init=paths["other"])
    started = load_components(mixed["checkpoint"])
    for key, value in realm["query_embedder"].state_dict().items():
        assert torch.equal(started["query_embedder"].state_dict()[key], value), key
    for key, value in other_encoder["encoder"].bert.state_dict().items():
        assert torch.equal(started["reader"].bert.state_dict()[key], value), key

    for name, reader_init in (("from-ict", paths["ict"]), ("warm-start", WARM_START)):
        baseline, _ = _train(qa_corpus, tmp_path / name, tiny_config, no_steps, init_checkpoint=paths["realm"], reader_init=reader_init)
        reader = load_components(baseline["checkpoint"])["reader"].bert.state_dict()
        assert not all(torch.equal(reader[k], v) for k, v in realm["encoder"].bert.state_dict().items()), name


def test_bm25_fine_tuning_trains_the_reader_alone_and_checkpoints_only_it(qa_corpus, tmp_path, tiny_config):
    bm25_path = str(Bm25Index.from_blocks(qa_corpus[0]).save(tmp_path / "bm25"))
    config = CONFIG.model_copy(update={"epochs": 12, "batch_size": 4, "checkpoint_every": 12, "num_read": 3, "num_candidates": 3})
    result, logged = _train((qa_corpus[0], bm25_path), tmp_path / "finetune", tiny_config, config)
    assert result["step"] == math.ceil(12 * result["training_questions"] / 4)
    assert all(m["retriever_loss"] == 0.0 for m in logged)
    assert result["retriever_only_questions"] == 0  # the corpus early update is a dense index's default alone
    readers = [m["reader_loss"] for m in logged]
    assert np.mean(readers[-3:]) < 0.5 * np.mean(readers[:3])
    assert sorted(p.name for p in Path(result["checkpoint"]).iterdir() if p.is_dir()) == ["reader"]
    with pytest.raises(ValueError, match="^retriever_corpus_softmax needs a dense index"):
        _train(
            (qa_corpus[0], bm25_path), tmp_path / "asked", tiny_config, config.model_copy(update={"retriever_corpus_softmax": True})
        )


def test_a_warmed_up_reader_starts_fine_tuning_whole_span_head_included(qa_corpus, tmp_path, tiny_config):
    warmed = _warmed_up(tiny_config)
    init = save_checkpoint(tmp_path / "warmup", 7, warmed)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, CONFIG.model_copy(update={"epochs": 0}), init_checkpoint=str(init)
    )
    started = load_components(result["checkpoint"])
    for name in ("query_embedder", "reader"):
        for key, value in warmed[name].state_dict().items():
            assert torch.equal(started[name].state_dict()[key], value), f"{name}.{key}"


def test_reader_dropout_sets_the_readers_hidden_dropout_alone_and_is_saved_with_it(qa_corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update={"epochs": 0, "reader_dropout": 0.3})
    result, _ = _train(qa_corpus, tmp_path, dataclasses.replace(tiny_config, dropout=0.05), config)
    saved = load_components(result["checkpoint"])
    assert saved["reader"].config.hidden_dropout_prob == 0.3
    assert saved["reader"].config.attention_probs_dropout_prob == 0.05
    assert saved["query_embedder"].config.hidden_dropout_prob == 0.05
    assert {m.p for m in saved["reader"].bert.encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.3, 0.05}


def test_averaged_weights_are_what_is_validated_and_published_and_a_resume_averages_on_exactly(
    qa_corpus, tmp_path, tiny_config
):
    """With average_weights the best checkpoint holds the moving average (not the last step's
    weights, which the step checkpoint holds) and scores its validation EM; a crash after
    step 2 and a rerun publish the same average as the uninterrupted run."""
    examples = [*EXAMPLES, QAExample("Where does the Seine flow into the English Channel?", ["Le Havre"], "test")]
    fraction = next(f for f in np.arange(0.05, 1, 0.05) if 1 <= sum(is_validation_question(e.question, f) for e in examples) <= 2)
    validation = [e for e in examples if is_validation_question(e.question, fraction)]
    # 3 or 4 training questions, 2 a batch, 2 epochs: 4 steps, validated at steps 2 and 4.
    config = CONFIG.model_copy(
        update={"epochs": 2, "batch_size": 2, "validation_fraction": float(fraction), "average_weights": True}
    )
    straight, _ = _train(qa_corpus, tmp_path / "straight", tiny_config, config, examples=examples)
    assert straight["step"] == 4
    answerer = Answerer.from_checkpoint(straight["checkpoint"], qa_corpus[1], qa_corpus[0], tiny_config, CPU)
    assert validation_exact_match(answerer, validation, config.num_read) == straight["best_validation_em"]
    best, last = _weights(straight["checkpoint"]), _weights(tmp_path / "straight" / "4")
    assert not all(torch.equal(best[key], last[key]) for key in last)

    def crash_at_step_3(metrics):
        if metrics["step"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        FinetuneTrainer(
            examples, *qa_corpus, None, str(tmp_path / "resumed"), tiny_config, config, CPU
        ).run(crash_at_step_3)
    resumed, resumed_log = _train(qa_corpus, tmp_path / "resumed", tiny_config, config, examples=examples)
    assert [m["step"] for m in resumed_log] == [3, 4]
    assert Path(resumed["checkpoint"]).name == Path(straight["checkpoint"]).name
    resumed_best = _weights(resumed["checkpoint"])
    assert all(torch.equal(resumed_best[key], value) for key, value in best.items())
    averaged = [checkpoint_extra(tmp_path / run / "4")[WEIGHT_AVERAGE_EXTRA] for run in ("straight", "resumed")]
    assert averaged[0]["updates"] == averaged[1]["updates"] == 4
    assert all(torch.equal(value, averaged[1]["averages"][name]) for name, value in averaged[0]["averages"].items())


def test_averaging_without_validation_questions_publishes_the_newest_average(qa_corpus, tmp_path, tiny_config):
    """No question held out: each checkpoint publishes the average as it stands (unvalidated),
    so the run's checkpoint holds the last average, not the last step's weights."""
    config = CONFIG.model_copy(update={"epochs": 2, "average_weights": True})  # 3 steps, checkpoints at 2 and 3
    result, logged = _train(qa_corpus, tmp_path, tiny_config, config)
    assert Path(result["checkpoint"]) == tmp_path / "best" / "3" and result["best_validation_em"] is None
    assert not any("validation_exact_match" in m for m in logged)
    average = checkpoint_extra(tmp_path / "3")[WEIGHT_AVERAGE_EXTRA]["averages"]
    assert WEIGHT_AVERAGE_EXTRA not in checkpoint_extra(result["checkpoint"])  # its components are the average
    published = _weights(result["checkpoint"])
    assert all(torch.equal(published[name], value) for name, value in average.items())
    assert not torch.equal(published["reader.span_output.weight"], _weights(tmp_path / "3")["reader.span_output.weight"])


@pytest.mark.parametrize("setting", ["span_features"])
def test_reader_modules_train_from_zero_and_answer_from_their_checkpoint(setting, qa_corpus, tmp_path, tiny_config):
    trained, logged = _train(qa_corpus, tmp_path / "trained", tiny_config, CONFIG.model_copy(update={setting: True, "epochs": 2}))
    assert all(math.isfinite(m["reader_loss"]) for m in logged)
    reader = load_components(trained["checkpoint"])["reader"]
    assert getattr(reader.config, setting)  # saved with it, so answering reads with it too
    assert all(weight.abs().sum() > 0 for weight in getattr(reader, setting).parameters())
    _answers_from_its_blocks(trained["checkpoint"], qa_corpus, tiny_config)
