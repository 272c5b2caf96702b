"""The warm-up: what the watch asks of the API or the registry, on one worker thread.

A node whose agent published nothing is scored from its ``status.images``, resolved
through the layer source (the registry) as in full-``Nodes`` mode. A new node's agent
publishes within seconds of the node registering, so a node is given
``agent_grace_s`` first (one deadline on the shared
:class:`~layersched.extender.watch._timers.TimerHeap`); only then are its images resolved
("warm"). An object ignored because its Node did not exist yet is read again once the
Node appears ("fetch"). Both jobs run on one daemon thread, each (job, node) queued once,
and never on the event loop: the store finds their results there
(:meth:`Warmup.resolved`) and is posted what changed.

**A name answers only for itself** (issue 44). The answers are the resolvers' own
(:class:`StatusImages`: the extender's per-platform resolvers, their one layer cache and
its TTLs), looked up name by name: a status image's layers are those of the first of
its names (a digest first) that resolved *itself*. Before, an answer was kept under an
image's first name whichever name gave it, and every node listing that first name was
credited with it: a node listing ``[K, attacker/tiny:1]``, K unresolvable at that moment,
made an honest node's 1 GB image K one 1-byte layer. A node whose images did not all
resolve is warmed again once the failures' TTL is over (before, a failure at first sight
was kept for good), and one whose answers came from tags once those are due for
revalidation.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from layersched.core.errors import KubeError
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeimages import NodeInfo
from layersched.core.reference import ImageName
from layersched.extender._resolver import DEFAULT_WORKERS, DeadlineResolver
from layersched.extender.watch._timers import TimerHeap
from layersched.kube import KubeClient, node_layers_path

log = logging.getLogger(__name__)

#: A new node's agent publishes within seconds of the node registering; only a node that
#: published nothing for this long has its status images resolved through the registry.
DEFAULT_AGENT_GRACE_S = 60.0

#: The worker's jobs: resolve a node's status images; read a node's object again.
WARM = "warm"
FETCH = "fetch"
_STOP = "stop"
#: The deadline of a provider's own resolver (one used without an extender: tools and
#: tests); the warm-up itself never waits on it, it resolves on its worker.
OWN_RESOLVER_TIMEOUT_S = 1.0


class StatusImages(Protocol):
    """How the warm-up resolves status images: through the extender's resolvers, one per
    platform (:class:`~layersched.extender._pod_layers.PodLayers`), their cache and TTLs."""

    def status_layers(self, key: str, names: Sequence[ImageName]) -> tuple[Layer, ...] | None:
        """On the loop: the layers of the first of ``names`` with an answer of its own in
        platform ``key``'s cache; None (never a registry call)."""
        ...

    def resolve_status(
        self, key: str, names: Sequence[ImageName]
    ) -> tuple[tuple[Layer, ...] | None, float | None]:
        """On the worker, blocking: the layers of the first of ``names`` that resolves
        itself in platform ``key``, and when to look again (seconds; None: never)."""
        ...


class OneResolver:
    """:class:`StatusImages` through one :class:`DeadlineResolver`, every node in one
    platform: a provider's own when no extender gave it its resolvers."""

    def __init__(self, resolver: DeadlineResolver) -> None:
        self.resolver = resolver

    def status_layers(self, key: str, names: Sequence[ImageName]) -> tuple[Layer, ...] | None:
        return self.resolver.cached_names(names)

    def resolve_status(
        self, key: str, names: Sequence[ImageName]
    ) -> tuple[tuple[Layer, ...] | None, float | None]:
        return self.resolver.resolve_names_now(names)


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
        key_of: Callable[[str], str] = lambda name: "",
    ) -> None:
        """``has_layers``: whether the store holds the node's object; ``warmed``: what the
        node's images resolve to changed (refresh it); ``fetched``: the node's object,
        read again, and its JSON's length (parse and apply it); ``key_of``: the platform
        key the node is scored in."""
        self._kube_factory = kube_factory
        self._source = source
        #: The resolvers (:meth:`use`), else one of the warm-up's own over ``source``.
        self._images: StatusImages | None = None
        self._key_of = key_of
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
        #: Per node warmed, what its status images resolved to last (hashes of
        #: their layers): it is refreshed only when that changes. Goes with the node.
        self._answers: dict[str, tuple[int, ...]] = {}
        #: Node images resolved through the layer source (nodes without an agent).
        self.node_image_resolutions = 0
        self._stop = threading.Event()
        self._work: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._work_lock = threading.Lock()
        self._work_pending: set[tuple[str, str]] = set()
        self._worker: threading.Thread | None = None

    def tracked(self) -> dict[str, int]:
        with self._grace_lock:
            return {
                "first_seen": len(self.first_seen),
                "latest": len(self.latest),
                "warmed": len(self._answers),
            }

    def use(self, images: StatusImages) -> None:
        """Resolve status images through ``images`` (the extender's resolvers)."""
        self._images = images

    def _status_images(self) -> StatusImages | None:
        if self._images is None and self._source is not None:
            own = DeadlineResolver(
                self._source, timeout_s=OWN_RESOLVER_TIMEOUT_S, workers=DEFAULT_WORKERS
            )
            self._images = OneResolver(own)
        return self._images

    def stop(self) -> None:
        self._stop.set()
        self._work.put((_STOP, ""))

    def resolved(self, node: str, key: str, names: Sequence[ImageName]) -> tuple[Layer, ...] | None:
        """On the loop: the layers a status image of ``names`` has in platform ``key``, as
        its own names resolved (cached: the worker resolves them); None for a node not
        warmed yet (within its agent grace, or waiting for the worker)."""
        images = self._images
        if images is None or node not in self._answers:
            return None
        return images.status_layers(key, names)

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
                self._answers.pop(name, None)
        self._timers.cancel(("grace", name))
        self._timers.cancel(("again", name))

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
        through the resolvers (their cache first), name by name, so the loop finds them
        resolved; come back once a failure's TTL is over (or a tag's). True when what
        its images resolve to changed (the node is then refreshed)."""
        with self._grace_lock:
            info = self.latest.get(name)
            first_s = self.first_seen.get(name)
        images = self._status_images()
        if images is None or info is None or first_s is None or self._has_layers(name):
            return False
        if time.monotonic() - first_s < self.agent_grace_s:
            return False  # its grace timer comes back for it
        key = self._key_of(name)
        answers: list[int] = []
        again_s: float | None = None
        for image in info.images:
            if image.layers is not None or not image.names:
                continue
            layers, image_again_s = images.resolve_status(key, image.names)
            self.node_image_resolutions += 1
            answers.append(hash(layers) if layers is not None else 0)
            if image_again_s is not None:
                again_s = image_again_s if again_s is None else min(again_s, image_again_s)
        if again_s is not None:
            again = functools.partial(self.want, WARM, name)
            self._timers.schedule(("again", name), time.monotonic() + again_s, again)
        answered = tuple(answers)
        with self._grace_lock:
            if name not in self.latest:
                return False  # gone meanwhile: nothing of it is kept
            before = self._answers.get(name)
            self._answers[name] = answered
        # refreshed when the answers changed (the first time: when any image has layers)
        return answered != before and (before is not None or any(answered))

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
