"""`realm index`: a trained run answers from another knowledge corpus without re-training.

Any `realm prepare` output (or its `blocks/`) is copied into the run as
`corpora/<name>/blocks/` and `corpora/<name>/block_entities/` (read and written through their
schemas, so a file that breaks the contract is refused naming it, and the entities checked to
tag exactly those blocks) and indexed by the doc tower that built the index the run
fine-tuned against, at the same block length: the query tower and reader were trained on
exactly those vectors. Indexing the same name again after the corpus changed re-embeds only
the blocks whose content changed (`realm.model.index.corpus_index`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from realm.model.index.block_store import entities_in_id_order, tagged_entities
from realm.model.index.corpus_index import CorpusIndexUpdate, index_corpus
from realm.model.index.lineage import WEIGHTS_FILE, read_lineage
from realm.model.publish import read_manifest, replace_dir
from realm.model.networks.config import ModelConfig
from realm.model.networks.presets import check_prepared_vocabulary
from realm.model.qa.trained_run import TrainedRun
from realm.schemas import BLOCK_ENTITIES, BLOCKS, read_table, write_table
from realm.schemas.io import parquet_files
from realm.schemas.leftovers import remove_leftovers
from realm.schemas.run_layout import RunLayout
from realm.schemas.writer_lock import writer_lock


def trained_doc_tower(index_path: str | os.PathLike) -> tuple[Path, int, int | None]:
    """(doc-tower snapshot dir, its step, the block length it embedded at, None when the index
    predates lineage) of a published dense index `<root>/index/<step>/`: the snapshot it was
    embedded with lives at `<root>/snapshots/<step>/` (`realm.flows.realm_pretrain`)."""
    index_path = Path(index_path)
    manifest = read_manifest(index_path)
    if manifest.get("index_type") == "bm25":
        raise ValueError(f"{index_path}: a BM25 index; `realm index` embeds with a dense run's doc tower")
    lineage = read_lineage(index_path) or {}
    step = lineage.get("doc_tower", {}).get("step", manifest["checkpoint_step"])
    snapshot = index_path.parent.parent / "snapshots" / str(step)
    if not (snapshot / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{snapshot}: the doc tower that embedded {index_path} is gone ({WEIGHTS_FILE} missing)")
    return snapshot, step, lineage.get("max_block_wordpieces")


def index_other_corpus(
    run_root: str | os.PathLike,
    corpus: str | os.PathLike,
    name: str,
    max_block_wordpieces: int | None = None,
    device: torch.device | None = None,
) -> CorpusIndexUpdate:
    """Copy the blocks of `corpus` (a prepared run root or its blocks/) into
    `<run_root>/corpora/<name>/` and publish the next version of its index; see the module
    docstring. `max_block_wordpieces` is needed only for an index built before its block
    length was recorded."""
    trained = TrainedRun.at(run_root)
    snapshot, step, recorded_length = trained_doc_tower(trained.index)
    length = recorded_length or max_block_wordpieces
    if length is None:
        raise ValueError(
            f"{trained.index} records no block length (built before lineage was recorded); pass the run's "
            "pre-training block length (realm index --max-block-wordpieces)"
        )
    if recorded_length is not None and max_block_wordpieces not in (None, recorded_length):
        raise ValueError(f"{trained.index} was embedded at {recorded_length} wordpieces a block, not {max_block_wordpieces}")
    source = Path(corpus)
    source = source / "blocks" if (source / "blocks").is_dir() else source
    if not source.is_dir():
        raise FileNotFoundError(f"{corpus}: not a prepared corpus (no blocks/ directory)")
    entities = tagged_entities(source)
    # Blocks cut with another vocabulary would be other words to the run's doc tower.
    check_prepared_vocabulary(RunLayout.at(source.parent), trained.bert_dir)
    other = RunLayout.at(run_root).corpus(name)
    blocks, tagged = read_table(str(source), BLOCKS), read_table(entities, BLOCK_ENTITIES)
    if blocks.num_rows == 0:
        raise ValueError(f"{source}: the corpus holds no blocks")
    _check_ids_unique(blocks, source)
    entities_in_id_order(tagged, np.sort(blocks["block_id"].to_numpy()), entities)
    with writer_lock(other.root, f"corpus {name!r}"):
        remove_leftovers(other.root)  # the staged copies of an attempt that was killed
        staged: list[Path] = []
        try:
            staged_blocks = _stage(blocks, Path(other.blocks), BLOCKS, staged)
            staged_entities = _stage(tagged, Path(other.block_entities), BLOCK_ENTITIES, staged)
            update = index_corpus(
                str(staged_blocks), str(snapshot), step, other.embeddings, other.index,
                ModelConfig.preset(trained.model_preset, bert_dir=trained.bert_dir), length, device, corpus_name=name, source=str(source.resolve()),
            )
            # A crash between the two leaves entities that tag other blocks: loading them refuses that, naming them,
            # and indexing the name again mends it.
            replace_dir(staged_entities, Path(other.block_entities))
            replace_dir(staged_blocks, Path(other.blocks))
        finally:  # a failed attempt leaves no copy of the corpus behind (a replaced one is gone already)
            for path in staged:
                shutil.rmtree(path, ignore_errors=True)
    return update


def _check_ids_unique(blocks: pa.Table, source: Path) -> None:
    """A ValueError naming a block id that several rows hold and the files holding it (two
    prepared corpora's shards copied into one blocks/ directory repeat ids)."""
    ids, counts = np.unique(blocks["block_id"].to_numpy(), return_counts=True)
    if (counts > 1).any():
        repeated = int(ids[counts > 1][0])
        files = [Path(f).name for f in parquet_files(str(source))
                 if repeated in read_table(f, BLOCKS, columns=["block_id"])["block_id"].to_pylist()]
        raise ValueError(
            f"{source}: block_id {repeated} is held by {int(counts[ids == repeated][0])} rows (in {', '.join(files)}); "
            f"{int((counts > 1).sum())} ids repeat in all: each block needs its own id"
        )


def _stage(table: pa.Table, target: Path, schema: pa.Schema, staged: list[Path]) -> Path:
    """`table` written through `schema` beside `target` under a hidden name (a leftover's, should
    the process be killed: `realm.schemas.leftovers`), added to `staged`."""
    path = target.with_name(f".staging-{target.name}-{os.getpid()}")
    staged.append(path)
    shutil.rmtree(path, ignore_errors=True)
    write_table(str(path / "part-00000.parquet"), table, schema)
    return path
