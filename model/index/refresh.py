"""When to refresh the MIPS index, when to swap each refreshed one in, and how stale the one in
use is (REALM §3.4, Atlas's `IndexRefreshScheduler`): the training loop asks this object
instead of testing `step % n`.

A refresh snapshots the doc tower at some step s, re-embeds the corpus and builds an index
while training goes on. Its index goes into use at step s + `refresh_every_steps`, when the
next refresh starts, whenever the build ended: the index a step retrieves from is then a
function of the step alone, so two runs with the same seed, or a resumed run and an
uninterrupted one, train on the same retrievals (a build that is not done by then is waited
for). Staleness of a swap is the number of steps between its snapshot and the swap. At most
one refresh is in flight. `refresh_every_steps = None` never refreshes: a frozen doc tower
keeps its index current. Nor does a doc tower that has not started training: the first refresh
comes `refresh_every_steps` after `doc_tower_trains_from`, as an earlier one would rebuild the
index in use. Running the refresh is the caller's job (the pre-training loop asks
the flow for it, `realm.model.training.pretrain_index`); this object only keeps count.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IndexRefreshScheduler:
    refresh_every_steps: int | None
    index_snapshot_step: int | None = None  # snapshot step of the index in use (None: none yet)
    in_flight_snapshot_step: int | None = None  # a resumed run's refresh in flight at its checkpoint
    last_start_step: int | None = None  # None: that of the refresh in flight, else of the index in use
    doc_tower_trains_from: int = 0  # the first step that updates the doc tower
    staleness_at_swap: list[int] = field(default_factory=list)  # one entry per swap

    def __post_init__(self) -> None:
        if self.refresh_every_steps is not None and self.refresh_every_steps < 1:
            raise ValueError(f"refresh_every_steps must be >= 1, got {self.refresh_every_steps}")
        if self.in_flight_snapshot_step is not None and self.refresh_every_steps is None:
            raise ValueError("a refresh in flight needs refresh_every_steps")
        if self.last_start_step is None:
            self.last_start_step = (
                self.index_snapshot_step if self.in_flight_snapshot_step is None else self.in_flight_snapshot_step
            )

    def is_time_to_refresh(self, step: int) -> bool:
        """True when no refresh is running and `refresh_every_steps` have passed since the last
        one started (or none ever did) and since the doc tower started training; never without
        `refresh_every_steps`. Ask after `is_time_to_swap`: the refresh due now is swapped in first."""
        if self.refresh_every_steps is None or self.in_flight_snapshot_step is not None:
            return False
        if self.last_start_step is None:
            return True
        return step - max(self.last_start_step, self.doc_tower_trains_from) >= self.refresh_every_steps

    def swap_step(self) -> int | None:
        """The step whose training first retrieves from the refresh in flight: its snapshot
        step + `refresh_every_steps` (None: none in flight)."""
        if self.in_flight_snapshot_step is None:
            return None
        return self.in_flight_snapshot_step + self.refresh_every_steps

    def is_time_to_swap(self, step: int) -> bool:
        """True when the refresh in flight must go into use before `step` trains (waited for if
        it has not ended)."""
        swap_step = self.swap_step()
        return swap_step is not None and step >= swap_step

    def refresh_started(self, snapshot_step: int) -> None:
        """The doc tower was snapshotted at `snapshot_step` and a refresh began."""
        if self.in_flight_snapshot_step is not None:
            raise RuntimeError(f"a refresh from step {self.in_flight_snapshot_step} is still in flight")
        self.in_flight_snapshot_step = snapshot_step
        self.last_start_step = snapshot_step

    def refresh_swapped(self, step: int) -> int:
        """The in-flight refresh's index went into use at `step`; returns its staleness."""
        if self.in_flight_snapshot_step is None:
            raise RuntimeError("no refresh in flight to swap in")
        staleness = step - self.in_flight_snapshot_step
        self.index_snapshot_step = self.in_flight_snapshot_step
        self.in_flight_snapshot_step = None
        self.staleness_at_swap.append(staleness)
        return staleness

    def refresh_failed(self) -> None:
        """The in-flight refresh died; the next `is_time_to_refresh` may start another."""
        self.in_flight_snapshot_step = None

    def index_age(self, step: int) -> int | None:
        """Steps since the snapshot of the index in use was taken (None before the first swap)."""
        return None if self.index_snapshot_step is None else step - self.index_snapshot_step
