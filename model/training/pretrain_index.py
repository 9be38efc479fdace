"""The index pre-training retrieves from, over a run: the first one (`attach_index`), the
refreshed ones, asked for on schedule and swapped in between steps (`IndexRefreshes`), and the
final one, built by the final doc tower, that fine-tuning reads.

A refresh re-embeds the corpus with a snapshot of the doc tower (published as
`snapshots/<step>/`) and publishes `index/<snapshot step>/` while training goes on. Who runs it
is the caller's choice: the Prefect flow submits its refresh task (`RefreshFn`), a test may run
`rebuild_index` in place. The schedule is `realm.model.index.refresh.IndexRefreshScheduler`'s:
each refreshed index goes into use at a step fixed by its snapshot step, waited for if its
build is late, so the index of every step is the same in every run with the same seed. At
most one refresh is in flight; checkpoints record it (`PretrainTrainer.refresh_in_flight`) and
a resumed run starts it again from the same snapshot. A failed one fails the run once its
retries are spent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from realm.model.index.mips import MipsIndex, latest_published
from realm.model.index.rebuild import rebuild_index
from realm.model.index.refresh import IndexRefreshScheduler
from realm.model.publish import IntegrityError, prune, read_manifest, verify_step

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


# Starts re-embedding the corpus with the doc-tower snapshot saved in a directory at a step;
# publishes into the `IndexRoots`' index and embeddings roots, pruning neither.
RefreshFn = Callable[[str, int], PendingRefresh]


@dataclass(frozen=True)
class IndexRoots:
    """Where pre-training's indexes, their embeddings and the doc-tower snapshots they embed
    with are published (`<run>/index`, `embeddings`, `snapshots`: siblings, so `prune` sees
    every manifest of the run that uses one)."""

    index: str
    embeddings: str
    snapshots: str


def attach_index(trainer: PretrainTrainer, roots: IndexRoots) -> str:
    """Give `trainer` its first index: on resume, the published `<roots.index>/<snapshot step>/`
    it was training against (so the resumed run retrieves what the uninterrupted one would);
    on a fresh run, or if that index is gone, one built now from its current doc tower.
    Returns the published index path."""
    if trainer.index_snapshot_step is not None:
        published = Path(roots.index) / str(trainer.index_snapshot_step)
        if published.is_dir():
            index = MipsIndex.load(published, trainer.model_config.retrieval_dim)
            trainer.swap_index(index, trainer.index_snapshot_step)
            return str(published)
        log.warning("%s is gone; rebuilding the index from the doc tower of step %d", published, trainer.step)
    snapshot = trainer.snapshot_doc_tower(roots.snapshots)
    published = rebuild_index(
        trainer.blocks_path, snapshot, roots.embeddings, roots.index, trainer.step, trainer.model_config,
        trainer.config.keep_checkpoints, trainer.device, trainer.config.max_block_wordpieces,
    )
    trainer.swap_index(MipsIndex.load(published, trainer.model_config.retrieval_dim), trainer.step)
    return published


class IndexRefreshes:
    """Refreshes of `trainer`'s index: `before_step` swaps in the refresh due at this step and
    starts one when the schedule says so; `records` holds one dict per swap (the refresh's
    result with swapped_at_step and staleness_steps); `final_index` gives the index
    fine-tuning reads. A refresh in flight at the checkpoint the trainer resumed from starts
    again from its snapshot, so it goes into use at the step it would have.

    Retention: refreshes and snapshots publish without pruning (`refresh` must prune neither
    root), as while a newer index is published the one in use may be named by no checkpoint
    yet, so only this object knows to keep it. Each swap, and the final index, prunes the
    indexes, embeddings and then doc-tower snapshots up to the one in use to the newest
    `keep_checkpoints` plus those a manifest of the run uses: a checkpoint its index and its
    refresh in flight, an index the snapshot that embedded it. Newer ones (in flight) stay."""

    def __init__(self, trainer: PretrainTrainer, refresh: RefreshFn, roots: IndexRoots):
        self.trainer, self.refresh, self.roots = trainer, refresh, roots
        # A frozen doc tower (cached mode) never changes, so re-embedding the corpus with it
        # would rebuild the index in use (`attach_index` gave the one the tower built or, on
        # resume, the one the checkpoint trained against).
        self.frozen = trainer.config.cached_doc_embeddings
        if self.frozen:
            log.info("doc tower frozen (cached_doc_embeddings): the index of step %d stays current", trainer.index_snapshot_step)
        in_flight = None if self.frozen or trainer.step >= trainer.total_steps else trainer.refresh_in_flight
        self.schedule = IndexRefreshScheduler(
            None if self.frozen else trainer.config.refresh_every, index_snapshot_step=trainer.index_snapshot_step,
            in_flight_snapshot_step=None if in_flight is None else int(Path(in_flight).name),
        )
        self.pending: PendingRefresh | None = None if in_flight is None else self._restart(in_flight)
        self.records: list[dict] = []

    def _restart(self, snapshot: str) -> PendingRefresh | None:
        step = self.schedule.in_flight_snapshot_step
        try:
            verify_step(snapshot)
        except IntegrityError as problem:
            # Only a snapshot deleted or damaged by hand gets here: checkpoints keep theirs.
            log.warning("%s; the refresh of step %d in flight at the checkpoint is dropped", problem, step)
            self.schedule.refresh_failed()
            self.trainer.refresh_in_flight = None
            return None
        log.info("restarting the refresh of step %d in flight at the checkpoint (due at step %d)", step, self.schedule.swap_step())
        return self.refresh(snapshot, step)

    def _start(self) -> tuple[str, PendingRefresh]:
        snapshot = self.trainer.snapshot_doc_tower(self.roots.snapshots)
        return snapshot, self.refresh(snapshot, self.trainer.step)

    def before_step(self) -> None:
        step = self.trainer.step
        if self.schedule.is_time_to_swap(step):
            self._swap(step)
        if self.pending is None and self.schedule.is_time_to_refresh(step):
            self.schedule.refresh_started(step)
            self.trainer.refresh_in_flight, self.pending = self._start()

    def _swap(self, step: int) -> None:
        """Put the refresh due at `step` into use, waiting for it if it has not ended."""
        if not self.pending.done():
            started = time.perf_counter()
            self.pending.wait()
            log.warning(
                "step %d: waited %.1f s for the index refresh of step %d, due now: its build takes longer than "
                "refresh_every (%d steps)",
                step, time.perf_counter() - started, self.schedule.in_flight_snapshot_step, self.schedule.refresh_every_steps,
            )
        try:
            refreshed = self.pending.result()  # its retries are spent: fail loudly
        except Exception:
            self.schedule.refresh_failed()
            raise
        index = MipsIndex.load(refreshed["path"])
        snapshot_step = int(read_manifest(refreshed["path"])["checkpoint_step"])
        staleness = self.trainer.swap_index(index, snapshot_step)
        self._prune(snapshot_step)
        self.schedule.refresh_swapped(step)
        self.records.append({**refreshed, "swapped_at_step": step, "staleness_steps": staleness})
        self.pending, self.trainer.refresh_in_flight = None, None

    def _prune(self, step: int) -> None:
        # Snapshots last: an index pruned here no longer keeps the snapshot that embedded it.
        for root in (self.roots.index, self.roots.embeddings, self.roots.snapshots):
            prune(root, step, self.trainer.config.keep_checkpoints)

    def final_index(self) -> str:
        """The index of the final doc tower, once any refresh in flight has ended: with the
        tower frozen, the one in use (a newer one may exist from before a resume with the tower
        frozen); else the newest published one if it is of this step, else one refreshed now."""
        if self.pending is not None:
            self.pending.wait()
        if self.frozen:
            return str(Path(self.roots.index) / str(self.trainer.index_snapshot_step))
        final = latest_published(self.roots.index)
        if final is None or int(Path(final).name) != self.trainer.step:
            _, last = self._start()
            last.wait()
            final = last.result()["path"]
        self._prune(self.trainer.step)
        return str(final)
