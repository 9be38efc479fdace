"""Fixtures of the pipeline tests."""

import socket
import tempfile

import pytest


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a reader tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(autouse=True)
def beam_temp_folders_in_tmp_path(tmp_path, monkeypatch):
    """Beam makes a temp folder for every Pipeline built and removes it only when the pipeline
    runs: each test that builds one without running it (to check its labels, or a refusal) left
    one in /tmp, seven a suite."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
