"""glibc's malloc, set for torch on a CPU: large tensors reuse freed heap instead of fresh pages.

By default glibc serves a block over its mmap threshold (128 KiB, rising to at most 32 MiB) with fresh pages from the
kernel and returns them when it is freed, and a thread other than the main one allocates from an arena of its own,
which cannot hold a block over 64 MiB at all. A network's activations are such blocks, allocated and freed on every
pass, so the kernel zero-fills each one again: on this project's 2-core VM the Channel Axes page's default job spent
more CPU time in those page faults than in the convolutions (docs/results.md, "Speed"). With
:data:`HEAP_BYTES` as both the mmap and the trim threshold and one arena, blocks up to 256 MiB come from the heap and
up to 256 MiB of freed heap is kept; :func:`release_freed_memory` hands the rest back after a job.

Worker processes get these settings as environment variables at their start (:data:`ENVIRONMENT`, through Dask's
``pre-spawn-environ``), a command-line run through :func:`tune` (``mallopt``). Elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

HEAP_BYTES = 256 << 20
"""Blocks up to this size come from the heap, and up to this much freed heap is kept."""
ENVIRONMENT = {"MALLOC_MMAP_THRESHOLD_": str(HEAP_BYTES), "MALLOC_TRIM_THRESHOLD_": str(HEAP_BYTES),
               "MALLOC_ARENA_MAX": "1"}
"""The settings as glibc reads them from the environment when a process starts."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def tune() -> bool:
    """Set this process's malloc as :data:`ENVIRONMENT` does (for threads that have not allocated yet, one arena);
    ``False`` where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    settings = ((_M_MMAP_THRESHOLD, HEAP_BYTES), (_M_TRIM_THRESHOLD, HEAP_BYTES), (_M_ARENA_MAX, 1))
    return all([libc.mallopt(option, value) == 1 for option, value in settings])


def release_freed_memory() -> None:
    """Return every freed page of the heap to the system (``malloc_trim(0)``): after a job, a process keeps only what
    it still holds."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
