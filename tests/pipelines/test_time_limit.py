import time

import pytest

from realm.pipelines.time_limit import CallTimedOut, TimeLimitedCalls


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


def test_an_error_in_the_call_reaches_the_caller():
    calls = TimeLimitedCalls(int, timeout_s=30)
    try:
        assert calls("7") == 7
        with pytest.raises(ValueError, match="invalid literal"):
            calls("seven")
    finally:
        calls.close()
