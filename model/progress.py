"""Progress of a long step: a rate and ETA meter, and the line that shows it on stderr.

`Progress` measures items per second over a sliding window of recent updates and the ETA to a
total (the trainers hand its dict to their `ProgressFn`). `StatusLine` shows a changing status
text: on a terminal it redraws one line in place; anywhere else (a pipe, a log file, a
scheduler's worker) it writes a plain line every `log_every_s` seconds and the final one, so a
log gets one line per interval instead of one per update. `ProgressBar` is a counted step shown
on a StatusLine: bar, count, rate and ETA. Corpus embedding, evaluation and `realm prepare`'s
per-stage counts (`realm.pipelines.progress`) show themselves through these.

Free of torch: the Beam pipelines import it.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

LOG_EVERY_S = 10.0
REDRAW_EVERY_S = 0.5
BAR_WIDTH = 20


def format_duration(seconds: float | None) -> str:
    """`1h05m`, `3m07s`; `?` when not known."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


class Progress:
    """Steps/s over a sliding window of recent updates, and the ETA to `total_steps`.

    `start_step` is where this process began (a resumed run's checkpoint step), so the rate
    counts only steps this process ran. `total_steps` None: no ETA. `clock` is injectable
    for tests.
    """

    def __init__(
        self,
        total_steps: int | None,
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
            "eta_s": (self.total_steps - step) / rate if rate > 0 and self.total_steps is not None else None,
            "elapsed_s": now - self.started,
        }


class StatusLine:
    """A status text shown on `stream` (default stderr) as it changes; see the module docstring."""

    def __init__(
        self,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        log_every_s: float = LOG_EVERY_S,
        redraw_every_s: float = REDRAW_EVERY_S,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        # Only the thread that owns the terminal redraws: a background task's line (pre-training
        # refreshes its index beside the training loop's log lines) would be broken into by
        # other output, so it writes plain lines, which interleave cleanly.
        self.redraws = self.stream.isatty() and threading.current_thread() is threading.main_thread()
        self.interval_s = redraw_every_s if self.redraws else log_every_s
        self._due = clock() + (0.0 if self.redraws else log_every_s)
        self._drawn_width = 0

    def update(self, text: str) -> None:
        """Show `text` if its interval has passed since the last one shown."""
        now = self.clock()
        if now >= self._due:
            self._show(text)
            self._due = now + self.interval_s

    def close(self, text: str) -> None:
        """Show the final `text` whatever the interval; a redrawn line is ended."""
        self._show(text)
        if self.redraws:
            self.stream.write("\n")
            self.stream.flush()

    def _show(self, text: str) -> None:
        if self.redraws:
            # A line longer than the terminal wraps, and `\r` then redraws only its last row.
            text = text[: shutil.get_terminal_size().columns - 1]
            self.stream.write("\r" + text.ljust(self._drawn_width))
            self._drawn_width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


class ProgressBar:
    """`total` items of `unit` (None: not known ahead) done a few at a time, shown on a
    `StatusLine`; use it as a context manager, which shows the final line on leaving."""

    def __init__(
        self,
        label: str,
        total: int | None,
        unit: str,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self.meter = Progress(total, clock=clock)
        self.line = StatusLine(stream, clock)

    def advance(self, count: int) -> None:
        """`count` more items are done."""
        self.done += count
        self.line.update(self._text(self.meter.update(self.done)))

    def close(self) -> None:
        elapsed_s = self.meter.update(self.done)["elapsed_s"]
        rate = f", {self.done / elapsed_s:.1f} {self.unit}/s" if elapsed_s > 0 else ""
        self.line.close(f"{self.label}: {self.done:,} {self.unit} in {format_duration(elapsed_s)}{rate}")

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _text(self, metrics: dict) -> str:
        rate = f"{metrics['steps_per_s']:.1f} {self.unit}/s"
        if not self.total:
            return f"{self.label} {self.done:,} {self.unit}, {rate}"
        share = min(self.done / self.total, 1.0)
        filled = round(share * BAR_WIDTH)
        bar = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] " if self.line.redraws else ""
        return (
            f"{self.label} {bar}{self.done:,}/{self.total:,} {self.unit} ({share:.0%}), {rate}, "
            f"ETA {format_duration(metrics['eta_s'])}"
        )
