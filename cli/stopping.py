"""Stopping any `realm` command within seconds of SIGTERM (what a scheduler or `timeout` sends)
or Ctrl-C, with a non-zero exit and its temporary Prefect server stopped.

The signal's own handling runs first: outside a flow it raises KeyboardInterrupt, so `finally`
blocks run; inside one, Prefect raises its TerminationSignal and marks the flow run crashed.
That exception reaches the top only after the flow's task runner has waited for its running
tasks (an index refresh may embed the whole corpus), so the process could run on long after
it was told to stop. A watcher thread therefore sees every signal as it arrives (through the
interpreter's wakeup file descriptor, which Prefect's own handler does not replace) and, if the
process is still alive `GRACE_S` later, stops its Prefect server and exits at once. Stopping at
any point is safe: every artifact and checkpoint is published by rename, and the next run
resumes from the last checkpoint (tests/flows/test_kill_and_resume.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# Long enough for Prefect to mark the flow run crashed, short enough for a scheduler's stop.
GRACE_S = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by `signum`."""
    return 128 + signum


class Stopped(KeyboardInterrupt):
    """Raised in the main thread when a stop signal arrives (a KeyboardInterrupt, so code that
    lets Ctrl-C through lets it through too)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame) -> None:
    raise Stopped(signum)


def _watch(read_fd: int) -> None:
    """Wait for the first stop signal, then give the main thread GRACE_S to end the process."""
    while True:
        received = os.read(read_fd, 64)
        if not received:
            return
        stop = next((number for number in received if number in STOP_SIGNALS), None)
        if stop is not None:
            break
    time.sleep(GRACE_S)
    print(f"realm: still running {GRACE_S:.0f} s after {signal.Signals(stop).name}; stopping now "
          "(the next run resumes from the last checkpoint)", file=sys.stderr, flush=True)
    # Only a command that ran flows started a server, and it imported this (Prefect) to do so.
    if "realm.cli.prefect_server" in sys.modules:
        sys.modules["realm.cli.prefect_server"].stop_own_servers()
    os._exit(exit_status(stop))


def install() -> None:
    """Route SIGTERM and SIGINT to `Stopped` and start the watcher. Call from the main thread."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # the interpreter writes it from its C signal handler
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read_fd,), name="realm-stop-watcher", daemon=True).start()
