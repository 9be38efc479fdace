"""What a killed writer leaves in a run folder, and its removal by the next stage that runs.

Every writer names what it has not finished with its process id: a step being published
(`realm.model.publish`: `.tmp-<step>-<pid>/`, and `.old-<step>-<pid>/` while a step is
replaced), prepare's staging directory (`.staging-<name>-<pid>/`), a file written under a
temporary name and renamed (`<name>.tmp-<pid>`). A process killed with SIGKILL leaves them
behind; nothing reads them (readers list published steps and `*.parquet` files only), but
they hold disk space, a whole checkpoint's worth at worst. `remove_leftovers` removes each
whose process no longer runs on this machine (a live one is still writing it). A pid the
system has since given to another process keeps its leftovers until that one ends too.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

# `.tmp-<step>-<pid>`, `.old-<step>-<pid>`, `.staging-<name>-<pid>` (directories) and
# `<name>.tmp-<pid>` (files and directories).
# Runs from older code hold `realm index`'s staged corpora as `.<name>-staging-<pid>`.
_OWNED = re.compile(r"^\.(?:(?:tmp|old|staging)-.+|.+-staging)-(?P<pid>\d+)$|\.tmp-(?P<file_pid>\d+)$")


def owner_pid(name: str) -> int | None:
    """The pid a temporary name carries (module docstring), None for any other name."""
    match = _OWNED.search(name)
    return None if match is None else int(match["pid"] or match["file_pid"])


def process_running(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (a zombie counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux): signal 0 is all there is to go by
        return True
    return stat[stat.rindex(")") + 2] not in "ZX"


def remove_leftovers(root: str | os.PathLike) -> list[Path]:
    """Remove every leftover (module docstring) under `root` whose process has ended; the paths removed."""
    removed = []
    for directory, subdirectories, files in os.walk(root):
        for name in [*subdirectories, *files]:
            pid = owner_pid(name)
            if pid is None or pid == os.getpid() or process_running(pid):
                continue
            path = Path(directory) / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                subdirectories.remove(name)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        log.warning("removed %d temporary file(s) left by killed runs under %s: %s",
                    len(removed), root, ", ".join(str(path) for path in removed))
    return removed
