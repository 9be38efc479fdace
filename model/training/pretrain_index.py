"""The index pre-training retrieves from, over a run: the first one (`attach_index`), the
refreshed ones, asked for on schedule and swapped in between steps (`IndexRefreshes`), and the
final one, built by the final doc tower, that fine-tuning reads.

A refresh re-embeds the corpus with a snapshot of the doc tower (published as
`snapshots/<step>/`) and publishes `index/<snapshot step>/` while training goes on. Who runs it
is the caller's choice: the Prefect flow submits its refresh task (`RefreshFn`), a test may run
`rebuild_index` in place. The schedule is `realm.model.index.refresh.IndexRefreshScheduler`'s:
each refreshed index goes into use at a step fixed by its snapshot step, waited for if its
build is late, so the index of every step is the same in every run with the same seed. At
most one refresh is in flight; the trainer's checkpoints record it (`IndexRefreshes.in_flight`)
and a resumed run starts it again from the same snapshot. A failed one fails the run once its
retries are spent.

On several processes rank 0 alone builds, refreshes, publishes and prunes; every rank swaps in
the index rank 0 swaps in, at the same step (`rank_zeros_swap`), reading it from the run folder
(a folder every host sees).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from realm.model.index.mips import MipsIndex, latest_published
from realm.model.index.refresh import IndexRefreshScheduler
from realm.model.publish import IntegrityError, prune, read_manifest, verify_step
from realm.model.training.distributed import World, broadcast

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
    # doc_tower "projection": where the pooled states of the blocks are published (`realm.model.index.pooled_states`).
    pooled_states: str | None = None


def first_index(roots: IndexRoots, snapshot_step: int | None, build: Callable[[], tuple[str, int]]) -> tuple[str, int]:
    """The index a stage starts against, and the step of the doc tower that built it: on resume
    the published `<roots.index>/<snapshot_step>/` it was training against (so the resumed run
    retrieves what the uninterrupted one would); on a fresh run, or if that index is gone,
    `build()`'s, published now from the current doc tower."""
    if snapshot_step is not None:
        published = Path(roots.index) / str(snapshot_step)
        if published.is_dir():
            return str(published), snapshot_step
        log.warning("%s is gone; rebuilding the index from the current doc tower", published)
    return build()


def rank_zeros_swap(world: World, roots: IndexRoots, swapped: tuple[MipsIndex, int] | None) -> tuple[MipsIndex, int] | None:
    """Rank 0's index swap of this step (the index and its snapshot step, or None), on every
    rank: the others load what rank 0 published, `<roots.index>/<snapshot step>/`, which rank 0
    keeps while it is in use."""
    if world.size == 1:
        return swapped
    snapshot_step = broadcast(world, None if swapped is None else swapped[1])
    if world.leader or snapshot_step is None:
        return swapped
    return MipsIndex.load(Path(roots.index) / str(snapshot_step)), snapshot_step


class IndexRefreshes:
    """Refreshes of a stage's index: `before_step` starts one when the schedule says so and
    returns the refreshed index due at this step, to be swapped in; `in_flight` is the snapshot
    of the refresh in flight (for checkpoints); `records` holds one dict per swap (the refresh's
    result with swapped_at_step and staleness_steps); `final_index` gives the index fine-tuning
    reads. A refresh in flight at the checkpoint resumed from starts again from its snapshot, so
    it goes into use at the step it would have.

    `snapshot()` publishes the current doc tower under `roots.snapshots` and returns its path;
    `refresh_every` is None when the doc tower is frozen for the whole stage (cached mode, or the
    towers frozen to its end: it never changes, so the index in use stays current); `doc_tower_trains_from` is the step it starts training, before
    which no refresh starts (`IndexRefreshScheduler`).

    Retention: refreshes and snapshots publish without pruning (`refresh` must prune neither
    root), as while a newer index is published the one in use may be named by no checkpoint
    yet, so only this object knows to keep it. Each swap, and the final index, prunes the
    indexes, embeddings and then doc-tower snapshots up to the one in use to the newest `keep`
    plus those a manifest of the run uses: a checkpoint its index and its refresh in flight, an
    index the snapshot that embedded it. Newer ones (in flight) stay."""

    def __init__(
        self, refresh: RefreshFn, roots: IndexRoots, snapshot: Callable[[], str], refresh_every: int | None, keep: int,
        index_snapshot_step: int, in_flight: str | None, doc_tower_trains_from: int = 0,
    ):
        self.refresh, self.roots, self.snapshot, self.keep = refresh, roots, snapshot, keep
        self.frozen = refresh_every is None
        if self.frozen:
            log.info("doc tower frozen for the whole stage: the index of step %d stays current", index_snapshot_step)
            in_flight = None
        self.schedule = IndexRefreshScheduler(
            refresh_every, index_snapshot_step=index_snapshot_step, doc_tower_trains_from=doc_tower_trains_from,
            in_flight_snapshot_step=None if in_flight is None else int(Path(in_flight).name),
        )
        self.in_flight: str | None = in_flight
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
            self.in_flight = None
            return None
        log.info("restarting the refresh of step %d in flight at the checkpoint (due at step %d)", step, self.schedule.swap_step())
        return self.refresh(snapshot, step)

    def before_step(self, step: int) -> tuple[MipsIndex, int] | None:
        """(the refreshed index due at `step`, its snapshot step), or None; starts a refresh when due."""
        swapped = self._swap(step) if self.schedule.is_time_to_swap(step) else None
        if self.pending is None and self.schedule.is_time_to_refresh(step):
            self.schedule.refresh_started(step)
            self.in_flight = self.snapshot()
            self.pending = self.refresh(self.in_flight, step)
        return swapped

    def _swap(self, step: int) -> tuple[MipsIndex, int]:
        """The refresh due at `step`, waited for if it has not ended."""
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
        self._prune(snapshot_step)
        self.schedule.refresh_swapped(step)
        self.records.append({**refreshed, "swapped_at_step": step, "staleness_steps": step - snapshot_step})
        self.pending, self.in_flight = None, None
        return index, snapshot_step

    def _prune(self, step: int) -> None:
        # Snapshots last: an index pruned here no longer keeps the snapshot that embedded it.
        for root in (self.roots.index, self.roots.embeddings, self.roots.snapshots):
            prune(root, step, self.keep)

    def final_index(self, step: int, index_snapshot_step: int) -> str:
        """The index of the final doc tower (of `step`), once any refresh in flight has ended:
        with the tower frozen, the one in use (of `index_snapshot_step`; a newer one may exist
        from before a resume with the tower frozen); else the newest published one if it is of
        this step, else one refreshed now."""
        if self.pending is not None:
            self.pending.wait()
        if self.frozen:
            return str(Path(self.roots.index) / str(index_snapshot_step))
        final = latest_published(self.roots.index)
        if final is None or int(Path(final).name) != step:
            last = self.refresh(self.snapshot(), step)
            last.wait()
            final = last.result()["path"]
        self._prune(step)
        return str(final)
