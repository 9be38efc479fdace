"""The embedding pipeline: a run's blocks through its doc-tower snapshot with RunInference give
the in-process embedder's vectors (same ids, cosine >= 0.999), in the EMBEDDINGS schema with
the index lineage; a block the tower cannot embed is dead-lettered and counted."""

import json
from functools import partial

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
import torch
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.model.index.embed_corpus import embed_blocks, load_embeddings
from realm.model.index.lineage import corpus_fingerprint, doc_tower_fingerprint
from realm.model.index.mips import MipsIndex
from realm.model.index.rebuild import fit_block_batch, rebuild_index
from realm.model.networks.config import ModelConfig, build_component, load_pretrained
from realm.model.networks.retriever import Embedder
from realm.model.publish import publish, staging_dir
from realm.model.tokenization import WordPieceTokenizer
from realm.pipelines import embed
from realm.pipelines.embed import EmbedBlocks, block_problem, embed_into
from realm.pipelines.options import RealmOptions
from realm.schemas import BLOCKS, DEAD_LETTER, EMBEDDINGS, read_table
from realm.schemas.run_layout import RunLayout
from tests.bert_fixture import VOCABULARY as BERT_VOCABULARY
from tests.bert_fixture import save_tiny_bert
from tests.model.corpus_fixture import write_corpus

SNAPSHOT_STEP = 3
BLOCK_WORDPIECES = 16  # below the corpus's blocks: the pipeline must cut them as a refresh does
BAD_BLOCK_ID = 777
VOCABULARY = 30522  # the tiny preset's


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def make_run(root, blocks: pa.Table, entities: pa.Table, config, bert_dir: str | None = None) -> RunLayout:
    """A run holding `blocks` and a published doc-tower snapshot of step 3 (a random tiny tower,
    seeded: every run made here has the same one), started from `bert_dir` when given."""
    layout = RunLayout.at(root)
    layout.record_model_preset("random-2l", bert_dir=bert_dir)
    write_corpus(layout.blocks, blocks, entities)
    staging = staging_dir(layout.snapshots, SNAPSHOT_STEP)
    torch.manual_seed(1)
    build_component(Embedder, config).save_pretrained(staging)
    publish(staging, layout.snapshots, SNAPSHOT_STEP)
    return layout


@pytest.fixture
def tiny_run(tmp_path, blocks_table, block_entities_table, tiny_config) -> RunLayout:
    """The test corpus plus one block holding a wordpiece id past the vocabulary."""
    bad = {**blocks_table.slice(0, 1).to_pylist()[0], "block_id": BAD_BLOCK_ID, "body_token_ids": [5, VOCABULARY]}
    blocks = pa.concat_tables([blocks_table, pa.Table.from_pylist([bad], schema=BLOCKS)])
    return make_run(tmp_path / "run", blocks, block_entities_table, tiny_config)


def test_a_wordpiece_id_outside_the_vocabulary_is_the_problem_named():
    block = {"title_token_ids": [1, 2], "body_token_ids": [3, VOCABULARY]}
    assert block_problem(block, VOCABULARY) == (
        "token_id_out_of_vocabulary", f"body_token_ids holds {VOCABULARY}; the doc tower's vocabulary has {VOCABULARY} ids"
    )
    assert block_problem({**block, "title_token_ids": [-1]}, VOCABULARY)[0] == "token_id_out_of_vocabulary"
    assert block_problem({**block, "body_token_ids": [0, VOCABULARY - 1]}, VOCABULARY) is None


def test_the_pipeline_embeds_what_the_in_process_embedder_does(tiny_run, blocks_table, tokenizer, tmp_path):
    output = tmp_path / "out"
    # No --step: the newest snapshot; Beam's local runner with its 2 workers.
    counts = embed.run([f"--run={tiny_run.root}", f"--output={output}", f"--max_block_wordpieces={BLOCK_WORDPIECES}",
                        "--embed_batch_blocks=3", "--embed_window_blocks=4"])

    snapshot = tiny_run.snapshots / str(SNAPSHOT_STEP)
    fitted = pa.Table.from_batches([fit_block_batch(b, BLOCK_WORDPIECES) for b in blocks_table.to_batches()])
    embed_blocks(load_pretrained(Embedder, snapshot), tokenizer, fitted, str(tmp_path / "in_process"), SNAPSHOT_STEP)
    in_process_ids, in_process = load_embeddings(str(tmp_path / "in_process"))

    table = read_table(str(output / "embeddings"), EMBEDDINGS)  # validates the schema
    assert table["checkpoint_step"].to_pylist() == [SNAPSHOT_STEP] * len(blocks_table)
    pipeline_ids, vectors = load_embeddings(str(output / "embeddings"))
    assert pipeline_ids.tolist() == in_process_ids.tolist() == sorted(blocks_table["block_id"].to_pylist())
    assert cosines(vectors, in_process).min() >= 0.999

    dead = read_table(str(output / "dead_letter"), DEAD_LETTER)
    assert [(r["stage"], r["record_key"], r["reason"]) for r in dead.to_pylist()] == [
        ("embed", str(BAD_BLOCK_ID), "embed_token_id_out_of_vocabulary")
    ]
    assert counts["embed"]["embed_token_id_out_of_vocabulary"] == 1
    assert counts["embed"]["blocks"] == len(blocks_table)
    assert json.loads((output / "summary" / "embed.json").read_text()) == counts

    lineage = json.loads((output / embed.LINEAGE_FILE).read_text())
    assert lineage["doc_tower"] == doc_tower_fingerprint(snapshot, SNAPSHOT_STEP)
    assert lineage["corpus"] == corpus_fingerprint(in_process_ids)
    assert lineage["max_block_wordpieces"] == BLOCK_WORDPIECES


def embedded_as(block_ids: list[int], vectors: np.ndarray):
    """An `assert_that` matcher: EMBEDDINGS rows of exactly `block_ids`, each within cosine 0.999 of its vector."""
    expected = dict(zip(block_ids, vectors))

    def check(rows):
        assert sorted(row["block_id"] for row in rows) == sorted(block_ids)
        got = np.array([row["embedding"] for row in rows], dtype=np.float32)
        assert cosines(got, np.stack([expected[row["block_id"]] for row in rows])).min() >= 0.999

    return check


def test_workers_embed_a_bert_run_without_its_bert_directory(tmp_path, blocks_table, block_entities_table):
    # run.json's bert_dir is a path on the machine that started the run: a Dataflow worker has
    # no such directory, so it must embed from the snapshot and what the launcher hands it.
    bert = save_tiny_bert(tmp_path / "bert")
    bert_tokenizer = WordPieceTokenizer(bert)
    blocks = pa.Table.from_pylist([
        {**row, "title_token_ids": bert_tokenizer.encode(row["title"]), "body_token_ids": bert_tokenizer.encode(row["text"])}
        for row in blocks_table.to_pylist()
    ], schema=BLOCKS)
    layout = make_run(tmp_path / "run", blocks, block_entities_table,
                      ModelConfig.preset("random-2l", bert_dir=str(bert)), bert_dir=str(bert))
    snapshot = layout.snapshots / str(SNAPSHOT_STEP)
    fitted = pa.Table.from_batches([fit_block_batch(b, BLOCK_WORDPIECES) for b in blocks.to_batches()])
    embed_blocks(load_pretrained(Embedder, snapshot), bert_tokenizer, fitted, str(tmp_path / "in_process"), SNAPSHOT_STEP)
    in_process_ids, in_process = load_embeddings(str(tmp_path / "in_process"))

    options = PipelineOptions([f"--max_block_wordpieces={BLOCK_WORDPIECES}", "--embed_batch_blocks=3",
                               "--embed_window_blocks=4"]).view_as(RealmOptions)
    handler = embed.doc_tower_handler(str(layout.root), str(snapshot), options, torch_threads=1)
    bert.rename(tmp_path / "bert-elsewhere")
    # A worker process of its own: nothing the launching process loaded is there.
    worker = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=multi_processing"])
    with TestPipeline(options=worker) as pipeline:
        embedded = pipeline | beam.Create(blocks.to_pylist()) | EmbedBlocks(handler, len(BERT_VOCABULARY), SNAPSHOT_STEP)
        assert_that(embedded["embeddings"], embedded_as(in_process_ids.tolist(), in_process))
        assert_that(embedded["dead_letter"], equal_to([]), label="NoDeadLetters")


def test_a_step_without_a_snapshot_stops_before_beam_starts(tiny_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="--step 9: no file matches it"):
        embed.run([f"--run={tiny_run.root}", "--step=9", f"--output={tmp_path / 'out'}"])
    assert not (tmp_path / "out").exists()


def _refresh(layout: RunLayout, config, **embedder) -> MipsIndex:
    """What pre-training's refresh task runs: `rebuild_index` with the snapshot of step 3."""
    path = rebuild_index(layout.blocks, str(layout.snapshots / str(SNAPSHOT_STEP)), layout.embeddings, layout.index,
                         SNAPSHOT_STEP, config, keep=None, max_block_wordpieces=BLOCK_WORDPIECES, **embedder)
    return MipsIndex.load(path, config.retrieval_dim)


def test_a_refresh_by_the_pipeline_builds_the_in_process_refreshs_index(
    tmp_path, blocks_table, block_entities_table, tiny_config
):
    by_pipeline = make_run(tmp_path / "pipeline", blocks_table, block_entities_table, tiny_config)
    in_process = make_run(tmp_path / "in_process", blocks_table, block_entities_table, tiny_config)
    pipeline_index = _refresh(by_pipeline, tiny_config, embed_into=partial(
        embed_into, run_root=str(by_pipeline.root), step=SNAPSHOT_STEP, max_block_wordpieces=BLOCK_WORDPIECES))
    in_process_index = _refresh(in_process, tiny_config)

    queries = np.random.default_rng(0).standard_normal((16, tiny_config.retrieval_dim)).astype(np.float32)
    k = 4
    assert pipeline_index.search(queries, k)[1].tolist() == in_process_index.search(queries, k)[1].tolist()
    # Published as the in-process refresh publishes: the step's directory alone, nothing of Beam's beside it.
    assert sorted(p.name for p in (by_pipeline.root / "embeddings").iterdir()) == [str(SNAPSHOT_STEP)]
    published = [p.name for p in (by_pipeline.root / "embeddings" / str(SNAPSHOT_STEP)).iterdir()]
    assert {name for name in published if not name.startswith("embed-")} == {"manifest.json"}


def test_a_refresh_by_the_pipeline_fails_on_a_block_it_dead_letters(tiny_run, tiny_config):
    with pytest.raises(ValueError, match="embed_token_id_out_of_vocabulary"):
        _refresh(tiny_run, tiny_config, embed_into=partial(
            embed_into, run_root=str(tiny_run.root), step=SNAPSHOT_STEP, max_block_wordpieces=BLOCK_WORDPIECES))
