import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from realm.pipelines.time_limit import ALARM_GRACE_S, CallFailed, CallTimedOut, ChildStartFailed, TimeLimitedCalls
from realm.schemas.leftovers import process_running


def _exit_now(code: int) -> None:
    os._exit(code)


def _sleep_after_writing_pid(path: str, seconds: float) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)


class _TwoArgumentError(Exception):
    def __init__(self, a, b):  # pickles with one argument, so it cannot be rebuilt in the parent
        super().__init__(f"{a} and {b}")


def _raise_two_argument_error() -> None:
    raise _TwoArgumentError("this", "that")


def test_calls_return_their_results_and_one_that_overruns_is_killed_while_the_next_one_runs():
    calls = TimeLimitedCalls(time.sleep, timeout_s=1)
    try:
        assert calls(0) is None
        started = time.monotonic()
        with pytest.raises(CallTimedOut, match="^sleep ran past 1 s$"):
            calls(60)
        assert time.monotonic() - started < 10  # killed, not waited for
        assert calls(0) is None  # a new child
    finally:
        calls.close()


def test_an_error_in_the_call_or_a_child_that_dies_is_a_call_failed_at_once_and_the_next_call_runs():
    calls = TimeLimitedCalls(int, timeout_s=60)
    try:
        assert calls("7") == 7
        with pytest.raises(CallFailed, match="^ValueError: invalid literal for int"):
            calls("seven")
        assert calls("8") == 8
    finally:
        calls.close()
    dying = TimeLimitedCalls(_exit_now, timeout_s=60)
    raising = TimeLimitedCalls(_raise_two_argument_error, timeout_s=60)
    try:
        started = time.monotonic()
        with pytest.raises(CallFailed, match=r"^the process running _exit_now ended \(exit code 3\)$"):
            dying(3)
        assert time.monotonic() - started < 30  # not the 60 s limit
        with pytest.raises(CallFailed, match="^_TwoArgumentError: this and that$"):
            raising()
    finally:
        dying.close()
        raising.close()


def test_a_child_whose_parent_is_killed_mid_call_ends_by_its_own_alarm(tmp_path):
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys; sys.path[:0] = %r\n"
        "from realm.pipelines.time_limit import TimeLimitedCalls\n"
        "from tests.pipelines.test_time_limit import _sleep_after_writing_pid\n"
        "TimeLimitedCalls(_sleep_after_writing_pid, timeout_s=5)(%r, 600)\n"
    ) % (sys.path, str(pid_file))])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.is_file() or not pid_file.read_text():
            assert time.monotonic() < deadline and parent.poll() is None, "the child never started its call"
            time.sleep(0.02)
    finally:
        parent.kill()  # before its 5 s limit: no one left to kill the child
        parent.wait()
    child = int(pid_file.read_text())
    assert process_running(child)  # the parent did not end it first
    deadline = time.monotonic() + 5 + ALARM_GRACE_S + 20
    while process_running(child):
        assert time.monotonic() < deadline, "the child outlived its call's limit"
        time.sleep(0.1)


def test_a_child_that_died_between_calls_is_replaced_and_one_that_cannot_start_is_an_error(tmp_path, monkeypatch):
    calls = TimeLimitedCalls(os.getpid, timeout_s=60)
    try:
        first = calls()
        os.kill(first, 9)  # as the OOM killer would, while it waits for the next page
        deadline = time.monotonic() + 30
        while process_running(first):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert calls() not in (first, None)
    finally:
        calls.close()
    # A function the child cannot import (its module gone since the parent imported it).
    (tmp_path / "vanishing.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from vanishing import double

    (tmp_path / "vanishing.py").unlink()
    unstartable = TimeLimitedCalls(double, timeout_s=60)
    with pytest.raises(ChildStartFailed, match=r"^the process for double could not start: .*exit code 1"):
        unstartable(2)
    # A function spawn cannot send at all: nothing is left half started, and closing is clean.
    unsendable = TimeLimitedCalls(lambda: None, timeout_s=60)
    with pytest.raises(Exception, match="pickle"):
        unsendable()
    unsendable.close()


def test_a_call_that_exits_or_is_interrupted_in_the_child_is_a_call_failed_naming_it():
    calls = TimeLimitedCalls(sys.exit, timeout_s=60)
    try:
        with pytest.raises(CallFailed, match="^SystemExit: 3$"):
            calls(3)
    finally:
        calls.close()
