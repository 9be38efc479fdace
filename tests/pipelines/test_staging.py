"""A staged artifact's manifest records its rows beside its files: the same rows written in
other shards and another order are the same input to a stage, while their files differ; a
run's artifact that holds the staged rows already is left as it was; a stage run on its own
keeps the rows of the other stages' dead letters."""

import hashlib
import json

import apache_beam as beam
import pyarrow.parquet as pq

from realm.model.training.stage_inputs import content_digest
from realm.pipelines.artifacts import WriteArtifact
from realm.pipelines.staging import move_into_place, replace_shards, write_manifests
from realm.schemas import DEAD_LETTER, DOCUMENTS, read_table
from realm.schemas.manifest import MANIFEST_FILE, verify_step
from realm.schemas.rows_digest import ROWS_KEY, rows_entry_of
from tests.pipelines.run_files import file_bytes

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
DOCS = [
    {"doc_id": f"d:{n}", "source": "documents", "title": f"Title {n}", "text": f"Text {n}.", "url": None, "date": None}
    for n in range(7)
]


def written(staging, name, schema, rows, num_shards, file_prefix="part"):
    """`rows` written as `<staging>/<name>/` by WriteArtifact in `num_shards` files."""
    with beam.Pipeline(argv=IN_PROCESS) as pipeline:
        pipeline | beam.Create(rows) | WriteArtifact(str(staging), name, schema, file_prefix, num_shards)
    return staging / name


def staged(staging, name, schema, rows, num_shards, file_prefix="part"):
    """`written`, then given its manifest, as a pipeline's artifacts are before they move into the run."""
    directory = written(staging, name, schema, rows, num_shards, file_prefix)
    write_manifests(str(staging), [name])
    return directory


def test_the_same_rows_in_other_shards_are_the_same_content_and_other_rows_are_not(tmp_path):
    one = staged(tmp_path / "one", "documents", DOCUMENTS, DOCS, num_shards=1)
    three = staged(tmp_path / "three", "documents", DOCUMENTS, DOCS[::-1], num_shards=3)
    edited = staged(tmp_path / "edited", "documents", DOCUMENTS, [*DOCS[:-1], {**DOCS[-1], "text": "Other."}], 3)

    listed = {path: verify_step(path)["files"] for path in (one, three)}
    assert len(listed[one]) == 1 and len(listed[three]) == 3  # other bytes...
    assert content_digest(one) == content_digest(three)  # ...the same rows
    assert content_digest(edited) != content_digest(three)
    assert read_table(str(one), DOCUMENTS) == read_table(str(three), DOCUMENTS)  # read back in doc_id order
    manifest = json.loads((one / MANIFEST_FILE).read_text())
    assert manifest[ROWS_KEY] == {"part": rows_entry_of(DOCS, DOCUMENTS.names)}
    assert not list(one.glob("*.rows.json"))  # taken into the manifest


def dead_letter(stage, key):
    return {"stage": stage, "record_key": key, "reason": f"{stage}_bad", "detail": None, "raw": None}


def test_a_stage_replacing_its_dead_letters_keeps_the_other_stages_rows(tmp_path):
    run = staged(tmp_path, "dead_letter", DEAD_LETTER, [dead_letter("read", "a.xml")], 1, file_prefix="read").parent
    before = json.loads((run / "dead_letter" / MANIFEST_FILE).read_text())[ROWS_KEY]["read"]
    staging = tmp_path / "staging"  # a stage run on its own leaves its dead letters to replace_shards
    written(staging, "dead_letter", DEAD_LETTER, [dead_letter("chunk", "d:1"), dead_letter("chunk", "d:2")], 2, "chunk")

    replace_shards(str(staging), str(run), "dead_letter", "chunk")

    rows = verify_step(run / "dead_letter")[ROWS_KEY]
    assert rows == {"read": before, "chunk": rows_entry_of([dead_letter("chunk", key) for key in ("d:1", "d:2")],
                                                           DEAD_LETTER.names)}
    assert not list(staging.glob("dead_letter/*.rows.json"))


def test_a_manifest_that_records_no_rows_for_some_shards_records_none(tmp_path):
    """An older realm's manifest lists its files alone: the stage's rows would pass for all of
    them, so the artifact stays keyed on its files."""
    run = staged(tmp_path, "dead_letter", DEAD_LETTER, [dead_letter("read", "a.xml")], 1, file_prefix="read").parent
    manifest = run / "dead_letter" / MANIFEST_FILE
    manifest.write_text(json.dumps({"files": json.loads(manifest.read_text())["files"]}))
    staging = tmp_path / "staging"
    written(staging, "dead_letter", DEAD_LETTER, [dead_letter("chunk", "d:1")], 1, "chunk")

    replace_shards(str(staging), str(run), "dead_letter", "chunk")

    assert ROWS_KEY not in verify_step(run / "dead_letter")
    assert len(verify_step(run / "dead_letter")["files"]) == 2


def test_a_run_artifact_holding_the_staged_rows_is_left_as_it_was_and_one_with_other_rows_replaced(tmp_path):
    run = staged(tmp_path / "run", "documents", DOCUMENTS, DOCS, num_shards=1).parent
    before = file_bytes(run / "documents")
    staging = staged(tmp_path / "again", "documents", DOCUMENTS, DOCS[::-1], num_shards=3).parent
    assert move_into_place(str(staging), str(run), {"documents": DOCUMENTS}, []) == ["documents"]
    assert file_bytes(run / "documents") == before  # its files, and every digest keyed on them

    staging = staged(tmp_path / "edited", "documents", DOCUMENTS, DOCS[:-1], num_shards=3).parent
    assert move_into_place(str(staging), str(run), {"documents": DOCUMENTS}, []) == []
    assert read_table(str(run / "documents"), DOCUMENTS).num_rows == 6
    assert len(verify_step(run / "documents")["files"]) == 3


def test_an_artifact_an_older_realm_wrote_is_kept_when_its_rows_hash_the_same_and_a_damaged_one_replaced(tmp_path):
    run = staged(tmp_path / "run", "documents", DOCUMENTS, DOCS, num_shards=2).parent
    manifest = run / "documents" / MANIFEST_FILE
    manifest.write_text(json.dumps({"files": json.loads(manifest.read_text())["files"]}))  # no rows recorded
    before = file_bytes(run / "documents")
    staging = staged(tmp_path / "again", "documents", DOCUMENTS, DOCS, num_shards=3).parent
    assert move_into_place(str(staging), str(run), {"documents": DOCUMENTS}, []) == ["documents"]
    assert file_bytes(run / "documents") == before

    shard = sorted((run / "documents").glob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")  # no longer the file its manifest lists
    assert move_into_place(str(staging), str(run), {"documents": DOCUMENTS}, []) == []
    assert read_table(str(run / "documents"), DOCUMENTS).to_pylist() == DOCS
    assert len(verify_step(run / "documents")["files"]) == 3


def test_an_older_artifact_that_no_longer_reads_through_its_schema_is_replaced_and_nothing_before_it_left_half_done(tmp_path):
    run = staged(tmp_path / "run", "documents", DOCUMENTS, DOCS, num_shards=1).parent
    shard = next((run / "documents").glob("*.parquet"))
    pq.write_table(pq.read_table(shard).drop_columns(["date"]), shard)  # a column the schema has since gained
    (run / "documents" / MANIFEST_FILE).write_text(json.dumps({"files": {shard.name: {
        "size": shard.stat().st_size, "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}}}))
    staging = staged(tmp_path / "again", "documents", DOCUMENTS, DOCS, num_shards=2).parent
    assert move_into_place(str(staging), str(run), {"documents": DOCUMENTS}, []) == []
    assert read_table(str(run / "documents"), DOCUMENTS).to_pylist() == DOCS
