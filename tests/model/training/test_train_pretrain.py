import logging
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from realm.model.index.embed_corpus import embed_blocks, load_embeddings
from realm.model.index.mips import MipsIndex
from realm.model.publish import latest_verified, read_manifest
from realm.model.index.rebuild import fit_block_batch, rebuild_index
from realm.model.training.pretrain_step import encoder_log_likelihood, encoder_log_probs, make_pretrain_batch, retrieve
from realm.model.networks.retriever import Embedder
from realm.model.training.stage_settings import PretrainConfig
from realm.model.training.masked_span_accuracy import marginal_predictions, span_correct
from realm.model.training.pretrain_index import IndexRoots, attach_index
from realm.model.training.train_pretrain import HELD_OUT, NEVER_TRAINED_ON, PretrainHooks, PretrainTrainer
from realm.schemas import BLOCKS, PRETRAIN_EXAMPLES, read_table, write_table
from tests.model.corpus_fixture import CORPUS

CPU = torch.device("cpu")
# Short lengths and a small k keep a tiny-preset step well under a second.
# Both towers trained from the first step, candidates re-embedded by the doc tower (REALM's
# own recipe; the stage's defaults freeze the retriever).
CONFIG = PretrainConfig(
    steps=4, batch_size=2, num_candidates=4, learning_rate=1e-3, warmup_steps=1, heldout_examples=4,
    max_query_wordpieces=24, max_block_wordpieces=24, cached_doc_embeddings=False, retriever_frozen_steps=0,
)
OUTSIDE_CORPUS = 10**6  # origin block ids of the examples: not in Z, so no block is forbidden


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tokenizer, blocks_table) -> tuple[str, str]:
    """(blocks path, examples path): each corpus sentence twice as a pre-training example, its
    title's wordpieces masked (or, for the second copy of the first two, no salient span)."""
    root = tmp_path_factory.mktemp("pretrain")
    blocks_path = write_table(str(root / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    rows = []
    for copy in range(2):
        for i, (_, title, text) in enumerate(CORPUS):
            token_ids, title_ids = tokenizer.encode(text), tokenizer.encode(title)
            start = next(s for s in range(len(token_ids)) if token_ids[s : s + len(title_ids)] == title_ids)
            salient = copy == 0 or i >= 2
            rows.append(
                {
                    "example_id": len(rows),
                    "origin_block_id": OUTSIDE_CORPUS + i,
                    "forbidden_block_ids": [OUTSIDE_CORPUS + i],
                    "text": text,
                    "token_ids": token_ids,
                    "spans": [],
                    "masked_token_positions": list(range(start, start + len(title_ids))) if salient else [],
                }
            )
    examples_path = write_table(str(root / "examples" / "part-0.parquet"), rows, PRETRAIN_EXAMPLES)
    return blocks_path, examples_path


def _trainer(corpus, root: Path, tiny_config, config=CONFIG) -> PretrainTrainer:
    blocks_path, examples_path = corpus
    trainer = PretrainTrainer(blocks_path, examples_path, str(root / "checkpoints"), tiny_config, config, device=CPU)
    attach_index(trainer, _roots(root))
    return trainer


def _roots(root: Path) -> IndexRoots:
    return IndexRoots(str(root / "index"), str(root / "embeddings"), str(root / "snapshots"))


def _run(trainer: PretrainTrainer, steps: int) -> list[dict]:
    return [trainer.train_step() for _ in range(steps)]


def _comparable(metrics: list[dict]) -> list[dict]:
    timing = {"steps_per_s", "eta_s", "elapsed_s"}
    return [{k: v for k, v in m.items() if k not in timing} for m in metrics]


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
    config = CONFIG.model_copy(update=dict(cached_doc_embeddings=True))
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


@pytest.mark.parametrize("cached", [False, True])
def test_the_closed_book_ablation_reads_the_null_document_alone_and_trains_only_the_encoder(
    corpus, tmp_path, tiny_config, cached
):
    config = CONFIG.model_copy(update=dict(num_candidates=1, cached_doc_embeddings=cached))
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


def test_swap_index_reports_staleness_and_the_next_step_searches_the_new_index(corpus, tmp_path, tiny_config):
    trainer = _trainer(corpus, tmp_path, tiny_config)
    _run(trainer, 3)
    kept_ids = np.array([CORPUS[0][0], CORPUS[1][0], CORPUS[2][0]], dtype=np.int64)
    index = MipsIndex.build(np.eye(3, 128, dtype=np.float32), kept_ids)
    searched = []
    search = index.search
    index.search = lambda queries, k: searched.append(search(queries, k)) or searched[-1]
    assert trainer.swap_index(index, snapshot_step=1) == 2
    metrics = trainer.train_step()
    assert (metrics["index_snapshot_step"], metrics["index_age"]) == (1, 3)
    (_, hit_ids), = searched
    assert set(hit_ids.ravel().tolist()) <= {*kept_ids.tolist(), -1}  # -1: past the 3-block index

    trainer.save_checkpoint()
    resumed = PretrainTrainer(*corpus, str(tmp_path / "checkpoints"), tiny_config, CONFIG, device=CPU)
    assert (resumed.step, resumed.index_snapshot_step) == (4, 1)


def test_the_index_a_checkpoint_trained_against_outlives_index_retention(corpus, tmp_path, tiny_config):
    config = CONFIG.model_copy(update={"keep_checkpoints": 1})
    trainer = _trainer(corpus, tmp_path, tiny_config, config)  # index/0 and embeddings/0
    _run(trainer, 1)
    trainer.save_checkpoint()  # trained against index/0
    vectors = np.eye(len(CORPUS), 128, dtype=np.float32)
    for step in (5, 6):
        MipsIndex.build(vectors, np.array([block_id for block_id, _, _ in CORPUS])).save(tmp_path / "index", step, keep=1)
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == ["0", "6"]


class RefreshPublishedAfterOnePoll:
    """A refresh run in place that the loop first sees still running, then published."""

    def __init__(self, path):
        self.path, self.polls = path, 0

    def done(self) -> bool:
        self.polls += 1
        return self.polls > 1

    def result(self) -> dict:
        return {"path": str(self.path)}

    def wait(self) -> None:
        pass


def test_run_refreshes_on_schedule_swaps_when_the_next_starts_and_ends_on_the_final_towers_index(
    corpus, tmp_path, tiny_config, caplog
):
    """Refresh every 2 steps, checkpoint and evaluate every 3, 5 steps: the refresh of step 2
    is swapped in before step 5 trains, when the refresh of step 4 starts (staleness 2; it was
    still running, so the loop waited for it); the final index is refreshed from step 5."""
    blocks_path, examples_path = corpus
    config = CONFIG.model_copy(update=dict(
        steps=5, refresh_every=2, checkpoint_every=3, eval_every=3, log_every=2, untrained_eval_examples=3,
        heldout_examples=2,
    ))
    trainer = PretrainTrainer(blocks_path, examples_path, str(tmp_path / "checkpoints"), tiny_config, config, device=CPU)
    progress, evaluated, refreshed = [], [], []

    def refresh(snapshot_dir: str, snapshot_step: int) -> RefreshPublishedAfterOnePoll:
        refreshed.append(snapshot_step)
        return RefreshPublishedAfterOnePoll(rebuild_index(  # pruning none, as the flow's task
            blocks_path, snapshot_dir, str(tmp_path / "embeddings"), str(tmp_path / "index"), snapshot_step, tiny_config,
            None, CPU, config.max_block_wordpieces,
        ))

    hooks = PretrainHooks(progress.append, lambda step, which, e: evaluated.append((step, which, e["examples"])), refresh)
    with caplog.at_level(logging.WARNING, logger="realm.model.training.pretrain_index"):
        result = trainer.run(hooks, _roots(tmp_path))

    assert refreshed == [2, 4, 5]
    assert result.refreshes == [
        {"path": str(tmp_path / "index" / "2"), "swapped_at_step": 4, "staleness_steps": 2}
    ]
    assert [record.getMessage().split(" s ")[0].rsplit(" ", 1)[0] for record in caplog.records] == ["step 4: waited"]
    assert [(m["step"], m["index_snapshot_step"]) for m in progress] == [(2, 0), (4, 0), (5, 2)]
    # 14 examples with a salient span, 2 held out: 5 steps of 2 drew 10 of the 12 training
    # examples, so 2 are left of the 3 asked for.
    assert evaluated == [(3, HELD_OUT, 2), (5, HELD_OUT, 2), (5, NEVER_TRAINED_ON, 2)]
    assert (result.step, result.checkpoint, result.index) == (
        5, str(tmp_path / "checkpoints" / "5"), str(tmp_path / "index" / "5")
    )
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["3", "5"]


class RefreshInAThread:
    """`rebuild_index` in a background thread, as the flow's task runner runs its refresh task:
    when it ends depends on the machine, not on the step."""

    def __init__(self, root: Path, blocks_path: str, snapshot_dir: str, snapshot_step: int, model_config, config):
        self.published: dict = {}
        self.thread = threading.Thread(target=lambda: self.published.update(path=rebuild_index(
            blocks_path, snapshot_dir, str(root / "embeddings"), str(root / "index"), snapshot_step, model_config,
            None, CPU, config.max_block_wordpieces,
        )))
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> dict:
        return dict(self.published)

    def wait(self) -> None:
        self.thread.join()


class StopAfter(Exception):
    """Raised by the progress hook: the run stops there, as a killed one would."""


REFRESHING = CONFIG.model_copy(update=dict(steps=6, refresh_every=2, checkpoint_every=1, log_every=1))


def _refreshing_run(corpus, root: Path, tiny_config, config=REFRESHING, stop_after: int | None = None):
    """Run (or resume) a pre-training run under `root` with its refreshes in a background
    thread; returns (losses by step, the run's result or None when stopped after `stop_after`)."""
    blocks_path, examples_path = corpus
    trainer = PretrainTrainer(blocks_path, examples_path, str(root / "checkpoints"), tiny_config, config, device=CPU)
    losses = {}

    def progress(metrics: dict) -> None:
        # A step is reported before its checkpoint is published: stopping at the report of the
        # step after `stop_after` leaves that one's checkpoint the newest, as a kill there would.
        if stop_after is not None and metrics["step"] > stop_after:
            raise StopAfter
        losses[metrics["step"]] = (metrics["loss"], metrics["index_snapshot_step"])

    def refresh(snapshot_dir: str, snapshot_step: int) -> RefreshInAThread:
        return RefreshInAThread(root, blocks_path, snapshot_dir, snapshot_step, tiny_config, config)

    hooks = PretrainHooks(progress, lambda step, which, evaluation: None, refresh)
    try:
        result = trainer.run(hooks, _roots(root))
    except StopAfter:
        result = None
    return losses, result


def test_runs_with_asynchronous_refreshes_repeat_their_losses_and_so_does_a_resumed_one(corpus, tmp_path, tiny_config):
    """Refresh every 2 steps, each swapped in 2 steps after its snapshot. The second run is
    stopped after step 3, its checkpoint taken while the refresh of step 2 was in flight, and
    resumed: it restarts that refresh from its snapshot and swaps it in at step 4 too."""
    straight, result = _refreshing_run(corpus, tmp_path / "straight", tiny_config)
    again, _ = _refreshing_run(corpus, tmp_path / "again", tiny_config)
    assert again == straight
    assert [index for _, index in straight.values()] == [0, 0, 0, 0, 2, 2]

    stopped, _ = _refreshing_run(corpus, tmp_path / "stopped", tiny_config, stop_after=3)
    assert sorted(stopped) == [1, 2, 3]
    resumed, resumed_result = _refreshing_run(corpus, tmp_path / "stopped", tiny_config)
    assert {**stopped, **resumed} == straight
    assert [{k: r[k] for k in ("swapped_at_step", "staleness_steps")} for r in resumed_result.refreshes] == [
        {"swapped_at_step": 4, "staleness_steps": 2}
    ]
    assert resumed_result.evaluations == result.evaluations


def test_a_resumed_run_whose_refresh_snapshot_is_gone_warns_and_trains_on(corpus, tmp_path, tiny_config, caplog):
    _refreshing_run(corpus, tmp_path, tiny_config, stop_after=3)
    shutil.rmtree(tmp_path / "snapshots" / "2")
    with caplog.at_level(logging.WARNING, logger="realm.model.training.pretrain_index"):
        resumed, result = _refreshing_run(corpus, tmp_path, tiny_config)
    assert [record.getMessage() for record in caplog.records] == [
        f"{tmp_path / 'snapshots' / '2'}: no manifest.json; not a published step; "
        "the refresh of step 2 in flight at the checkpoint is dropped"
    ]
    # The refresh of step 4 starts on schedule and is swapped in at 6, after the last step.
    assert [index for _, index in resumed.values()] == [0, 0, 0] and result.refreshes == []


def test_snapshots_are_pruned_like_checkpoints_but_never_one_in_use_or_in_flight(corpus, tmp_path, tiny_config):
    """keep_checkpoints 1, refresh every 2 of 9 steps, a checkpoint every 3: snapshots are
    taken at 0 (the first index), 2, 4, 6, 8 and 9 (the final index)."""
    config = REFRESHING.model_copy(update=dict(steps=9, checkpoint_every=3, keep_checkpoints=1))
    _, result = _refreshing_run(corpus, tmp_path, tiny_config, config)

    # Checkpoint 9 trained against index/6 with the refresh of step 8 in flight; index/9 is
    # the newest. Each index uses the snapshot that embedded it.
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["9"]
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == ["6", "9"]
    assert sorted(p.name for p in (tmp_path / "embeddings").iterdir()) == ["9"]
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == ["6", "8", "9"]
    assert result.index == str(tmp_path / "index" / "9")


def test_rebuild_index_publishes_the_snapshot_embeddings_while_training_runs(corpus, tmp_path, tiny_config, tokenizer):
    blocks_path, _ = corpus
    trainer = _trainer(corpus, tmp_path, tiny_config)
    trainer.train_step()
    snapshot = trainer.snapshot_doc_tower(str(tmp_path / "snapshots"))  # named by the step: 1
    assert snapshot == str(tmp_path / "snapshots" / "1")
    refreshed = {}
    thread = threading.Thread(
        target=lambda: refreshed.update(path=rebuild_index(
            blocks_path, snapshot, str(tmp_path / "embeddings"), str(tmp_path / "index"), 1, tiny_config,
            CONFIG.keep_checkpoints, CPU, CONFIG.max_block_wordpieces,
        ))
    )
    thread.start()
    trainer.train_step()  # the main thread trains meanwhile (and changes the live doc tower)
    thread.join()

    assert read_manifest(refreshed["path"])["checkpoint_step"] == 1
    assert latest_verified(tmp_path / "embeddings") == tmp_path / "embeddings" / "1"  # published with its manifest
    index = MipsIndex.load(refreshed["path"])
    batches = pq.ParquetFile(blocks_path).iter_batches()
    blocks = pa.Table.from_batches([fit_block_batch(b, CONFIG.max_block_wordpieces) for b in batches])
    embed_blocks(Embedder.from_pretrained(snapshot), tokenizer, blocks, str(tmp_path / "oracle"), 1, device=CPU)
    block_ids, vectors = load_embeddings(str(tmp_path / "oracle"))
    assert np.array_equal(index.block_ids, block_ids)
    np.testing.assert_array_equal(np.asarray(index.vectors), vectors)


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

