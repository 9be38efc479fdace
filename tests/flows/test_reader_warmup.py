"""The reader warm-up's flow: SQuAD questions read over their paragraphs, on the tiny trained run."""

import hashlib
import json
import math
import shutil

import pytest

from realm.flows import reader_warmup as warmup_flow
from realm.flows.caching import CACHE_DIR
from realm.flows.reader_warmup import SQUAD_FILE, drawn_squad_questions, reader_warmup
from tests.flows.tiny_run import tiny_params


def test_the_shipped_squad_file_is_the_official_one_read_whole():
    """10,570 questions, 37 of them asking a question another one asks in the same words."""
    drawn = drawn_squad_questions(20_000, seed=0)
    assert len(drawn) == 10_533 and len({q.id for q in drawn}) == 10_533
    assert drawn_squad_questions(5, seed=0) == drawn[:5]


def _cache_entries(run, task: str) -> set[str]:
    return {p.name for p in (run / CACHE_DIR).glob(f"{task}-*.json")}


@pytest.mark.slow
def test_the_squad_warm_up_trains_resumes_and_runs_again_when_its_data_change(trained_tiny_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(trained_tiny_run, run)
    params = tiny_params(run)
    metrics = run / "reports" / "warmup_metrics.jsonl"
    first = reader_warmup(params.run, params.warmup)  # the chain's warm-up, a cache hit
    logged = metrics.read_text().splitlines()
    assert first["step"] == math.ceil(first["training_questions"] / 2) > 0
    assert first["training_questions"] + first["validation_questions"] <= params.warmup.questions

    # Stopped after its second-to-last checkpoint: it resumes there and ends as it did.
    shutil.rmtree(run / "checkpoints" / "warmup" / str(first["step"]))
    for name in _cache_entries(run, "realm-train-reader-warmup"):
        (run / CACHE_DIR / name).unlink()
    resumed = reader_warmup(params.run, params.warmup)
    assert {key: resumed[key] for key in ("step", "final_loss", "best_validation_em")} == {
        key: first[key] for key in ("step", "final_loss", "best_validation_em")}
    last = json.loads(logged[-1])
    assert json.loads(metrics.read_text().splitlines()[-1])["loss"] == last["loss"]

    # The same questions in a file with other bytes: both stages key on the file, so both run again.
    prepared, trained = _cache_entries(run, "realm-prepare-squad-passages"), _cache_entries(run, "realm-train-reader-warmup")
    edited = tmp_path / "dev-v1.1.json"
    edited.write_text(json.dumps(json.loads(SQUAD_FILE.read_text(encoding="utf-8")), indent=1), encoding="utf-8")
    monkeypatch.setattr(warmup_flow, "SQUAD_FILE", edited)
    monkeypatch.setattr(warmup_flow, "SQUAD_SHA256", hashlib.sha256(edited.read_bytes()).hexdigest())
    again = reader_warmup(params.run, params.warmup)
    assert _cache_entries(run, "realm-prepare-squad-passages") > prepared
    assert _cache_entries(run, "realm-train-reader-warmup") > trained
    assert again["step"] == first["step"] and again["checkpoint"] == resumed["checkpoint"]
