"""Calls run in a child process that is killed when one overruns its time (POSIX).

Some C code cannot be interrupted from Python: mwparserfromhell's tokenizer runs in time
quadratic in a run of unclosed markup (earwig/mwparserfromhell#364), and a Python signal
handler only runs once the C call returns. One such page would hold a worker for
hours. Here each call runs in a child process kept for the next calls; a call that overruns
kills it, and the next call starts another. A child whose parent was killed (SIGKILL: nothing
left to kill it) ends at its next read of the pipe, or by its own alarm a few seconds after the
call's time, so no child outlives its call's limit by much.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

# How long a child may take to start (its imports): longer, and it is taken for one that cannot.
START_TIMEOUT_S = 120.0
# The child's own alarm goes off this long after the parent's limit, so the parent, when alive,
# is the one that ends an overrunning call (and says so).
ALARM_GRACE_S = 5.0


class CallTimedOut(Exception):
    """A call overran its time; the child process running it was killed."""


class CallFailed(Exception):
    """A call raised in the child (its type and message), or the child ended without an answer."""


class ChildStartFailed(RuntimeError):
    """The child process could not start: no call can run, whatever its arguments."""


class TimeLimitedCalls:
    """`fn(*args)` in a child process (spawned: forking a threaded Beam worker is unsafe),
    raising `CallTimedOut` after `timeout_s` and `CallFailed` for an error in the call or a child
    that died. The child's start-up is not counted against a call. `close` ends the child."""

    def __init__(self, fn: Callable, timeout_s: float):
        self.fn, self.timeout_s = fn, timeout_s
        self.name = getattr(fn, "__name__", repr(fn))
        self._process = self._connection = None

    def __call__(self, *args):
        if self._process is not None and not self._process.is_alive():
            self.close()  # it died between calls (the OOM killer's pick after a large page): start another
        connection = self._connection or self._start()
        try:
            connection.send(args)
            if not wait([connection, self._process.sentinel], self.timeout_s):
                self.close()
                raise CallTimedOut(f"{self.name} ran past {self.timeout_s:g} s")
            return self._answer()
        except (CallTimedOut, CallFailed):
            raise
        except OSError as error:  # the pipe broke: the child died as the call was sent
            self.close()
            raise CallFailed(f"the process running {self.name} ended: {error}") from None
        except BaseException:  # interrupted mid-call: its answer would be read as the next call's
            self.close()
            raise

    def _start(self) -> Connection:
        context = multiprocessing.get_context("spawn")
        connection, child_end = context.Pipe()
        process = context.Process(target=_serve, args=(child_end, self.fn, self.timeout_s + ALARM_GRACE_S), daemon=True)
        try:
            process.start()
        except BaseException:  # nothing started: nothing to keep
            connection.close()
            raise
        finally:
            child_end.close()
        self._process, self._connection = process, connection
        try:
            if not wait([connection, process.sentinel], START_TIMEOUT_S):
                self.close()
                raise ChildStartFailed(f"the process for {self.name} did not start within {START_TIMEOUT_S:g} s")
            self._answer()  # its "ready"
        except CallFailed as failure:
            raise ChildStartFailed(f"the process for {self.name} could not start: {failure}") from None
        except BaseException:  # interrupted: its "ready" would be read as the first call's answer
            self.close()
            raise
        return connection

    def _answer(self):
        try:
            failed, value = self._connection.recv()
        except (EOFError, OSError):  # the child ended: its end of the pipe closed unanswered
            self._process.join(1)
            exit_code = self._process.exitcode
            self.close()
            raise CallFailed(f"the process running {self.name} ended (exit code {exit_code})") from None
        if failed:
            raise CallFailed(value)
        return value

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._connection.close()
            self._process = self._connection = None


def _serve(connection: Connection, fn: Callable, alarm_s: float) -> None:
    """The child: answer `(failed, result or "Type: message")` to each call until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the child
    # An ignored or blocked SIGALRM survives exec; the alarm below must end the process.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    connection.send((False, None))
    while True:
        try:
            args = connection.recv()
        except EOFError:  # the parent closed its end, or ended
            return
        # SIGALRM's default action ends the process even inside C code.
        signal.setitimer(signal.ITIMER_REAL, alarm_s)
        try:
            answer = (False, fn(*args))
        except BaseException as error:  # sent as text: not every exception rebuilds in the parent
            answer = (True, f"{type(error).__name__}: {' '.join(str(error).split())}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        connection.send(answer)
