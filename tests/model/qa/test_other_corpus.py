import pyarrow as pa
import pytest

from realm.model.index.lineage import read_lineage
from realm.model.qa.answering import Answerer
from realm.model.qa.other_corpus import index_other_corpus
from realm.schemas import BLOCK_ENTITIES, BLOCKS, ArtifactError, write_table
from tests.model.corpus_fixture import write_corpus

LENGTH = 64  # the block length the trained_run fixture embedded at
QUESTION = "Which river flows through Paris?"


def test_a_trained_run_answers_from_another_corpus_indexed_by_its_own_doc_tower(
    tmp_path, trained_run, blocks_table, block_entities_table
):
    seine = blocks_table.filter(pa.compute.equal(blocks_table["title"], "Seine"))
    other = str(tmp_path / "other")
    write_corpus(f"{other}/blocks", seine, block_entities_table)

    update = index_other_corpus(trained_run.root, other, "seine-only")
    assert (update.version, update.blocks, update.embedded) == (0, 1, 1)
    lineage = read_lineage(update.path)
    trained_lineage = read_lineage(f"{trained_run.index}/0")
    assert lineage["doc_tower"] == trained_lineage["doc_tower"] and lineage["max_block_wordpieces"] == LENGTH
    assert (lineage["corpus"]["blocks"], lineage["corpus_name"], lineage["source"]) == (1, "seine-only", f"{other}/blocks")

    (own,) = Answerer.from_run(trained_run.root).answer([QUESTION], num_read=1, num_retrieve=8)
    (swapped,) = Answerer.from_run(trained_run.root, corpus="seine-only").answer([QUESTION], num_read=1, num_retrieve=1)
    assert len(own.evidence) == 8
    assert [e.title for e in swapped.evidence] == ["Seine"] and swapped.block_id == seine["block_id"][0].as_py()
    assert swapped.answer in seine["text"][0].as_py()

    again = index_other_corpus(trained_run.root, other, "seine-only")
    assert (again.version, again.embedded, again.reused, again.dropped) == (1, 0, 1, 0)


def test_what_cannot_be_indexed_is_named(tmp_path, trained_run, blocks_table, block_entities_table):
    with pytest.raises(FileNotFoundError, match="not a prepared corpus"):
        index_other_corpus(trained_run.root, tmp_path / "nowhere", "x")
    untagged = tmp_path / "untagged"  # prepared before entity tagging was a stage
    write_table(str(untagged / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    with pytest.raises(FileNotFoundError, match=f"no block entities .* --blocks {untagged}/blocks --output {untagged}$"):
        index_other_corpus(trained_run.root, untagged, "untagged")
    assert not (trained_run.root / "corpora" / "untagged" / "blocks").exists()
    mistagged = tmp_path / "mistagged"  # its entities tag a block it does not hold
    write_table(str(mistagged / "blocks" / "part-0.parquet"), blocks_table.slice(1), BLOCKS)
    write_table(str(mistagged / "block_entities" / "part-0.parquet"), block_entities_table, BLOCK_ENTITIES)
    with pytest.raises(ArtifactError, match=f"^{mistagged}/block_entities: block .* is not in the blocks"):
        index_other_corpus(trained_run.root, mistagged, "mistagged")
    assert not (trained_run.root / "corpora" / "mistagged").exists()
    empty = tmp_path / "empty"
    write_corpus(f"{empty}/blocks", blocks_table.slice(0, 0), block_entities_table.slice(0, 0))
    with pytest.raises(ValueError, match=f"^{empty}/blocks: the corpus holds no blocks$"):
        index_other_corpus(trained_run.root, empty, "empty")
    merged = tmp_path / "merged"  # two prepared corpora's shards copied together: one block in both
    write_table(str(merged / "blocks" / "part-0.parquet"), blocks_table.slice(0, 3), BLOCKS)
    write_table(str(merged / "blocks" / "part-1.parquet"), blocks_table.slice(2), BLOCKS)
    write_table(str(merged / "block_entities" / "part-0.parquet"), block_entities_table, BLOCK_ENTITIES)
    repeated = blocks_table["block_id"][2].as_py()
    with pytest.raises(ValueError, match=rf"^{merged}/blocks: block_id {repeated} is held by 2 rows \(in part-0.parquet, "
                                         r"part-1.parquet\); 1 ids repeat in all"):
        index_other_corpus(trained_run.root, merged, "merged")
    with pytest.raises(ValueError, match="must be letters, digits"):
        index_other_corpus(trained_run.root, trained_run.root, "../escape")
    with pytest.raises(FileNotFoundError, match="no corpus 'missing' indexed for this run"):
        Answerer.from_run(trained_run.root, corpus="missing")
    with pytest.raises(ValueError, match="embedded at 64 wordpieces a block, not 32"):
        index_other_corpus(trained_run.root, trained_run.root, "own", max_block_wordpieces=32)
    (trained_run.snapshots / "0" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="the doc tower that embedded .* is gone"):
        index_other_corpus(trained_run.root, trained_run.root, "own")


def test_a_failed_indexing_leaves_no_copy_of_the_corpus(trained_run, monkeypatch):
    import realm.model.qa.other_corpus

    def fail(*args, **kwargs):
        raise RuntimeError("the disk filled up")

    monkeypatch.setattr(realm.model.qa.other_corpus, "index_corpus", fail)
    with pytest.raises(RuntimeError, match="the disk filled up"):
        index_other_corpus(trained_run.root, trained_run.root, "copy")
    assert [p.name for p in (trained_run.root / "corpora" / "copy").iterdir()] == []


def test_a_second_indexing_of_one_name_at_once_is_refused_and_changes_nothing(trained_run):
    from realm.schemas.writer_lock import WriterBusy, writer_lock

    busy = trained_run.root / "corpora" / "busy"
    with writer_lock(busy, "corpus 'busy'"):  # as a `realm index` still running holds it
        with pytest.raises(WriterBusy, match=f"^{busy}: another writer holds corpus 'busy' now"):
            index_other_corpus(trained_run.root, trained_run.root, "busy")
    assert list(busy.iterdir()) == []
