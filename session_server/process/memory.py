"""Large allocations go back to the system when freed (I/O shell, glibc only).

glibc serves an allocation from its heaps unless it is bigger than the mmap threshold,
and raises that threshold (up to 32 MiB) each time a mapped block is freed. A server that
receives frames of several MiB therefore soon keeps them on its heaps, where freed blocks
stay part of the process's RSS (and each worker thread's arena keeps its own). Fixing the
threshold (``mallopt(M_MMAP_THRESHOLD)``, which also stops the adjustment) keeps every
large frame, decoded string and encoded row in its own mapping, returned when freed, so
RSS follows what is in use. On another C library this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Final

__all__ = ["MMAP_THRESHOLD_BYTES", "map_large_allocations"]

log = logging.getLogger("session_server.process.memory")

MMAP_THRESHOLD_BYTES: Final = 256 * 1024
_M_MMAP_THRESHOLD: Final = -3  # glibc malloc.h


def map_large_allocations(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; False when not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused; large blocks may stay on the heap")
    return done
