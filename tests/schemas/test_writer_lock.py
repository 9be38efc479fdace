"""One writer at a time: a second is refused while the first holds the part, never after."""

import subprocess
import sys

import pytest

from realm.schemas.writer_lock import WriterBusy, writer_lock


def test_a_second_writer_is_refused_while_the_first_works_and_proceeds_after(tmp_path):
    part = tmp_path / "corpora" / "nile"
    with writer_lock(part, "corpus 'nile'"):
        with pytest.raises(WriterBusy, match=f"^{part}: another writer holds corpus 'nile' now; run again"):
            with writer_lock(part, "corpus 'nile'"):
                pass
        with writer_lock(tmp_path / "corpora" / "other", "corpus 'other'"):  # another part is free
            pass
    with writer_lock(part, "corpus 'nile'"):
        pass
    assert list(part.iterdir()) == []  # no lock file left in the run


def test_a_killed_writer_leaves_the_part_unlocked(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from realm.schemas.writer_lock import writer_lock\n"
         f"with writer_lock({str(tmp_path)!r}, 'x'):\n    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(WriterBusy):
            with writer_lock(tmp_path, "x"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with writer_lock(tmp_path, "x"):
        pass


def test_where_a_directory_cannot_be_locked_the_writer_goes_on_with_a_warning(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl
    import logging

    def nfs_flock(descriptor, operation):  # NFS emulates flock with a write lock a directory cannot take
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    wrote = []
    with caplog.at_level(logging.WARNING, logger="realm.schemas.writer_lock"):
        with writer_lock(tmp_path, "corpus 'nile'"):
            wrote.append(True)
    assert wrote == [True]
    assert caplog.records[0].getMessage() == (
        f"{tmp_path}: this file system cannot lock a directory ([Errno 9] Bad file descriptor); "
        "writing corpus 'nile' unlocked"
    )

    def denied(descriptor, operation):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(fcntl, "flock", denied)
    with pytest.raises(PermissionError):
        with writer_lock(tmp_path, "corpus 'nile'"):
            pass
