"""Prefect's temporary server, recorded so that a killed run's server does not outlive it.

A flow run with no `PREFECT_API_URL` starts Prefect's ephemeral server as a child process
(uvicorn) and stops it at exit. A run killed with SIGKILL never reaches its exit handlers,
so the server is left running, holding a port and Prefect's database, with nothing to stop
it. Each server a realm command starts is therefore recorded in a file under the user's
state directory (`$XDG_STATE_HOME/realm/prefect-servers/`, by default
`~/.local/state/realm/...`): its pid and port, and the pid of the realm process that owns
it, each with its start time, so a pid the system has since reused is never mistaken for
them. The next realm command that runs flows stops every recorded server whose owner is
gone (SIGTERM, then SIGKILL) and starts its own; a server whose owner still runs (another
run, in parallel) is left alone. Without `/proc` (not Linux) processes cannot be identified
this way and nothing is recorded or stopped.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from prefect.server.api.server import SubprocessASGIServer

log = logging.getLogger(__name__)

# How long a server gets to stop on SIGTERM before it is killed (Prefect's own stop waits as long).
STOP_TIMEOUT_S = 5.0


def records_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "realm" / "prefect-servers"


def start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process, None when there is none
    (a zombie counts as gone: it has exited and only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "; command may hold spaces
    state, started = fields[0], fields[19]  # stat fields 3 and 22
    return None if state in ("Z", "X") else int(started)


def _alive(pid: int, started: int) -> bool:
    return start_time(pid) == started


class RecordedServer(SubprocessASGIServer):
    """Prefect's ephemeral server, recorded while it runs (see the module docstring)."""

    record: Path | None = None

    def start(self, timeout: int | None = None) -> None:
        was_running = self.running
        super().start(timeout)
        if not was_running and self.server_process is not None:
            self.record = write_record(self.server_process.pid, self.port)

    def stop(self) -> None:
        super().stop()
        if self.record is not None:
            self.record.unlink(missing_ok=True)
            self.record = None


def write_record(server_pid: int, port: int) -> Path | None:
    owner, server = start_time(os.getpid()), start_time(server_pid)
    if owner is None or server is None:
        return None
    directory = records_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{server_pid}.json"
    path.write_text(json.dumps(
        {"server_pid": server_pid, "server_started": server, "port": port, "owner_pid": os.getpid(), "owner_started": owner}
    ))
    return path


def _records() -> Iterator[tuple[Path, dict, tuple[int, int], tuple[int, int]]]:
    """(path, record, owner, server) of every readable record; (pid, start time) identify a process."""
    for path in sorted(records_dir().glob("*.json")):
        try:
            record = json.loads(path.read_text())
            owner = (record["owner_pid"], record["owner_started"])
            server = (record["server_pid"], record["server_started"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # unreadable: it identifies no process
            continue
        yield path, record, owner, server


def stop_own_servers() -> None:
    """Stop the servers this process started, for an exit that skips Prefect's own exit handlers."""
    for path, _, owner, server in _records():
        if owner == (os.getpid(), start_time(os.getpid())):
            if _alive(*server):
                _stop(*server)
            path.unlink(missing_ok=True)


def stop_orphaned_servers() -> list[dict]:
    """Stop every recorded server whose realm process is gone; returns their records."""
    stopped = []
    for path, record, owner, server in _records():
        if _alive(*owner):
            continue
        if _alive(*server):
            _stop(*server)
            log.warning("stopped the temporary Prefect server (pid %d, port %s) left behind by a realm run "
                        "that was killed (pid %d)", record["server_pid"], record["port"], record["owner_pid"])
            stopped.append(record)
        path.unlink(missing_ok=True)
    return stopped


def _stop(pid: int, started: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid, started):
        os.kill(pid, signal.SIGKILL)


def install() -> None:
    """Stop orphaned servers and make the server this process's flows start a recorded one.
    Starts nothing: Prefect starts the server when the first flow needs it."""
    if not Path("/proc/self/stat").is_file():
        return
    stop_orphaned_servers()
    # Prefect keeps one server instance per port and asks for the one of port None, so the
    # instance created here is the one every flow of this process starts and stops.
    if None not in SubprocessASGIServer._instances:
        RecordedServer()
