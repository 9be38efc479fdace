"""The progress a trainer reports: steps/s over recent updates and the ETA, in the dict it
hands to a `ProgressFn` (the Prefect flows log it and draw its curves)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

# A trainer calls this every `log_every` steps with `Progress.update`'s dict.
ProgressFn = Callable[[dict], None]


class Progress:
    """Steps/s over a sliding window of recent updates, and the ETA to `total_steps`.

    `start_step` is where this process began (a resumed run's checkpoint step), so the rate
    counts only steps this process ran. `clock` is injectable for tests.
    """

    def __init__(
        self,
        total_steps: int,
        start_step: int = 0,
        window: int = 20,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.total_steps = total_steps
        self.clock = clock
        self.started = clock()
        self._marks: deque[tuple[int, float]] = deque([(start_step, self.started)], maxlen=window + 1)

    def steps_per_s(self) -> float:
        (first_step, first_time), (last_step, last_time) = self._marks[0], self._marks[-1]
        return (last_step - first_step) / (last_time - first_time) if last_time > first_time else 0.0

    def update(self, step: int, **metrics) -> dict:
        """`metrics` plus step, total_steps, steps_per_s, eta_s (None until a rate is known),
        elapsed_s; `step` is the number of completed steps."""
        now = self.clock()
        self._marks.append((step, now))
        rate = self.steps_per_s()
        return {
            **metrics,
            "step": step,
            "total_steps": self.total_steps,
            "steps_per_s": rate,
            "eta_s": (self.total_steps - step) / rate if rate > 0 else None,
            "elapsed_s": now - self.started,
        }
