import numpy as np
import pytest

from realm.model.index.bm25 import Bm25Index
from realm.model.index.mips import IndexIntegrityError, MipsIndex
from realm.model.publish import IntegrityError
from realm.schemas import BLOCKS, write_table
from tests.model.corpus_fixture import CORPUS

IDS = [block_id for block_id, _, _ in CORPUS]
TEXTS = [f"{title} {text}" for _, title, text in CORPUS]


@pytest.fixture(scope="module")
def index() -> Bm25Index:
    return Bm25Index.build(IDS, TEXTS)


def test_top_hit_is_the_block_sharing_the_rarest_stemmed_terms(index):
    scores, block_ids = index.search_texts(["Which composers became deaf?", "highest mountains"], 3)
    assert block_ids[:, 0].tolist() == [-3, 23]  # Beethoven ("deaf", "composer"), Everest ("highest", "mountain")
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first


def test_more_than_the_corpus_pads_like_the_dense_index(index):
    scores, block_ids = index.search_texts(["river"], 12)
    assert sorted(block_ids[0, :8].tolist()) == sorted(IDS)
    assert block_ids[0, 8:].tolist() == [-1] * 4 and np.isneginf(scores[0, 8:]).all()


def test_a_question_of_stopwords_alone_scores_zero_and_still_returns_k_blocks(index):
    scores, block_ids = index.search_texts(["what is the"], 3)
    assert scores.tolist() == [[0.0, 0.0, 0.0]] and set(block_ids[0]) <= set(IDS)


def test_saved_index_searches_alike_and_refuses_corruption_and_dense_indexes(index, tmp_path):
    path = index.save(tmp_path / "bm25")
    questions = ["Who wrote the first algorithm?", "Nobel prizes"]
    for got, want in zip(Bm25Index.load(path).search_texts(questions, 4), index.search_texts(questions, 4)):
        np.testing.assert_array_equal(got, want)

    dense = MipsIndex.build(np.eye(len(IDS), 128, dtype=np.float32), np.array(IDS)).save(tmp_path / "dense", 0)
    with pytest.raises(IndexIntegrityError, match="not 'bm25'"):
        Bm25Index.load(dense)
    with open(path / "block_ids.npy", "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(IntegrityError, match="block_ids.npy: size 200, manifest.json says 192"):
        Bm25Index.load(path)


def test_from_blocks_reads_the_validated_blocks_artifact(tmp_path, blocks_table):
    write_table(str(tmp_path / "blocks" / "part-0.parquet"), blocks_table, BLOCKS)
    index = Bm25Index.from_blocks(str(tmp_path / "blocks"))
    assert index.count == blocks_table.num_rows
    assert index.search_texts(["Seine Channel Havre"], 1)[1][0, 0] == 11
