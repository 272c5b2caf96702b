"""The publish loop and what wakes it: the runtime's image events (a poll where there are
none, or while their stream is down), the watch of the agent's own ``NodeLayerInventory``
(a change by another writer wakes the loop, which repairs it), and the resync; every
failure backs off exponentially with jitter while reading goes on.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from layersched.agent._health import AgentHealth
from layersched.agent._publisher import Publisher
from layersched.agent._readers import NodeRead
from layersched.core.errors import KubeError, LayerschedError
from layersched.kube import NODE_LAYERS_PATH, Gone, WatchEvent, selector

log = logging.getLogger(__name__)

#: Events come in bursts (one per record of a pull: tag, digest, ID); read once after
#: the burst settles.
DEBOUNCE_S = 0.2
#: Without events, how often the runtime is read.
DEFAULT_POLL_S = 2.0
#: Even with events, read and compare this often (a missed event costs at most this).
DEFAULT_RESYNC_S = 60.0
#: Back-off against the API server (and the runtime): 0.5 s doubling to 30 s, +-20 %.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
BACKOFF_JITTER = 0.2
#: The API server's answer to an object its CRD's schema refuses.
HTTP_UNPROCESSABLE = 422
#: The server ends a watch of the agent's own object after this; it is resumed at once.
OWN_WATCH_TIMEOUT_S = 300


class OwnObjectApi(Protocol):
    """What watching the agent's own object needs (``layersched.kube.KubeClient`` fits)."""

    def list(
        self, path: str, *, label_selector: str | None = ..., field_selector: str | None = ...
    ) -> tuple[list[dict[str, Any]], str]: ...

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_s: int = ...,
        field_selector: str | None = ...,
    ) -> Iterator[WatchEvent]: ...


@dataclass
class Backoff:
    """Exponential back-off with jitter; :meth:`reset` after a success."""

    first_s: float = BACKOFF_FIRST_S
    max_s: float = BACKOFF_MAX_S
    jitter: float = BACKOFF_JITTER
    _next_s: float = 0.0

    def next_s(self) -> float:
        self._next_s = min(self.max_s, self._next_s * 2 if self._next_s else self.first_s)
        return self._next_s * (1 + random.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self._next_s = 0.0


class ChangeSignal:
    """Set by the event watcher (or the poll timer), waited on by the publish loop."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.stopped = threading.Event()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout_s: float) -> bool:
        fired = self._event.wait(timeout_s)
        self._event.clear()
        return fired


def watch_events(events: Callable[[], Iterator[str]], signal: ChangeSignal, poll_s: float) -> None:
    """Set ``signal`` on every image event; when the stream fails, fall back to polling
    (``poll_s``) until it can be opened again. Runs until ``signal.stopped``."""
    backoff = Backoff()
    while not signal.stopped.is_set():
        try:
            for topic in events():
                log.debug("runtime event %s", topic)
                backoff.reset()
                signal.set()
                if signal.stopped.is_set():
                    return
        except LayerschedError as err:
            log.warning("runtime events unavailable (%s): polling every %.1f s", err, poll_s)
        # the stream ended or failed: poll until it reopens
        deadline = time.monotonic() + backoff.next_s()
        while time.monotonic() < deadline and not signal.stopped.is_set():
            signal.set()
            signal.stopped.wait(poll_s)


def watch_own_object(kube: OwnObjectApi, publisher: Publisher, signal: ChangeSignal) -> None:
    """Watch the node's own NodeLayerInventory (a field selector on its name) and wake the
    publish loop when an event shows it differs from what the agent last published (the
    loop then repairs it). Lists on start and after a failure (a change missed meanwhile
    shows there), resumes the watch where it ended; backs off on failures. Runs until
    ``signal.stopped``."""
    names = selector({"metadata.name": publisher.node})
    backoff = Backoff()
    version = ""
    while not signal.stopped.is_set():
        try:
            if not version:
                items, version = kube.list(NODE_LAYERS_PATH, field_selector=names)
                current = next(
                    (i for i in items if (i.get("metadata") or {}).get("name") == publisher.node),
                    None,
                )
                if publisher.notice(current):
                    signal.set()
            for event in kube.watch(
                NODE_LAYERS_PATH, version, timeout_s=OWN_WATCH_TIMEOUT_S, field_selector=names
            ):
                backoff.reset()
                version = event.resource_version or version
                if event.type == "BOOKMARK":
                    continue
                if publisher.notice(None if event.type == "DELETED" else event.object):
                    signal.set()
                if signal.stopped.is_set():
                    return
        except Gone:
            version = ""
        except LayerschedError as err:
            version = ""
            pause_s = backoff.next_s()
            log.warning(
                "watching node %s's NodeLayerInventory: %s: again in %.1f s (resyncs still "
                "check it)",
                publisher.node,
                err,
                pause_s,
            )
            signal.stopped.wait(pause_s)


def publish_loop(
    read: Callable[[], NodeRead],
    publisher: Publisher,
    signal: ChangeSignal,
    *,
    resync_s: float = DEFAULT_RESYNC_S,
    once: bool = False,
    health: AgentHealth | None = None,
) -> None:
    """Read and publish now, then after every change signal (debounced) or resync; a
    resync also checks the object in the API against what the agent last applied.
    ``health`` hears of every round, success and failure (the agent's probes)."""
    backoff = Backoff()
    verify = False
    try:
        while not signal.stopped.is_set():
            if health is not None:
                health.tick()
            try:
                node = read()
                publisher.stats.reads += 1
                publisher.publish(node.images, node.source, verify=verify)
                backoff.reset()
            except KubeError as err:
                publisher.stats.api_failures += 1
                if health is not None:
                    health.failed(f"publishing: {err}")
                pause_s = backoff.next_s()
                _log_api_failure(publisher.node, err, pause_s)
                if once:
                    raise
                signal.stopped.wait(pause_s)
                continue
            except LayerschedError as err:
                if health is not None:
                    health.failed(f"reading the runtime: {err}")
                pause_s = backoff.next_s()
                log.warning(
                    "reading node %s's images: %s: retrying in %.1f s", publisher.node, err, pause_s
                )
                if once:
                    raise
                signal.stopped.wait(pause_s)
                continue
            if health is not None:
                health.succeeded()
            if once:
                return
            hold_s = publisher.repair_wait_s()
            changed = signal.wait(resync_s if hold_s is None else min(resync_s, hold_s))
            verify = not changed
            if changed:
                signal.stopped.wait(DEBOUNCE_S)
    finally:
        if health is not None:
            health.stopped()


def _log_api_failure(node: str, err: KubeError, pause_s: float) -> None:
    if err.status == HTTP_UNPROCESSABLE:
        log.error(
            "publishing node %s: the API refused the object: %s: is the CRD installed the "
            "one this agent was built with? apply this version's install/kustomize/crd.yaml "
            "(`layersched inventory manifests`); retrying in %.1f s",
            node,
            err,
            pause_s,
        )
        return
    log.warning("publishing node %s: %s: retrying in %.1f s", node, err, pause_s)
