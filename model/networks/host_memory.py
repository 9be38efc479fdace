"""Host memory that training reuses instead of asking the kernel for it again on every step.

glibc's malloc serves every request above its mmap threshold (at most 32 MB) with a fresh
`mmap` and unmaps it on free. A training step on the CPU allocates many such buffers and
frees them within the step: each word-embedding gradient is a dense [30,522, 384] float32
tensor (47 MB) built per padded-length group, the span scorer's activations are tens of MB,
and every fresh page is zero-filled by the kernel on its first touch. Measured on the 2-core
CPU, a fresh 47 MB `torch.zeros` takes ~12 ms against ~1 ms for one reused, and a
fine-tuning step spends a ninth of its time so (`bench/host_memory.py`: 1.13x).

`reuse_freed_memory` turns glibc's mmap path off and lets freed memory stay in the heap, so
later steps get pages that are already mapped: what PyTorch's guide reaches by preloading
jemalloc or tcmalloc, without a library to install. Arithmetic is untouched (every buffer is
still 64-byte aligned by PyTorch's allocator), so a step's losses are the same bits; the
price is a resident size that stays at the heap's high-water mark instead of shrinking
between steps. Where the C library is not glibc (macOS, musl) it does nothing.
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
    allocator now does (False where it is not glibc's). Calling it again changes nothing."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the process's own C library, whichever file it was loaded from
    # mallopt returns 1 on success; the trim threshold first, so that turning mmap off never
    # meets a heap that still shrinks.
    if not (libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) and libc.mallopt(M_MMAP_MAX, 0)):
        log.warning("glibc's mallopt refused; freed host memory goes back to the kernel as before")
        return False
    return True
