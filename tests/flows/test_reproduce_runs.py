import json
import shutil
import time

import pytest

from realm.flows.reproduce_runs import StageTimer


def _recorded(path) -> dict:
    return json.loads(path.read_text())


def _wait_for_heartbeat(path, stage: str) -> float:
    """The seconds a running stage's heartbeat has written, once it has written some."""
    for _ in range(1000):
        seconds = _recorded(path).get(StageTimer.IN_PROGRESS, {}).get(stage, 0.0) if path.exists() else 0.0
        if seconds > 0:
            return seconds
        time.sleep(0.01)
    raise AssertionError(f"no heartbeat for {stage} in {path}")


def test_a_stage_killed_and_resumed_is_timed_over_both_attempts(tmp_path):
    path, killed = tmp_path / "stage_seconds.json", tmp_path / "as_the_kill_left_it.json"
    with StageTimer(path, heartbeat_seconds=0.01)("finetune_orqa"):
        done_before_kill = _wait_for_heartbeat(path, "finetune_orqa")
        shutil.copy(path, killed)  # the file as a SIGKILL now would leave it: no exit handler runs
    resumed = StageTimer(killed, heartbeat_seconds=0.01)
    assert resumed.total(["finetune_orqa"]) == 0.0  # not complete yet
    with resumed("finetune_orqa"):
        time.sleep(0.05)
    recorded = _recorded(killed)
    assert recorded["finetune_orqa"] >= done_before_kill + 0.05
    assert StageTimer.IN_PROGRESS not in recorded  # nothing left running
    assert StageTimer(killed).total(["finetune_orqa"]) == recorded["finetune_orqa"]


def test_a_failed_attempt_counts_and_a_completed_stage_is_not_timed_again(tmp_path):
    path = tmp_path / "stage_seconds.json"
    timer = StageTimer(path, heartbeat_seconds=60)
    with pytest.raises(RuntimeError), timer("pretrain_realm"):
        time.sleep(0.02)
        raise RuntimeError("out of memory")
    failed = _recorded(path)[StageTimer.IN_PROGRESS]["pretrain_realm"]
    assert failed >= 0.02 and "pretrain_realm" not in _recorded(path)
    with timer("pretrain_realm"):
        time.sleep(0.02)
    first = _recorded(path)["pretrain_realm"]
    assert first >= failed + 0.02
    with StageTimer(path)("pretrain_realm"):  # a later run: the stage is a cache hit
        time.sleep(0.02)
    assert _recorded(path) == {"pretrain_realm": first}


def test_a_file_from_before_attempts_were_summed_is_read_as_completed_stages(tmp_path):
    path = tmp_path / "stage_seconds.json"
    path.write_text(json.dumps({"prepare": 94.2, "finetune_bm25": 1466.5}))
    assert StageTimer(path).total(["prepare", "finetune_bm25", "finetune_orqa"]) == pytest.approx(1560.7)
