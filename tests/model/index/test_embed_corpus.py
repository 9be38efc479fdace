import numpy as np
import pyarrow.parquet as pq
import torch

from realm.model.index.block_store import count_blocks, iter_block_batches
from realm.model.index.embed_corpus import embed_blocks, embed_window, load_embeddings
from realm.model.networks.inputs import block_sequence, pad_batch
from realm.model.networks.retriever import build_retriever
from realm.schemas import EMBEDDINGS, read_table, write_table


def _plain_forward(doc_embedder, tokenizer, blocks_table) -> np.ndarray:
    """One block at a time, in input order: no sorting, no padding."""
    rows = []
    with torch.no_grad():
        for title, body in zip(blocks_table["title_token_ids"].to_pylist(), blocks_table["body_token_ids"].to_pylist()):
            inputs = pad_batch([block_sequence(tokenizer, title, body)], tokenizer.pad_id)
            rows.append(doc_embedder(**inputs.as_kwargs())[0].numpy())
    return np.stack(rows)


def test_embeddings_validate_and_match_a_plain_forward(tiny_config, tokenizer, blocks_table, tmp_path, capsys):
    doc_embedder = build_retriever(tiny_config).doc_embedder.eval()
    blocks_dir = tmp_path / "blocks"
    write_table(str(blocks_dir / "part-0.parquet"), blocks_table, blocks_table.schema)

    stats = embed_blocks(
        doc_embedder,
        tokenizer,
        iter_block_batches(str(blocks_dir), batch_rows=3),
        str(tmp_path / "embeddings"),
        checkpoint_step=42,
        batch_size=2,
        window_blocks=5,  # two windows: 6 rows then 2
        total_blocks=count_blocks(str(blocks_dir)),
    )
    assert stats.num_blocks == len(blocks_table) == count_blocks(str(blocks_dir))
    # Off a terminal, a run shorter than the log interval shows its summary line alone.
    summaries = [line for line in capsys.readouterr().err.splitlines() if line.startswith("embedding:")]
    assert len(summaries) == 1 and summaries[0].startswith(f"embedding: {len(blocks_table)} blocks in ")
    assert pq.ParquetFile(stats.path).metadata.num_row_groups == 2
    table = read_table(str(tmp_path / "embeddings"), EMBEDDINGS)  # validates the schema
    assert table["checkpoint_step"].to_pylist() == [42] * len(blocks_table)

    block_ids, embeddings = load_embeddings(str(tmp_path / "embeddings"))
    in_id_order = blocks_table.sort_by("block_id")  # how blocks and embeddings are read back
    assert block_ids.tolist() == in_id_order["block_id"].to_pylist()
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(blocks_table), 128)
    np.testing.assert_allclose(embeddings, _plain_forward(doc_embedder, tokenizer, in_id_order), atol=2e-5)
    assert sorted(p.name for p in (tmp_path / "embeddings").iterdir()) == ["part-00000.parquet"]


def test_training_mode_is_restored(tiny_config, tokenizer, blocks_table, tmp_path):
    doc_embedder = build_retriever(tiny_config).doc_embedder.train()
    embed_blocks(doc_embedder, tokenizer, blocks_table, str(tmp_path), checkpoint_step=0)
    assert doc_embedder.training


def test_a_window_reports_each_batch_once_it_is_embedded(tiny_config, tokenizer, blocks_table):
    embedded = []
    embed_window(build_retriever(tiny_config).doc_embedder, tokenizer, blocks_table, 3, torch.device("cpu"), False,
                 progress=embedded.append)
    assert len(blocks_table) == 8 and embedded == [3, 3, 2]
