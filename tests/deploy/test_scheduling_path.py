"""The README's scheduling path, exactly as a user runs it, against a real local Prefect server
and process worker: `prefect server start`, `prefect work-pool create`, `prefect deploy --all`,
`prefect deployment ls`, `prefect worker start`, `prefect deployment run
'realm-pipeline/nightly-tiny'`, and the tiny run completing. A dependency drift that breaks any
step (fastapi 0.151-0.154 made `deploy` and `deployment ls` fail with 422; >= 0.155 killed flow
runs) fails here. Slow: minutes (`python -m pytest -m slow tests/deploy/test_scheduling_path.py`)."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFECT = [sys.executable, "-m", "prefect"]
RUN_TIMEOUT_S = 1500

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT_S + 300)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _prefect(env: dict, *args: str) -> str:
    done = subprocess.run([*PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"prefect {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "REALM_REPO": str(ROOT),
        "REALM_QA_DIR": str(ROOT / "flows" / "data" / "qa"),
    }
    process = subprocess.Popen([*PREFECT, "server", "start", "--port", str(port)], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, f"prefect server start exited {process.returncode}"
        assert time.monotonic() < deadline, "the Prefect server did not answer /api/health within 120 s"
        try:
            if httpx.get(f"{env['PREFECT_API_URL']}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(1)
    yield env
    process.terminate()
    process.wait(timeout=60)


def test_the_readme_scheduling_path_runs_the_nightly_tiny_deployment_to_completion(server):
    shutil.rmtree(ROOT / "runs" / "nightly-tiny", ignore_errors=True)
    _prefect(server, "work-pool", "create", "realm-local", "--type", "process")
    _prefect(server, "--no-prompt", "deploy", "--all", "--prefect-file", "deploy/prefect.yaml")
    assert "nightly-tiny" in _prefect(server, "deployment", "ls")
    worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", "realm-local"], cwd=ROOT, env=server,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _prefect(server, "deployment", "run", "realm-pipeline/nightly-tiny")
        api = server["PREFECT_API_URL"]
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 10}, timeout=30).json()
            top = [r for r in runs if r.get("parent_task_run_id") is None]
            states = {r["state"]["type"] for r in top}
            if states & {"FAILED", "CRASHED", "CANCELLED"}:
                pytest.fail(f"the flow run ended {states}: {[r['state']['message'] for r in top]}")
            if top and states == {"COMPLETED"}:
                break
            assert time.monotonic() < deadline, f"the tiny run did not complete within {RUN_TIMEOUT_S} s ({states})"
            time.sleep(5)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert (ROOT / "runs" / "nightly-tiny" / "predictions" / "demo.parquet").is_file()
