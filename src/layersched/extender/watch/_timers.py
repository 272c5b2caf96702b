"""One timer thread for every deadline the live inventory keeps.

The watch schedules two kinds of deadlines per node: the end of a new node's agent grace
(then its status images are resolved through the registry) and the moment its published
inventory goes stale. A ``threading.Timer`` each would be one thread per node without an
agent (5,000 threads on a cluster without agents); :class:`TimerHeap` keeps them in one
heap served by one daemon thread. Scheduling a key again replaces its deadline, and
cancelled or replaced entries are dropped from the heap once they outnumber the live
ones, so the heap is bounded by the keys scheduled, never by how often they were.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)

#: Dead entries (cancelled, or replaced by a later schedule) tolerated in the heap
#: beyond the live ones before it is rebuilt from the live ones.
COMPACT_SLACK = 64


class TimerHeap:
    """Callbacks due at monotonic times, run one at a time on one daemon thread.

    A callback must be quick (post work elsewhere): the next one waits for it. One that
    raises is logged with its traceback and the thread goes on.
    """

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._name = name
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Hashable]] = []
        #: key -> (due, callback): the live deadline of each key.
        self._due: dict[Hashable, tuple[float, Callable[[], None]]] = {}
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(self, key: Hashable, due_s: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` at monotonic time ``due_s`` (replacing ``key``'s deadline)."""
        with self._cond:
            if self._stopped:
                return
            self._due[key] = (due_s, callback)
            heapq.heappush(self._heap, (due_s, next(self._order), key))
            self._compact()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def scheduled(self, key: Hashable) -> bool:
        """Whether ``key`` has a deadline pending."""
        with self._cond:
            return key in self._due

    def cancel(self, key: Hashable) -> None:
        """Forget ``key``'s deadline, if any."""
        with self._cond:
            if self._due.pop(key, None) is not None:
                self._compact()

    def __len__(self) -> int:
        """Deadlines pending."""
        with self._cond:
            return len(self._due)

    @property
    def heap_entries(self) -> int:
        """Entries in the heap, dead ones included (bounded by the live ones + slack)."""
        with self._cond:
            return len(self._heap)

    def stop(self) -> None:
        """Run nothing more; the thread ends."""
        with self._cond:
            self._stopped = True
            self._due.clear()
            self._heap.clear()
            self._cond.notify()

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._due) + COMPACT_SLACK:
            self._heap = [(due, next(self._order), key) for key, (due, _) in self._due.items()]
            heapq.heapify(self._heap)

    def _next(self) -> Callable[[], None] | None:
        """Wait for the next due callback (None: stopped)."""
        with self._cond:
            while not self._stopped:
                if not self._heap:
                    self._cond.wait()
                    continue
                due_s, _, key = self._heap[0]
                wait_s = due_s - self._clock()
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue
                heapq.heappop(self._heap)
                live = self._due.get(key)
                if live is None or live[0] != due_s:
                    continue  # cancelled, or scheduled again for another time
                del self._due[key]
                return live[1]
            return None

    def _run(self) -> None:
        while (callback := self._next()) is not None:
            try:
                callback()
            except Exception:
                log.exception("%s: a timer callback failed (a bug: please report it)", self._name)
