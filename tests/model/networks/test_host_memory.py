import ctypes
import os
import platform
import subprocess
import sys
from unittest import mock

import pytest

from realm.model.networks import host_memory

# A child process reports how many bytes glibc holds in mmapped chunks (mallinfo2's hblkhd)
# before a 64 MiB buffer, while it is alive, and after it is freed: the allocator is
# process-wide, so the test's own process is left as it was.
MAPPED_BYTES = """
import ctypes, sys
from realm.model.networks.host_memory import reuse_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "reuse":
    assert reuse_freed_memory()
before = libc.mallinfo2().hblkhd
buffer = bytearray(64 << 20)
alive = libc.mallinfo2().hblkhd
del buffer
print(before, alive, libc.mallinfo2().hblkhd)
"""

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc's allocator, 2.33 or later (mallinfo2)",
)
# What would set the child's allocator otherwise than glibc's defaults.
ALLOCATOR_ENVIRONMENT = ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def mapped_bytes(way: str) -> tuple[int, int, int]:
    env = {name: value for name, value in os.environ.items() if name not in ALLOCATOR_ENVIRONMENT}
    child = subprocess.run([sys.executable, "-c", MAPPED_BYTES, way], capture_output=True, text=True, env=env)
    assert child.returncode == 0, child.stderr
    before, alive, freed = map(int, child.stdout.split())
    return before, alive, freed


@glibc_only
def test_a_large_buffer_is_its_own_mapping_by_default():
    before, alive, freed = mapped_bytes("default")
    assert alive - before >= 64 << 20  # mapped for the buffer alone,
    assert freed == before  # and unmapped when freed


@glibc_only
def test_with_freed_memory_reused_a_large_buffer_comes_from_the_heap():
    before, alive, freed = mapped_bytes("reuse")
    assert alive == freed == before


def test_another_c_library_is_left_alone():
    with mock.patch.object(host_memory.platform, "libc_ver", return_value=("", "")), \
            mock.patch.object(host_memory.ctypes, "CDLL") as cdll:
        assert host_memory.reuse_freed_memory() is False
    cdll.assert_not_called()
