"""A staged artifact's manifest records its rows beside its files: the same rows written in
other shards and another order are the same input to a stage, while their files differ; a
stage run on its own keeps the rows of the other stages' dead letters."""

import json

import apache_beam as beam

from realm.model.training.stage_inputs import content_digest
from realm.pipelines.artifacts import WriteArtifact
from realm.pipelines.staging import replace_shards, write_manifests
from realm.schemas import DEAD_LETTER, DOCUMENTS, read_table
from realm.schemas.manifest import MANIFEST_FILE, verify_step
from realm.schemas.rows_digest import ROWS_KEY, row_hash, rows_entry

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
    assert manifest[ROWS_KEY] == {"part": rows_entry(7, sum(row_hash(row, DOCUMENTS.names) for row in DOCS))}
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
    assert rows == {"read": before, "chunk": rows_entry(2, sum(row_hash(dead_letter("chunk", key), DEAD_LETTER.names)
                                                               for key in ("d:1", "d:2")))}
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
