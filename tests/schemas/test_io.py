import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from realm.schemas import (
    DOCUMENTS,
    EMBEDDINGS,
    ArtifactError,
    SchemaMismatchError,
    UnreadableArtifactError,
    read_table,
    write_table,
)

DOCUMENT = {"doc_id": "vital:1", "source": "vital", "title": "Paris", "text": "Paris is a city.", "url": None, "date": None}


def test_an_artifact_written_with_its_schema_reads_back_equal_across_shards(tmp_path):
    second = {**DOCUMENT, "doc_id": "vital:2", "title": "Lyon", "url": "https://x/Lyon"}
    write_table(str(tmp_path / "documents" / "part-0.parquet"), [DOCUMENT], DOCUMENTS)
    write_table(str(tmp_path / "documents" / "part-1.parquet"), [second], DOCUMENTS)
    table = read_table(str(tmp_path / "documents"), DOCUMENTS)
    assert table.schema == DOCUMENTS
    assert table.to_pylist() == [DOCUMENT, second]
    assert sorted(p.name for p in (tmp_path / "documents").iterdir()) == ["part-0.parquet", "part-1.parquet"]


def test_compatible_physical_types_are_cast_to_the_contract(tmp_path):
    """Beam and pandas write large strings, int32 for int64 and plain lists for fixed-size ones."""
    path = str(tmp_path / "embeddings.parquet")
    pq.write_table(
        pa.table({
            "block_id": pa.array([7], pa.int32()),
            "embedding": pa.array([[0.5] * 128], pa.list_(pa.float32())),
            "checkpoint_step": pa.array([3], pa.int64()),
            "extra": pa.array(["ignored"], pa.large_string()),
        }),
        path,
    )
    table = read_table(path, EMBEDDINGS)
    assert table.schema == EMBEDDINGS and table.column("block_id").to_pylist() == [7]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop(["title"]), "missing column 'title'"),
        (lambda t: t.set_column(2, "title", pa.array([3], pa.int64())), "column 'title' has type int64, expected string"),
        (lambda t: t.set_column(0, "doc_id", pa.array([None], pa.string())), "column 'doc_id' holds nulls but is required"),
    ],
)
def test_a_file_that_breaks_the_contract_is_refused_naming_the_file_and_column(tmp_path, change, message):
    path = str(tmp_path / "bad.parquet")
    pq.write_table(change(pa.Table.from_pylist([DOCUMENT], schema=DOCUMENTS)), path)
    with pytest.raises(SchemaMismatchError, match=f"^{path}: {message}"):
        read_table(path, DOCUMENTS)


def test_an_empty_or_missing_artifact_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no .parquet files"):
        read_table(str(tmp_path / "empty"), DOCUMENTS)
    with pytest.raises(FileNotFoundError, match="no such artifact"):
        read_table(str(tmp_path / "absent"), DOCUMENTS)


def test_an_artifact_with_a_row_order_reads_back_in_it_whatever_its_shards(tmp_path):
    """Beam's workers decide which rows land in which shard; documents come back by doc_id."""
    documents = [{**DOCUMENT, "doc_id": f"vital:{n}", "title": f"t{n}"} for n in (5, 1, 4, 2, 3)]
    write_table(str(tmp_path / "documents" / "part-0.parquet"), documents[:2], DOCUMENTS)
    write_table(str(tmp_path / "documents" / "part-1.parquet"), documents[2:], DOCUMENTS)
    assert read_table(str(tmp_path / "documents"), DOCUMENTS)["doc_id"].to_pylist() == [f"vital:{n}" for n in range(1, 6)]
    # Only the title is asked for; the order still follows doc_id.
    assert read_table(str(tmp_path / "documents"), DOCUMENTS, columns=["title"]).to_pylist() == [
        {"title": f"t{n}"} for n in range(1, 6)
    ]


@pytest.mark.parametrize("damage", ["truncated", "not parquet"])
def test_a_damaged_file_is_named(tmp_path, damage):
    path = tmp_path / "documents" / "part-0.parquet"
    write_table(str(path), [DOCUMENT], DOCUMENTS)
    path.write_bytes(path.read_bytes()[:-30] if damage == "truncated" else b"not parquet at all\n")
    with pytest.raises(UnreadableArtifactError, match=f"^{path}: not readable as Parquet"):
        read_table(str(tmp_path / "documents"), DOCUMENTS)


def test_a_lost_shard_of_a_beam_artifact_is_named_rather_than_read_as_a_smaller_artifact(tmp_path):
    for index in (0, 2):  # 1 of 3 is gone; the dead letters' other stage is complete
        write_table(str(tmp_path / "documents" / f"prepare-{index:05d}-of-00003.parquet"), [DOCUMENT], DOCUMENTS)
    write_table(str(tmp_path / "documents" / "chunk-00000-of-00001.parquet"), [DOCUMENT], DOCUMENTS)
    missing = tmp_path / "documents" / "prepare-00001-of-00003.parquet"
    with pytest.raises(ArtifactError, match=f"^{missing}: missing \\(2 of 3 shards there\\)$"):
        read_table(str(tmp_path / "documents"), DOCUMENTS)


def test_a_column_added_later_reads_back_null_from_files_written_before_it(tmp_path):
    from realm.schemas.io import added_on

    grown = pa.schema([*DOCUMENTS, added_on(pa.field("language", pa.string(), nullable=True), "2026-11-28")])
    old, new = str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet")
    write_table(old, [DOCUMENT], DOCUMENTS)  # written before the column was added
    write_table(new, [{**DOCUMENT, "language": "en"}], grown)
    assert read_table(old, grown).to_pylist() == [{**DOCUMENT, "language": None}]
    assert read_table(new, grown).column("language").to_pylist() == ["en"]
    # a column not declared added later is still required of every file
    with pytest.raises(SchemaMismatchError, match=f"^{old}: missing column 'language'"):
        read_table(old, pa.schema([*DOCUMENTS, pa.field("language", pa.string(), nullable=True)]))
    with pytest.raises(ValueError, match="'language' added on 2026-11-28 must be nullable"):
        added_on(pa.field("language", pa.string(), nullable=False), "2026-11-28")
