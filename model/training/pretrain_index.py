"""The index pre-training retrieves from, over a run: the first one (`attach_index`), the
refreshed ones, asked for on schedule and swapped in between steps (`IndexRefreshes`), and the
final one, built by the final doc tower, that fine-tuning reads.

A refresh re-embeds the corpus with a snapshot of the doc tower and publishes
`index/<snapshot step>/` while training goes on. Who runs it is the caller's choice: the
Prefect flow submits its refresh task (`RefreshFn`), a test may run `rebuild_index` in place.
The schedule is `realm.model.index.refresh.IndexRefreshScheduler`'s; at most one refresh is in
flight, and a failed one fails the run once its retries are spent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from realm.model.index.mips import MipsIndex, latest_published
from realm.model.index.rebuild import rebuild_index
from realm.model.index.refresh import IndexRefreshScheduler
from realm.model.publish import read_manifest

if TYPE_CHECKING:
    from realm.model.training.train_pretrain import PretrainTrainer

log = logging.getLogger(__name__)


class PendingRefresh(Protocol):
    """A refresh in flight."""

    def done(self) -> bool:
        """Whether it has ended, published or failed."""

    def result(self) -> dict:
        """Once ended: {"path": the published index, ...} (recorded with the swap); raises its error if it failed."""

    def wait(self) -> None:
        """Block until it has ended, published or failed."""


# Starts re-embedding the corpus with the doc-tower snapshot saved in a directory at a step.
RefreshFn = Callable[[str, int], PendingRefresh]


def attach_index(trainer: PretrainTrainer, index_root: str, embeddings_root: str, snapshot_root: str) -> str:
    """Give `trainer` its first index: on resume, the published `<index_root>/<snapshot step>/`
    it was training against (so the resumed run retrieves what the uninterrupted one would);
    on a fresh run, or if that index is gone, one built now from its current doc tower.
    Returns the published index path."""
    if trainer.index_snapshot_step is not None:
        published = Path(index_root) / str(trainer.index_snapshot_step)
        if published.is_dir():
            index = MipsIndex.load(published, trainer.model_config.retrieval_dim)
            trainer.swap_index(index, trainer.index_snapshot_step)
            return str(published)
        log.warning("%s is gone; rebuilding the index from the doc tower of step %d", published, trainer.step)
    snapshot = trainer.snapshot_doc_tower(str(Path(snapshot_root) / str(trainer.step)))
    published = rebuild_index(
        trainer.blocks_path, snapshot, embeddings_root, index_root, trainer.step, trainer.model_config,
        trainer.config.keep_checkpoints, trainer.device, trainer.config.max_block_wordpieces,
    )
    trainer.swap_index(MipsIndex.load(published, trainer.model_config.retrieval_dim), trainer.step)
    return published


class IndexRefreshes:
    """Refreshes of `trainer`'s index: `before_step` starts one when the schedule says so and
    swaps a published one in; `records` holds one dict per swap (the refresh's result with
    swapped_at_step and staleness_steps); `final_index` gives the index fine-tuning reads."""

    def __init__(self, trainer: PretrainTrainer, refresh: RefreshFn, snapshot_root: str):
        self.trainer, self.refresh, self.snapshot_root = trainer, refresh, snapshot_root
        # A frozen doc tower (cached mode) never changes, so re-embedding the corpus with it
        # would rebuild the index in use (`attach_index` gave the one the tower built or, on
        # resume, the one the checkpoint trained against).
        self.frozen = trainer.config.cached_doc_embeddings
        if self.frozen:
            log.info("doc tower frozen (cached_doc_embeddings): the index of step %d stays current", trainer.index_snapshot_step)
        self.schedule = IndexRefreshScheduler(
            None if self.frozen else trainer.config.refresh_every,
            index_snapshot_step=trainer.index_snapshot_step, last_start_step=trainer.index_snapshot_step,
        )
        self.pending: PendingRefresh | None = None
        self.records: list[dict] = []

    def _start(self) -> PendingRefresh:
        step = self.trainer.step
        return self.refresh(self.trainer.snapshot_doc_tower(str(Path(self.snapshot_root) / str(step))), step)

    def before_step(self) -> None:
        step = self.trainer.step
        if self.pending is None and self.schedule.is_time_to_refresh(step):
            self.schedule.refresh_started(step)
            self.pending = self._start()
        if self.pending is not None and self.pending.done():
            try:
                refreshed = self.pending.result()  # its retries are spent: fail loudly
            except Exception:
                self.schedule.refresh_failed()
                raise
            index = MipsIndex.load(refreshed["path"])
            staleness = self.trainer.swap_index(index, int(read_manifest(refreshed["path"])["checkpoint_step"]))
            self.schedule.refresh_swapped(step)
            self.records.append({**refreshed, "swapped_at_step": step, "staleness_steps": staleness})
            self.pending = None

    def final_index(self, index_root: str) -> str:
        """The index of the final doc tower, once any refresh in flight has ended: with the
        tower frozen, the one in use (a newer one may exist from before a resume with the tower
        frozen); else the newest published one if it is of this step, else one refreshed now."""
        if self.pending is not None:
            self.pending.wait()
        if self.frozen:
            return str(Path(index_root) / str(self.trainer.index_snapshot_step))
        final = latest_published(index_root)
        if final is None or int(Path(final).name) != self.trainer.step:
            final = self._start().result()["path"]
        return str(final)
