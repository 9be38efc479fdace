"""`prepare` end to end: every artifact written, read back through its schema, bad records
dead-lettered; a prepare that fails leaves the run it would have replaced exactly as it was."""

import json
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from realm.pipelines import prepare
from realm.pipelines.read_ccnews import url_doc_id
from realm.schemas import ARTIFACTS, BLOCKS, ArtifactError, read_table
from realm.schemas.manifest import MANIFEST_FILE, IntegrityError, verify_step
from realm.schemas.rows_digest import ROWS_KEY, rows_entry_of
from tests.pipelines.news_fixture import BRIDGE_HTML, BRIDGE_URL, CAFE_HTML, CAFE_URL, SECTION_HTML, SECTION_URL, warc_records
from tests.pipelines.run_files import file_bytes
from tests.pipelines.wikipedia_fixture import ARTICLES, dump_bytes, page

WRITTEN = ["documents", "blocks", "block_entities", "pretrain_examples", "ict_examples", "dead_letter"]
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def read_artifacts(root):
    return {name: read_table(str(root / name), ARTIFACTS[name]) for name in WRITTEN}


def sorted_rows(table):
    return sorted(json.dumps(row, sort_keys=True) for row in table.to_pylist())


def dead_reasons(tables):
    return sorted(zip(tables["dead_letter"]["stage"].to_pylist(), tables["dead_letter"]["reason"].to_pylist()))


def assert_consistent(tables):
    """Cross-artifact invariants a trainer relies on."""
    block_ids = tables["blocks"]["block_id"].to_pylist()
    assert len(block_ids) == len(set(block_ids))
    assert set(tables["blocks"]["doc_id"].to_pylist()) <= set(tables["documents"]["doc_id"].to_pylist())
    for example in tables["pretrain_examples"].to_pylist():
        assert example["origin_block_id"] in example["forbidden_block_ids"]
        assert example["origin_block_id"] in set(block_ids)
        assert all(len(example["token_ids"]) > p for p in example["masked_token_positions"])
    assert set(tables["ict_examples"]["context_block_id"].to_pylist()) <= set(block_ids)
    assert sorted(tables["block_entities"]["block_id"].to_pylist()) == sorted(block_ids)  # every block, once
    texts = dict(zip(block_ids, tables["blocks"]["text"].to_pylist()))
    for row in tables["block_entities"].to_pylist():
        assert all(0 <= e["start"] < e["end"] <= len(texts[row["block_id"]]) for e in row["entities"])
    assert all(n <= 288 for n in tables["blocks"]["num_tokens"].to_pylist())


@pytest.fixture(scope="module")
def prepared_run(tmp_path_factory):
    """A run prepared from the Wikipedia fixture's pages; tests change copies of it."""
    root = tmp_path_factory.mktemp("prepared")
    (root / "dump.xml").write_bytes(dump_bytes(ARTICLES))
    prepare.run(["--corpus", "wikipedia-xml", "--input", str(root / "dump.xml"), "--output", str(root / "run"), *IN_PROCESS])
    return root / "run"


@pytest.fixture
def run_copy(prepared_run, tmp_path):
    return shutil.copytree(prepared_run, tmp_path / "run")


def test_vital_corpus_with_the_default_two_worker_runner(tmp_path, monkeypatch, capsys):
    temp_folder = tmp_path / "temp"
    temp_folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_folder))
    counts = prepare.run(["--corpus", "vital", "--limit", "40", "--output", str(tmp_path / "run")])
    assert list(temp_folder.iterdir()) == []  # nothing of Beam's (beam-temp*, tmp*) is left behind
    tmp_path = tmp_path / "run"
    tables = read_artifacts(tmp_path)
    assert tables["documents"].num_rows == 40 == counts["chunk"]["documents"]
    assert tables["blocks"].num_rows == counts["chunk"]["blocks"] >= 40
    assert tables["pretrain_examples"].num_rows == counts["salient"]["sentences"] == counts["trivial"]["examples"]
    assert tables["ict_examples"].num_rows == counts["ict"]["examples"]
    assert tables["block_entities"].num_rows == counts["entities"]["blocks"] == tables["blocks"].num_rows
    assert counts["entities"]["entities"] == sum(len(e) for e in tables["block_entities"]["entities"].to_pylist()) > 0
    assert tables["dead_letter"].num_rows == 0  # written although empty
    assert pq.read_schema(next((tmp_path / "dead_letter").glob("*.parquet"))).names == ARTIFACTS["dead_letter"].names
    assert json.loads((tmp_path / "summary" / "prepare.json").read_text()) == counts
    assert_consistent(tables)
    # The live progress, counted in the worker processes, ends on what Beam's counters say.
    last_progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("prepare ")][-1]
    blocks, examples = counts["chunk"]["blocks"], counts["salient"]["sentences"]
    assert last_progress.split(" | ")[1:] == [
        "read 40 out", f"chunk 40 in, {blocks:,} out", f"entities {blocks:,} in, {blocks:,} out",
        f"salient {blocks:,} in, {examples:,} out",
        f"trivial {examples:,} in, {examples:,} out", f"ict {blocks:,} in, {counts['ict']['examples']:,} out",
    ]


def test_wikipedia_dump_with_broken_pages_lands_good_articles_and_dead_letters(tmp_path):
    copied = "Paris is the capital of France."  # a sentence of the ARTICLES fixture's Paris page
    pages = [*ARTICLES, page(21, "Capitals", f"'''Capitals''' of Europe. {copied} Berlin is the capital of Germany.")]
    (tmp_path / "dump.xml").write_bytes(dump_bytes(pages))
    out = tmp_path / "run"
    counts = prepare.run(["--corpus", "wikipedia-xml", "--input", str(tmp_path / "*.xml"), "--output", str(out), *IN_PROCESS])
    tables = read_artifacts(out)
    assert sorted(tables["documents"]["title"].to_pylist()) == ["Capitals", "Lyon", "Paris", "Stub"]
    assert sorted(tables["blocks"]["doc_id"].to_pylist()) == sorted(
        d for d, t in zip(tables["documents"]["doc_id"].to_pylist(), tables["documents"]["title"].to_pylist()) if t != "Stub"
    )
    assert dead_reasons(tables) == [
        ("chunk", "chunk_empty_body"),
        ("read", "read_malformed_xml"),
        ("read", "read_undecodable_bytes"),
    ]
    # The sentence copied into "Capitals" is forbidden for the example taken from "Paris" (X != Z copy).
    by_text = {e["text"]: e for e in tables["pretrain_examples"].to_pylist()}
    assert len(by_text[copied]["forbidden_block_ids"]) == 2
    assert counts["trivial"]["examples_with_copies_beyond_origin"] == 2
    assert_consistent(tables)


@pytest.mark.usefixtures("no_network")
def test_warc_with_broken_bytes_a_page_crawled_twice_a_section_front_and_a_truncated_record(tmp_path):
    records = warc_records(
        gzip=True,
        pages=[
            ("response", BRIDGE_URL, BRIDGE_HTML.encode("utf-8")),
            ("response", CAFE_URL, CAFE_HTML.encode("utf-8")),
            ("response", "https://news.example.com/bad-bytes", b"<html><body><p>caf\xe9 \xff\xfe</p></body></html>"),
            ("response", SECTION_URL, SECTION_HTML.encode("utf-8")),
        ],
    )
    (tmp_path / "crawl.warc.gz").write_bytes(b"".join(records) + records[0] + records[0][:50])
    out = tmp_path / "run"
    counts = prepare.run(["--corpus", "warc", "--input", str(tmp_path / "*.warc.gz"), "--output", str(out), *IN_PROCESS])
    tables = read_artifacts(out)
    assert tables["documents"]["url"].to_pylist() == sorted([BRIDGE_URL, CAFE_URL], key=lambda url: url_doc_id("warc", url))
    assert tables["blocks"].num_rows >= 2 and tables["pretrain_examples"].num_rows > 0
    assert dead_reasons(tables) == [
        ("read", "read_corrupt_warc"),
        ("read", "read_duplicate_doc_id"),
        ("read", "read_navigation_only"),
        ("read", "read_undecodable_bytes"),
    ]
    assert counts["read"]["read_duplicate_doc_id"] == 1 and counts["read"]["read_navigation_only"] == 1
    assert_consistent(tables)


@pytest.mark.parametrize(
    ("flag", "value", "looked_for"),
    [("--input", "dumps/*.xml", ""), ("--knowledge_blocks", "other_run/blocks", " (looked for other_run/blocks/*.parquet)")],
)
def test_an_input_that_matches_no_file_stops_prepare_before_the_run_changes(run_copy, flag, value, looked_for):
    before = file_bytes(run_copy)
    dump = run_copy.parent / "dump.xml"
    dump.write_bytes(dump_bytes(ARTICLES))
    inputs = {"--input": str(dump), flag: value}  # the other input is a good one
    with pytest.raises(FileNotFoundError) as error:
        prepare.run(["--corpus", "wikipedia-xml", "--output", str(run_copy), *sum(inputs.items(), ()), *IN_PROCESS])
    assert str(error.value) == f"{flag} {value}: no file matches it{looked_for}; {run_copy} is unchanged"
    assert file_bytes(run_copy) == before


def test_an_input_naming_a_directory_stops_prepare_naming_its_files_instead(run_copy):
    before = file_bytes(run_copy)
    dumps = run_copy.parent / "dumps"
    dumps.mkdir()
    (dumps / "dump.xml").write_bytes(dump_bytes(ARTICLES))
    with pytest.raises(FileNotFoundError) as error:
        prepare.run(["--corpus", "wikipedia-xml", "--output", str(run_copy), "--input", str(dumps), *IN_PROCESS])
    assert str(error.value) == (
        f"--input {dumps}: {dumps} is a directory; name its files ({dumps}/* or {dumps}/**); {run_copy} is unchanged"
    )
    assert file_bytes(run_copy) == before


def test_a_pipeline_that_fails_leaves_the_previous_run_exactly_as_it_was(run_copy):
    """A documents file with the wrong columns stops the pipeline half way (the user's error)."""
    before = file_bytes(run_copy)
    bad = run_copy.parent / "bad.parquet"
    pq.write_table(pa.table({"doc_id": ["d1"], "body": ["no title, no text"]}), bad)
    with pytest.raises(Exception, match="bad.parquet"):
        prepare.run(["--corpus", "documents", "--input", str(bad), "--output", str(run_copy), *IN_PROCESS])
    assert file_bytes(run_copy) == before  # no staging directory left either


def test_an_input_whose_every_record_is_rejected_replaces_nothing(run_copy):
    before = file_bytes(run_copy)
    bad = run_copy.parent / "all_bad.jsonl"
    bad.write_text('[1, 2, 3]\n{"doc_id": 5, "title": "T"\n')
    with pytest.raises(prepare.EmptyCorpusError) as error:
        prepare.run(["--corpus", "documents", "--input", str(bad), "--output", str(run_copy), *IN_PROCESS])
    assert str(error.value) == (
        f"{bad}: no block was built (records rejected on reading: read_malformed_json 2); {run_copy} is unchanged"
    )
    assert file_bytes(run_copy) == before


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"PAR1 not really", "not readable as Parquet"), (None, "missing column 'source'")],
)
def test_a_documents_file_that_is_not_usable_parquet_stops_prepare_in_one_line_before_the_run_changes(
    run_copy, content, message
):
    before = file_bytes(run_copy)
    bad = run_copy.parent / "docs.parquet"
    if content is None:
        pq.write_table(pa.table({"doc_id": ["d1"], "text": ["no title"]}), bad)
    else:
        bad.write_bytes(content)
    with pytest.raises(ArtifactError, match=f"^{bad}: {message}"):
        prepare.run(["--corpus", "documents", "--input", str(bad), "--output", str(run_copy), *IN_PROCESS])
    assert file_bytes(run_copy) == before


def test_a_run_can_be_prepared_again_from_its_own_documents_and_blocks(run_copy):
    """Its documents and blocks are read to the end before they are replaced."""
    previous = read_artifacts(run_copy)
    counts = prepare.run([
        "--corpus", "documents", "--input", str(run_copy / "documents" / "*.parquet"),
        "--knowledge_blocks", str(run_copy / "blocks"), "--output", str(run_copy), *IN_PROCESS,
    ])
    tables = read_artifacts(run_copy)
    assert sorted(tables["documents"]["doc_id"].to_pylist()) == sorted(previous["documents"]["doc_id"].to_pylist())
    assert sorted(tables["blocks"]["block_id"].to_pylist()) == sorted(previous["blocks"]["block_id"].to_pylist())
    # The read stage's dead letters of the XML dump are gone with the artifact they belonged to.
    assert dead_reasons(previous) == [("chunk", "chunk_empty_body"), ("read", "read_malformed_xml"), ("read", "read_undecodable_bytes")]
    assert dead_reasons(tables) == [("chunk", "chunk_empty_body")]
    assert json.loads((run_copy / "summary" / "prepare.json").read_text()) == counts
    assert sorted(p.name for p in run_copy.iterdir()) == sorted(["summary", "vocabulary.json", *WRITTEN])  # no staging dir left
    assert_consistent(tables)


def test_each_prepared_artifact_carries_a_manifest_and_a_shard_altered_since_is_named(run_copy):
    """Beam writes Parquet uncompressed: a flipped byte in a page still reads, as other text."""
    tables = read_artifacts(run_copy)
    for name in WRITTEN:  # its files, and the count and hash sum of the rows they hold
        rows = verify_step(run_copy / name)[ROWS_KEY]
        assert rows == {"prepare": rows_entry_of(tables[name].to_pylist(), ARTIFACTS[name].names)}
    shard = sorted((run_copy / "blocks").glob("*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"^{shard}: sha256 does not match {MANIFEST_FILE}"):
        read_table(str(run_copy / "blocks"), BLOCKS)



@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    """`run/` prepared in process from the Wikipedia fixture's pages (`dump.xml`) with `--model_dir
    bert/`, tests/bert_fixture's BERT and its own vocabulary."""
    from tests.bert_fixture import save_tiny_bert

    root = tmp_path_factory.mktemp("bert_run")
    save_tiny_bert(root / "bert")
    (root / "dump.xml").write_bytes(dump_bytes(ARTICLES))
    prepare.run(["--corpus", "wikipedia-xml", "--input", str(root / "dump.xml"), "--output", str(root / "run"),
                 "--model_dir", str(root / "bert"), *IN_PROCESS])
    return root


def test_the_wordpieces_are_cut_with_the_bert_directory_s_vocabulary_and_its_sha256_recorded(bert_run):
    """--model_dir (realm prepare --bert DIR): blocks' and examples' ids are that vocabulary's, and
    vocabulary.json names it, as training checks; the default run records the default's."""
    from realm.model.tokenization import load_tokenizer
    from realm.schemas.run_layout import RunLayout
    from tests.bert_fixture import VOCABULARY

    bert, out = bert_run / "bert", bert_run / "run"
    tokenizer = load_tokenizer(str(bert))
    tables = read_artifacts(out)
    for block in tables["blocks"].to_pylist():
        assert block["title_token_ids"] == tokenizer.encode(block["title"])
        assert block["body_token_ids"] == tokenizer.encode(block["text"])
    ids = [i for e in tables["pretrain_examples"].to_pylist() for i in e["token_ids"]]
    ids += [i for e in tables["ict_examples"].to_pylist() for i in e["query_token_ids"]]
    assert ids and max(ids) < len(VOCABULARY)
    assert RunLayout.at(out).prepared_vocabulary() == {"sha256": tokenizer.vocabulary_sha256, "source": str(bert)}
    assert_consistent(tables)


def test_workers_cut_a_bert_directory_s_wordpieces_without_that_directory(bert_run, tmp_path):
    # --model_dir is a path on the machine that launches prepare: a Dataflow worker has no such
    # directory, so chunking, tagging and ICT must cut wordpieces with what the launcher hands them.
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from realm.pipelines.options import RealmOptions
    from realm.pipelines.progress import StageTaps

    bert = shutil.copytree(bert_run / "bert", tmp_path / "bert")
    options = PipelineOptions(["--corpus", "wikipedia-xml", "--input", str(bert_run / "dump.xml"),
                               "--model_dir", str(bert)]).view_as(RealmOptions)
    # A worker process of its own: nothing the launching process loaded is there.
    pipeline = beam.Pipeline(options=PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=multi_processing"]))
    prepare.build_prepare_pipeline(pipeline, options, str(tmp_path / "run"), StageTaps(None))
    bert.rename(tmp_path / "bert-elsewhere")
    pipeline.run().wait_until_finish()
    by_workers, in_process = read_artifacts(tmp_path / "run"), read_artifacts(bert_run / "run")
    for name in WRITTEN:
        assert sorted_rows(by_workers[name]) == sorted_rows(in_process[name]), name
    assert by_workers["blocks"].num_rows and by_workers["pretrain_examples"].num_rows and by_workers["ict_examples"].num_rows


def test_a_bert_directory_without_a_vocabulary_stops_prepare_before_the_run_changes(run_copy, tmp_path):
    before = file_bytes(run_copy)
    with pytest.raises(FileNotFoundError, match="neither tokenizer.json nor vocab.txt"):
        prepare.run(["--corpus", "vital", "--limit", "3", "--output", str(run_copy), "--model_dir", str(tmp_path), *IN_PROCESS])
    assert file_bytes(run_copy) == before
