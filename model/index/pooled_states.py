"""The doc tower's pooled final states of every block, computed once, and indexes re-projected from them.

When only the doc tower's projection learns (pre-training's `doc_tower = "projection"`), its BERT
never changes, so neither do the pooled states of the blocks: a training step projects the
candidates' states with the current projection (gradient into it alone), and a refresh projects
the whole corpus again (`reproject_index`), a matrix product in place of a BERT pass over it.

States are published as `<root>/<body>-<max_block_wordpieces>/0/` (POOLED_STATES, with a manifest),
`body` a digest of the tower's BERT weights: a doc-tower snapshot finds the states of its own BERT
and blocks cut as its index cuts them, and never another's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from realm.model.index import EMBED_BATCH_BLOCKS, EMBED_WINDOW_BLOCKS
from realm.model.index.block_store import count_blocks
from realm.model.index.embed_corpus import block_windows, embed_window, write_embeddings
from realm.model.index.lineage import doc_tower_fingerprint
from realm.model.index.rebuild import fitted_block_batches, publish_embeddings_and_index
from realm.model.networks.config import ModelConfig, load_pretrained
from realm.model.networks.retriever import Embedder
from realm.model.progress import ProgressBar
from realm.model.publish import latest_verified, publish, staging_dir
from realm.schemas import POOLED_STATES, read_table


def body_digest(embedder: Embedder) -> str:
    """sha256 (16 hex digits) of the tower's BERT weights, in parameter order."""
    digest = hashlib.sha256()
    for name, tensor in embedder.bert.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def states_root(root: str | Path, embedder: Embedder, max_block_wordpieces: int) -> Path:
    return Path(root) / f"{body_digest(embedder)}-{max_block_wordpieces}"


@dataclass(frozen=True)
class PooledStates:
    block_ids: np.ndarray  # [n] int64, ascending
    states: np.ndarray  # [n, hidden] float32

    @classmethod
    def load(cls, path: str | Path) -> PooledStates:
        table = read_table(str(path), POOLED_STATES)  # rows by block_id
        states = np.array(table["state"].combine_chunks().flatten().to_numpy(), dtype=np.float32)  # writable, for torch
        return cls(table["block_id"].to_numpy(), states.reshape(table.num_rows, -1))

    def lookup(self, block_ids: np.ndarray) -> np.ndarray:
        """[len(block_ids), hidden] states of these blocks; KeyError naming one the corpus lacks."""
        rows = np.searchsorted(self.block_ids, block_ids)
        missing = (rows >= len(self.block_ids)) | (self.block_ids[np.minimum(rows, len(self.block_ids) - 1)] != block_ids)
        if missing.any():
            raise KeyError(f"block {int(np.asarray(block_ids)[missing][0])} has no pooled state")
        return self.states[rows]


def publish_pooled_states(
    doc_embedder: Embedder, model_config: ModelConfig, blocks_path: str, root: str, max_block_wordpieces: int,
    device: torch.device, batch_size: int = EMBED_BATCH_BLOCKS, window_blocks: int = EMBED_WINDOW_BLOCKS,
) -> Path:
    """The published states of `doc_embedder`'s BERT over the blocks cut to `max_block_wordpieces`:
    those already published, else computed now (eval mode, the model preset's autocast)."""
    target = states_root(root, doc_embedder, max_block_wordpieces)
    if (published := latest_verified(target)) is not None:
        return published
    staging = staging_dir(target, 0)
    was_training = doc_embedder.training
    doc_embedder.eval()
    tokenizer = model_config.tokenizer()
    try:
        with (
            pq.ParquetWriter(staging / "part-00000.parquet", POOLED_STATES) as writer,
            ProgressBar("pooled states", count_blocks(blocks_path), "blocks") as bar,
        ):
            for window in block_windows(fitted_block_batches(blocks_path, max_block_wordpieces), window_blocks):
                states = embed_window(
                    doc_embedder, tokenizer, window, batch_size, device, model_config.cpu_bf16_autocast, bar.advance,
                    pooled=True,
                )
                rows = pa.ListArray.from_arrays(
                    pa.array(np.arange(0, states.size + 1, states.shape[1]), pa.int32()), pa.array(states.ravel())
                )
                writer.write_table(pa.Table.from_arrays([window["block_id"].combine_chunks(), rows], schema=POOLED_STATES))
    finally:
        doc_embedder.train(was_training)
    return publish(staging, target, 0)


def reproject_index(
    states_root_dir: str, doc_embedder_dir: str, embeddings_root: str, index_root: str, snapshot_step: int,
    keep: int | None, max_block_wordpieces: int,
) -> str:
    """`rebuild_index` for a doc tower whose BERT never trained: the published pooled states of
    its BERT (under `states_root_dir`) projected by the snapshot's projection, published as
    `<embeddings_root>/<snapshot_step>/` and indexed as `<index_root>/<snapshot_step>/`."""
    doc_embedder = load_pretrained(Embedder, doc_embedder_dir)
    source = latest_verified(states_root(states_root_dir, doc_embedder, max_block_wordpieces))
    if source is None:
        raise FileNotFoundError(
            f"{states_root_dir}: no pooled states of the BERT of {doc_embedder_dir} at {max_block_wordpieces} wordpieces"
        )
    pooled = PooledStates.load(source)
    with torch.no_grad():
        vectors = doc_embedder.project(torch.from_numpy(pooled.states)).float().numpy()
    staging = staging_dir(embeddings_root, snapshot_step)
    write_embeddings(str(staging), pooled.block_ids, vectors, snapshot_step, part=0)
    return str(publish_embeddings_and_index(
        staging, embeddings_root, index_root, snapshot_step, keep, doc_embedder_dir,
        doc_tower_fingerprint(doc_embedder_dir, snapshot_step), max_block_wordpieces, pooled_states=str(source),
    ))
