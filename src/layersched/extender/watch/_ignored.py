"""What the watch ignores, and how it says so: why an object (or part of one) is ignored
(:data:`IGNORED_REASONS`, the ``reason`` label of the ignored-objects counter), the record
a watch thread hands the loop for it (:class:`Ignored`), and the warnings, rate-limited
per kind (:class:`IgnoredLog`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Warnings about ignored objects: the first of each kind in this period is logged in
#: full, the others are counted and summed up in one line when the period ends. A flood
#: of hostile objects then costs a few log lines, and nothing is kept per message (a
#: string kept per object would pin memory the objects' garbage is freed from).
IGNORED_LOG_PERIOD_S = 60.0
#: Why an object is ignored (the ``reason`` label of the ignored-objects counter).
MALFORMED = "malformed"
TOO_LARGE = "too_large"
OVER_BUDGET = "over_budget"
UNKNOWN_NODE = "unknown_node"
STALE = "stale"
IGNORED_REASONS = (MALFORMED, TOO_LARGE, OVER_BUDGET, UNKNOWN_NODE, STALE)


@dataclass(frozen=True, slots=True)
class Ignored:
    """Why an object is ignored (one of :data:`IGNORED_REASONS`), and the warning."""

    reason: str
    message: str


class IgnoredLog:
    """Warnings about ignored objects (or parts of objects), rate-limited: the first of
    each kind per :data:`IGNORED_LOG_PERIOD_S` in full, the rest counted and summed up in
    one line when the period ends (:meth:`flush`). Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._period_end_s = 0.0
        #: kinds of warning logged in this period -> how many more were not
        self._suppressed: dict[str, int] = {}

    def warn(self, kind: str, message: str) -> None:
        with self._lock:
            if self._clock() >= self._period_end_s:
                self._flush_locked()
            if kind in self._suppressed:
                self._suppressed[kind] += 1
                return
            self._suppressed[kind] = 0
        log.warning("%s", message)

    def flush(self) -> None:
        """Sum up the warnings not logged, if their period ended."""
        with self._lock:
            if self._clock() >= self._period_end_s:
                self._flush_locked()

    def _flush_locked(self) -> None:
        more = {kind: count for kind, count in self._suppressed.items() if count}
        if more:
            log.warning(
                "%d more objects (or parts of objects) ignored in the last %.0f s: %s (see "
                "layersched_extender_watch_ignored_objects_total)",
                sum(more.values()),
                IGNORED_LOG_PERIOD_S,
                ", ".join(f"{count} {kind}" for kind, count in sorted(more.items())),
            )
        self._suppressed = {}
        self._period_end_s = self._clock() + IGNORED_LOG_PERIOD_S
