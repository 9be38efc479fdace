"""An index over a knowledge corpus other than the one a run trained on, kept up to date
incrementally: REALM's knowledge lives in a corpus that can be swapped or edited without
re-training (Guu et al. 2020, §4.4).

Each `index_corpus` call publishes a new version `<index_root>/<v>/` (and its
`<embeddings_root>/<v>/`). Block ids are hashes of a block's title and body, so a block whose
content changed is a new id: only ids the previous version did not hold are embedded, the
vectors of unchanged blocks are carried over, and ids that left the corpus are dropped. The
previous vectors are reused only when they were embedded by the same doc tower (its weights'
sha256) at the same block length, and only when their files match their manifest; otherwise
every block is embedded again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from realm.model.index.block_store import iter_block_batches
from realm.model.index.embed_corpus import embed_blocks, load_embeddings, write_embeddings
from realm.model.index.lineage import doc_tower_fingerprint, lineage_mismatches
from realm.model.index.mips import latest_published
from realm.model.index.rebuild import fit_block_batch, publish_embeddings_and_index
from realm.model.networks.config import ModelConfig, load_pretrained
from realm.model.networks.device import select_device
from realm.model.networks.retriever import Embedder
from realm.model.publish import IntegrityError, staging_dir, verify_step

log = logging.getLogger(__name__)

# Versions of a corpus's index and embeddings kept: the newest, and the one before as a fallback.
VERSIONS_KEPT = 2


@dataclass(frozen=True)
class CorpusIndexUpdate:
    path: str  # the published index version
    version: int
    blocks: int  # in the corpus now
    embedded: int  # new or changed blocks, embedded by the doc tower
    reused: int  # unchanged blocks whose vectors were carried over
    dropped: int  # blocks of the previous version no longer in the corpus
    seconds: float


def index_corpus(
    blocks_path: str,
    doc_embedder_dir: str,
    doc_tower_step: int,
    embeddings_root: str,
    index_root: str,
    model_config: ModelConfig,
    max_block_wordpieces: int,
    device: torch.device | None = None,
    **lineage_extra,
) -> CorpusIndexUpdate:
    """Publish the next version of `<index_root>` over every block of `blocks_path`, embedded
    by the doc tower in `doc_embedder_dir` (cut to `max_block_wordpieces`, as the index the
    run trained against was); see the module docstring for what is re-embedded."""
    started = time.perf_counter()
    doc_tower = doc_tower_fingerprint(doc_embedder_dir, doc_tower_step)
    previous = latest_published(index_root)
    version = 0 if previous is None else int(previous.name) + 1
    kept_ids, kept_vectors = _reusable(previous, embeddings_root, doc_tower, max_block_wordpieces)
    corpus_ids = np.concatenate(
        [batch["block_id"].to_numpy() for batch in iter_block_batches(blocks_path, columns=["block_id"])] or [np.zeros(0, np.int64)]
    )
    if len(corpus_ids) == 0:
        raise ValueError(f"{blocks_path}: the corpus holds no blocks; nothing to index")
    reuse = np.isin(kept_ids, corpus_ids)
    new = pa.array(corpus_ids[~np.isin(corpus_ids, kept_ids)], pa.int64())

    staging = staging_dir(embeddings_root, version)
    device = device or select_device()
    doc_embedder = load_pretrained(Embedder, doc_embedder_dir).to(device)
    changed = (
        fit_block_batch(batch.filter(pc.is_in(batch["block_id"], value_set=new)), max_block_wordpieces)
        for batch in iter_block_batches(blocks_path)
    )
    stats = embed_blocks(
        doc_embedder, model_config.tokenizer(), changed, str(staging), doc_tower_step,
        device=device, cpu_bf16_autocast=model_config.cpu_bf16_autocast, total_blocks=len(new),
    )
    if reuse.any():
        write_embeddings(str(staging), kept_ids[reuse], kept_vectors[reuse], doc_tower_step, part=1)
    update = dict(embedded=stats.num_blocks, reused=int(reuse.sum()), dropped=int((~reuse).sum()))
    published = publish_embeddings_and_index(
        staging, embeddings_root, index_root, version, VERSIONS_KEPT, doc_embedder_dir, doc_tower, max_block_wordpieces,
        version=version, **update, **lineage_extra,
    )
    result = CorpusIndexUpdate(
        str(published), version, len(corpus_ids), seconds=time.perf_counter() - started, **update
    )
    log.info("corpus index version %d: %d blocks (%d embedded, %d reused, %d dropped) in %.0f s -> %s",
             version, result.blocks, result.embedded, result.reused, result.dropped, result.seconds, published)
    return result


def _reusable(
    previous: Path | None, embeddings_root: str, doc_tower: dict, max_block_wordpieces: int
) -> tuple[np.ndarray, np.ndarray]:
    """(block ids, vectors) of the previous version that the same doc tower at the same block
    length embedded; empty when there is none."""
    nothing = np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    if previous is None:
        return nothing
    # The corpus is not compared: an edited corpus reuses the vectors of the blocks it kept.
    stale = lineage_mismatches(previous, doc_tower, None, max_block_wordpieces)
    if stale:
        log.info("%s was embedded by another %s: every block is embedded again", previous, " and ".join(stale))
        return nothing
    embeddings = Path(embeddings_root) / previous.name
    try:
        verify_step(embeddings)  # damaged vectors reused would be wrong answers, silently
    except IntegrityError as problem:
        log.warning("%s: every block is embedded again", problem)
        return nothing
    return load_embeddings(str(embeddings))
