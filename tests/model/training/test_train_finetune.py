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
from realm.model.index.mips import MipsIndex
from realm.model.qa.qa_data import QAExample
from realm.model.qa.corpus_holders import answer_holders
from realm.model.training.finetune_loss import finetune_loss
from realm.model.training.squad_passages import squad_passages
from realm.model.training.squad_questions import read_squad
from realm.model.training.train_finetune import FinetuneTrainer, is_validation_question, validation_exact_match
from tests.model.corpus_fixture import CORPUS_QUESTIONS as EXAMPLES
from tests.model.training.finetune_fixture import (
    CPU,
    UNANSWERABLE,
    CONFIG,
    train as _train,
    weights as _weights,
    answers_from_its_blocks as _answers_from_its_blocks,
    digests as _digests,
    warmed_up as _warmed_up,
)
from tests.model.training.squad_fixture import cut_passages, write_squad


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


def test_questions_read_over_their_passages_train_the_reader_alone_and_resume_exactly(
    qa_corpus, tmp_path, tokenizer, tiny_config
):
    """SQuAD-style questions (`realm.model.training.passage_candidates`): each reads its passage
    first, the query tower is left as it started, validation reads the same blocks, and a run
    stopped after the step-4 checkpoint resumes into the uninterrupted run's step 5."""
    questions = read_squad(write_squad(tmp_path / "squad.json"))
    examples, passages = squad_passages(
        questions, cut_passages(questions, str(tmp_path / "squad" / "blocks"), tokenizer), tokenizer,
        tiny_config.max_span_wordpieces,
    )
    fraction = next(f for f in np.arange(0.05, 1, 0.05) if sum(is_validation_question(e.question, f) for e in examples) == 1)
    config = CONFIG.model_copy(update={
        "num_read": 3, "num_candidates": 3, "epochs": 3, "batch_size": 2, "validation_fraction": float(fraction),
    })
    init = save_checkpoint(tmp_path / "pretrain", 0, _warmed_up(tiny_config))

    def train(root):
        trainer = FinetuneTrainer(
            examples, qa_corpus[0], qa_corpus[1], str(init), str(root), tiny_config, config, CPU, passages=passages
        )
        logged = []
        return trainer, trainer.run(logged.append), logged

    trainer, straight, straight_log = train(tmp_path / "warmup")
    assert straight["training_questions"] == 3 and straight["without_answer_in_candidates"] == 0
    assert straight["step"] == 5 and straight["retriever_only_questions"] == 0
    assert trainer.candidates.block_ids[:, 0].tolist() == [passages.by_question[e.question].block_id for e in trainer.training]
    held_out = trainer.validation[0]
    read = trainer.answerer.answer([held_out.question], num_read=3, num_retrieve=3)[0]
    assert read.evidence[0].block_id == passages.by_question[held_out.question].block_id
    assert [m["step"] for m in straight_log if "validation_exact_match" in m] == [2, 4, 5]
    started, last = _weights(init), _weights(tmp_path / "warmup" / "5")
    queries = [key for key in started if key.startswith("query_embedder.")]
    assert queries and all(torch.equal(last[key], started[key]) for key in queries)
    assert not all(torch.equal(last[key], started[key]) for key in started if key.startswith("reader."))

    shutil.rmtree(tmp_path / "warmup" / "5")
    _, resumed, resumed_log = train(tmp_path / "warmup")
    assert [m["step"] for m in resumed_log] == [5] and resumed_log[0]["loss"] == straight_log[-1]["loss"]
    assert all(torch.equal(value, last[key]) for key, value in _weights(tmp_path / "warmup" / "5").items())

    asked = config.model_copy(update={"retriever_corpus_softmax": True})
    with pytest.raises(ValueError, match="^retriever_corpus_softmax trains the query tower, which questions read over"):
        FinetuneTrainer(examples, qa_corpus[0], qa_corpus[1], str(init), str(tmp_path / "asked"), tiny_config, asked, CPU,
                        passages=passages)
