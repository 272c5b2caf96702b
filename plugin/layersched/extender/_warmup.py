"""The warm-up: what the watch asks of the API or the registry, on one worker thread.

A node whose agent published nothing is scored from its ``status.images``, resolved
through the layer source (the registry) as in full-``Nodes`` mode. A new node's agent
publishes within seconds of the node registering, so a node is given
``agent_grace_s`` first (one deadline on the shared
:class:`~layersched.extender._timers.TimerHeap`); only then are its images resolved
("warm"). An object ignored because its Node did not exist yet is read again once the
Node appears ("fetch"). Both jobs run on one daemon thread, each (job, node) queued once,
and never on the event loop: the store finds their results there
(:meth:`Warmup.resolved`) and is posted what changed.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from layersched.core.errors import KubeError
from layersched.core.layerindex import NodeInfo, names_resolver, resolve_node_image
from layersched.core.layers import Layer, LayerSource
from layersched.extender._timers import TimerHeap
from layersched.kube import KubeClient, node_layers_path

log = logging.getLogger(__name__)

#: Node-image resolutions (nodes without an agent) remembered, by first name.
MAX_RESOLVED = 50_000
#: A new node's agent publishes within seconds of the node registering; only a node that
#: published nothing for this long has its status images resolved through the registry.
DEFAULT_AGENT_GRACE_S = 60.0

#: The worker's jobs: resolve a node's status images; read a node's object again.
WARM = "warm"
FETCH = "fetch"
_STOP = "stop"


class Warmup:
    """The agent grace of each node, the registry's answers for nodes without an agent,
    and the worker thread that gets them (and re-reads orphaned objects)."""

    def __init__(
        self,
        kube_factory: Callable[[], KubeClient],
        source: LayerSource | None,
        timers: TimerHeap,
        *,
        agent_grace_s: float,
        has_layers: Callable[[str], bool],
        warmed: Callable[[str], None],
        fetched: Callable[[str, Mapping[str, Any], int], None],
    ) -> None:
        """``has_layers``: whether the store holds the node's object; ``warmed``: some
        of the node's images were resolved (refresh it); ``fetched``: the node's object,
        read again, and its JSON's length (parse and apply it)."""
        self._kube_factory = kube_factory
        self._source = source
        self._resolver = names_resolver(source) if source is not None else None
        self._timers = timers
        #: How long a node may go without a NodeLayerInventory before its status images
        #: are resolved through the layer source (its agent is starting, usually).
        self.agent_grace_s = agent_grace_s
        self._has_layers = has_layers
        self._warmed = warmed
        self._fetched = fetched
        # the agent grace: the nodes watch thread writes, the worker reads, the loop prunes
        self._grace_lock = threading.Lock()
        self.first_seen: dict[str, float] = {}
        self.latest: dict[str, NodeInfo] = {}
        # node-image resolutions (worker thread writes, loop reads)
        self._resolved: OrderedDict[str, tuple[Layer, ...] | None] = OrderedDict()
        #: Node images resolved through the layer source (nodes without an agent).
        self.node_image_resolutions = 0
        self._stop = threading.Event()
        self._work: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._work_lock = threading.Lock()
        self._work_pending: set[tuple[str, str]] = set()
        self._worker: threading.Thread | None = None

    def tracked(self) -> dict[str, int]:
        with self._grace_lock:
            return {"first_seen": len(self.first_seen), "latest": len(self.latest)}

    def stop(self) -> None:
        self._stop.set()
        self._work.put((_STOP, ""))

    def resolved(self, name: str) -> tuple[Layer, ...] | None:
        """The layers the worker resolved for the status image first named ``name``."""
        return self._resolved.get(name)

    def note_node(self, name: str, info: NodeInfo, *, has_layers: bool | None = None) -> None:
        """On the nodes watch thread: remember a node's latest facts, and if it has no
        published layers, have its status images resolved once its agent grace is over."""
        now_s = time.monotonic()
        with self._grace_lock:
            self.latest[name] = info
            first_s = self.first_seen.setdefault(name, now_s)
        if has_layers is None:
            has_layers = self._has_layers(name)
        if self._source is None or has_layers:
            return
        due_s = first_s + self.agent_grace_s
        if now_s < due_s:
            if not self._timers.scheduled(("grace", name)):
                self._timers.schedule(
                    ("grace", name), due_s, functools.partial(self.want, WARM, name)
                )
        else:
            self.want(WARM, name)

    def forget(self, name: str, gone: NodeInfo | None) -> None:
        """On the loop: a node is gone; drop its grace state unless the nodes watch has
        seen it again since (it re-registered)."""
        with self._grace_lock:
            latest = self.latest.get(name)
            if latest is None or gone is None or latest is gone:
                self.latest.pop(name, None)
                self.first_seen.pop(name, None)
        self._timers.cancel(("grace", name))

    def want(self, job: str, name: str) -> None:
        """Queue ``job`` (:data:`WARM`: resolve the node's status images; :data:`FETCH`:
        read its object again) for the worker thread, once."""
        if job == WARM and self._source is None:
            return
        with self._work_lock:
            if (job, name) in self._work_pending:
                return
            self._work_pending.add((job, name))
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work_forever, name="layersched-inventory-worker", daemon=True
                )
                self._worker.start()
        self._work.put((job, name))

    def _work_forever(self) -> None:
        while not self._stop.is_set():
            job, name = self._work.get()
            if job == _STOP:
                return
            with self._work_lock:
                self._work_pending.discard((job, name))
            try:
                if job == WARM and self.warm(name):
                    self._warmed(name)
                elif job == FETCH:
                    self._fetch(name)
            except Exception:  # one node's trouble must not end the worker
                log.exception("inventory worker: %s %s failed (a bug: please report it)", job, name)

    def warm(self, name: str) -> bool:
        """On the worker: resolve the status images of a node without published layers
        through the layer source (the registry), so the loop finds them resolved. True
        when some of its images have layers (the node is then refreshed)."""
        with self._grace_lock:
            info = self.latest.get(name)
            first_s = self.first_seen.get(name)
        if self._source is None or info is None or first_s is None or self._has_layers(name):
            return False
        if time.monotonic() - first_s < self.agent_grace_s:
            return False  # its grace timer comes back for it
        fresh = False
        for image in info.images:
            if image.layers is not None or not image.names:
                continue
            if image.names[0] not in self._resolved:
                layers, warning = resolve_node_image(image, self._source, self._resolver)
                self.node_image_resolutions += 1
                if warning is not None:
                    log.warning(warning)
                self._resolved[image.names[0]] = layers
            # resolved now or for another node: this node may have been refreshed before
            # (its images names only), and nothing else would refresh it
            fresh = fresh or self._resolved.get(image.names[0]) is not None
        while len(self._resolved) > MAX_RESOLVED:
            self._resolved.popitem(last=False)
        return fresh

    def _fetch(self, name: str) -> None:
        """On the worker: read the object of a node that just appeared, ignored earlier
        because its Node did not exist then."""
        try:
            with self._kube_factory() as kube:
                obj = kube.get(node_layers_path(name))
        except KubeError as err:
            if err.status != 404:
                log.warning("reading the layers published for node %s: %s", name, err)
            return
        self._fetched(name, obj, len(json.dumps(obj, separators=(",", ":"))))
