"""Embed every block of the corpus with the doc tower and write the `embeddings/` artifact.

Blocks stream in (a pyarrow Table, or record batches from `block_store.iter_block_batches`) and are
gathered into windows of `window_blocks`; within a window they are embedded under
`torch.inference_mode` in length-sorted batches (padding to the batch's longest block then
wastes little: unsorted batches cost 2.3x, design §5b), and each window is appended as a row
group to one Parquet part through `ParquetWriter`, so memory stays flat however large the
corpus. The part is written under a hidden temporary name and renamed when complete. Progress
(blocks embedded, rate, ETA) shows on stderr as it goes (`realm.model.progress`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from realm.model.index import EMBED_BATCH_BLOCKS, EMBED_WINDOW_BLOCKS
from realm.model.index.block_store import BLOCK_COLUMNS
from realm.model.networks.device import autocast
from realm.model.networks.inputs import block_sequence, length_sorted_groups, pad_batch
from realm.model.networks.retriever import Embedder
from realm.model.progress import ProgressBar
from realm.model.tokenization import WordPieceTokenizer
from realm.schemas import EMBEDDING_DIM, EMBEDDINGS, read_table, validate_table, write_table
from realm.schemas.io import naming_damage, open_parquet


@dataclass(frozen=True)
class EmbedStats:
    path: str
    num_blocks: int
    seconds: float


def block_windows(blocks: pa.Table | Iterable[pa.RecordBatch], window_blocks: int) -> Iterator[pa.Table]:
    batches = blocks.to_batches(max_chunksize=window_blocks) if isinstance(blocks, pa.Table) else blocks
    pending, pending_rows = [], 0
    for batch in batches:
        pending.append(batch.select(BLOCK_COLUMNS))
        pending_rows += batch.num_rows
        if pending_rows >= window_blocks:
            yield pa.Table.from_batches(pending)
            pending, pending_rows = [], 0
    if pending_rows:
        yield pa.Table.from_batches(pending)


def embed_window(
    doc_embedder: Embedder,
    tokenizer: WordPieceTokenizer,
    window: pa.Table,
    batch_size: int,
    device: torch.device,
    cpu_bf16_autocast: bool,
    progress: Callable[[int], None] | None = None,
    pooled: bool = False,
) -> np.ndarray:
    """[rows, dim] float32 embeddings of a window's blocks, in the window's row order, computed
    in length-sorted batches; `progress` is told each batch's block count once it is embedded.
    With `pooled`, the tower's pooled final states before its projection ([rows, hidden])."""
    sequences = [
        block_sequence(tokenizer, title, body)
        for title, body in zip(window["title_token_ids"].to_pylist(), window["body_token_ids"].to_pylist())
    ]
    encode = doc_embedder.pooled if pooled else doc_embedder
    width = doc_embedder.config.hidden_size if pooled else doc_embedder.config.retrieval_dim
    out = np.empty((window.num_rows, width), dtype=np.float32)
    with torch.inference_mode(), autocast(device, cpu_bf16_autocast):
        for rows in length_sorted_groups([len(ids) for ids, _ in sequences], batch_size):
            inputs = pad_batch([sequences[row] for row in rows], tokenizer.pad_id).to(device)
            out[rows] = encode(**inputs.as_kwargs()).float().cpu().numpy()
            if progress is not None:
                progress(len(rows))
    return out


def embed_blocks(
    doc_embedder: Embedder,
    tokenizer: WordPieceTokenizer,
    blocks: pa.Table | Iterable[pa.RecordBatch],
    out_dir: str,
    checkpoint_step: int,
    *,
    part: int = 0,
    batch_size: int = EMBED_BATCH_BLOCKS,
    window_blocks: int = EMBED_WINDOW_BLOCKS,
    device: torch.device | None = None,
    cpu_bf16_autocast: bool = False,
    total_blocks: int | None = None,
) -> EmbedStats:
    """Write `<out_dir>/part-<part>.parquet` (EMBEDDINGS schema), one row per block in input
    order. Use a fresh `out_dir` per snapshot (an older snapshot's parts would otherwise be
    read along with it). `total_blocks` (a Table's own row count when not given) is what the
    progress line's share and ETA count towards."""
    device = device or next(doc_embedder.parameters()).device
    if doc_embedder.config.retrieval_dim != EMBEDDING_DIM:
        raise ValueError(f"doc tower embeds in {doc_embedder.config.retrieval_dim}-d; EMBEDDINGS holds {EMBEDDING_DIM}")
    path = Path(out_dir) / f"part-{part:05d}.parquet"
    partial = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = doc_embedder.training
    doc_embedder.eval()
    if total_blocks is None and isinstance(blocks, pa.Table):
        total_blocks = blocks.num_rows
    started, num_blocks = time.perf_counter(), 0
    try:
        with (
            pq.ParquetWriter(partial, EMBEDDINGS) as writer,
            ProgressBar("embedding", total_blocks, "blocks") as bar,
        ):
            for window in block_windows(blocks, window_blocks):
                embeddings = embed_window(
                    doc_embedder, tokenizer, window, batch_size, device, cpu_bf16_autocast, bar.advance
                )
                writer.write_table(_embeddings_table(window["block_id"], embeddings, checkpoint_step))
                num_blocks += window.num_rows
        os.replace(partial, path)
    finally:
        doc_embedder.train(was_training)
        partial.unlink(missing_ok=True)
    return EmbedStats(path=str(path), num_blocks=num_blocks, seconds=time.perf_counter() - started)


def _embeddings_table(block_ids: pa.ChunkedArray | np.ndarray, embeddings: np.ndarray, checkpoint_step: int) -> pa.Table:
    ids = block_ids.combine_chunks() if isinstance(block_ids, pa.ChunkedArray) else pa.array(block_ids, pa.int64())
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(embeddings.ravel(), pa.float32()), EMBEDDING_DIM)
    steps = pa.array(np.full(len(embeddings), checkpoint_step, dtype=np.int64))
    return pa.Table.from_arrays([ids, vectors, steps], schema=EMBEDDINGS)


def write_embeddings(out_dir: str, block_ids: np.ndarray, embeddings: np.ndarray, checkpoint_step: int, part: int) -> str:
    """Vectors computed earlier (an incremental update's unchanged blocks) as
    `<out_dir>/part-<part>.parquet`, beside the parts `embed_blocks` writes."""
    return write_table(
        str(Path(out_dir) / f"part-{part:05d}.parquet"), _embeddings_table(block_ids, embeddings, checkpoint_step), EMBEDDINGS
    )


def load_embeddings(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(block_ids [n] int64, embeddings [n, 128] float32) of an `embeddings/` artifact."""
    return embedding_arrays(read_table(path, EMBEDDINGS, columns=["block_id", "embedding"]))


def embedding_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(block_ids [n] int64, embeddings [n, 128] float32) of EMBEDDINGS rows."""
    vectors = table["embedding"].combine_chunks().flatten().to_numpy()
    return table["block_id"].to_numpy(), vectors.reshape(-1, EMBEDDING_DIM).astype(np.float32, copy=False)


def embedding_batches(files: Iterable[str], batch_rows: int = 65_536) -> Iterator[pa.Table]:
    """The rows of EMBEDDINGS files, validated, `batch_rows` at a time, in the files' order: a
    reader holds one batch decoded, never a whole file (decoded at once, a file takes ~4x its
    vectors' size)."""
    for file in files:
        with naming_damage(file):  # damage may surface at any batch
            for batch in open_parquet(file).iter_batches(batch_size=batch_rows):
                yield validate_table(pa.Table.from_batches([batch]), EMBEDDINGS, file)
