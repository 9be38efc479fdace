"""One Prefect test server and one tiny prepared corpus for the whole flows test session."""

import shutil

import pytest
from prefect.testing.utilities import prefect_test_harness

from realm.flows.demo import DATA_DIR
from realm.flows.params import PipelineParams
from realm.pipelines import prepare


@pytest.fixture(scope="session", autouse=True)
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


def tiny_params(run_root) -> PipelineParams:
    """The tiny preset, cut down further so the whole chain runs in about a minute."""
    params = PipelineParams.preset("tiny", output=str(run_root))
    params.prepare.limit = 60
    params.ict = params.ict.model_copy(update={"steps": 6, "batch_size": 8, "checkpoint_every": 3, "heldout_examples": 16})
    params.pretrain = params.pretrain.model_copy(
        update={"steps": 6, "batch_size": 2, "checkpoint_every": 2, "refresh_every": 3, "log_every": 1, "heldout_examples": 8}
    )
    params.warmup = params.warmup.model_copy(update={"questions": 24, "batch_size": 2, "checkpoint_every": 2})
    # CuratedTrec's 295 shipped training questions: a few have an answer in 60 articles.
    params.finetune = params.finetune.model_copy(
        update={"epochs": 1, "batch_size": 2, "checkpoint_every": 2, "qa_train": [str(DATA_DIR / "qa" / "ct.train.jsonl")]}
    )
    return params
