"""Rebuilding the MIPS index from a doc-tower snapshot (REALM §3.4's asynchronous refresh):
re-embed every block, build the index, publish both the embeddings and the index atomically,
each with its manifest (`realm.model.publish`). Pre-training's refresh task and the
reproduction's shared base index call `rebuild_index`; blocks are cut to the trainer's length
first (`fit_block_batch`), so the index embeds the blocks the trainer re-embeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from realm.model.index.block_store import count_blocks, iter_block_batches
from realm.model.index.embed_corpus import embed_blocks, load_embeddings
from realm.model.index.lineage import doc_tower_fingerprint, index_lineage
from realm.model.index.mips import IndexConfig, MipsIndex
from realm.model.index.shards import build_sharded_index, split_embeddings
from realm.model.networks.config import ModelConfig, load_pretrained
from realm.model.networks.device import select_device
from realm.model.networks.retriever import Embedder
from realm.model.publish import publish, staging_dir
from realm.model.tokenization import BLOCK_SPECIAL_TOKENS, MAX_BLOCK_WORDPIECES
from realm.schemas import EMBEDDINGS, read_table
from realm.schemas.io import open_parquet, parquet_files_under

log = logging.getLogger(__name__)


def _cut_lists(column: pa.Array, budgets: np.ndarray) -> pa.Array:
    """Row i of a list<int32> column cut to its first budgets[i] values, without a Python
    object per row (the layout is values + offsets)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = column.offsets.to_numpy()
    lengths = np.diff(offsets)
    kept = np.minimum(lengths, np.maximum(budgets, 0))  # [rows]
    position = np.arange(offsets[-1] - offsets[0]) - np.repeat(offsets[:-1] - offsets[0], lengths)  # within its row
    values = column.values.to_numpy()[offsets[0] : offsets[-1]][position < np.repeat(kept, lengths)]
    new_offsets = np.concatenate([[0], np.cumsum(kept)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(new_offsets), pa.array(values, pa.int32()))


def fit_block_batch(batch: pa.RecordBatch, max_block_wordpieces: int) -> pa.RecordBatch:
    """Blocks cut so `[CLS] title [SEP] body [SEP]` <= max_block_wordpieces, as `join` cuts a
    pair: the title keeps up to max − 3 wordpieces, the body what is left."""
    if max_block_wordpieces >= MAX_BLOCK_WORDPIECES:
        return batch  # blocks/ already holds <= 288 (the schema's invariant)
    budget = max_block_wordpieces - BLOCK_SPECIAL_TOKENS
    titles = _cut_lists(batch["title_token_ids"], np.full(batch.num_rows, budget))
    bodies = _cut_lists(batch["body_token_ids"], budget - np.diff(titles.offsets.to_numpy()))
    columns = {name: batch[name] for name in batch.schema.names}
    columns.update(title_token_ids=titles, body_token_ids=bodies)
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=batch.schema)


def fitted_block_batches(blocks_path: str, max_block_wordpieces: int):
    """The blocks of `blocks_path`, batch by batch, cut to `max_block_wordpieces` (`fit_block_batch`)."""
    return (fit_block_batch(batch, max_block_wordpieces) for batch in iter_block_batches(blocks_path))


def embed_share(
    blocks_path: str,
    doc_embedder_dir: str,
    staging: str,
    snapshot_step: int,
    model_config: ModelConfig,
    device: torch.device | None,
    max_block_wordpieces: int,
    share: int = 0,
    shares: int = 1,
) -> None:
    """Embed the `share`-th of `shares` near-equal runs of the blocks, in block_id order, with
    the doc tower saved in `doc_embedder_dir`, into `<staging>/part-<share>.parquet`: the whole
    corpus by default; one rank's part of a refresh split across ranks
    (`realm.model.training.refresh_shares`), whose parts read in file order are the blocks in
    order, as one embedder's."""
    device = device or select_device()
    total = count_blocks(blocks_path)
    start, stop = total * share // shares, total * (share + 1) // shares
    cut = (fit_block_batch(batch, max_block_wordpieces) for batch in iter_block_batches(blocks_path, rows=(start, stop)))
    embed_blocks(
        load_pretrained(Embedder, doc_embedder_dir).to(device), model_config.tokenizer(), cut, staging, snapshot_step,
        part=share, device=device, cpu_bf16_autocast=model_config.cpu_bf16_autocast, total_blocks=stop - start,
    )


def rebuild_index(
    blocks_path: str,
    doc_embedder_dir: str,
    embeddings_root: str,
    index_root: str,
    snapshot_step: int,
    model_config: ModelConfig,
    keep: int | None,
    device: torch.device | None = None,
    max_block_wordpieces: int = MAX_BLOCK_WORDPIECES,
    embed_into: Callable[[str], None] | None = None,
    index_shards: int | None = None,
) -> str:
    """Re-embed every block with the doc tower saved in `doc_embedder_dir`, publish the
    embeddings as `<embeddings_root>/<snapshot_step>/`, build the MIPS index
    (`IndexConfig.for_corpus`, in `index_shards` shards when given) and publish it as
    `<index_root>/<snapshot_step>/`; returns that path. Of each root the newest `keep` steps
    are kept (and any a manifest uses; None: all).

    Loads its own copy of the tower and touches nothing of the trainer's, so it may run in a
    background thread while `train_step` runs in the main one. `max_block_wordpieces` must be
    the trainer's, so the index embeds the blocks the trainer re-embeds.

    `embed_into(staging)`, when given, writes the EMBEDDINGS parts into the staging directory
    instead of the in-process embedder (the Beam pipeline, `realm.pipelines.embed.embed_into`).
    """
    staging = staging_dir(embeddings_root, snapshot_step)
    started = time.perf_counter()
    if embed_into is not None:
        embed_into(str(staging))
    else:
        embed_share(blocks_path, doc_embedder_dir, str(staging), snapshot_step, model_config, device, max_block_wordpieces)
    published = publish_embeddings_and_index(
        staging, embeddings_root, index_root, snapshot_step, keep, doc_embedder_dir,
        doc_tower_fingerprint(doc_embedder_dir, snapshot_step), max_block_wordpieces, index_shards,
    )
    log.info(
        "index of step %d: blocks embedded and indexed in %.0f s, published %s",
        snapshot_step, time.perf_counter() - started, published,
    )
    return str(published)


def publish_embeddings_and_index(
    staging: Path,
    embeddings_root: str,
    index_root: str,
    step: int,
    keep: int | None,
    doc_embedder_dir: str,
    doc_tower: dict,
    max_block_wordpieces: int,
    index_shards: int | None = None,
    **lineage_extra,
) -> Path:
    """Publish the embeddings written into `staging` as `<embeddings_root>/<step>/`, build the
    MIPS index over them (`IndexConfig.for_corpus`, in `index_shards` shards when given) and
    publish it as `<index_root>/<step>/` with its lineage (`realm.model.index.lineage`;
    `lineage_extra` adds to it); returns the index's path. Of each root the newest `keep` steps
    are kept. The index uses the doc tower in `doc_embedder_dir` (`doc_tower` is its
    fingerprint): a doc-tower snapshot is kept as long as an index it embedded, which
    `realm index` embeds other corpora with.

    One shard is built here from the whole artifact loaded at once. Several are built by
    `build_sharded_index`, a process per shard from its own file of the embeddings
    (`split_embeddings`), so no process holds every vector."""
    staged = sum(open_parquet(file).metadata.num_rows for file in parquet_files_under(str(staging)))
    config = IndexConfig.for_corpus(staged, index_shards)
    if config.shards == 1:
        embeddings_dir = publish(staging, embeddings_root, step, keep)
        block_ids, vectors = load_embeddings(str(embeddings_dir))
        index = MipsIndex.build(vectors, block_ids, config)
        lineage = index_lineage(doc_tower, block_ids, max_block_wordpieces, **lineage_extra)
        return index.save(index_root, step, keep, lineage, uses=[doc_embedder_dir])
    split_embeddings(staging, config.shards)
    block_ids = read_table(str(staging), EMBEDDINGS, columns=["block_id"])["block_id"].to_numpy()  # for the lineage
    embeddings_dir = publish(staging, embeddings_root, step, keep)
    lineage = index_lineage(doc_tower, block_ids, max_block_wordpieces, **lineage_extra)
    built = build_sharded_index(embeddings_dir, index_root, step, config, keep=keep, lineage=lineage, uses=[doc_embedder_dir])
    return built.path
