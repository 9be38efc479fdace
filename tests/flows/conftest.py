"""One Prefect test server, one tiny prepared corpus and one tiny trained run for the flows tests."""

import shutil
from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from realm.cli.main import main
from realm.flows.realm_pipeline import realm_pipeline
from realm.pipelines import prepare
from tests.flows.tiny_run import tiny_params


# Package scope: the server's background services draw on the global `random` stream, so it
# stops before the model tests, whose resume checks compare RNG draws.
@pytest.fixture(scope="package", autouse=True)
def prefect_server():
    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def prepared_corpus(tmp_path_factory):
    """60 vital articles through the real Beam pipeline (in-process runner: seconds, not minutes)."""
    root = tmp_path_factory.mktemp("prepared")
    prepare.run(["--corpus", "vital", "--limit", "60", "--output", str(root),
                 "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    return root


@pytest.fixture
def run_root(prepared_corpus, tmp_path):
    """A fresh run root that already holds the prepared artifacts."""
    root = tmp_path / "run"
    shutil.copytree(prepared_corpus, root)
    return root


@pytest.fixture(scope="package")
def trained_tiny_run(prefect_server, prepared_corpus, tmp_path_factory) -> Path:
    """The whole chain on the prepared corpus (`tiny_params`), evaluated, and the run's own
    blocks indexed again as corpus "again" (`realm index`), so it holds every kind of file a
    run holds. Tests change copies of it: checkpoints record their paths relative to
    themselves, so a copy anywhere reads its own files."""
    run = tmp_path_factory.mktemp("trained") / "run"
    shutil.copytree(prepared_corpus, run)
    realm_pipeline(tiny_params(run))
    assert main(["index", "--run", str(run), "--corpus", str(run), "--name", "again"]) == 0
    return run
