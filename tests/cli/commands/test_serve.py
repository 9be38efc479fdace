import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from realm.cli.main import main
from realm.model.networks.device import usable_cores
from tests.cli.refusal import refused

two_cores = pytest.mark.skipif(usable_cores() < 2, reason="two workers need two cores")


def test_an_address_that_cannot_serve_is_refused_in_one_line(trained_run, capsys):
    import socket

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--run", str(trained_run.root), "--port", "70000"])
    assert exit_.value.code == 2 and "argument --port: '70000' is not a port (0-65535)" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused(["serve", "--run", str(trained_run.root), "--port", str(port)],
                f"^realm serve: cannot listen on 127.0.0.1:{port}: Address already in use$", capsys)
        # Not shared through SO_REUSEPORT with the server already there.
        refused(["serve", "--run", str(trained_run.root), "--port", str(port), "--workers", "2"],
                f"^realm serve: cannot listen on 127.0.0.1:{port}: Address already in use$", capsys)
    assert "serving" not in capsys.readouterr().out


def test_the_sockets_bind_as_the_server_does():
    # IPv6 sockets IPv6-only, as asyncio binds them: "::" is free while IPv4's wildcard is taken.
    import socket

    from realm.cli.commands.serve import listening_sockets

    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 sockets on this machine")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for sock in listening_sockets("::", port):
            sock.close()
        with pytest.raises(SystemExit, match="Address already in use"):
            listening_sockets("0.0.0.0", port)


TWO_ADDRESSES = ("127.0.0.1", "127.0.0.2")  # both on the loopback interface: 127.0.0.0/8


@pytest.fixture
def two_address_host(monkeypatch) -> str:
    """A host name that resolves to two addresses of this machine, as a dual-stack `localhost`
    or a multi-homed host's name does (the resolver answers for it; every other name as before)."""
    import socket

    resolve = socket.getaddrinfo

    def resolving(host, port, *args, **kwargs):
        if host != "two-addresses.test":
            return resolve(host, port, *args, **kwargs)
        return [entry for address in TWO_ADDRESSES for entry in resolve(address, port, *args, **kwargs)]

    monkeypatch.setattr(socket, "getaddrinfo", resolving)
    return "two-addresses.test"


@pytest.mark.parametrize("workers", [1, 2])
def test_port_0_is_one_port_for_every_address_and_worker(two_address_host, workers):
    from realm.cli.commands.serve import worker_sockets

    socket_sets = worker_sockets(two_address_host, 0, workers)
    try:
        port = socket_sets[0][0].getsockname()[1]  # the one the server prints
        assert port != 0
        assert [[sock.getsockname() for sock in sockets] for sockets in socket_sets] == (
            [[(address, port) for address in TWO_ADDRESSES]] * workers
        )
    finally:
        for sock in (sock for sockets in socket_sets for sock in sockets):
            sock.close()


def test_more_workers_than_cores_or_none_are_refused(trained_run, capsys):
    cores = usable_cores()
    refused(["serve", "--run", str(trained_run.root), "--port", "0", "--workers", str(cores + 1)],
            f"^realm serve: --workers {cores + 1} is more than the {cores} cores this process may use$", capsys)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--run", str(trained_run.root), "--workers", "0"])
    assert exit_.value.code == 2 and "argument --workers: '0' is not a number of workers (1 or more)" in capsys.readouterr().err


@two_cores
def test_a_worker_that_cannot_load_is_reported_as_one_process_reports_it(trained_run, capsys):
    for workers in ("1", "2"):
        refused(["serve", "--run", str(trained_run.root), "--port", "0", "--workers", workers, "--index", "other"],
                "no corpus 'other' indexed for this run", capsys)


@two_cores
@pytest.mark.slow
def test_two_workers_share_the_port_and_answer_as_the_run_does(trained_run):
    from realm.model.qa.answering import Answerer

    server = subprocess.Popen(
        [sys.executable, "-m", "realm.cli.main", "serve", "--run", str(trained_run.root), "--port", "0", "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        serving = server.stdout.readline()
        assert serving.endswith("with 2 workers (Ctrl-C stops)\n"), serving + server.stderr.read()
        url = serving.split(" on ")[1].split("/ ")[0]
        # Every request on a new connection: the kernel spreads them over both workers' sockets.
        workers = {json.load(urllib.request.urlopen(f"{url}/health"))["worker_pid"] for _ in range(32)}
        assert len(workers) == 2 and server.pid not in workers
        question = "Where does the Nile flow?"
        request = urllib.request.Request(f"{url}/ask", json.dumps({"question": question}).encode(),
                                         {"Content-Type": "application/json"})
        (expected,) = Answerer.from_run(trained_run.root).answer([question], num_read=5, num_retrieve=5)
        for _ in range(4):
            assert json.load(urllib.request.urlopen(request))["answer"] == expected.answer
    finally:
        server.send_signal(signal.SIGTERM)
        status = server.wait(timeout=60)
    assert status == 128 + signal.SIGTERM
    for pid in workers:  # stopped with it
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
