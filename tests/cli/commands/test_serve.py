import pytest

from realm.cli.main import main
from tests.cli.refusal import refused


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
    assert "serving" not in capsys.readouterr().out


def test_the_address_check_binds_as_the_server_does():
    # IPv6 sockets IPv6-only, as asyncio binds them: "::" is free while IPv4's wildcard is taken.
    import socket

    from realm.cli.commands.serve import check_can_listen

    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 sockets on this machine")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        check_can_listen("::", port)
        with pytest.raises(SystemExit, match="Address already in use"):
            check_can_listen("0.0.0.0", port)
