import json
import math
import shutil
import threading

import pytest

from realm.flows.ict_warm_start import ict_warm_start
from realm.flows.realm_pretrain import realm_pretrain
from realm.model.analysis.comparison import compare
from realm.model.index.mips import MipsIndex, latest_published
from realm.model.publish import record_files
from realm.model.training.train_pretrain import PretrainTrainer
from realm.schemas import MASKED_SPAN_OUTCOMES, read_table, write_table
from tests.flows.tiny_run import tiny_params


class InjectedCrash(RuntimeError):
    pass


def test_killed_pretraining_resumes_from_its_last_checkpoint(run_root, monkeypatch):
    params = tiny_params(run_root)
    ict_warm_start(params.run, params.ict)
    original_step = PretrainTrainer.train_step

    def crash_at_step_6(self):
        if self.step == 5:
            raise InjectedCrash("killed at step 6")
        return original_step(self)

    monkeypatch.setattr(PretrainTrainer, "train_step", crash_at_step_6)
    with pytest.raises(InjectedCrash):
        realm_pretrain(params.run, params.pretrain)
    monkeypatch.setattr(PretrainTrainer, "train_step", original_step)
    metrics = run_root / "reports" / "pretrain_metrics.jsonl"
    assert logged(metrics, "step", "loss") == [1, 2, 3, 4, 5]
    result = realm_pretrain(params.run, params.pretrain)
    assert result["step"] == 6
    # Steps 1-5 ran before the crash, the checkpoint of step 4 the last; the resumed run did
    # 5 again and 6, and its curve holds each step once.
    assert logged(metrics, "step", "loss") == [1, 2, 3, 4, 5, 6]
    assert logged(metrics, "step", "accuracy_with_retrieval") == [6]  # held out, after the last step

    # Other settings set the checkpoints aside and start afresh: so does the curve.
    first_losses = logged(metrics, "loss", "loss")
    params.pretrain.learning_rate /= 2
    realm_pretrain(params.run, params.pretrain)
    assert logged(metrics, "step", "loss") == [1, 2, 3, 4, 5, 6]
    assert logged(metrics, "step", "accuracy_with_retrieval") == [6]
    assert list((run_root / "checkpoints").glob("pretrain.superseded-*"))
    assert logged(metrics, "loss", "loss")[1:] != first_losses[1:]  # step 1 ran before any update


def logged(metrics, field: str, kind: str) -> list:
    """`field` of every row of the metrics file that has `kind` (training steps: loss)."""
    return [row[field] for row in map(json.loads, metrics.read_text().splitlines()) if kind in row]


def test_readers_only_ever_open_complete_indexes_while_refreshes_publish(run_root):
    params = tiny_params(run_root)
    params.pretrain.refresh_every = 1
    ict_warm_start(params.run, params.ict)
    stop, failures, opened = threading.Event(), [], []

    def read_published_indexes():
        while not stop.is_set():
            path = latest_published(run_root / "index")
            if path is None:
                continue
            try:
                opened.append(MipsIndex.load(path).count)
            except FileNotFoundError:
                pass  # pruned (keep-last-N) between listing and opening: never half-written
            except Exception as error:  # noqa: BLE001 - any other failure is a torn read
                failures.append(repr(error))

    reader = threading.Thread(target=read_published_indexes, daemon=True)
    reader.start()
    try:
        result = realm_pretrain(params.run, params.pretrain)
    finally:
        stop.set()
        reader.join()
    assert failures == []
    assert opened and set(opened) == {len(read_block_ids(run_root))}
    assert len(result["refreshes"]) >= 2
    assert all(r["staleness_steps"] >= 0 for r in result["refreshes"])


def read_block_ids(run_root):
    from realm.schemas import BLOCKS

    return read_table(str(run_root / "blocks"), BLOCKS, columns=["block_id"])["block_id"].to_pylist()


def test_a_frozen_doc_tower_trains_against_its_first_index_without_refreshing(run_root):
    params = tiny_params(run_root)
    params.pretrain = params.pretrain.model_copy(
        update={"refresh_every": 1, "doc_tower": "frozen", "untrained_eval_examples": 5}
    )
    ict_warm_start(params.run, params.ict)
    result = realm_pretrain(params.run, params.pretrain)
    assert result["step"] == 6 and result["refreshes"] == []
    assert result["untrained"]["examples"] == 5 and 0.0 <= result["untrained"]["paired_p_value"] <= 1.0
    assert [p.name for p in (run_root / "index").iterdir()] == ["0"] and result["index"].endswith("/index/0")


def test_with_the_projection_learning_each_refresh_task_reprojects_the_pooled_states(run_root):
    """doc_tower "projection": the refresh tasks publish indexes of the pooled states computed
    once; a resumed run finds the same states and repeats the uninterrupted run's losses."""
    params = tiny_params(run_root)
    params.pretrain = params.pretrain.model_copy(update={"doc_tower": "projection"})
    ict_warm_start(params.run, params.ict)
    result = realm_pretrain(params.run, params.pretrain)
    assert [(r["swapped_at_step"], r["staleness_steps"]) for r in result["refreshes"]] == [(4, 2)]
    (states,) = (run_root / "pooled_states").iterdir()
    for step in (2, 6):
        lineage = json.loads((run_root / "index" / str(step) / "manifest.json").read_text())["lineage"]
        assert lineage["pooled_states"] == str(states / "0")
    losses = logged(run_root / "reports" / "pretrain_metrics.jsonl", "loss", "loss")
    shutil.rmtree(run_root / "checkpoints" / "pretrain" / "6")
    shutil.rmtree(run_root / "checkpoints" / "pretrain" / "4")
    assert realm_pretrain(params.run, params.pretrain)["step"] == 6  # from step 2's checkpoint
    assert logged(run_root / "reports" / "pretrain_metrics.jsonl", "loss", "loss") == losses
    assert [p.name for p in (run_root / "pooled_states").iterdir()] == [states.name]


def test_the_last_evaluation_is_written_example_by_example(run_root):
    params = tiny_params(run_root)
    params.pretrain = params.pretrain.model_copy(update={"untrained_eval_examples": 5})
    # what an earlier pre-training of this root evaluated and this one does not: not left behind
    write_table(str(run_root / "masked_spans" / "stale.parquet"), [], MASKED_SPAN_OUTCOMES)
    record_files(run_root / "masked_spans", ["stale.parquet"])
    ict_warm_start(params.run, params.ict)
    result = realm_pretrain(params.run, params.pretrain)

    assert sorted(p.name for p in (run_root / "masked_spans").iterdir()) == [
        "held_out.parquet", "manifest.json", "never_trained_on.parquet",
    ]
    for name, summary in (("held_out", result), ("never_trained_on", result["untrained"])):
        outcomes = read_table(str(run_root / "masked_spans" / f"{name}.parquet"), MASKED_SPAN_OUTCOMES).to_pylist()
        assert len(outcomes) == len({o["example_id"] for o in outcomes}) == summary["examples"]
        assert {o["step"] for o in outcomes} == {6}
        assert sum(o["right_with_retrieval"] for o in outcomes) == round(summary["examples"] * summary["accuracy_with_retrieval"])
        assert sum(o["right_null_only"] for o in outcomes) == round(summary["examples"] * summary["accuracy_null_only"])
        assert sum(o["right_with_retrieval"] and not o["right_null_only"] for o in outcomes) == summary["right_only_with_retrieval"]
        assert sum(o["span_in_candidates"] for o in outcomes) == round(summary["examples"] * summary["span_in_candidates"])
        assert sum(o["right_reading_holder"] and o["span_in_candidates"] for o in outcomes) == (
            summary["span_in_candidates_right_reading_that_block"]
        )
        for o in outcomes:  # the candidates read, the null document first, agree with the example's outcome
            holding, right = o["candidates_holding_span"], o["candidates_right"]
            assert o["candidate_block_ids"][0] == -1 and len(o["retrieval_log_probs"]) == len(holding) == len(right)
            assert sum(math.exp(lp) for lp in o["retrieval_log_probs"]) == pytest.approx(1.0, abs=1e-4)
            assert (o["right_null_only"], o["span_in_candidates"]) == (right[0], any(holding))
            assert o["right_reading_holder"] == any(h and r for h, r in zip(holding, right))
    rows = compare([str(run_root)])["masked_spans"]
    assert [(row["examples"], row["n"]) for row in rows] == [("held_out", result["examples"]), ("never_trained_on", 5)]
    assert rows[1]["copying"]["span_in_candidates"] == sum(o["span_in_candidates"] for o in outcomes)


def test_two_runs_with_asynchronous_refreshes_give_the_same_loss_curve(prepared_corpus, tmp_path):
    """The tiny preset (doc tower trained, candidates re-embedded) with a refresh task every
    2 of 6 steps: each refresh's index goes into use 2 steps after its snapshot however long
    the task took, so a second run with the same seed repeats every loss."""
    curves = []
    for name in ("first", "second"):
        root = tmp_path / name
        shutil.copytree(prepared_corpus, root)
        params = tiny_params(root)
        assert (params.pretrain.refresh_every, params.pretrain.doc_tower) == (2, "whole")
        result = realm_pretrain(params.run, params.pretrain)
        assert [(r["swapped_at_step"], r["staleness_steps"]) for r in result["refreshes"]] == [(4, 2)]
        rows = [json.loads(line) for line in (root / "reports" / "pretrain_metrics.jsonl").read_text().splitlines()]
        curves.append([(row["step"], row["loss"], row["index_snapshot_step"]) for row in rows if "loss" in row])
    assert [index for _, _, index in curves[0]] == [0, 0, 0, 0, 2, 2]
    assert curves[1] == curves[0]
