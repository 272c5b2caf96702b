"""The agent's health endpoint: what /livez and /readyz mean (a table over a clock the
test moves), and its application served over real HTTP in this process, its readiness
going false when publishing fails past the bound and true again when the API is back,
with the publish loop running against an API double over HTTP; the agent's metrics page
when given; and :func:`layersched.agent.run`, the whole agent in the service shell, from
its first publish to its stop on SIGTERM."""

from __future__ import annotations

import http.client
import os
import signal as signals
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
import tenacity

from layersched.agent import (
    LIVEZ_PATH,
    METRICS_PATH,
    READYZ_PATH,
    AgentHealth,
    AgentMetrics,
    ChangeSignal,
    NodeRead,
    Publisher,
    health_app,
    publish_loop,
    run,
)
from layersched.agent._health import HEALTH_MAX_CONNECTIONS
from layersched.agent._publisher import PublishStats
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from tests.fixtures.extender import free_port
from tests.fixtures.inventory_api import InventoryApi
from tests.fixtures.serving import http_get, running_app

LIVE_BOUND_S = 100.0
READY_BOUND_S = 30.0
#: How long the HTTP test waits for a probe to turn (the bounds there are a second).
TURN_TIMEOUT_S = 10.0
POLL_S = 0.05


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


# Each case: what the loop reported, at which second (from 0), and the answers at the end.
# live/ready bounds are 100 s and 30 s.
STEPS: dict[str, tuple[list[tuple[float, str]], float, bool, bool, str]] = {
    # just started: the loop runs, nothing is published yet
    "fresh": ([], 1, True, False, "nothing published yet"),
    # started, and the first read failed: not ready, and the failure is said
    "first-read-failed": ([(1, "fail")], 2, True, False, "failing: reading"),
    # a publish 10 s ago: ready
    "published": ([(0, "ok")], 10, True, True, "ok"),
    # published at 0, failing since 5 s, now 20 s: within the 30 s bound, still ready
    "short-outage": ([(0, "ok"), (5, "fail"), (15, "fail")], 20, True, True, "ok"),
    # the same outage at 40 s: past the bound, not ready, the last failure said
    "long-outage": ([(0, "ok"), (5, "fail"), (35, "fail")], 40, True, False, "last failure"),
    # back after the outage: ready again
    "recovered": ([(0, "ok"), (5, "fail"), (35, "fail"), (39, "ok")], 40, True, True, "ok"),
    # ready at 0, then no round for 101 s (a call that never returns): stuck
    "stuck": ([(0, "ok")], 101, False, False, "no successful publish"),
    # waiting for a change 90 s after the last round (within 100 s): alive, not ready
    "idle-within-bound": ([(0, "tick")], 90, True, False, "nothing published yet"),
    # the loop ended
    "stopped": ([(0, "ok"), (1, "stop")], 2, False, True, "ok"),
}


@pytest.mark.parametrize("case", list(STEPS), ids=list(STEPS))
def test_live_and_ready_mean(case: str) -> None:
    steps, at_s, live, ready, why = STEPS[case]
    clock = Clock()
    start = clock.now_s
    health = AgentHealth(live_bound_s=LIVE_BOUND_S, ready_bound_s=READY_BOUND_S, clock=clock)
    for when_s, what in steps:
        clock.now_s = start + when_s
        if what == "ok":
            health.succeeded()
        elif what == "fail":
            health.failed("reading the runtime: containerd did not answer")
        elif what == "tick":
            health.tick()
        else:
            health.stopped()
    clock.now_s = start + at_s
    assert health.live()[0] is live
    assert health.ready()[0] is ready
    answers = (health.live()[1], health.ready()[1])
    assert any(why in answer for answer in answers), answers


def eventually(port: int, path: str, status: int) -> str:
    """Wait until ``path`` answers ``status``; its body."""

    @tenacity.retry(
        stop=tenacity.stop_after_delay(TURN_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def check() -> str:
        got, body = http_get(port, path)
        assert got == status, (got, body)
        return body

    return check()


IMAGE = NodeImage.held(("reg/a:1",), f"sha256:{1:064x}", (Layer(f"sha256:{2:064x}", 10),))


@contextmanager
def running_agent(api: InventoryApi, health: AgentHealth) -> Iterator[ChangeSignal]:
    """The publish loop on a thread (a resync every 0.1 s: each one checks the API)."""

    def read() -> NodeRead:
        return NodeRead((IMAGE,), "content-store", {})

    signal = ChangeSignal()
    with api.client() as kube:
        publisher = Publisher(kube, "n1", runtime="x")
        loop = threading.Thread(
            target=publish_loop,
            args=(read, publisher, signal),
            kwargs={"resync_s": 0.1, "health": health},
            daemon=True,
        )
        loop.start()
        try:
            yield signal
        finally:
            signal.stopped.set()
            signal.set()
            loop.join(TURN_TIMEOUT_S)


def test_readiness_follows_publishing_over_http() -> None:
    health = AgentHealth(live_bound_s=30.0, ready_bound_s=1.0)
    with ExitStack() as stack:
        api = stack.enter_context(InventoryApi())
        port = stack.enter_context(running_app(health_app(health)))
        # not ready before the first publish could happen, alive from the start
        assert http_get(port, LIVEZ_PATH)[0] == 200
        signal = stack.enter_context(running_agent(api, health))
        eventually(port, READYZ_PATH, 200)
        assert api.applies == 1
        # the API goes away: every resync's check fails; within a second still ready ...
        api.unavailable = True
        # ... and past the bound, not ready, saying why; alive all along
        body = eventually(port, READYZ_PATH, 503)
        assert "no successful publish" in body and "503" in body
        assert http_get(port, LIVEZ_PATH)[0] == 200
        # the API is back: the next try (after the back-off) succeeds, ready again
        api.unavailable = False
        eventually(port, READYZ_PATH, 200)
        # the loop stops (SIGTERM): not alive any more
        signal.stopped.set()
        signal.set()
        body = eventually(port, LIVEZ_PATH, 503)
        assert "stopped" in body


def test_only_the_two_probes_are_served() -> None:
    health = AgentHealth(live_bound_s=30.0, ready_bound_s=1.0)
    with running_app(health_app(health)) as port:
        assert http_get(port, "/metrics")[0] == 404
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("POST", LIVEZ_PATH, body=b"x" * 1024)
        assert connection.getresponse().status == 405  # GET only: nothing reads a body
        connection.close()


def test_metrics_are_served_when_given() -> None:
    health = AgentHealth(live_bound_s=30.0, ready_bound_s=1.0)
    stats = PublishStats(reads=3, applies=2)
    stats.repairs["stale"] = 1
    with running_app(health_app(health, AgentMetrics(stats).registry)) as port:
        status, body = http_get(port, METRICS_PATH)
        assert status == 200
        assert "layersched_agent_reads_total 3.0" in body
        assert 'layersched_agent_repairs_total{cause="stale"} 1.0' in body
        assert 'layersched_agent_repairs_total{cause="deleted"} 0.0' in body
        stats.repairs["deleted"] += 1  # read at scrape time
        assert (
            'layersched_agent_repairs_total{cause="deleted"} 1.0' in http_get(port, METRICS_PATH)[1]
        )


@tenacity.retry(
    stop=tenacity.stop_after_delay(TURN_TIMEOUT_S),
    wait=tenacity.wait_fixed(POLL_S),
    retry=tenacity.retry_if_result(lambda closed: not closed),
    retry_error_callback=lambda state: False,
)
def closed_unanswered(port: int) -> bool:
    """Whether a new connection to ``port`` is closed unanswered, asked until it is (the
    connections opened before it count once the server has accepted them) or the turn
    is over (False)."""
    try:
        http_get(port, LIVEZ_PATH)
    except (http.client.RemoteDisconnected, ConnectionError):
        return True
    return False


def test_run_serves_the_probes_publishes_and_stops_on_sigterm() -> None:
    # the whole agent in the service shell, on this (main) thread: health port, the
    # publish loop on a thread, the poll timer, the watch of its own object; SIGTERM
    # (sent once it is ready, so the shell's handler is in place) ends it cleanly
    port = free_port()
    scraped: list[str] = []
    refused: list[bool] = []

    def read() -> NodeRead:
        return NodeRead((IMAGE,), "content-store", {})

    def stop_when_ready() -> None:
        try:
            eventually(port, READYZ_PATH, 200)
            scraped.append(http_get(port, METRICS_PATH)[1])
            # idle connections hold at most the cap; one more is closed unanswered
            idle = [
                socket.create_connection(("127.0.0.1", port)) for _ in range(HEALTH_MAX_CONNECTIONS)
            ]
            refused.append(closed_unanswered(port))
            for sock in idle:
                sock.close()
        finally:
            os.kill(os.getpid(), signals.SIGTERM)

    with InventoryApi() as api, api.client() as kube:
        publisher = Publisher(kube, "n1", runtime="x")
        stopper = threading.Thread(target=stop_when_ready, daemon=True)
        stopper.start()
        run(read, publisher, api.client, poll_s=0.1, resync_s=0.5, health_port=port)
        stopper.join(TURN_TIMEOUT_S)
        assert api.applies == 1
    assert scraped, f"{READYZ_PATH} never answered 200"
    assert "layersched_agent_applies_total 1.0" in scraped[0]
    assert refused == [True]
    # the port is closed once run() returned
    with pytest.raises(ConnectionError):
        http_get(port, LIVEZ_PATH)
