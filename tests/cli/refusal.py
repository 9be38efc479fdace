"""The CLI's refusal contract, for the tests of every command."""

import re

from realm.cli.main import main


def refused(argv: list[str], pattern: str, capsys) -> None:
    """The command exits 2 with one line on stderr matching `pattern`, nothing on stdout."""
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and re.search(pattern, captured.err), captured.err
    assert "Traceback" not in captured.err and captured.out == ""
