"""Publishing step directories: the manifest written last, checked by readers, and retention."""

import hashlib
import json
import logging
import shutil
from pathlib import Path

from realm.model.publish import latest_verified, publish, staging_dir, step_damage


def _publish(root: Path, step: int, keep: int | None = None, uses=(), content: bytes = b"step") -> Path:
    staging = staging_dir(root, step)
    (staging / "data.bin").write_bytes(content)
    return publish(staging, root, step, keep, uses=uses)


def _steps(root: Path) -> list[str]:
    return sorted((p.name for p in root.iterdir()), key=int)


def test_the_manifest_lists_every_file_with_its_size_and_sha256(tmp_path):
    staging = staging_dir(tmp_path, 3)
    (staging / "a.bin").write_bytes(b"abc")
    (staging / "sub").mkdir()
    (staging / "sub" / "b.bin").write_bytes(b"")
    path = publish(staging, tmp_path, 3, metadata={"count": 7})
    assert json.loads((path / "manifest.json").read_text()) == {
        "count": 7,
        "files": {
            "a.bin": {"size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
            "sub/b.bin": {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()},
        },
        "uses": [],
    }
    assert latest_verified(tmp_path) == path


def test_retention_keeps_the_newest_steps(tmp_path):
    for step in (1, 2, 3, 4, 5):
        _publish(tmp_path, step, keep=2)
    assert _steps(tmp_path) == ["4", "5"]


def test_a_step_another_manifest_uses_outlives_retention_even_after_the_run_moves(tmp_path):
    run = tmp_path / "run"
    _publish(run / "index", 1)
    _publish(run / "checkpoints" / "pretrain", 7, uses=[run / "index" / "1"])
    moved = tmp_path / "moved"
    shutil.move(run, moved)  # the manifest names what it uses relative to itself
    for step in (2, 3):
        _publish(moved / "index", step, keep=1)
    assert _steps(moved / "index") == ["1", "3"]


def test_retention_goes_on_past_a_manifest_of_another_shape(tmp_path):
    stray = tmp_path / "checkpoints" / "pretrain" / "7"
    stray.mkdir(parents=True)
    for shape in ([], None, {"uses": "index/1"}):  # none of them names a step it uses
        (stray / "manifest.json").write_text(json.dumps(shape))
        for step in (1, 2):
            _publish(tmp_path / "index", step, keep=1)
        assert _steps(tmp_path / "index") == ["2"]


def test_a_resumed_run_keeps_two_good_steps_beside_the_damaged_newer_one_it_fell_back_from(tmp_path):
    for step in (2, 4, 6):
        _publish(tmp_path, step, keep=2)
    (tmp_path / "6" / "data.bin").write_bytes(b"")  # damaged: the run resumes from step 4
    assert latest_verified(tmp_path) == tmp_path / "4"
    _publish(tmp_path, 5, keep=2)  # only steps up to 5 count, so 4 stays
    assert _steps(tmp_path) == ["4", "5", "6"]
    _publish(tmp_path, 6, keep=2, content=b"redone")
    assert _steps(tmp_path) == ["5", "6"] and latest_verified(tmp_path) == tmp_path / "6"


def test_step_damage_names_the_file_and_sizes_alone_pass_a_flipped_byte(tmp_path):
    path = _publish(tmp_path, 1, content=b"step")
    assert step_damage(path) is None
    (path / "data.bin").write_bytes(b"stop")  # the same size, another hash
    assert "sha256 does not match" in str(step_damage(path))
    assert step_damage(path, contents=False) is None
    (path / "data.bin").write_bytes(b"st")
    assert str(step_damage(path, contents=False)) == f"{path / 'data.bin'}: size 2, manifest.json says 4"


def test_a_step_without_a_manifest_is_whole_only_when_it_holds_the_legacy_marker(tmp_path):
    legacy = tmp_path / "3"
    legacy.mkdir()
    (legacy / "state.pt").write_bytes(b"written last")
    assert step_damage(legacy, legacy_marker="state.pt") is None
    assert "no manifest.json" in str(step_damage(legacy))
    assert step_damage(legacy, legacy_marker="other.pt") is not None


def test_latest_verified_skips_an_unpublished_step_silently_and_warns_of_a_damaged_one(tmp_path, caplog):
    _publish(tmp_path, 1)
    (tmp_path / "2").mkdir()  # no manifest: never published
    damaged = _publish(tmp_path, 3)
    (damaged / "data.bin").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="realm.model.publish"):
        assert latest_verified(tmp_path) == tmp_path / "1"
    assert [record.getMessage() for record in caplog.records] == [
        f"{damaged / 'data.bin'}: size 0, manifest.json says 4; falling back to an older step"
    ]
    assert latest_verified(tmp_path, legacy_marker="data.bin") == tmp_path / "1"
    (tmp_path / "2" / "data.bin").write_bytes(b"legacy")
    assert latest_verified(tmp_path, legacy_marker="data.bin") == tmp_path / "2"
