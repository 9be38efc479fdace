"""A stop signal ends a realm process within seconds, its Prefect server stopped, even while a
flow's task runner waits for a task that runs on (an index refresh embedding the corpus)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from realm.cli import prefect_server
from realm.cli.stopping import GRACE_S, exit_status

# What `realm run` does, cut to its stopping part: the CLI's installs, then a flow whose task
# runs for a minute after the flow is told to stop.
A_RUN = textwrap.dedent("""
    import sys, time
    from prefect import flow, task
    from realm.cli import prefect_server, stopping

    stopping.install()
    prefect_server.install()

    @task
    def refresh():
        time.sleep(60)

    @flow(name="realm-until-stopped")
    def until_stopped():
        refresh.submit()
        print("flow running", flush=True)
        time.sleep(60)

    try:
        until_stopped()
    except stopping.Stopped as stop:
        sys.exit(stopping.exit_status(stop.signum))
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_flow_waiting_on_its_task_exits_a_grace_period_after_the_signal_its_server_stopped(tmp_path, monkeypatch, signum):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), PREFECT_HOME=str(tmp_path / "prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false")
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    run = subprocess.Popen([sys.executable, "-c", A_RUN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline() == "flow running\n"
        (record,) = [json.loads(path.read_text()) for path in prefect_server.records_dir().glob("*.json")]
        run.send_signal(signum)
        sent = time.monotonic()
        _, err = run.communicate(timeout=GRACE_S + 60)
        waited = time.monotonic() - sent
    finally:
        run.kill()
        prefect_server.stop_orphaned_servers()  # a failed assertion leaves no server behind
    assert run.returncode == exit_status(signum) == 128 + signum
    assert waited < GRACE_S + 10, err[-3000:]
    assert prefect_server.start_time(record["server_pid"]) is None
    assert list(prefect_server.records_dir().glob("*.json")) == []
