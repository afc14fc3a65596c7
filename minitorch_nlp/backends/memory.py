"""Where the CPU backends' arrays get their memory: glibc's malloc, told to keep what is freed.

A training step makes and frees the same few hundred arrays each step, many of them megabytes.
By default glibc's malloc gives freed memory at the top of its heap back to the system once more
than its trim threshold is free, and serves blocks above its mmap threshold straight from the
system (both thresholds start at 128 kB and follow the largest block freed so far). Either way
the next step's arrays land on new pages, and the first write to each page is a page fault that
also zeroes it; two threads faulting at once queue on the process's memory-map lock. On the GPT
step of ``benchmarks/backends.py`` (numba backend, 2 cores) that was 14,900 faults and 31 ms of
system time a step at one thread, 46 ms at two; the step took 230 and 162 ms, and 192 and 119 ms
with the settings below (5 faults a step).

Importing this module therefore sets glibc's two thresholds (``mallopt``): blocks up to
``MMAP_THRESHOLD`` (32 MB, the largest glibc accepts) come from the heap, and up to
``TRIM_THRESHOLD`` (256 MB) of freed heap stays in the process for the next arrays. The price is
that memory: a process keeps up to that much that it no longer uses. Nothing is changed when the
user has set glibc's malloc variables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
malloc tunables in ``GLIBC_TUNABLES``) or when the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_memory"]

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3   # mallopt's parameter numbers in <malloc.h>


def _user_chose():
    return ("MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ
            or "malloc" in os.environ.get("GLIBC_TUNABLES", ""))


def keep_freed_memory(mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD):
    """Set glibc malloc's mmap and trim thresholds (bytes); returns whether both were set (not
    on another C library, nor when the user chose them through the environment)."""
    if _user_chose():
        return False
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):   # TypeError: Windows has no "this process" library
        return False
    if not hasattr(libc, "gnu_get_libc_version"):
        return False
    return (libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
            and libc.mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1)


keep_freed_memory()
