import json

import pytest

from realm.model.publish import MANIFEST_FILE
from realm.model.training.stage_inputs import changed_inputs, content_digest, json_digest, stage_inputs
from realm.model.training.stage_settings import IctConfig


def test_content_is_digested_not_the_path_a_published_step_by_its_manifest(tmp_path):
    (tmp_path / "a.jsonl").write_text("q1\n")
    (tmp_path / "b.jsonl").write_text("q1\n")
    assert content_digest(tmp_path / "a.jsonl") == content_digest(tmp_path / "b.jsonl")
    (tmp_path / "b.jsonl").write_text("q2\n")
    assert content_digest(tmp_path / "a.jsonl") != content_digest(tmp_path / "b.jsonl")

    step = tmp_path / "index" / "3"
    step.mkdir(parents=True)
    files = {"index.faiss": {"size": 4, "sha256": "ab"}}
    (step / MANIFEST_FILE).write_text(json.dumps({"files": files, "uses": ["../../x"]}))
    assert content_digest(step) == json_digest(files)
    legacy = tmp_path / "index" / "2"  # published before sizes were recorded: digests alone
    legacy.mkdir()
    (legacy / MANIFEST_FILE).write_text(json.dumps({"sha256": {"index.faiss": "ab"}}))
    assert content_digest(legacy) == json_digest({"index.faiss": "ab"})
    with pytest.raises(FileNotFoundError, match="gone: not found"):
        content_digest(tmp_path / "gone")


def test_changed_inputs_name_the_data_and_the_settings_with_their_values(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "part-0.parquet").write_bytes(b"rows")
    before = stage_inputs(IctConfig(), 0, {"examples": tmp_path / "examples"})
    assert "steps" not in before["settings"] and "log_every" not in before["settings"]
    assert changed_inputs(before, stage_inputs(IctConfig(steps=5, log_every=1), 0, {"examples": tmp_path / "examples"})) == []

    (tmp_path / "examples" / "part-0.parquet").write_bytes(b"other rows")
    after = stage_inputs(IctConfig(learning_rate=2e-4), 1, {"examples": tmp_path / "examples"}, {"questions": "q"})
    assert changed_inputs(before, after) == ["examples", "questions", "learning_rate 0.0001 -> 0.0002", "seed 0 -> 1"]


def test_a_setting_added_since_counts_as_its_default_where_the_record_lacks_it(tmp_path):
    recorded = stage_inputs(IctConfig(), 0, {})
    learning_rate = recorded["settings"].pop("learning_rate")  # as a realm from before the setting wrote it
    assert changed_inputs(recorded, stage_inputs(IctConfig(), 0, {}), IctConfig) == []
    changed = stage_inputs(IctConfig(learning_rate=2 * learning_rate), 0, {})
    assert changed_inputs(recorded, changed, IctConfig) == [f"learning_rate {learning_rate} -> {2 * learning_rate}"]
    assert changed_inputs(recorded, stage_inputs(IctConfig(), 0, {})) == [f"learning_rate None -> {learning_rate}"]
