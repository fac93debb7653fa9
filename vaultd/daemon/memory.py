"""Handing memory the process no longer uses back to the system.

After a first index the heap holds the peak of the backlog's batches (texts, chunks, metadata
lists) in free blocks that glibc's malloc keeps for reuse; a daemon that then sits idle for
days should not. `malloc_trim` releases the free pages at the top of every arena and, since
glibc 2.8, free whole pages inside them too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from functools import cache
from typing import Any


@cache
def _libc() -> Any | None:
    if not sys.platform.startswith("linux"):
        return None  # macOS's allocator returns freed pages by itself
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - absent outside glibc (musl)
    except (OSError, AttributeError):
        return None
    return libc


def trim_heap() -> bool:
    """Collect garbage, then return free heap pages to the system. False where unsupported."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))
