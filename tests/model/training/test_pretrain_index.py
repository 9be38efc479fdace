import logging
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from realm.model.index.embed_corpus import embed_blocks, load_embeddings
from realm.model.index.mips import MipsIndex
from realm.model.publish import latest_verified, read_manifest
from realm.model.index.rebuild import fit_block_batch, rebuild_index
from realm.model.networks.retriever import Embedder
from realm.model.training.train_pretrain import HELD_OUT, NEVER_TRAINED_ON, PretrainHooks, PretrainTrainer
from tests.model.corpus_fixture import CORPUS
from tests.model.training.pretrain_fixture import CPU, CONFIG, trainer as _trainer, roots as _roots, run as _run


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


def test_no_refresh_starts_before_the_doc_tower_has_trained_refresh_every_steps(corpus, tmp_path, tiny_config):
    """Towers frozen for 2 steps, a refresh every 2: the first refresh snapshots the doc tower
    after 2 steps of training (step 4), and the final index is refreshed from step 5."""
    blocks_path, examples_path = corpus
    config = CONFIG.model_copy(update=dict(steps=5, refresh_every=2, retriever_frozen_steps=2, checkpoint_every=5))
    trainer = PretrainTrainer(blocks_path, examples_path, str(tmp_path / "checkpoints"), tiny_config, config, device=CPU)
    refreshed = []

    def refresh(snapshot_dir: str, snapshot_step: int) -> RefreshPublishedAfterOnePoll:
        refreshed.append(snapshot_step)
        return RefreshPublishedAfterOnePoll(rebuild_index(
            blocks_path, snapshot_dir, str(tmp_path / "embeddings"), str(tmp_path / "index"), snapshot_step, tiny_config,
            None, CPU, config.max_block_wordpieces,
        ))

    trainer.run(PretrainHooks(lambda metrics: None, lambda step, which, e: None, refresh), _roots(tmp_path))
    assert refreshed == [4, 5]


def test_a_stage_of_0_steps_evaluates_nothing_and_ends_on_the_index_it_started_with(corpus, tmp_path, tiny_config):
    blocks_path, examples_path = corpus
    config = CONFIG.model_copy(update=dict(steps=0, untrained_eval_examples=3))
    trainer = PretrainTrainer(blocks_path, examples_path, str(tmp_path / "checkpoints"), tiny_config, config, device=CPU)
    evaluated = []
    hooks = PretrainHooks(lambda metrics: None, lambda step, which, e: evaluated.append(which), lambda *a: None)
    result = trainer.run(hooks, _roots(tmp_path))
    assert (evaluated, result.evaluations, result.step, result.index) == ([], {}, 0, str(tmp_path / "index" / "0"))


def test_before_the_towers_train_candidates_take_the_index_vectors_as_in_cached_mode(corpus, tmp_path, tiny_config):
    """The index holds the untrained doc tower's vectors, so the frozen steps of a full run
    train exactly as a cached run's; they part once the doc tower trains."""
    blocks_path, examples_path = corpus
    losses = {}
    for cached in (False, True):
        config = CONFIG.model_copy(update=dict(steps=3, retriever_frozen_steps=2, doc_tower="frozen" if cached else "whole"))
        trainer = PretrainTrainer(
            blocks_path, examples_path, str(tmp_path / str(cached) / "checkpoints"), tiny_config, config, device=CPU
        )
        trainer.attach_index(_roots(tmp_path / str(cached)))
        losses[cached] = [trainer.train_step()["loss"] for _ in range(3)]
    assert losses[False][:2] == losses[True][:2]
    assert losses[False][2] != losses[True][2]


def test_with_only_the_projection_learning_refreshes_reproject_the_bert_states_computed_once(corpus, tmp_path, tiny_config):
    """doc_tower "projection": the doc tower's BERT never changes, its projection does, and each
    refresh publishes the pooled states projected by the snapshot's projection."""
    from realm.model.index.pooled_states import PooledStates, reproject_index

    blocks_path, examples_path = corpus
    config = CONFIG.model_copy(update=dict(steps=4, refresh_every=2, checkpoint_every=4, doc_tower="projection"))
    trainer = PretrainTrainer(blocks_path, examples_path, str(tmp_path / "checkpoints"), tiny_config, config, device=CPU)
    bert = {k: v.clone() for k, v in trainer.retriever.doc_embedder.bert.state_dict().items()}
    projection = trainer.retriever.doc_embedder.projection.weight.clone()
    refreshed = []

    def refresh(snapshot_dir: str, snapshot_step: int) -> RefreshPublishedAfterOnePoll:
        refreshed.append(snapshot_step)
        return RefreshPublishedAfterOnePoll(reproject_index(
            str(tmp_path / "pooled_states"), snapshot_dir, str(tmp_path / "embeddings"), str(tmp_path / "index"),
            snapshot_step, None, config.max_block_wordpieces,
        ))

    result = trainer.run(PretrainHooks(lambda m: None, lambda step, which, e: None, refresh), _roots(tmp_path))
    tower = trainer.retriever.doc_embedder
    assert refreshed == [2, 4] and result.index == str(tmp_path / "index" / "4")
    assert all(torch.equal(v, tower.bert.state_dict()[k]) for k, v in bert.items())
    assert not torch.equal(projection, tower.projection.weight)
    (states_dir,) = (tmp_path / "pooled_states").iterdir()
    states = PooledStates.load(states_dir / "0")
    with torch.no_grad():
        expected = tower.project(torch.from_numpy(states.states)).numpy()
    np.testing.assert_allclose(MipsIndex.load(result.index).lookup(states.block_ids), expected, rtol=1e-5, atol=1e-6)


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
