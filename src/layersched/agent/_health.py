"""The agent's health: what its probes ask, and the application that answers them.

* ``GET /livez``: 200 while the publish loop runs, that is it went round (read, publish,
  or waited out a change signal or a back-off) within :attr:`AgentHealth.live_bound_s`;
  503 when it is stuck (a call that never returns) or has stopped. The kubelet restarts
  the container then.
* ``GET /readyz``: 200 when a read of the runtime and its publish (applied, or nothing
  to apply) last succeeded within :attr:`AgentHealth.ready_bound_s`; 503 before the
  first success, and once reading or publishing has failed for longer than the bound
  (the API refuses the object, or the runtime does not answer). Short failures within
  the bound (an API server restarting) do not flip it.

Both answer a short plain-text line saying why. Given a metrics registry (the agent's
:class:`~layersched.agent._metrics.AgentMetrics`), ``GET /metrics`` serves it.

:func:`health_app` is served by the service shell (:mod:`layersched.serving`) on the
agent's event loop, while the publish loop runs on a thread (:mod:`._run`): a connection
holds no thread, one that sends no request within :data:`HEALTH_READ_TIMEOUT_S` is
closed, and past :data:`HEALTH_MAX_CONNECTIONS` at once a new one is closed unanswered,
so a slow or flooding client cannot hold the agent's memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from layersched.serving import LIVEZ_PATH, READYZ_PATH, add_health_routes

#: A connection must bring its request within this, and is closed after as long idle
#: (kubelet's probe timeout is 1 s by default).
HEALTH_READ_TIMEOUT_S = 5.0
#: Connections held at once; more are closed at once (kubelet sends one per probe).
HEALTH_MAX_CONNECTIONS = 8
#: A failure's text in a /readyz answer is cut to this.
MAX_REASON_CHARS = 200


class AgentHealth:
    """What the publish loop reports and the probes read (thread-safe)."""

    def __init__(
        self,
        *,
        live_bound_s: float,
        ready_bound_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.live_bound_s = live_bound_s
        self.ready_bound_s = ready_bound_s
        self._clock = clock
        self._lock = threading.Lock()
        self._tick_at = clock()
        self._ok_at: float | None = None
        self._failing_since: float | None = None
        self._failure = ""
        self._stopped = False

    def tick(self) -> None:
        """The loop went round."""
        with self._lock:
            self._tick_at = self._clock()

    def succeeded(self) -> None:
        """A read and its publish succeeded (applied, or nothing to apply)."""
        with self._lock:
            self._tick_at = self._ok_at = self._clock()
            self._failing_since = None
            self._failure = ""

    def failed(self, reason: str) -> None:
        """A read or a publish failed with ``reason``."""
        with self._lock:
            self._tick_at = now = self._clock()
            if self._failing_since is None:
                self._failing_since = now
            self._failure = reason[:MAX_REASON_CHARS]

    def stopped(self) -> None:
        """The loop ended (the agent is shutting down)."""
        with self._lock:
            self._stopped = True

    def live(self) -> tuple[bool, str]:
        """Whether the loop runs, and why not."""
        with self._lock:
            if self._stopped:
                return False, "the publish loop has stopped"
            idle_s = self._clock() - self._tick_at
            if idle_s > self.live_bound_s:
                return False, (
                    f"the publish loop has not gone round for {idle_s:.0f} s "
                    f"(bound {self.live_bound_s:.0f} s): stuck"
                )
            return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Whether the node's object is being kept, and why not."""
        with self._lock:
            now = self._clock()
            if self._ok_at is None:
                since = "" if self._failing_since is None else f"; failing: {self._failure}"
                return False, f"nothing published yet{since}"
            age_s = now - self._ok_at
            if age_s > self.ready_bound_s:
                return False, (
                    f"no successful publish for {age_s:.0f} s (bound "
                    f"{self.ready_bound_s:.0f} s); last failure: {self._failure or 'none'}"
                )
            return True, "ok"


def health_app(health: AgentHealth, registry: CollectorRegistry | None = None) -> web.Application:
    """The health port's application: ``/livez`` and ``/readyz`` answer ``health``, and
    ``/metrics`` serves ``registry`` when given. It reads no request body."""
    app = web.Application()
    add_health_routes(app, {LIVEZ_PATH: health.live, READYZ_PATH: health.ready}, registry)
    return app
