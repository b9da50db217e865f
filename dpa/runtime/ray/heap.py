"""How dpa's own worker processes hand memory back to the operating system.

A job's kernels work on arrays of a block's length (a column of 1.7M rows is 13 MB) and on
per-group arrays (100k groups of float64 are 800 KB), allocated and freed block after block.
glibc's ``malloc`` serves an allocation above its mmap threshold (128 KiB to start) with a
fresh ``mmap`` and returns it with ``munmap`` when freed, and gives the top of its heap back
once more than its trim threshold (128 KiB) is free. Every such array is then new memory
again: a page fault on first touch of each 4 KiB page, which inside a virtual machine costs
several microseconds. Grouping a block of 1M rows over 100k keys a second time in a new
process takes thousands of page faults with glibc's thresholds and none with the ones below
(``tests/unit/dpa/runtime/ray/test_heap.py``).

:func:`keep_freed_memory` raises both thresholds in the process it runs in, so that freed
arrays stay in the heap for the next block: arrays up to :data:`MMAP_THRESHOLD` come from the
heap, and up to :data:`TRIM_THRESHOLD` of free heap is kept. Only the hosts (the processes that run
mappers and reducers) call it; the user's driver process keeps its own settings. Elsewhere than
glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

#: Allocations up to this size come from the heap rather than a fresh ``mmap`` (a block's
#: column of 1.7M float64 values is 13 MB).
MMAP_THRESHOLD = 32 << 20

#: Free memory at the top of the heap kept for reuse, at most.
TRIM_THRESHOLD = 64 << 20

# mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Raises glibc's mmap and trim thresholds in this process (see the module docstring).

    Returns:
        Whether both were set (False where the C library is not glibc).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: nothing to tune
        logger.debug("no mallopt in this C library: heap thresholds left as they are")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not done:
        logger.debug("mallopt refused the heap thresholds")
    return done
