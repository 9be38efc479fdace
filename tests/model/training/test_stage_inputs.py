import json

import pytest

from realm.model.publish import MANIFEST_FILE
from realm.model.training.stage_inputs import changed_inputs, content_digest, json_digest, stage_inputs
from realm.model.training.stage_settings import IctConfig, PretrainConfig
from realm.schemas.rows_digest import ROWS_KEY, rows_digest, rows_entry


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


def test_a_prepared_artifact_that_records_its_rows_is_digested_by_its_rows_not_its_files(tmp_path):
    rows = {"prepare": rows_entry(2, 12345)}
    for name, files in (("a", {"prepare-00000-of-00001.parquet": {"size": 9, "sha256": "ab"}}),
                        ("b", {f"prepare-0000{n}-of-00002.parquet": {"size": 5, "sha256": f"c{n}"} for n in range(2)})):
        (tmp_path / name).mkdir()
        (tmp_path / name / MANIFEST_FILE).write_text(json.dumps({"files": files, ROWS_KEY: rows}))
    assert content_digest(tmp_path / "a") == content_digest(tmp_path / "b") == rows_digest(rows)


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


def test_a_removed_setting_recorded_at_its_old_default_is_no_change_and_any_other_value_is():
    """A stage an older realm checkpointed with a removed lever off resumes; one it trained with the lever on does not."""
    current = stage_inputs(PretrainConfig(), 0, {})
    off = {**current, "settings": {**current["settings"], "copy_from_block": False}}
    assert changed_inputs(off, current, PretrainConfig) == []
    on = {**current, "settings": {**current["settings"], "copy_from_block": True}}
    assert changed_inputs(on, current, PretrainConfig) == ["copy_from_block True -> None"]


def test_a_setting_recorded_under_its_old_name_counts_under_its_new_one():
    current = stage_inputs(IctConfig(), 0, {})
    settings = dict(current["settings"])
    settings["tower_pooling"] = settings.pop("retrieval_pooling")
    assert changed_inputs({**current, "settings": settings}, current, IctConfig) == []


def test_cached_doc_embeddings_recorded_by_an_older_realm_resumes_as_the_doc_tower_setting_it_meant():
    for cached, doc_tower in ((True, "frozen"), (False, "whole")):
        current = stage_inputs(PretrainConfig(doc_tower=doc_tower), 0, {})
        settings = dict(current["settings"])
        del settings["doc_tower"]
        assert changed_inputs({**current, "settings": {**settings, "cached_doc_embeddings": cached}}, current, PretrainConfig) == []
    whole = stage_inputs(PretrainConfig(doc_tower="whole"), 0, {})
    old = {k: v for k, v in whole["settings"].items() if k != "doc_tower"}
    current = stage_inputs(PretrainConfig(doc_tower="projection"), 0, {})
    assert changed_inputs({**whole, "settings": {**old, "cached_doc_embeddings": False}}, current, PretrainConfig) == [
        "doc_tower whole -> projection"
    ]
