"""`--nproc N`: every training stage on 2 CPU processes under torchrun (gloo), the tiny preset on 60 articles.

Tolerances. Rank r reads rows r, r + 2, ... of the one-process batch and the gradients are
averaged weighted by each rank's share, so 2 processes take the one-process update up to float
summation order: with dropout off (tests/cli/no_dropout_realm.py) every logged loss equals the
one-process loss within a relative NO_DROPOUT_RTOL (measured: 5e-8). With the tiny preset's
dropout (0.1) each rank draws its own masks (seeded by seed, rank and step), so the same
examples see other masks than in one process: within DROPOUT_RTOL over these steps (measured:
0.3%). A checkpoint resumed on another number of processes continues within these (every step
is seeded from seed, rank and step, so resuming on the same number draws what the run would have).

The processes run `python -m realm.cli.main` (or the no-dropout wrapper), each with its own
temporary Prefect server, as a user's shell would.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from realm.cli.launch import exit_text, torchrun_argv, without_launch_options
from realm.flows.demo import DATA_DIR
from realm.model.training.distributed import World

NO_DROPOUT_RTOL = 1e-5
DROPOUT_RTOL = 0.02
STEPS = 4
WRAPPER = Path(__file__).with_name("no_dropout_realm.py")


def _stage(stage: str, *settings: str, options: tuple[str, ...] = ("--steps", str(STEPS))) -> list[str]:
    return ["train", stage, "--preset", "tiny", *options, *[
        arg for setting in [*settings, "checkpoint_every=2", "log_every=1"] for arg in ("--param", setting)]]


PRETRAIN = _stage("pretrain", "batch_size=4", "heldout_examples=8", "refresh_every=2")
# 5 examples a batch: the ranks' shards differ in length (3 and 2).
ICT = _stage("ict", "batch_size=5", "heldout_examples=8")
# Fine-tuning a pre-trained run, sized in epochs: CuratedTrec's questions with an answer in the
# 60 articles, the early update over the whole corpus (the dense index's default).
FINETUNE = _stage(
    "finetune", "epochs=1", "batch_size=5", "reader_dropout=0", options=("--qa", str(DATA_DIR / "qa" / "ct.train.jsonl"))
)
WARMUP = _stage("warmup", "questions=24", "batch_size=4", "reader_dropout=0", options=())


def test_launch_options_are_taken_out_of_the_relaunched_command():
    argv = ["train", "pretrain", "--nproc", "2", "--output", "r", "--torchrun-args=--nnodes 2", "--steps", "4"]
    assert without_launch_options(argv) == ["train", "pretrain", "--output", "r", "--steps", "4"]


def test_torchrun_runs_standalone_unless_given_a_rendezvous():
    assert torchrun_argv(2, [], "m", ["a"]) == ["--nproc-per-node", "2", "--standalone", "-m", "m", "a"]
    several_hosts = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400"]
    assert torchrun_argv(8, several_hosts, "m", []) == ["--nproc-per-node", "8", *several_hosts, "-m", "m"]


def test_each_rank_reads_every_nth_row_of_the_batch():
    rows = [10, 11, 12, 13, 14]
    assert list(World(0, 2).shard(rows)) == [10, 12, 14] and list(World(1, 2).shard(rows)) == [11, 13]
    with pytest.raises(ValueError, match="cannot be shared by 8 processes"):
        World(0, 8).shard(rows)


def test_a_failed_rank_is_named_by_its_signal_or_status():
    assert exit_text(-9) == "killed by SIGKILL" and exit_text(2) == "exit status 2"


# -- real processes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    from realm.pipelines import prepare

    root = tmp_path_factory.mktemp("prepared")
    prepare.run(["--corpus", "vital", "--limit", "60", "--output", str(root),
                 "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    return root


def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(XDG_STATE_HOME=str(tmp / "state"), PREFECT_HOME=str(tmp / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return env


def _command(nproc: int, dropout: bool, stage: list[str]) -> list[str]:
    """The python command line of `realm` `stage` on `nproc` processes (torchrun's own when without dropout)."""
    if dropout:
        return [sys.executable, "-m", "realm.cli.main", *stage, "--nproc", str(nproc)]
    if nproc == 1:
        return [sys.executable, str(WRAPPER), *stage]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), str(WRAPPER),
            *stage]


def _train(
    prepared: Path, run: Path, nproc: int, dropout: bool = False, fresh: bool = True, stage: list[str] = PRETRAIN
) -> str:
    if fresh:
        shutil.copytree(prepared, run)
    done = subprocess.run([*_command(nproc, dropout, stage), "--output", str(run)], env=_env(run.parent),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def losses(run: Path, stage: str = "pretrain") -> dict[int, float]:
    """{step: loss}, the last logged for each step (a resumed run logs the steps it redid again)."""
    rows = map(json.loads, (run / "reports" / f"{stage}_metrics.jsonl").read_text().splitlines())
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def assert_close(got: dict[int, float], expected: dict[int, float], rtol: float) -> None:
    assert got.keys() == expected.keys()
    assert all(got[step] == pytest.approx(expected[step], rel=rtol) for step in got), (got, expected)


@pytest.fixture(scope="module")
def runs(prepared, tmp_path_factory) -> dict[int, Path]:
    """The same pre-training without dropout on 1 and on 2 processes."""
    root = tmp_path_factory.mktemp("runs")
    logs = {nproc: _train(prepared, root / f"n{nproc}", nproc) for nproc in (1, 2)}
    assert "on 2 process(es)" in logs[2] and "on 1 process(es)" in logs[1]
    return {nproc: root / f"n{nproc}" for nproc in (1, 2)}


def test_two_processes_log_the_losses_of_one_at_the_same_global_batch(runs):
    assert_close(losses(runs[2]), losses(runs[1]), NO_DROPOUT_RTOL)
    # Rank 0 alone published: every checkpoint once, the refreshed index beside it.
    assert sorted(p.name for p in (runs[2] / "checkpoints" / "pretrain").iterdir()) == ["2", "4"]
    assert (runs[2] / "index" / "4" / "manifest.json").is_file()


def test_each_rank_embeds_its_share_of_a_refresh_into_the_index_one_process_builds(runs):
    from realm.model.index.embed_corpus import load_embeddings

    # The final refresh (of step 4): rank r's share as part r, 60 articles' blocks in two runs of block-id order.
    one, two = (runs[nproc] / "embeddings" / "4" for nproc in (1, 2))
    assert sorted(p.name for p in two.glob("*.parquet")) == ["part-00000.parquet", "part-00001.parquet"]
    shares = [len(load_embeddings(str(two / f"part-0000{rank}.parquet"))[0]) for rank in (0, 1)]
    (one_ids, one_vectors), (two_ids, two_vectors) = load_embeddings(str(one)), load_embeddings(str(two))
    assert abs(shares[0] - shares[1]) <= 1 and list(two_ids) == list(one_ids)
    np.testing.assert_allclose(two_vectors, one_vectors, atol=1e-4)


def _on_one_and_two_processes(start: Path, tmp_path: Path, stage: list[str]) -> tuple[dict, dict]:
    """`stage` trained from copies of `start` on 1 and on 2 processes: ({step: loss} of each)."""
    logs = {nproc: _train(start, tmp_path / f"n{nproc}", nproc, stage=stage) for nproc in (1, 2)}
    assert "on 2 process(es)" in logs[2]
    return losses(tmp_path / "n1", stage[1]), losses(tmp_path / "n2", stage[1])


def test_ict_on_two_processes_logs_the_losses_of_one_with_the_whole_batch_as_negatives(prepared, tmp_path):
    one, two = _on_one_and_two_processes(prepared, tmp_path, ICT)
    assert_close(two, one, NO_DROPOUT_RTOL)
    assert sorted(p.name for p in (tmp_path / "n2" / "checkpoints" / "ict").iterdir()) == ["2", "4"]


def test_finetuning_on_two_processes_logs_the_losses_of_one(runs, tmp_path):
    one, two = _on_one_and_two_processes(runs[1], tmp_path, FINETUNE)
    assert len(one) >= 2
    assert_close(two, one, NO_DROPOUT_RTOL)


@pytest.mark.slow
def test_the_squad_warmup_on_two_processes_logs_the_losses_of_one(runs, tmp_path):
    one, two = _on_one_and_two_processes(runs[1], tmp_path, WARMUP)
    assert len(one) >= 2
    assert_close(two, one, NO_DROPOUT_RTOL)


@pytest.mark.slow
@pytest.mark.parametrize(("trained_on", "resumed_on"), [(2, 1), (1, 2)])
def test_a_checkpoint_resumes_on_another_number_of_processes(runs, tmp_path, trained_on, resumed_on):
    run = tmp_path / "resumed"
    shutil.copytree(runs[trained_on], run)
    shutil.rmtree(run / "checkpoints" / "pretrain" / str(STEPS))  # as if stopped after the checkpoint of step 2
    log = _train(runs[trained_on], run, resumed_on, fresh=False)
    assert f"from step 2 to {STEPS} on {resumed_on} process(es)" in log
    assert_close(losses(run), losses(runs[resumed_on]), NO_DROPOUT_RTOL)


@pytest.mark.slow
def test_with_the_tiny_presets_dropout_two_processes_stay_within_the_stated_tolerance(prepared, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _train(prepared, one, 1, dropout=True)
    _train(prepared, two, 2, dropout=True)
    assert_close(losses(two), losses(one), DROPOUT_RTOL)


def _rank_pid(agent: int, rank: int) -> int | None:
    """The worker of torchrun's agent `agent` whose RANK is `rank`."""
    for proc in Path("/proc").iterdir():
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == agent and f"RANK={rank}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                return int(proc.name)
        except (ValueError, OSError):
            continue
    return None


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_in_one_line_and_the_same_command_resumes(prepared, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(prepared, run)
    command = [sys.executable, "-m", "realm.cli.main", *PRETRAIN, "--steps", "8", "--nproc", "2", "--output", str(run)]
    log = tmp_path / "killed.log"
    with log.open("w") as stderr:
        job = subprocess.Popen(command, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 300
    while not re.search(r"pretrain step 3/8", log.read_text()):  # reported after the checkpoint of step 2
        assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    os.kill(_rank_pid(job.pid, 1), signal.SIGKILL)
    assert job.wait(timeout=120) == 128 + signal.SIGKILL
    last = log.read_text().strip().splitlines()[-1]
    assert re.fullmatch(r"realm: rank 1 failed \(killed by SIGKILL\); .* resumes from the last checkpoint", last), last

    again = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed_from = int(re.search(r"pre-training from step (\d+) to 8 on 2 process", again.stderr).group(1))
    assert resumed_from >= 2 and resumed_from % 2 == 0
    assert sorted(losses(run)) == list(range(1, 9))
