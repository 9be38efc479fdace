"""What a killed writer left in a run goes with the next stage; what a running one writes stays."""

import subprocess
import sys

from realm.schemas.leftovers import owner_pid, remove_leftovers


def ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()  # reaped: its pid names no process now
    return process.pid


def test_owner_pids_are_read_from_the_names_writers_give():
    assert [owner_pid(name) for name in [
        ".tmp-40-123", ".old-40-123", ".staging-prepare-123", "part-0.parquet.tmp-123", ".manifest.json.tmp-123",
        ".blocks-staging-123",  # `realm index`'s staged corpus in runs from older code
    ]] == [123] * 6
    assert [owner_pid(name) for name in ["40", "manifest.json", "prepare-00000-of-00001.parquet", ".staging-prepare"]] == [None] * 4


def test_the_leftovers_of_an_ended_process_are_removed_and_a_running_ones_kept(tmp_path):
    dead, running = ended_pid(), subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        checkpoints = tmp_path / "checkpoints" / "ict"
        for pid in (dead, running.pid):
            (checkpoints / f".tmp-6-{pid}" / "query_embedder").mkdir(parents=True)
            (tmp_path / f".staging-prepare-{pid}" / "blocks").mkdir(parents=True)
            (tmp_path / "blocks").mkdir(exist_ok=True)
            (tmp_path / "blocks" / f"part-0.parquet.tmp-{pid}").write_bytes(b"half")
        (checkpoints / "3").mkdir()

        removed = remove_leftovers(tmp_path)

        def leftovers(pid):
            return [checkpoints / f".tmp-6-{pid}", tmp_path / f".staging-prepare-{pid}", tmp_path / "blocks" / f"part-0.parquet.tmp-{pid}"]

        assert sorted(removed) == sorted(leftovers(dead))
        assert [path.exists() for path in leftovers(dead)] == [False] * 3
        assert [path.exists() for path in [*leftovers(running.pid), checkpoints / "3"]] == [True] * 4
    finally:
        running.kill()
        running.wait()
