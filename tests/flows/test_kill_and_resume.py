"""Fault injection, the kill half: a real `realm` process SIGKILLed at a point a seeded RNG
picks, then the same command again. What the resumed run leaves must equal an uninterrupted
run's: Parquet artifacts row for row (counts and content hashes), the same published
checkpoint steps with the same weights (they load), the same loss at every step logged, at
most one checkpoint interval of steps redone, no temporary file or directory of the killed
process left in the run or the temp folder, and no Prefect server of its left running.

The killed process runs `python -m realm.cli.main`; the uninterrupted run and the resume call
the same CLI in this process (the one Prefect test server; the killed process uses it too,
except in the cases that start their own server to check it is stopped). Kill points: for
prepare a delay after its pipeline's temp folder appears; for training a delay after the log
shows step k (k = 1 + seed mod 3 of the 4 steps, the delay drawn from the seed), which lands
between steps, inside one, inside a checkpoint's publish or (pre-training with refresh) while
an index is rebuilt. Fast cases: one kill of prepare, pre-training and fine-tuning; the slow
ones (`pytest -m slow`) kill each at more points, ICT and pre-training with refresh too."""

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL

from realm.cli import prefect_server
from realm.cli.main import main
from realm.flows.demo import DATA_DIR
from realm.model.networks.checkpoint import latest_checkpoint, load_components
from realm.model.publish import file_sha256, published_steps
from realm.pipelines.execution import TEMP_PREFIX
from realm.schemas import ARTIFACTS, read_table
from realm.schemas.leftovers import owner_pid

PREPARED = ["documents", "blocks", "pretrain_examples", "ict_examples", "dead_letter"]
PREPARE = ["prepare", "--corpus", "vital", "--limit", "60", "--beam-args", "--direct_num_workers=1 --direct_running_mode=in_memory"]
CHECKPOINT_EVERY = 2


def _train(stage: str, *settings: str) -> list[str]:
    """`realm train STAGE` on the tiny preset, checkpointing every CHECKPOINT_EVERY steps and logging every step."""
    every = [f"checkpoint_every={CHECKPOINT_EVERY}", "log_every=1"]
    return ["train", stage, "--preset", "tiny", *[arg for setting in [*every, *settings] for arg in ("--param", setting)]]


# Pre-training refreshes its index every 2 steps unless its doc tower is frozen.
PRETRAIN = [*_train("pretrain", "batch_size=2", "heldout_examples=8", "refresh_every=2"), "--steps", "4"]
NO_REFRESH = ["--param", "doc_tower=frozen"]
ICT = [*_train("ict", "batch_size=8", "heldout_examples=16"), "--steps", "4"]
# Half an epoch over the 16 CuratedTrec training questions with an answer in the 60 articles: 4 steps.
FINETUNE = [*_train("finetune", "epochs=0.5", "batch_size=2", "retriever=bm25"), "--qa", str(DATA_DIR / "qa" / "ct.train.jsonl")]
STEPS = 4
# How long after its trigger a kill may come: a few steps of the tiny preset.
MAX_DELAY_S = 1.5
# The whole chain, pre-training STEPS steps with a refresh every 2 (ICT, the warm-up and
# fine-tuning publish their starts; evaluation answers 41 questions).
RUN = ["run", "--preset", "tiny", "--steps", str(STEPS), "--beam-args", "--direct_num_workers=1 --direct_running_mode=in_memory",
       *[arg for setting in ["prepare.limit=60", "ict.steps=0", "pretrain.batch_size=2", "pretrain.heldout_examples=8",
                             "pretrain.refresh_every=2", f"pretrain.checkpoint_every={CHECKPOINT_EVERY}", "pretrain.log_every=1",
                             "warmup.questions=0", "finetune.epochs=0", f"evaluate.qa={json.dumps([str(DATA_DIR / 'qa' / 'ct.heldout.jsonl')])}"]
         for arg in ("--param", setting)]]
# How soon a stopped command must have exited (`realm.cli.stopping.GRACE_S` and the exit itself).
STOPPED_WITHIN_S = 15


def _output(argv: list[str], run: Path) -> list[str]:
    return [*argv, "--output", str(run)]


def _env(tmp_path: Path, own_server: bool) -> dict:
    """The killed process's environment: this test's temp and state folders, and this
    session's Prefect server unless it is to start its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(TMPDIR=str(tmp_path / "tmp"), XDG_STATE_HOME=str(tmp_path / "state"),
               PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if not own_server:
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    return env


@pytest.fixture
def same_temp_folder(tmp_path, monkeypatch):
    """The killed process's temp folder is this process's too, so the resume sees what it left."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return folder


def _kill(process: subprocess.Popen, delay_s: float, what: str) -> str:
    time.sleep(delay_s)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL, f"the process ended before the kill point ({what})"
    return what


def _stop(process: subprocess.Popen, delay_s: float, what: str) -> str:
    """SIGTERM, as a scheduler or `timeout` sends it: the command ends within seconds, with the shell's status for it."""
    time.sleep(delay_s)
    assert process.poll() is None, f"the process ended before the stop point ({what})"
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    status = process.wait(timeout=60)
    assert time.monotonic() - sent < STOPPED_WITHIN_S, f"still running {time.monotonic() - sent:.0f} s after SIGTERM ({what})"
    assert status == 128 + signal.SIGTERM, what
    return what


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as stderr:
        return subprocess.Popen([sys.executable, "-m", "realm.cli.main", *argv], env=env, stdout=subprocess.DEVNULL, stderr=stderr)


def kill_prepare(run: Path, env: dict, seed: int, tmp_path: Path) -> str:
    """`realm prepare` killed a seeded delay after its pipeline's temp folder appeared."""
    delay = random.Random(seed).uniform(0, MAX_DELAY_S)
    process = _start(_output(PREPARE, run), env, tmp_path / "killed.log")
    folder = Path(env["TMPDIR"])
    while not any(folder.glob(f"{TEMP_PREFIX}*")):
        assert process.poll() is None, (tmp_path / "killed.log").read_text()[-2000:]
        time.sleep(0.02)
    return _kill(process, delay, f"{delay:.2f} s into the pipeline")


def kill_training(argv: list[str], stage: str, run: Path, env: dict, seed: int, tmp_path: Path, end=_kill) -> str:
    """`argv` killed (or ended otherwise, by `end`) a delay drawn from `seed` after the log shows
    step 1 + seed mod (STEPS − 1)."""
    step, delay = 1 + seed % (STEPS - 1), random.Random(seed).uniform(0, MAX_DELAY_S)
    log = tmp_path / "killed.log"
    process = _start(_output(argv, run), env, log)
    shown = re.compile(rf"{stage} step {step}/")
    while not shown.search(log.read_text()):
        assert process.poll() is None, log.read_text()[-3000:]
        time.sleep(0.02)
    return end(process, delay, f"{delay:.2f} s after step {step}")


def run_in_process(argv: list[str], run: Path) -> None:
    assert main(_output(argv, run)) == 0


def table_digest(path: Path, name: str) -> tuple[int, str]:
    """(rows, sha256 of the rows in a canonical order) of a Parquet artifact."""
    rows = sorted(json.dumps(row, sort_keys=True, default=str) for row in read_table(str(path), ARTIFACTS[name]).to_pylist())
    return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()


def leftovers(*roots: Path) -> list[Path]:
    """Every file or directory under `roots` named as a writer's unfinished work (`realm.schemas.leftovers`)."""
    return [path for root in roots for path in root.rglob("*") if owner_pid(path.name) is not None]


def checkpoints(root: Path) -> dict[int, dict[str, str]]:
    """{published step: {weights file: sha256}}; the newest loads."""
    load_components(latest_checkpoint(root))
    return {step: {p.relative_to(path).as_posix(): file_sha256(p) for p in sorted(path.rglob("*.safetensors"))}
            for step, path in published_steps(root)}


def losses(run: Path, stage: str) -> list[tuple[int, float]]:
    """(step, loss) of every row the stage logged, in order: a resumed run logs the steps it redid again."""
    lines = (run / "reports" / f"{stage}_metrics.jsonl").read_text().splitlines()
    return [(row["step"], row["loss"]) for row in map(json.loads, lines) if "loss" in row]


def assert_resumed_like_uninterrupted(stage: str, resumed: Path, uninterrupted: Path, kill_point: str) -> None:
    root = Path("checkpoints") / stage
    assert checkpoints(resumed / root) == checkpoints(uninterrupted / root), kill_point
    expected = dict(losses(uninterrupted, stage))
    logged = losses(resumed, stage)
    assert [(step, expected.get(step)) for step, _ in logged] == logged, kill_point
    assert sorted({step for step, _ in logged}) == sorted(expected) == list(range(1, STEPS + 1)), kill_point
    redone = len(logged) - len(expected)
    assert 0 <= redone <= CHECKPOINT_EVERY, f"{kill_point}: {redone} steps redone"
    assert leftovers(resumed) == [], kill_point


@pytest.fixture(scope="module")
def uninterrupted() -> dict[str, Path]:
    """Each training case run without a kill, in this process, on a copy of the prepared corpus; filled on first use."""
    return {}


def _uninterrupted(cache: dict, name: str, argv: list[str], prepared_corpus: Path, tmp_path_factory) -> Path:
    if name not in cache:
        run = tmp_path_factory.mktemp(f"uninterrupted-{name}") / "run"
        shutil.copytree(prepared_corpus, run)
        run_in_process(argv, run)
        cache[name] = run
    return cache[name]


def _prepare_case(prepared_corpus, tmp_path, seed):
    run = tmp_path / "run"
    kill_point = kill_prepare(run, _env(tmp_path, own_server=False), seed, tmp_path)
    run_in_process(PREPARE, run)
    for name in PREPARED:
        assert table_digest(run / name, name) == table_digest(prepared_corpus / name, name), f"{name}, killed {kill_point}"
    assert leftovers(run, tmp_path / "tmp") == [], kill_point


# case: (command, stage)
TRAINING = {
    "ict": (ICT, "ict"),
    "pretrain": (PRETRAIN + NO_REFRESH, "pretrain"),
    "pretrain with refresh": (PRETRAIN, "pretrain"),
    "finetune": (FINETUNE, "finetune"),
}


def _training_case(case, uninterrupted, prepared_corpus, tmp_path_factory, tmp_path, seed, own_server=False):
    argv, stage = TRAINING[case]
    reference = _uninterrupted(uninterrupted, case, argv, prepared_corpus, tmp_path_factory)
    run = tmp_path / "run"
    shutil.copytree(prepared_corpus, run)
    kill_point = kill_training(argv, stage, run, _env(tmp_path, own_server), seed, tmp_path)
    servers = [json.loads(p.read_text()) for p in prefect_server.records_dir().glob("*.json")]
    assert len(servers) == own_server  # the killed process's own server, left running
    run_in_process(argv, run)
    assert_resumed_like_uninterrupted(stage, run, reference, f"killed {kill_point}")
    assert [prefect_server.start_time(server["server_pid"]) for server in servers] == [None] * len(servers)
    assert list(prefect_server.records_dir().glob("*.json")) == []


def test_prepare_killed_and_run_again_equals_an_uninterrupted_prepare(prepared_corpus, tmp_path, same_temp_folder):
    _prepare_case(prepared_corpus, tmp_path, seed=0)


@pytest.mark.parametrize("case", ["pretrain", "finetune"])
def test_training_killed_and_resumed_equals_an_uninterrupted_run(
    case, uninterrupted, prepared_corpus, tmp_path_factory, tmp_path, same_temp_folder
):
    _training_case(case, uninterrupted, prepared_corpus, tmp_path_factory, tmp_path, seed=0)


def test_the_whole_chain_stopped_by_sigterm_exits_within_seconds_and_resumes_like_an_uninterrupted_run(
    uninterrupted, prepared_corpus, tmp_path_factory, tmp_path, same_temp_folder
):
    """`realm run` told to stop mid pre-training (with refreshes in flight) exits within seconds,
    its own Prefect server stopped, and the same command then finishes with the losses of a run
    never stopped."""
    reference = _uninterrupted(uninterrupted, "run", RUN, prepared_corpus, tmp_path_factory)
    run = tmp_path / "run"
    shutil.copytree(prepared_corpus, run)
    stop_point = kill_training(RUN, "pretrain", run, _env(tmp_path, own_server=True), 0, tmp_path, end=_stop)
    assert "\nrealm: stopped by SIGTERM; the same command again resumes" in (tmp_path / "killed.log").read_text(), stop_point
    assert list(prefect_server.records_dir().glob("*.json")) == [], stop_point
    run_in_process(RUN, run)
    assert_resumed_like_uninterrupted("pretrain", run, reference, f"stopped {stop_point}")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 5))
def test_prepare_killed_at_more_points(prepared_corpus, tmp_path, same_temp_folder, seed):
    _prepare_case(prepared_corpus, tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 4))
@pytest.mark.parametrize("case", list(TRAINING))
def test_training_killed_at_more_points(
    case, seed, uninterrupted, prepared_corpus, tmp_path_factory, tmp_path, same_temp_folder
):
    """The first seed's killed process starts its own Prefect server: the resume stops it.
    Pre-training with refresh gives equal losses too: each refreshed index goes into use at a
    step fixed by its snapshot's, however long its build ran."""
    _training_case(case, uninterrupted, prepared_corpus, tmp_path_factory, tmp_path, seed, own_server=seed == 1)
