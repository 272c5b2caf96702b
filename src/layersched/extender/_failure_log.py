"""How a resolver's failures are logged: a pod image's at WARNING once per
:data:`POD_WARNING_PERIOD_S` (it is retried no more often), a node image's once per
:data:`NODE_WARNING_PERIOD_S` (thousands may fail together when a registry is down), the
rest at INFO; a layer source's bug with its traceback, once per period.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from layersched.core.errors import LayerschedError
from layersched.core.reference import ImageName
from layersched.registry import NEGATIVE_TTL_S, POSITIVE_TTL_S

log = logging.getLogger(__name__)

#: A failing pod image is logged at WARNING once per negative-cache period (it is
#: retried no more often); a failing node image once per positive period, since
#: thousands of them may fail together when a registry is down.
POD_WARNING_PERIOD_S = NEGATIVE_TTL_S
NODE_WARNING_PERIOD_S = POSITIVE_TTL_S
#: Images whose last warning time is remembered; past this the memory starts over.
MAX_WARNED_IMAGES = 10_000


class WarningLog:
    """Decides whether a failure is logged at WARNING (first in its period) or INFO."""

    def __init__(self, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._period_s = period_s
        self._clock = clock
        self._last: dict[ImageName, float] = {}
        self._lock = threading.Lock()

    def level(self, image: ImageName) -> int:
        now = self._clock()
        with self._lock:
            last = self._last.get(image)
            if last is not None and now - last < self._period_s:
                return logging.INFO
            if len(self._last) >= MAX_WARNED_IMAGES:
                self._last.clear()
            self._last[image] = now
            return logging.WARNING


class FailureLog:
    """How a resolver's failures are logged: a pod image's at WARNING once per
    POD_WARNING_PERIOD_S, a node image's once per NODE_WARNING_PERIOD_S, else INFO."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.pods = WarningLog(POD_WARNING_PERIOD_S, clock)
        self.nodes = WarningLog(NODE_WARNING_PERIOD_S, clock)

    def pod_failed(
        self, image: ImageName, err: BaseException | str | None, *, warning_only: bool = False
    ) -> None:
        """A pod image's failure (or nothing, with ``warning_only`` and no warning due: a
        pod answered from the negative cache)."""
        level = self.pods.level(image)
        if warning_only and level != logging.WARNING:
            return
        log.log(
            level,
            "pod image %r: layers cannot be resolved, pods using it score 0 "
            "(retried after %.0f s): %s",
            image,
            NEGATIVE_TTL_S,
            err,
        )

    def node_failed(self, image: ImageName, err: LayerschedError) -> None:
        level = self.nodes.level(image)
        log.log(level, "node image %r: layers cannot be resolved, ignored: %s", image, err)

    def kept(self, image: ImageName, err: LayerschedError) -> None:
        """A failed revalidation that kept the last known layers."""
        log.log(
            self.nodes.level(image),
            "image %r: revalidating its layers failed, keeping the last known ones "
            "(retried after %.0f s): %s",
            image,
            NEGATIVE_TTL_S,
            err,
        )

    def bug(self, image: ImageName, err: Exception, *, for_pod: bool) -> None:
        """The layer source raised what it never should (a KeyError in a parser, say): its
        traceback is in the operator's log once per period."""
        warnings = self.pods if for_pod else self.nodes
        if warnings.level(image) == logging.WARNING:
            log.exception(
                "%s image %r: the layer source failed unexpectedly (a bug: please report "
                "it with this traceback); the image counts as unresolved, retried after %.0f s",
                "pod" if for_pod else "node",
                image,
                NEGATIVE_TTL_S,
            )
        else:
            log.info("image %r: the layer source failed unexpectedly again: %r", image, err)

    def unknown_offline(self, image: ImageName, err: LayerschedError) -> None:
        level = self.pods.level(image)
        log.log(level, "pod image %r: layers unknown, pods using it score 0: %s", image, err)
