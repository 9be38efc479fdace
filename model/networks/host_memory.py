"""Host memory that training reuses instead of asking the kernel for it again on every step.

glibc's malloc serves every request above its mmap threshold (at most 32 MB) with a fresh
`mmap` and unmaps it on free. A training step on the CPU allocates many such buffers and
frees them within the step: each word-embedding gradient is a dense [30,522, 384] float32
tensor (47 MB) built per padded-length group, the span scorer's activations are tens of MB,
and every fresh page is zero-filled by the kernel on its first touch, a share of a CPU step's
time (`bench/host_memory.py`).

`reuse_freed_memory` turns glibc's mmap path off and lets freed memory stay in the heap, so
later steps get pages that are already mapped: what PyTorch's guide reaches by preloading
jemalloc or tcmalloc, without a library to install. Only where buffers come from changes,
not what is computed in them: the bench's losses are the same bits at every step. The price:
the setting is the whole process's and lasts as long as it does (in `realm run`, from the
ICT stage's trainer on, the index build and evaluation included), and its resident size
no longer shrinks between steps: it stays at the heap's high-water mark or above, where
fragmentation pins freed memory. It helps the main thread's heap, where the trainers run
their steps (CPU autograd runs its backward on the calling thread); other threads' arenas
still map their own. pyarrow allocates from its own pool, and Beam's workers are processes
of their own: neither is touched. Where the C library is not glibc (macOS, musl) it does
nothing.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
# Freed memory at the heap's top is given back to the kernel only past this much: mallopt
# takes a C int, and no step frees 2 GB at once.
TRIM_THRESHOLD_BYTES = 2**31 - 1


def reuse_freed_memory() -> bool:
    """Keep freed host memory mapped for reuse (module docstring); whether this process's
    allocator now does (False where it is not glibc's, or glibc refused). Calling it again
    changes nothing. A speed setting only: it never raises."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library, whichever file it came from
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success.
    if not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES):
        log.warning("glibc's mallopt refused a trim threshold; freed host memory goes back to the kernel as before")
        return False
    if not mallopt(M_MMAP_MAX, 0):
        log.warning("glibc's mallopt refused to turn mmap off; large buffers are still mapped afresh")
        return False
    return True
