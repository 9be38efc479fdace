"""A realm run killed with SIGKILL leaves Prefect's temporary server running; the next run stops it."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from realm.cli import prefect_server

# What `realm run` does, cut to its Prefect part: the CLI's install, then a flow that runs
# until the test kills the process (the flow starts the temporary server, as every flow does).
A_RUN = textwrap.dedent("""
    import time
    from prefect import flow
    from realm.cli import prefect_server

    prefect_server.install()

    @flow(name="realm-until-killed")
    def until_killed():
        print("flow running", flush=True)
        time.sleep(600)

    until_killed()
""")


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A user state directory and Prefect home of the test's own; no Prefect server configured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), PREFECT_HOME=str(tmp_path / "prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false")
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    return env


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_a_killed_runs_server_is_stopped_by_the_next_run_and_a_live_runs_is_not(state):
    run = subprocess.Popen([sys.executable, "-c", A_RUN], env=state, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        records = prefect_server.records_dir()
        _wait_for(lambda: list(records.glob("*.json")), 120, "the server's record")
        record = json.loads(next(records.glob("*.json")).read_text())
        assert record["owner_pid"] == run.pid
        server = (record["server_pid"], record["server_started"])
        assert httpx.get(f"http://127.0.0.1:{record['port']}/api/health", timeout=5).status_code == 200
        assert run.stdout.readline() == "flow running\n"

        assert prefect_server.stop_orphaned_servers() == []  # its run is alive: left alone
        assert prefect_server.start_time(server[0]) == server[1]

        run.send_signal(signal.SIGKILL)  # no exit handler runs
        run.wait(timeout=10)
        time.sleep(1)
        assert prefect_server.start_time(server[0]) == server[1], "the server died with its run: nothing to test"

        assert prefect_server.stop_orphaned_servers() == [record]
        assert prefect_server.start_time(server[0]) is None
        assert list(records.glob("*.json")) == []
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{record['port']}/api/health", timeout=5)
    finally:
        run.kill()
        run.wait()
        prefect_server.stop_orphaned_servers()  # a failed assertion leaves no server behind
