"""The agent's process: the publish loop, the threads that wake it, and the health port.

:func:`run` is to the agent what ``serve`` is to the other components. With the health
port, it runs in the service shell (:mod:`layersched.serving`): the shell serves
``/livez``, ``/readyz`` and ``/metrics`` on the event loop and turns SIGTERM/SIGINT into
the loop's stop, while the publish loop, the watch of the node's own object and the
runtime's events (or a poll timer) run on threads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator

from layersched.agent._health import (
    HEALTH_MAX_CONNECTIONS,
    HEALTH_READ_TIMEOUT_S,
    AgentHealth,
    health_app,
)
from layersched.agent._loop import (
    BACKOFF_MAX_S,
    DEFAULT_POLL_S,
    DEFAULT_RESYNC_S,
    ChangeSignal,
    OwnObjectApi,
    publish_loop,
    watch_events,
    watch_own_object,
)
from layersched.agent._metrics import AgentMetrics
from layersched.agent._publisher import Publisher
from layersched.agent._readers import NodeRead
from layersched.serving import LIVEZ_PATH, READYZ_PATH, Listener, Serving
from layersched.serving import serve as serve_listeners

log = logging.getLogger(__name__)

#: Where the health port listens by default (the deployment passes the pod's IP, which
#: the kubelet probes).
DEFAULT_HEALTH_HOST = "127.0.0.1"
#: /livez fails when the loop has not gone round for its longest wait (a resync period,
#: or the longest back-off) plus this: every call it makes has a deadline of seconds
#: (containerd and the CRI 10 s, the API 30 s), so five minutes more is a hang.
LIVE_GRACE_S = 300.0
#: /readyz fails when nothing was published for a resync period plus this: a healthy
#: loop succeeds at least every resync period.
READY_GRACE_S = 60.0


def run(
    read: Callable[[], NodeRead],
    publisher: Publisher,
    own_object: Callable[[], OwnObjectApi],
    *,
    events: Callable[[], Iterator[str]] | None = None,
    poll_s: float = DEFAULT_POLL_S,
    resync_s: float = DEFAULT_RESYNC_S,
    health_host: str = DEFAULT_HEALTH_HOST,
    health_port: int | None = None,
    once: bool = False,
) -> None:
    """Publish the node's layers once (``once``), or until SIGTERM/SIGINT.

    ``read``: the node's images and layers; ``own_object``: a client of its own for the
    watch of the node's object (it holds its connection open for minutes); ``events``:
    the runtime's image events (None: read every ``poll_s``); ``health_port``: serve the
    probes and metrics there (None: no health port).
    """
    if once:
        publisher.adopt_published()
        publish_loop(read, publisher, ChangeSignal(), resync_s=resync_s, once=True)
    else:
        health = AgentHealth(
            live_bound_s=max(resync_s, poll_s, BACKOFF_MAX_S) + LIVE_GRACE_S,
            ready_bound_s=resync_s + READY_GRACE_S,
        )
        listeners: list[Listener] = []
        if health_port is not None:
            app = health_app(health, AgentMetrics(publisher.stats).registry)
            listeners.append(
                Listener(
                    app,
                    health_host,
                    health_port,
                    "--health-port",
                    keepalive_s=HEALTH_READ_TIMEOUT_S,
                    max_connections=HEALTH_MAX_CONNECTIONS,
                )
            )
        signal = ChangeSignal()

        def publish() -> None:
            publisher.adopt_published()
            _start_wakers(own_object, publisher, signal, events, poll_s)
            publish_loop(read, publisher, signal, resync_s=resync_s, health=health)

        async def main(serving: Serving) -> None:
            stopping = asyncio.ensure_future(_stop_on_signal(serving, signal))
            try:
                await asyncio.to_thread(publish)
            finally:
                stopping.cancel()

        asyncio.run(serve_listeners(listeners, main, on_listening=_health_listening))
    stats = publisher.stats
    log.info(
        "agent for %s stopped: %d reads, %d applies, %d repairs",
        publisher.node,
        stats.reads,
        stats.applies,
        sum(stats.repairs.values()),
    )


def _health_listening(url: str) -> None:
    log.info("health on %s (%s, %s)", url, LIVEZ_PATH, READYZ_PATH)


async def _stop_on_signal(serving: Serving, signal: ChangeSignal) -> None:
    await serving.stopped.wait()
    log.info("signal: stopping")
    signal.stopped.set()
    signal.set()


def _start_wakers(
    own_object: Callable[[], OwnObjectApi],
    publisher: Publisher,
    signal: ChangeSignal,
    events: Callable[[], Iterator[str]] | None,
    poll_s: float,
) -> None:
    """The daemon threads that wake the publish loop: the watch of the node's own object
    (its client is left to the process's end, as the thread is: closing it would fail
    its read), and the runtime's events or a poll timer."""
    threading.Thread(
        target=watch_own_object,
        args=(own_object(), publisher, signal),
        name="own-object",
        daemon=True,
    ).start()
    if events is not None:
        threading.Thread(
            target=watch_events, args=(events, signal, poll_s), name="runtime-events", daemon=True
        ).start()
    else:
        threading.Thread(target=_poll, args=(signal, poll_s), name="poll", daemon=True).start()


def _poll(signal: ChangeSignal, poll_s: float) -> None:
    while not signal.stopped.wait(poll_s):
        signal.set()
