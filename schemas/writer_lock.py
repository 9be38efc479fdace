"""One writer at a time for a part of a run folder.

Two processes writing the same part at once would interleave their steps: `realm index` run
twice on one corpus name could publish one corpus's vectors and leave the other's blocks
beside them. `writer_lock` holds an advisory lock (flock) on the part's directory itself while
a writer works, so no lock file is left in the run, and refuses a second writer at once; the
kernel releases the lock when its process ends, however it ends, so a killed writer never
leaves the part locked. Where the file system cannot lock a directory (NFS), the writer goes on
unlocked with a warning, as before the lock existed.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

# What flock gives where it cannot lock a directory: NFS emulates it with a write lock, which
# needs a file open for writing (EBADF); Lustre mounted without flock, some FUSE file systems.
_NO_DIRECTORY_LOCKS = {errno.EBADF, errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP}


class WriterBusy(RuntimeError):
    """Another process is writing the part now."""


@contextmanager
def writer_lock(root: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold a lock on the directory `root` (created if need be) for the block's duration;
    `WriterBusy` naming `what` when another process holds it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WriterBusy(f"{root}: another writer holds {what} now; run again when it ends") from None
        except OSError as error:
            if error.errno not in _NO_DIRECTORY_LOCKS:
                raise
            log.warning("%s: this file system cannot lock a directory (%s); writing %s unlocked", root, error, what)
        yield
    finally:
        os.close(descriptor)  # releases the lock
