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
``harness/bench/bench_against.py``), while after a hostile flood and its deletion neither
allocator alone comes back within 10 % of its baseline (docs/inventory.md).
:func:`limit_malloc_arenas` caps glibc's heaps in either case (CPython takes objects over
512 bytes from glibc even under pymalloc), and :func:`trim` (``malloc_trim(0)``) returns
free pages after a burst. All are no-ops where glibc is
absent (musl, macOS). ``harness/bench/bench_extender.py``'s ``watch_memory_hostile`` case
measures the effect.

Neither allocator gives back everything: what was allocated while a flood was held and
outlived it pins the memory around it (a pymalloc arena, a glibc page). So a
:class:`Recycler` watches for that residue, and once it passes a bound the extender
**re-executes itself** (:func:`reexec`: same PID, same arguments, its listening sockets
handed over open, so kube-scheduler's connections wait in their backlog rather than being
refused). The fresh process answers neutral scores until it has listed the inventory
again, then holds only what a fresh process holds: after the hostile flood, 0.974 × the
baseline, with 8.4 s of neutral answers (``harness/results/extender_memory.json``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

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
#: A recycle is due when resident memory exceeds what a fresh process would hold by more
#: than this (``--recycle-excess-mib``; 0: never) ...
DEFAULT_RECYCLE_EXCESS_BYTES = 32 * 1024 * 1024
#: ... and by more than this share of the fresh process's own resident memory ...
RECYCLE_EXCESS_RATIO = 0.2
#: ... at this many checks in a row ...
RECYCLE_CONFIRMATIONS = 2
#: ... made this often ...
RECYCLE_CHECK_PERIOD_S = 5.0
#: ... and at most once in this long (a pod's whole life, across re-executions).
RECYCLE_MIN_INTERVAL_S = 600.0
#: How a re-executed process finds its listening sockets: ``verb=3:4,health=5``.
SOCKETS_ENV = "LAYERSCHED_EXTENDER_SOCKETS"
#: How many re-executions came before, and when the last was decided: ``2,1764000000.5``.
RECYCLED_ENV = "LAYERSCHED_EXTENDER_RECYCLED"
#: Every so often, if objects of this many bytes were parsed or released since the last
#: time, glibc is told to return its free pages (RSS then follows what is held).
TRIM_PERIOD_S = 5.0
TRIM_AFTER_BYTES = 16 * 1024 * 1024


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


class ChurnTrim:
    """:func:`trim` after a burst: checked every :data:`TRIM_PERIOD_S` (the caller's
    timer), it trims once more than :data:`TRIM_AFTER_BYTES` went through since the last
    check that did (``churned_bytes``: a running count of bytes parsed and released)."""

    def __init__(self, churned_bytes: Callable[[], int]) -> None:
        self._churned_bytes = churned_bytes
        self._churned_at_trim = 0
        #: Times glibc returned free pages.
        self.trims = 0

    def check(self) -> None:
        churned_bytes = self._churned_bytes()
        if churned_bytes - self._churned_at_trim > TRIM_AFTER_BYTES:
            self._churned_at_trim = churned_bytes
            if trim():
                self.trims += 1


def exec_with_glibc_malloc() -> None:
    """Re-execute this process (same arguments, same PID) with CPython allocating through
    glibc's malloc, unless ``PYTHONMALLOC`` is set already or the C library is not glibc.
    Call it first thing, before any thread or file is opened; it returns only when it
    does nothing."""
    if "PYTHONMALLOC" in os.environ or not available():
        return
    _execute_again({**MALLOC_ENVIRONMENT, **os.environ})


def _execute_again(environment: Mapping[str, str]) -> NoReturn:
    """This very program again (same PID), with the same arguments, in ``environment``:
    no shell, no other program. Raises OSError if the interpreter cannot be executed."""
    sys.stdout.flush()
    sys.stderr.flush()
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


def rss_bytes() -> int:
    """This process's resident memory (0 where ``/proc`` is not there)."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_bytes().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


@dataclass(eq=False)  # one per process, registered as a collector: hashed by identity
class Recycler:
    """When to re-execute: once resident memory has stayed well above what a fresh process
    holding the same inventory would need.

    The reference is this process's own: its resident memory and its held bytes (the
    watch pools' estimate, which is above the memory really gained: 0.5 to 0.9 of it,
    and the layer caches') at the first check after the inventory was listed. A fresh
    process holding ``held`` bytes then needs at most ``reference RSS + max(0, held -
    reference held)``; what is resident beyond that is memory freed but kept by the
    allocator. A flood that is still held is no excess (its bytes are held); once it is
    released, the excess is what it left.
    """

    #: 0: never recycle.
    min_excess_bytes: int = DEFAULT_RECYCLE_EXCESS_BYTES
    ratio: float = RECYCLE_EXCESS_RATIO
    confirmations: int = RECYCLE_CONFIRMATIONS
    min_interval_s: float = RECYCLE_MIN_INTERVAL_S
    #: Re-executions before this process, and when the last was decided (Unix time; 0:
    #: never), as :func:`recycled_before` read them.
    count: int = 0
    last_at_s: float = 0.0
    #: (resident bytes, held bytes) at the first check; None before it.
    reference: tuple[int, int] | None = None
    #: The latest check's excess (bytes; negative: under the estimate).
    excess_bytes: int = 0
    #: Checks in a row over the bound.
    over: int = 0
    #: Seconds from the last recycle's decision until this process had listed the
    #: inventory (None: this process was not recycled into, or is not ready yet).
    ready_after_s: float | None = None
    #: Set once a recycle is due (then the server re-executes).
    wanted: threading.Event = field(default_factory=threading.Event)

    @property
    def enabled(self) -> bool:
        return self.min_excess_bytes > 0

    def bound_bytes(self) -> int:
        """The excess past which a recycle is due (0 before the reference is taken)."""
        if self.reference is None:
            return 0
        return max(self.min_excess_bytes, int(self.ratio * self.reference[0]))

    def check(self, rss: int, held: int, now_s: float | None = None) -> bool:
        """Record one measurement (resident and held bytes); True when a recycle becomes
        due (once: :attr:`wanted` is then set)."""
        if not self.enabled or rss <= 0 or self.wanted.is_set():
            return False
        if self.reference is None:
            self.reference = (rss, held)
            return False
        reference_rss, reference_held = self.reference
        self.excess_bytes = rss - reference_rss - max(0, held - reference_held)
        self.over = self.over + 1 if self.excess_bytes > self.bound_bytes() else 0
        now_s = time.time() if now_s is None else now_s
        if self.over < self.confirmations or now_s - self.last_at_s < self.min_interval_s:
            return False
        self.wanted.set()
        return True

    def collect(self) -> Iterator[Metric]:
        """The recycler's metrics (it is a prometheus_client collector)."""
        recycles = CounterMetricFamily(
            "layersched_extender_memory_recycles",
            "Re-executions since the pod started, to give back memory the allocator kept "
            "after a burst (counted across them).",
        )
        recycles.add_metric([], float(self.count))
        yield recycles
        gauges = [
            (
                "layersched_extender_memory_excess_bytes",
                "Resident memory beyond what a fresh process holding as much needs "
                "(estimated; past layersched_extender_memory_recycle_bound_bytes the "
                "extender re-executes).",
                float(self.excess_bytes),
            ),
            (
                "layersched_extender_memory_recycle_bound_bytes",
                "The excess past which the extender re-executes itself (0 until measured).",
                float(self.bound_bytes()),
            ),
        ]
        if self.ready_after_s is not None:
            gauges.append(
                (
                    "layersched_extender_memory_recycle_neutral_seconds",
                    "After the last recycle: seconds from its decision until this process "
                    "had listed the inventory (neutral scores meanwhile).",
                    self.ready_after_s,
                )
            )
        for name, documentation, value in gauges:
            yield GaugeMetricFamily(name, documentation, value=value)

    def loaded(self, now_s: float | None = None) -> None:
        """The inventory is listed: how long the last recycle kept this process neutral."""
        if self.count > 0:
            now_s = time.time() if now_s is None else now_s
            self.ready_after_s = max(0.0, now_s - self.last_at_s)


def recycled_before(environ: Mapping[str, str] | None = None) -> tuple[int, float]:
    """(re-executions before this process, when the last was decided) from
    :data:`RECYCLED_ENV`; (0, 0.0) when there was none or the value is unreadable."""
    value = (os.environ if environ is None else environ).get(RECYCLED_ENV, "")
    count, _, at_s = value.partition(",")
    try:
        return max(0, int(count)), float(at_s)
    except ValueError:
        return 0, 0.0


def inherited_sockets(environ: Mapping[str, str] | None = None) -> dict[str, list[socket.socket]]:
    """The listening sockets a recycled process was handed (:data:`SOCKETS_ENV`), by
    listener name; {} for a process started afresh. Raises ValueError naming the variable
    if it names a descriptor that is not a listening TCP socket."""
    value = (os.environ if environ is None else environ).get(SOCKETS_ENV, "")
    sockets: dict[str, list[socket.socket]] = {}
    for part in filter(None, value.split(",")):
        name, _, fds = part.partition("=")
        for fd in fds.split(":"):
            try:
                sock = socket.socket(fileno=int(fd))
            except (ValueError, OSError) as err:
                raise ValueError(
                    f"{SOCKETS_ENV}={value!r}: {fd!r} is not an open socket ({err}); the "
                    "variable is set by the extender for the process it re-executes into: "
                    "unset it"
                ) from None
            if sock.type != socket.SOCK_STREAM or not sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                sock.detach()
                raise ValueError(
                    f"{SOCKETS_ENV}={value!r}: descriptor {fd} is not a listening TCP "
                    "socket; the variable is set by the extender for the process it "
                    "re-executes into: unset it"
                )
            sock.setblocking(False)
            sockets.setdefault(name, []).append(sock)
    return sockets


def reexec(sockets: Mapping[str, Sequence[socket.socket]], recycler: Recycler) -> NoReturn:
    """Re-execute this process (same PID, same arguments, same environment otherwise),
    handing it ``sockets`` open (by listener name) and the recycle count."""
    for listeners in sockets.values():
        for sock in listeners:
            os.set_inheritable(sock.fileno(), True)
    environment = dict(os.environ)
    environment[SOCKETS_ENV] = ",".join(
        f"{name}={':'.join(str(sock.fileno()) for sock in listeners)}"
        for name, listeners in sockets.items()
    )
    environment[RECYCLED_ENV] = f"{recycler.count + 1},{time.time():.3f}"
    logging.shutdown()
    _execute_again(environment)
