"""A stage run on its own (here chunk) swaps its output in only once it has succeeded: a run
that fails leaves the previous output byte for byte; one that succeeds replaces the stage's
artifact and its own dead letters, and leaves other stages' dead letters where they were."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from realm.pipelines import chunk
from realm.schemas import BLOCKS, DEAD_LETTER, DOCUMENTS, read_table, write_table
from realm.schemas.manifest import MANIFEST_FILE, verify_step
from tests.pipelines.run_files import file_bytes

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
# An earlier stage's dead letter, kept in the shared dead_letter/ directory.
READ_SHARD = "dead_letter/read-00000-of-00001.parquet"


def documents(directory, rows):
    """A documents/ artifact of (doc_id, title, text) rows."""
    write_table(str(directory / "part-0.parquet"), [{"doc_id": d, "source": "documents", "title": t, "text": x, "url": None, "date": None}
                            for d, t, x in rows], DOCUMENTS)
    return str(directory)


def run_chunk(documents_path, output):
    return chunk.run(["--documents", documents_path, "--output", str(output), *IN_PROCESS])


@pytest.fixture
def chunked(tmp_path):
    """An output chunked from two documents (one without a body), beside an earlier stage's dead letter."""
    output = tmp_path / "run"
    write_table(str(output / READ_SHARD), [{"stage": "read", "record_key": "x.xml", "reason": "read_malformed_xml",
                                            "detail": None, "raw": None}], DEAD_LETTER)
    first = documents(tmp_path / "first", [("d:1", "Apollo 11", "Armstrong flew to the Moon."), ("d:2", "Empty", "")])
    run_chunk(first, output)
    return output


def test_a_stage_that_fails_leaves_its_previous_output_byte_for_byte(chunked, tmp_path):
    """A documents file with the wrong columns stops the pipeline half way (the user's error)."""
    before = file_bytes(chunked)
    (tmp_path / "bad").mkdir()
    pq.write_table(pa.table({"doc_id": ["d:3"], "body": ["no title, no text"]}), tmp_path / "bad" / "part-0.parquet")
    with pytest.raises(Exception, match="bad/part-0.parquet"):
        run_chunk(str(tmp_path / "bad"), chunked)
    assert file_bytes(chunked) == before  # no staging directory left either


def test_an_input_that_holds_no_parquet_file_stops_the_stage_before_its_output_changes(chunked, tmp_path):
    before = file_bytes(chunked)
    with pytest.raises(FileNotFoundError) as error:
        run_chunk(str(tmp_path / "typo"), chunked)
    assert str(error.value) == (
        f"--documents {tmp_path / 'typo'}: no file matches it (looked for {tmp_path / 'typo' / '*.parquet'}); {chunked} is unchanged"
    )
    assert file_bytes(chunked) == before


def test_a_stage_that_succeeds_replaces_its_artifact_and_its_own_dead_letters_only(chunked, tmp_path):
    read_shard = (chunked / READ_SHARD).read_bytes()
    assert read_table(str(chunked / "blocks"), BLOCKS)["title"].to_pylist() == ["Apollo 11"]
    assert sorted(read_table(str(chunked / "dead_letter"), DEAD_LETTER)["reason"].to_pylist()) == [
        "chunk_empty_body", "read_malformed_xml"]

    second = documents(tmp_path / "second", [("d:3", "Vostok 1", "Gagarin orbited the Earth.")])
    counts = run_chunk(second, chunked)

    assert counts["chunk"]["blocks"] == 1
    assert read_table(str(chunked / "blocks"), BLOCKS)["title"].to_pylist() == ["Vostok 1"]
    assert read_table(str(chunked / "dead_letter"), DEAD_LETTER)["reason"].to_pylist() == ["read_malformed_xml"]
    assert (chunked / READ_SHARD).read_bytes() == read_shard
    verify_step(chunked / "blocks")
    listed = verify_step(chunked / "dead_letter")["files"]
    assert listed and all(name.startswith("chunk-") for name in listed)  # the new shards; not the unlisted read one
    assert sorted(p.name for p in chunked.iterdir()) == ["blocks", "dead_letter", "summary"]
    assert (chunked / "blocks" / MANIFEST_FILE).is_file()


def test_a_stage_rewrites_the_dead_letter_manifest_aside_never_through_a_hard_linked_copy(chunked, tmp_path):
    manifest = chunked / "dead_letter" / MANIFEST_FILE
    linked = tmp_path / "copy-of-the-run-manifest.json"  # a run copied with hard links shares the file
    os.link(manifest, linked)
    before = linked.read_bytes()
    run_chunk(documents(tmp_path / "second", [("d:3", "Vostok 1", "Gagarin orbited the Earth.")]), chunked)
    assert linked.read_bytes() == before and manifest.read_bytes() != before
    verify_step(chunked / "dead_letter")
    assert not list((chunked / "dead_letter").glob("*.tmp-*"))
