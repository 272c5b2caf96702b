"""The agent's health: what its probes ask, and a small HTTP server that answers them.

* ``GET /livez``: 200 while the publish loop runs, that is it went round (read, publish,
  or waited out a change signal or a back-off) within :attr:`AgentHealth.live_bound_s`;
  503 when it is stuck (a call that never returns) or has stopped. The kubelet restarts
  the container then.
* ``GET /readyz``: 200 when a read of the runtime and its publish (applied, or nothing
  to apply) last succeeded within :attr:`AgentHealth.ready_bound_s`; 503 before the
  first success, and once reading or publishing has failed for longer than the bound
  (the API refuses the object, or the runtime does not answer). Short failures within
  the bound (an API server restarting) do not flip it.

Both answer a short plain-text line saying why. Given a metrics page (the agent's
:class:`~layersched.agent._metrics.AgentMetrics`), ``GET /metrics`` serves it.

The server is a stdlib ``ThreadingHTTPServer`` that reads nothing but the request line
and headers (no body), with a per-connection read deadline and a cap on connections in
flight, so a slow or flooding client cannot hold the agent's memory or threads.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from layersched.core.errors import InputError

log = logging.getLogger(__name__)

LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
METRICS_PATH = "/metrics"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: A probe's request line and headers must arrive within this (kubelet's probe timeout
#: is 1 s by default).
HEALTH_READ_TIMEOUT_S = 5.0
#: Connections served at once; more are closed at once (kubelet sends one per probe).
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


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    timeout = HEALTH_READ_TIMEOUT_S
    server_version = "layersched-agent"
    sys_version = ""

    def do_GET(self) -> None:
        health = self.server.health
        if self.path == LIVEZ_PATH:
            healthy, reason = health.live()
        elif self.path == READYZ_PATH:
            healthy, reason = health.ready()
        elif self.path == METRICS_PATH and self.server.metrics is not None:
            self._send(HTTPStatus.OK, self.server.metrics(), METRICS_CONTENT_TYPE)
            return
        else:
            self._answer(HTTPStatus.NOT_FOUND, f"try {LIVEZ_PATH} or {READYZ_PATH}")
            return
        self._answer(HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE, reason)

    def _answer(self, status: HTTPStatus, text: str) -> None:
        self._send(status, f"{text}\n".encode(), "text/plain; charset=utf-8")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("health %s: " + format, self.client_address[0], *args)


class HealthServer(ThreadingHTTPServer):
    """Serves :class:`AgentHealth` on ``host:port`` (port 0: any free port) from a
    daemon thread: :meth:`start`, then :meth:`close`."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        health: AgentHealth,
        host: str,
        port: int,
        metrics: Callable[[], bytes] | None = None,
    ) -> None:
        self.health = health
        #: The ``/metrics`` page, rendered per request (None: not served).
        self.metrics = metrics
        self._slots = threading.BoundedSemaphore(HEALTH_MAX_CONNECTIONS)
        self._thread: threading.Thread | None = None
        if ":" in host:
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host, port), _Handler)
        except OSError as err:
            raise InputError(
                f"serving the agent's health on {host}:{port} ({err.strerror}): is the port "
                "in use or the address not this host's? choose --health-host/--health-port"
            ) from None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> HealthServer:
        self._thread = threading.Thread(target=self.serve_forever, name="health", daemon=True)
        self._thread.start()
        log.info(
            "health on %s:%d (%s, %s)", self.server_address[0], self.port, LIVEZ_PATH, READYZ_PATH
        )
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: drop, the prober retries
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
