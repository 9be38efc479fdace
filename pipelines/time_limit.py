"""Calls run in a child process that is killed when one overruns its time.

Some C code cannot be interrupted from Python: mwparserfromhell's tokenizer runs in time
quadratic in a run of unclosed markup (earwig/mwparserfromhell#364: 2,000 unclosed `{{a|`
take 2.4 s on this CPU, and the time grows with the square of the run), and a Beam DoFn runs
off the main thread, where `signal.alarm` cannot reach. One such page would hold a worker for
hours. Here the call runs in a child process kept for the next calls, and a call that overruns
kills it; the next call starts a new one.
"""

from __future__ import annotations

import importlib
import multiprocessing
from collections.abc import Callable


class CallTimedOut(Exception):
    """A call overran its time; the child process running it was killed."""


class TimeLimitedCalls:
    """`fn(*args)` in a child process (spawned: forking a threaded Beam worker is unsafe),
    raising `CallTimedOut` after `timeout_s`. The child's start-up is not counted against a
    call. `close` ends the child."""

    def __init__(self, fn: Callable, timeout_s: float):
        self.fn, self.timeout_s = fn, timeout_s
        self._pool = None

    def __call__(self, *args):
        pool = self._pool or self._start()
        try:
            return pool.apply_async(self.fn, args).get(self.timeout_s)
        except multiprocessing.TimeoutError:
            self.close()
            raise CallTimedOut(f"{self.fn.__name__} ran past {self.timeout_s:g} s") from None

    def _start(self):
        self._pool = multiprocessing.get_context("spawn").Pool(1)
        self._pool.apply(_import, (self.fn.__module__,))  # its imports take seconds, not the first call's time
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _import(module: str) -> None:
    importlib.import_module(module)
