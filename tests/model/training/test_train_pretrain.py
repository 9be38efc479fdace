from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from realm.model.training.pretrain_step import encoder_log_likelihood, encoder_log_probs, make_pretrain_batch, retrieve
from realm.model.training.masked_span_accuracy import marginal_predictions, span_correct
from realm.model.training.train_pretrain import PretrainTrainer
from realm.schemas import BLOCKS, PRETRAIN_EXAMPLES, read_table, write_table
from tests.model.corpus_fixture import CORPUS
from tests.model.training.pretrain_fixture import (
    CPU,
    CONFIG,
    OUTSIDE_CORPUS,
    trainer as _trainer,
    run as _run,
    comparable as _comparable,
)


def test_resume_from_a_checkpoint_repeats_the_uninterrupted_run_exactly(corpus, tmp_path, tiny_config):
    straight = _run(_trainer(corpus, tmp_path / "straight", tiny_config), 4)

    first = _trainer(corpus, tmp_path / "split", tiny_config)
    assert _comparable(_run(first, 2)) == _comparable(straight[:2])
    first.save_checkpoint()
    resumed = _trainer(corpus, tmp_path / "split", tiny_config)  # reloads index/0, which it was using
    assert (resumed.step, resumed.index_snapshot_step) == (2, 0)
    resumed.evaluate_masked_spans()  # draws no random numbers: the next steps are unchanged
    assert _comparable(_run(resumed, 2)) == _comparable(straight[2:])


def test_step_reports_the_documented_metrics(corpus, tmp_path, tiny_config):
    metrics = _trainer(corpus, tmp_path, tiny_config).train_step()
    assert np.isfinite(metrics["loss"]) and 0.0 <= metrics["mlm_accuracy"] <= 1.0
    assert 0.0 <= metrics["retrieval_entropy"] <= np.log(CONFIG.num_candidates) + 1e-6
    assert 0.0 < metrics["null_document_probability"] < 1.0
    assert (metrics["step"], metrics["index_snapshot_step"], metrics["index_age"]) == (1, 0, 1)


def test_only_examples_with_a_salient_span_are_trained_on_and_held_out(corpus, tmp_path, tiny_config):
    trainer = _trainer(corpus, tmp_path, tiny_config)
    # The fixture's 16 examples less the 2 without a salient span.
    assert len(trainer.train_rows) + len(trainer.heldout_rows) == 14
    assert all(trainer.examples[row]["masked_token_positions"] for row in trainer.train_rows)
    assert sum(metrics["num_random_spans"] for metrics in _run(trainer, 4)) == 0


def test_no_example_with_a_salient_span_is_refused_naming_the_file(tmp_path, tokenizer, tiny_config, blocks_table):
    blocks_path = write_table(str(tmp_path / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    rows = [
        {"example_id": i, "origin_block_id": OUTSIDE_CORPUS, "forbidden_block_ids": [], "text": text,
         "token_ids": tokenizer.encode(text), "spans": [], "masked_token_positions": []}
        for i, (_, _, text) in enumerate(CORPUS)
    ]
    examples_path = write_table(str(tmp_path / "examples" / "part-0.parquet"), rows, PRETRAIN_EXAMPLES)
    with pytest.raises(ValueError, match=f"{examples_path}: none of {len(CORPUS)} pre-training examples has a salient span"):
        PretrainTrainer(blocks_path, examples_path, str(tmp_path / "checkpoints"), tiny_config, CONFIG, device=CPU)


def test_the_fresh_mlm_head_learns_at_its_own_rate(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update=dict(learning_rate=1e-4, mlm_head_learning_rate=2e-3))
    trainer = _trainer(corpus, tmp_path, tiny_config, config)
    rate_of = {id(p): group["initial_lr"] for group in trainer.optimizer.param_groups for p in group["params"]}
    head = trainer.encoder.cls.predictions
    assert {rate_of[id(p)] for p in head.transform.parameters()} == {2e-3}
    assert rate_of[id(head.bias)] == 2e-3
    # The decoder is the input embedding: it learns with the body.
    assert head.decoder.weight is trainer.encoder.bert.embeddings.word_embeddings.weight
    assert rate_of[id(head.decoder.weight)] == 1e-4
    assert {rate_of[id(p)] for p in trainer.encoder.bert.encoder.parameters()} == {1e-4}


def test_random_spans_ablation_masks_every_example_randomly(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update=dict(random_spans=True))
    metrics = _trainer(corpus, tmp_path, tiny_config, config).train_step()
    assert metrics["num_random_spans"] == config.batch_size


def test_cached_mode_freezes_the_doc_tower(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update=dict(doc_tower="frozen"))
    trainer = _trainer(corpus, tmp_path, tiny_config, config)
    before = {k: v.clone() for k, v in trainer.retriever.doc_embedder.state_dict().items()}
    query_before = trainer.retriever.query_embedder.projection.weight.clone()
    _run(trainer, 2)
    assert all(torch.equal(v, trainer.retriever.doc_embedder.state_dict()[k]) for k, v in before.items())
    assert not torch.equal(query_before, trainer.retriever.query_embedder.projection.weight)


def test_neither_tower_trains_before_retriever_frozen_steps(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update=dict(retriever_frozen_steps=2))
    trainer = _trainer(corpus, tmp_path, tiny_config, config)
    towers = {"query": trainer.retriever.query_embedder, "doc": trainer.retriever.doc_embedder}
    start = {name: {k: v.clone() for k, v in tower.state_dict().items()} for name, tower in towers.items()}
    encoder_start = trainer.encoder.cls.predictions.transform.dense.weight.clone()
    _run(trainer, 2)
    for name, tower in towers.items():
        assert all(torch.equal(v, tower.state_dict()[k]) for k, v in start[name].items()), name
    assert not torch.equal(encoder_start, trainer.encoder.cls.predictions.transform.dense.weight)
    _run(trainer, 1)
    for name, tower in towers.items():
        assert not torch.equal(start[name]["projection.weight"], tower.projection.weight), name


@pytest.mark.parametrize("doc_tower", ["whole", "frozen"])
def test_the_closed_book_ablation_reads_the_null_document_alone_and_trains_only_the_encoder(
    corpus, tmp_path, tiny_config, doc_tower
):
    config = CONFIG.model_copy(update=dict(num_candidates=1, doc_tower=doc_tower))
    trainer = _trainer(corpus, tmp_path, tiny_config, config)
    towers = {"query": trainer.retriever.query_embedder, "doc": trainer.retriever.doc_embedder}
    start = {name: {k: v.clone() for k, v in tower.state_dict().items()} for name, tower in towers.items()}
    encoder_start = trainer.encoder.bert.encoder.layer[0].attention.self.query.weight.clone()
    metrics = _run(trainer, 3)
    # p(null|x) = 1: each loss is the masked span's −log p(y|x) read from `[CLS] x [SEP] [SEP]` alone.
    assert [(m["null_document_probability"], m["retrieval_entropy"], m["span_in_candidates"]) for m in metrics] == [
        (1.0, 0.0, 0.0)
    ] * 3
    assert [m["retriever_learning_rate"] for m in metrics] == [0.0] * 3
    for name, tower in towers.items():
        assert all(torch.equal(v, tower.state_dict()[k]) for k, v in start[name].items()), name
    assert not torch.equal(encoder_start, trainer.encoder.bert.encoder.layer[0].attention.self.query.weight)
    evaluation = trainer.evaluate_masked_spans()
    assert evaluation["accuracy_with_retrieval"] == evaluation["accuracy_null_only"]


def test_the_towers_learn_at_their_own_rate_from_zero_once_they_unfreeze(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(
        update=dict(steps=8, warmup_steps=0, retriever_frozen_steps=2, retriever_learning_rate=5e-4, retriever_warmup_steps=3)
    )
    trainer = _trainer(corpus, tmp_path, tiny_config, config)
    rate_of = {id(p): group["initial_lr"] for group in trainer.optimizer.param_groups for p in group["params"]}
    for tower in (trainer.retriever.query_embedder, trainer.retriever.doc_embedder):
        assert {rate_of[id(p)] for p in tower.parameters()} == {5e-4}
    assert {rate_of[id(p)] for p in trainer.encoder.bert.encoder.parameters()} == {1e-3}
    # Each step's metrics carry the rates of the step after it: the towers' is 0 up to their
    # start (step 2), then rises over 3 steps to the schedule's, which falls linearly to 0 at 8.
    metrics = _run(trainer, 6)
    assert [m["learning_rate"] for m in metrics] == pytest.approx([1e-3 * (8 - s) / 8 for s in range(1, 7)])
    tower_rates = [5e-4 * (8 - s) / 8 * ramp for s, ramp in zip(range(1, 7), [0, 1 / 4, 2 / 4, 3 / 4, 1, 1])]
    assert [m["retriever_learning_rate"] for m in metrics] == pytest.approx(tower_rates)


def test_resume_across_the_end_of_the_retriever_freeze_is_exact(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update=dict(retriever_frozen_steps=2))
    straight = _run(_trainer(corpus, tmp_path / "straight", tiny_config, config), 4)
    first = _trainer(corpus, tmp_path / "split", tiny_config, config)
    _run(first, 1)
    first.save_checkpoint()
    resumed = _trainer(corpus, tmp_path / "split", tiny_config, config)
    assert _comparable(_run(resumed, 3)) == _comparable(straight[1:])


def test_the_loss_goes_down_on_the_toy_corpus(corpus, tmp_path, tiny_config):
    """Every step sees all 12 training examples, so the loss is comparable step to step."""
    config = CONFIG.model_copy(update=dict(batch_size=12))
    losses = [metrics["loss"] for metrics in _run(_trainer(corpus, tmp_path, tiny_config, config), 4)]
    assert losses[-1] < losses[0]


def test_evaluate_masked_spans_reports_both_accuracies_on_the_heldout_examples(corpus, tmp_path, tiny_config):
    result = _trainer(corpus, tmp_path, tiny_config).evaluate_masked_spans()
    n = result["examples"]
    assert n == CONFIG.heldout_examples
    assert 0.0 <= result["accuracy_with_retrieval"] <= 1.0 and 0.0 <= result["accuracy_null_only"] <= 1.0
    assert 0.0 <= result["span_in_candidates"] <= 1.0
    # The accuracies differ by exactly the discordant examples, which a paired test reads.
    difference = round(n * result["accuracy_with_retrieval"]) - round(n * result["accuracy_null_only"])
    assert difference == result["right_only_with_retrieval"] - result["right_only_null"]
    found = round(n * result["span_in_candidates"])
    assert 0 <= result["span_in_candidates_right_with_retrieval"] <= min(found, round(n * result["accuracy_with_retrieval"]))
    assert 0 <= result["span_in_candidates_right_null_only"] <= min(found, round(n * result["accuracy_null_only"]))
    assert 0 <= result["span_in_candidates_right_reading_that_block"] <= found


def test_evaluation_on_never_trained_on_rows(corpus, tmp_path, tiny_config):
    trainer = _trainer(corpus, tmp_path, tiny_config)
    _run(trainer, 2)  # 4 of the 12 training examples drawn
    rows = trainer.untrained_rows(100)
    assert len(rows) == len(trainer.train_rows) - 2 * CONFIG.batch_size
    assert trainer.evaluate_masked_spans(rows)["examples"] == len(rows)


def test_marginal_predictions_take_the_argmax_of_the_mixture_per_position():
    # Two candidates over a 3-word vocabulary, one masked slot: candidate 0 is confident in
    # word 0, candidate 1 less so in word 1; p(z) tips the mixture to word 1.
    vocab = torch.log(torch.tensor([[[[0.9, 0.1, 0.0]]], [[[0.0, 0.6, 0.4]]]]).transpose(0, 1) + 1e-12)  # [1, 2, 1, 3]
    log_p_z = torch.log(torch.tensor([[0.3, 0.7]]))
    assert marginal_predictions(log_p_z, vocab).tolist() == [[1]]  # 0.27 / 0.45 / 0.28
    assert marginal_predictions(torch.log(torch.tensor([[0.6, 0.4]])), vocab).tolist() == [[0]]


def test_a_span_counts_only_when_every_masked_wordpiece_is_right(tokenizer):
    example = {"example_id": 1, "origin_block_id": 1, "forbidden_block_ids": [1], "token_ids": [2000, 2001, 2002]}
    batch = make_pretrain_batch(
        tokenizer, [{**example, "masked_token_positions": [0, 1]}, {**example, "masked_token_positions": [2]}]
    )
    assert span_correct(torch.tensor([[2000, 2001], [2002, 0]]), batch).tolist() == [True, True]
    assert span_correct(torch.tensor([[2000, 9], [2002, 9]]), batch).tolist() == [False, True]
    # One prediction per candidate read: [batch, k, max_masks] -> [batch, k].
    per_candidate = torch.tensor([[[2000, 2001], [2000, 9]], [[7, 0], [2002, 0]]])
    assert span_correct(per_candidate, batch).tolist() == [[True, False], [False, True]]


def test_encoder_log_probs_hold_the_likelihood_of_the_targets(corpus, tmp_path, tiny_config):
    trainer = _trainer(corpus, tmp_path, tiny_config)
    trainer.encoder.eval()
    batch = trainer._batch(trainer.train_rows[:3])
    with torch.no_grad():
        _, candidates = retrieve(trainer.retriever, trainer._index_in_use(), batch, CONFIG.num_candidates, CPU)
        expected = encoder_log_likelihood(trainer.encoder, trainer.tokenizer, trainer.blocks, batch, candidates, CPU)
        log_p, vocab_log_probs = encoder_log_probs(
            trainer.encoder, trainer.tokenizer, trainer.blocks, batch, candidates, CPU
        )
    torch.testing.assert_close(log_p, expected)
    targets = batch.mlm_targets[:, None, :, None].expand(-1, CONFIG.num_candidates, -1, 1)  # [batch, k, max_masks, 1]
    from_vocab = (vocab_log_probs.gather(3, targets).squeeze(3) * batch.mlm_mask[:, None, :]).sum(dim=2)
    torch.testing.assert_close(from_vocab, expected)


def _reshuffled_into_two_shards(path: str, schema: pa.Schema, directory: Path) -> str:
    table = read_table(path, schema)
    table = table.take(np.random.default_rng(0).permutation(table.num_rows))
    write_table(str(directory / "part-0.parquet"), table.slice(0, 3), schema)
    write_table(str(directory / "part-1.parquet"), table.slice(3), schema)
    return str(directory)


def test_the_same_blocks_and_examples_in_other_shards_train_to_the_same_losses(corpus, tmp_path, tiny_config):
    """Beam's workers decide which rows land in which shard, and in what order."""
    blocks_path, examples_path = corpus
    reprepared = (
        _reshuffled_into_two_shards(blocks_path, BLOCKS, tmp_path / "blocks"),
        _reshuffled_into_two_shards(examples_path, PRETRAIN_EXAMPLES, tmp_path / "examples"),
    )
    runs = []
    for root, paths in (("first", corpus), ("again", reprepared)):  # one after the other: torch's RNG is global
        trainer = _trainer(paths, tmp_path / root, tiny_config)
        heldout_ids = [trainer.examples[row]["example_id"] for row in trainer.heldout_rows]
        runs.append((heldout_ids, _comparable(_run(trainer, 3)), trainer.evaluate_masked_spans()))
    assert runs[1] == runs[0]
