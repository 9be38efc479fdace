import numpy as np
import pyarrow as pa
import pytest
import torch

from realm.model.index.corpus_index import index_corpus
from realm.model.index.embed_corpus import embed_window, load_embeddings
from realm.model.index.lineage import corpus_fingerprint, doc_tower_fingerprint, read_lineage
from realm.model.index.mips import MipsIndex
from realm.model.networks.config import build_component
from realm.model.networks.retriever import Embedder
from realm.schemas import BLOCKS, write_table

LENGTH = 64  # wordpieces a block is cut to, as pre-training's max_block_wordpieces would


def _tower(tmp_path, tiny_config, seed: int) -> str:
    torch.manual_seed(seed)
    path = tmp_path / f"tower-{seed}"
    build_component(Embedder, tiny_config).save_pretrained(path)
    return str(path)


def _write(path, table: pa.Table) -> str:
    write_table(str(path / "part-0.parquet"), table, BLOCKS)
    return str(path)


def _edited(blocks_table: pa.Table, tokenizer) -> pa.Table:
    """The corpus with Paris's block edited (a new id, as chunking gives changed content),
    Mount Everest's removed and one block added."""
    rows = [r for r in blocks_table.to_pylist() if r["title"] != "Mount Everest"]
    for row in rows:
        if row["title"] == "Paris":
            row.update(block_id=101, text="Paris is the capital of France, on the river Loire.")
            row["body_token_ids"] = tokenizer.encode(row["text"])
    added = dict(rows[0], block_id=202, title="Lyon", text="Lyon lies on the Rhone.", doc_id="test:Lyon")
    added.update(title_token_ids=tokenizer.encode("Lyon"), body_token_ids=tokenizer.encode(added["text"]))
    return pa.Table.from_pylist(rows + [added], schema=BLOCKS)


def _vectors(index_path: str) -> dict[int, np.ndarray]:
    index = MipsIndex.load(index_path)
    return {int(i): v for i, v in zip(index.block_ids, index.lookup(index.block_ids))}


def test_an_edited_corpus_re_embeds_only_the_blocks_that_changed(tmp_path, blocks_table, tokenizer, tiny_config):
    tower = _tower(tmp_path, tiny_config, seed=3)
    blocks = _write(tmp_path / "v0", blocks_table)
    roots = str(tmp_path / "embeddings"), str(tmp_path / "index")

    first = index_corpus(blocks, tower, 7, *roots, tiny_config, LENGTH, torch.device("cpu"))
    assert (first.version, first.blocks, first.embedded, first.reused, first.dropped) == (0, 8, 8, 0, 0)

    edited = _edited(blocks_table, tokenizer)
    second = index_corpus(_write(tmp_path / "v1", edited), tower, 7, *roots, tiny_config, LENGTH, torch.device("cpu"))
    # Paris's new block and Lyon's embedded; the other six carried over; old Paris and Everest dropped.
    assert (second.version, second.blocks, second.embedded, second.reused, second.dropped) == (1, 8, 2, 6, 2)
    assert second.path == str(tmp_path / "index" / "1")

    before, after = _vectors(first.path), _vectors(second.path)
    assert sorted(after) == sorted(edited["block_id"].to_pylist())
    for block_id in set(before) & set(after):
        np.testing.assert_array_equal(after[block_id], before[block_id])
    # The new blocks' vectors are what the tower gives them, cut to the same length.
    fresh = embed_window(Embedder.from_pretrained(tower), tokenizer, edited, 4, torch.device("cpu"), False)
    for row, block_id in enumerate(edited["block_id"].to_pylist()):
        if block_id in (101, 202):
            np.testing.assert_allclose(after[block_id], fresh[row], atol=1e-5)

    lineage = read_lineage(second.path)
    assert lineage["doc_tower"] == doc_tower_fingerprint(tower, 7)
    assert lineage["corpus"] == corpus_fingerprint(edited["block_id"].to_numpy())
    assert (lineage["version"], lineage["embedded"], lineage["reused"], lineage["dropped"]) == (1, 2, 6, 2)
    assert lineage["max_block_wordpieces"] == LENGTH


def test_vectors_of_another_doc_tower_or_block_length_are_never_reused(tmp_path, blocks_table, tiny_config):
    blocks = _write(tmp_path / "v0", blocks_table)
    roots = str(tmp_path / "embeddings"), str(tmp_path / "index")
    index_corpus(blocks, _tower(tmp_path, tiny_config, seed=3), 7, *roots, tiny_config, LENGTH)
    other_tower = index_corpus(blocks, _tower(tmp_path, tiny_config, seed=4), 9, *roots, tiny_config, LENGTH)
    assert (other_tower.embedded, other_tower.reused) == (8, 0)
    shorter = index_corpus(blocks, _tower(tmp_path, tiny_config, seed=4), 9, *roots, tiny_config, 32)
    assert (shorter.version, shorter.embedded, shorter.reused) == (2, 8, 0)
    same = index_corpus(blocks, _tower(tmp_path, tiny_config, seed=4), 9, *roots, tiny_config, 32)
    assert (same.version, same.embedded, same.reused, same.dropped) == (3, 0, 8, 0)
    ids, _ = load_embeddings(str(tmp_path / "embeddings" / "3"))
    assert sorted(ids.tolist()) == sorted(blocks_table["block_id"].to_pylist())


def test_an_empty_corpus_is_refused_naming_it(tmp_path, blocks_table, tiny_config):
    empty = _write(tmp_path / "empty", blocks_table.slice(0, 0))
    with pytest.raises(ValueError, match=f"{empty}: the corpus holds no blocks"):
        index_corpus(empty, _tower(tmp_path, tiny_config, seed=3), 0, str(tmp_path / "e"), str(tmp_path / "i"), tiny_config, LENGTH)


def test_damaged_vectors_of_the_previous_version_are_embedded_again_not_reused(tmp_path, blocks_table, tiny_config, caplog):
    blocks, tower = _write(tmp_path / "v0", blocks_table), _tower(tmp_path, tiny_config, seed=3)
    roots = str(tmp_path / "embeddings"), str(tmp_path / "index")
    first = index_corpus(blocks, tower, 7, *roots, tiny_config, LENGTH)
    part = tmp_path / "embeddings" / "0" / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the vectors: the file still reads
    part.write_bytes(bytes(data))
    again = index_corpus(blocks, tower, 7, *roots, tiny_config, LENGTH)
    assert (again.embedded, again.reused) == (8, 0)
    assert f"{part}: sha256 does not match" in caplog.text
    assert {k: v.tolist() for k, v in _vectors(again.path).items()} == {k: v.tolist() for k, v in _vectors(first.path).items()}
