"""One Prefect test server and one tiny prepared corpus for the flows tests."""

import shutil

import pytest
from prefect.testing.utilities import prefect_test_harness

from realm.pipelines import prepare


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
