"""Giving freed memory back to the system (glibc), so that RSS follows what is held.

After a burst of large objects (the watch parsing 1 MiB NodeLayerInventory objects,
then dropping them) the extender's resident memory stayed at the burst's level although
the objects were gone, measured on CPython 3.11 with glibc 2.36:

* CPython's own small-object allocator (pymalloc) returns a 1 MiB arena to the system
  only when every object in it is freed, and the few objects that outlive a burst
  (counters, the nodes' new id arrays) keep hundreds of arenas alive: after 200 hostile
  objects and their deletion, 347 arenas held 155 MB of objects and 200 MB of nothing.
* glibc's malloc keeps freed pages in its heaps (one per thread that allocated, up to 8
  per core) until told otherwise.

So ``--allocator glibc`` runs the extender on glibc's malloc, which returns free pages
anywhere in a heap: :func:`exec_with_glibc_malloc` re-executes the process with
``PYTHONMALLOC=malloc`` and ``MALLOC_ARENA_MAX=2`` unless ``PYTHONMALLOC`` is set
already. It is not the default: every small allocation of a request then costs more, and
a ``NodeNames`` request at 5,000 nodes took about twice as long (p50 1.79 against 0.95 ms,
``bench/bench_against.py``), while after a hostile flood and its deletion neither
allocator comes back within 10 % of its baseline (``bench/results/extender_memory.json``;
docs/inventory.md). :func:`limit_malloc_arenas` caps glibc's heaps in either case (CPython
takes objects over 512 bytes from glibc even under pymalloc), and :func:`trim`
(``malloc_trim(0)``) returns free pages after a burst. All are no-ops where glibc is
absent (musl, macOS). ``bench/bench_extender.py``'s ``watch_memory_hostile`` case
measures the effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import sys

log = logging.getLogger(__name__)

#: mallopt's parameter for the number of heaps (glibc's malloc.h).
M_ARENA_MAX = -8
#: Heaps glibc may make: the event loop's and one shared by the other threads.
MALLOC_ARENAS = 2
#: ``--allocator``'s choices: CPython's own small-object allocator, or glibc's malloc.
PYMALLOC, GLIBC = "pymalloc", "glibc"
ALLOCATORS = (PYMALLOC, GLIBC)
#: What :func:`exec_with_glibc_malloc` sets (unless set already).
MALLOC_ENVIRONMENT = {"PYTHONMALLOC": "malloc", "MALLOC_ARENA_MAX": str(MALLOC_ARENAS)}


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None  # not glibc
    return libc


def available() -> bool:
    """Whether the C library is glibc (the calls below do something)."""
    return _glibc() is not None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Let glibc make at most ``arenas`` heaps (unless ``MALLOC_ARENA_MAX`` says how
    many already); True if it took the setting."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Return glibc's free pages to the system; True if some were."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def exec_with_glibc_malloc() -> None:
    """Re-execute this process (same arguments, same PID) with CPython allocating through
    glibc's malloc, unless ``PYTHONMALLOC`` is set already or the C library is not glibc.
    Call it first thing, before any thread or file is opened; it returns only when it
    does nothing."""
    if "PYTHONMALLOC" in os.environ or not available():
        return
    environment = {**MALLOC_ENVIRONMENT, **os.environ}
    sys.stdout.flush()
    sys.stderr.flush()
    # this very program again, with the same arguments: no shell, no other program
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)  # noqa: S606


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def malloc_bytes() -> tuple[int, int] | None:
    """(bytes in use, bytes free but kept) in glibc's heaps, or None (not glibc >= 2.33).
    In use is what the process really holds; RSS above it is freed memory not returned."""
    libc = _glibc()
    info = getattr(libc, "mallinfo2", None) if libc is not None else None
    if info is None:
        return None
    info.restype = _MallInfo2
    stats = info()
    return int(stats.uordblks + stats.hblkhd), int(stats.fordblks)
