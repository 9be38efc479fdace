"""A manifest that parses but lists no files, or a file without its sha256, or rows without their
count and sum, vouches for nothing."""

import hashlib
import json

import pytest

from realm.schemas.manifest import IntegrityError, verify_step


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        (None, "not a manifest (no object of files)"),
        ([], "not a manifest (no object of files)"),
        ({}, "not a manifest (no object of files)"),
        ({"files": ["data.bin"]}, "not a manifest (no object of files)"),
        ({"files": {"data.bin": 4}}, "'data.bin' is listed without its sha256"),
        ({"files": {"data.bin": {"size": 4}}}, "'data.bin' is listed without its sha256"),
        ({"sha256": {"data.bin": None}}, "'data.bin' is listed without its sha256"),
        ({"files": {"data.bin": {"sha256": "ab"}}, "rows": {"part": {"count": 1}}},
         "'rows' is not a row count and hash sum per file prefix"),
        ({"files": {"data.bin": {"sha256": "ab"}}, "rows": {"part": {"count": 1, "sum": "xyz"}}},
         "'rows' is not a row count and hash sum per file prefix"),
    ],
)
def test_a_manifest_that_lists_no_file_with_its_sha256_is_an_integrity_error(tmp_path, manifest, reason):
    (tmp_path / "data.bin").write_bytes(b"step")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError) as raised:
        verify_step(tmp_path)
    assert str(raised.value) == f"{tmp_path / 'manifest.json'}: {reason}"


def test_a_legacy_index_manifest_of_digests_alone_still_verifies(tmp_path):
    (tmp_path / "data.bin").write_bytes(b"step")
    digest = hashlib.sha256(b"step").hexdigest()
    (tmp_path / "manifest.json").write_text(json.dumps({"sha256": {"data.bin": digest}}))
    assert verify_step(tmp_path) == {"sha256": {"data.bin": digest}}
    (tmp_path / "data.bin").write_bytes(b"stop")
    with pytest.raises(IntegrityError, match="sha256 does not match"):
        verify_step(tmp_path)
