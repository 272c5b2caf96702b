"""The live inventory: :class:`WatchLayerIndexProvider`, the extender's
:class:`~layersched.extender._providers.LayerIndexProvider` kept current by the API's watch
of Nodes and ``NodeLayerInventory`` objects (and, for ``in-flight``, of the pods bound to
nodes), wiring the watch's parts: the list/watch loops, the parser, the store, the votes,
the warmup, the timers and the metrics.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client.registry import Collector

from layersched.core.budget import DEFAULT_MAX_INVENTORY_BYTES, IndexPools
from layersched.core.errors import LayerschedError
from layersched.core.layerindex import LayerIndex, held_image_names
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeimages import NodeInfo
from layersched.core.reference import ImageName
from layersched.core.votes import DEFAULT_IMAGE_QUORUM, ImageVotes
from layersched.extender import _memory
from layersched.extender._platforms import Platforms
from layersched.extender.watch._ignored import IgnoredLog
from layersched.extender.watch._metrics import WatchMetrics
from layersched.extender.watch._parse import (
    DEFAULT_INVENTORY_MAX_AGE_S,
    LAYERS,
    NODES,
    HeldLayers,
    ParsedNode,
    Parser,
)
from layersched.extender.watch._pending import (
    PENDING_PODS_SELECTOR,
    PODS,
    RETRY_PERIOD_S,
    PendingPods,
    PodParser,
    pod_key,
)
from layersched.extender.watch._store import Store
from layersched.extender.watch._timers import TimerHeap
from layersched.extender.watch._warmup import DEFAULT_AGENT_GRACE_S, StatusImages, Warmup
from layersched.extender.watch._watch import DEFAULT_UNREADY_AFTER_S, Watch
from layersched.kube import ALL_PODS_PATH, NODE_LAYERS_PATH, NODES_PATH, KubeClient

log = logging.getLogger(__name__)

#: The watch's own deadline on its timer thread (beside the nodes'): every
#: :data:`~layersched.extender._memory.TRIM_PERIOD_S`.
HOUSEKEEPING = "housekeeping"
#: The pending pods' retry of layers not known yet (``in-flight``): every
#: :data:`~layersched.extender.watch._pending.RETRY_PERIOD_S`.
PENDING_RETRY = "pending-retry"


class WatchLayerIndexProvider:
    """An :class:`LayerIndexProvider` kept current by the API: the live watch of Nodes and
    NodeLayerInventory objects (docs/inventory.md), in the parts the Go port has.

    * :class:`~layersched.extender.watch._watch.Watch`, the list/watch loop, one per collection
      on a thread of its own;
    * :class:`~layersched.extender.watch._parse.Parser`, which parses each object on that
      thread under the caps and the budget (:mod:`~layersched.core.budget`);
    * :class:`~layersched.extender.watch._store.Store`, which applies it on the event loop (so a
      scoring pass never sees a half-applied change), with expiry and orphans;
    * :class:`~layersched.core.votes.ImageVotes`, the nodes' votes on pod images;
    * :class:`~layersched.extender.watch._warmup.Warmup`, the registry's answers for nodes
      without an agent, after their grace;
    * :class:`~layersched.extender.watch._metrics.WatchMetrics`, its /metrics.

    Deadlines (agent grace, staleness, housekeeping) share one timer thread.
    """

    def __init__(
        self,
        kube_factory: Callable[[], KubeClient],
        source: LayerSource | None,
        platforms: Platforms | None = None,
        *,
        agent_grace_s: float = DEFAULT_AGENT_GRACE_S,
        image_quorum: int = DEFAULT_IMAGE_QUORUM,
        max_age_s: float = DEFAULT_INVENTORY_MAX_AGE_S,
        max_inventory_bytes: int = DEFAULT_MAX_INVENTORY_BYTES,
        unready_after_s: float = DEFAULT_UNREADY_AFTER_S,
    ) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self.platforms = platforms if platforms is not None and platforms.enabled else None
        #: A watch disconnected for longer than this makes ready() false.
        self.unready_after_s = unready_after_s
        self._stop = threading.Event()
        self._timers = TimerHeap("layersched-inventory-timers")
        self._pools = IndexPools(max_inventory_bytes)
        self._votes = ImageVotes(image_quorum)
        self._ignored_log = IgnoredLog()
        self._warmup = Warmup(
            kube_factory,
            source,
            self._timers,
            agent_grace_s=agent_grace_s,
            has_layers=lambda name: name in self._store.layers,
            warmed=lambda name: self._post(self._store.refresh, name),
            fetched=self._fetched,
            key_of=self._key_of,
        )
        store = Store(
            self._pools,
            self._votes,
            self._warmup,
            self._timers,
            self._post,
            self._ignored_log,
            self.platforms,
            max_age_s,
        )
        self._store = store
        self._parser = Parser(
            self._pools, store, self.platforms, self._ignored_log, self._post, max_age_s
        )
        self._watches = {
            NODES: self._watch(kube_factory, NODES, NODES_PATH, self._warmup.note_node),
            LAYERS: self._watch(kube_factory, LAYERS, NODE_LAYERS_PATH),
        }
        #: How each watched collection is doing (for /readyz and /metrics).
        self.state = {kind: watch.state for kind, watch in self._watches.items()}
        self._kube_factory = kube_factory
        #: With in-flight scoring: the pending pods and their watch (track_pending).
        self._pods: PendingPods | None = None
        self._pods_watch: Watch | None = None
        self._trim = _memory.ChurnTrim(self._churned_bytes)
        parts = (store, self._pools, self._votes, self._warmup, self._trim)
        self._metrics = WatchMetrics(self.state, *parts, self._node_deadlines)

    # ------------------------------------------------------------ state, and settings tests change
    @property
    def platform_keys(self) -> list[str] | None:
        """Per node index, its platform key (None: every node is the default platform)."""
        return self._store.platform_keys

    @platform_keys.setter
    def platform_keys(self, keys: list[str] | None) -> None:
        self._store.platform_keys = keys

    @property
    def max_age_s(self) -> float:
        """How long an object may go without a new ``observedAt`` before it is stale."""
        return self._parser.max_age_s

    @max_age_s.setter
    def max_age_s(self, max_age_s: float) -> None:
        self._parser.max_age_s = self._store.max_age_s = max_age_s

    @property
    def agent_grace_s(self) -> float:
        """How long a node may go without a NodeLayerInventory before its status images
        are resolved through the layer source (its agent is starting, usually)."""
        return self._warmup.agent_grace_s

    @agent_grace_s.setter
    def agent_grace_s(self, agent_grace_s: float) -> None:
        self._warmup.agent_grace_s = agent_grace_s

    @property
    def node_image_resolutions(self) -> int:
        """Node images resolved through the layer source (nodes without an agent)."""
        return self._warmup.node_image_resolutions

    @property
    def expired(self) -> int:
        """Objects that went stale while held (their node fell back)."""
        return self._store.expired

    @property
    def trims(self) -> int:
        """Times glibc returned free pages."""
        return self._trim.trims

    # ------------------------------------------------------------ provider API
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop changes are applied on (the extender's)."""
        self._loop = loop

    def current(self) -> LayerIndex | None:
        return self._store.index

    def load(self) -> None:
        """List both collections page by page (retrying until the API answers), publish
        the first inventory, then keep watching on daemon threads."""
        if self._loop is None:
            raise LayerschedError("WatchLayerIndexProvider.load before bind_loop")
        nodes_watch, layers_watch = self._watches[NODES], self._watches[LAYERS]
        nodes, nodes_version = nodes_watch.list_until_ok()
        self._store.listed_nodes = set(nodes)
        self._pools.expected_nodes = max(1, len(nodes))
        layers, layers_version = layers_watch.list_until_ok()
        self._store.listed_nodes = set()
        for name, parsed in nodes.items():  # nodes without an agent may need the registry
            if isinstance(parsed, ParsedNode):
                has_layers = isinstance(layers.get(name), HeldLayers)
                self._warmup.note_node(name, parsed.info, has_layers=has_layers)
        done = threading.Event()

        def install() -> None:
            self._store.install(nodes, layers)
            nodes_watch.synced()
            layers_watch.synced()
            done.set()

        self._loop.call_soon_threadsafe(install)
        done.wait()
        nodes_watch.start(nodes_version)
        layers_watch.start(layers_version)
        self._timers.schedule(
            HOUSEKEEPING, time.monotonic() + _memory.TRIM_PERIOD_S, self._housekeep
        )
        if self._pods_watch is not None:
            self._start_pods()
        inventory = self._store.index
        assert inventory is not None
        log.info(
            "inventory listed: %d nodes, %d with published layers",
            inventory.node_count,
            len(self._store.layers),
        )

    def stop(self) -> None:
        self._stop.set()
        self._timers.stop()
        self._warmup.stop()

    def ready(self) -> tuple[bool, str]:
        """(ready, why): ready once both collections were listed and while no watch has
        been disconnected for longer than ``unready_after_s``; the text says whether the
        watches are connected or the inventory is being served stale, and why. The pods'
        watch (in-flight) is said too, but never makes the extender unready: without it
        nodes are scored without pulls in flight."""
        readiness = [watch.readiness(self.unready_after_s) for watch in self._watches.values()]
        ok = self._store.index is not None and all(ok for ok, _ in readiness)
        lines = [line for _, line in readiness]
        if self._pods_watch is not None:
            lines.append(self._pods_watch.readiness(self.unready_after_s)[1])
        return ok, "\n".join(lines)

    def collector(self) -> Collector | None:
        """The watches' metrics."""
        return self._metrics

    def held_bytes(self) -> int:
        """Estimated bytes the watched objects hold (the pools' charge)."""
        return self._pools.held_bytes

    def use_resolvers(self, images: StatusImages) -> None:
        """Nodes without an agent: their status images through ``images``."""
        self._warmup.use(images)

    def _key_of(self, name: str) -> str:
        """The platform key node ``name`` is scored in (read off the loop: one dict
        lookup, as the parser reads the store's nodes)."""
        node = self._store.nodes.get(name)
        if node is None or self.platforms is None:
            return self.platforms.default_key if self.platforms is not None else ""
        return self.platforms.effective(node.key)

    def track_pending(self, pods: PendingPods) -> bool:
        """Watch the pods bound to nodes and still Pending into ``pods`` (listed once the
        inventory is, on a thread of their own: a cluster that forbids listing pods keeps
        scoring, without pulls in flight), and tell it when a node's layers change."""
        self._pods = pods
        self._pods_watch = Watch(
            PODS,
            ALL_PODS_PATH,
            self._kube_factory,
            PodParser(),
            pods,
            self._post,
            self._stop,
            field_selector=PENDING_PODS_SELECTOR,
            key_of=pod_key,
        )
        self.state[PODS] = self._pods_watch.state
        earlier = self._store.on_change

        def changed(name: str) -> None:
            if earlier is not None:
                earlier(name)
            pods.node_changed(name)

        self._store.on_change = changed
        if self._store.index is not None:  # loaded already: list the pods now
            self._start_pods()
        return True

    def _start_pods(self) -> None:
        threading.Thread(target=self._watch_pods, name="list-pods", daemon=True).start()

    def image_layers(self, image: ImageName, key: str = "") -> tuple[Layer, ...] | None:
        """Layers of pod image ``image`` for platform ``key`` when at least the quorum of
        nodes publish the same layers for it (and no other answer has a quorum too);
        None otherwise: the registry is asked."""
        return self._votes.layers(image, key)

    def held_images(self, node: str) -> list[str] | None:
        """The image names the inventory holds for ``node`` (None: unknown node)."""
        return held_image_names(self._store.index, node)

    def tracked(self) -> dict[str, int]:
        """How many entries each piece of per-node and pooled state holds (for tests and
        operators: everything here goes with the node or the object)."""
        return (
            self._warmup.tracked()
            | self._store.tracked()
            | {
                "voted": self._votes.voters,
                "timers": self._node_deadlines(),
                "timer_heap": self._timers.heap_entries,
                "pooled_layers": self._pools.layers,
                "pooled_images": self._pools.images,
                "votes": len(self._votes),
                "held_bytes": self._pools.held_bytes,
            }
        )

    # ------------------------------------------------------------ wiring
    def _watch(
        self,
        kube_factory: Callable[[], KubeClient],
        kind: str,
        path: str,
        on_node: Callable[[str, NodeInfo], None] | None = None,
    ) -> Watch:
        parts = (self._parser, self._store, self._post, self._stop)
        return Watch(kind, path, kube_factory, *parts, on_node=on_node)

    def _watch_pods(self) -> None:
        """On its own thread: list the pending pods (retrying until the API answers),
        apply them on the loop, then watch; and retry the pods whose layers were not all
        known every RETRY_PERIOD_S."""
        watch, pods = self._pods_watch, self._pods
        assert watch is not None and pods is not None
        try:
            items, version = watch.list_until_ok()
        except Exception:  # noqa: BLE001 - stopping: list_until_ok gave up
            return
        self._post(watch.apply_list, items)
        watch.start(version)
        self._timers.schedule(PENDING_RETRY, time.monotonic() + RETRY_PERIOD_S, self._retry_pods)

    def _retry_pods(self) -> None:
        """On the timer thread: the pending pods' retry, on the loop."""
        if self._pods is not None:
            self._post(self._pods.retry)
        self._timers.schedule(PENDING_RETRY, time.monotonic() + RETRY_PERIOD_S, self._retry_pods)

    def _churned_bytes(self) -> int:
        """Bytes of objects parsed or released in all (for the trim after a burst)."""
        return self._parser.parsed_bytes + self._pools.released_bytes

    def _node_deadlines(self) -> int:
        """Deadlines pending for nodes (not the housekeeping's nor the pods' retry)."""
        own = (HOUSEKEEPING, PENDING_RETRY)
        return len(self._timers) - sum(1 for key in own if self._timers.scheduled(key))

    def _housekeep(self) -> None:
        """On the timer thread, every TRIM_PERIOD_S: sum up the warnings of ignored
        objects of a period that ended, and after a burst of objects parsed or released,
        have glibc return its free pages, so that RSS follows what is held."""
        self._ignored_log.flush()
        self._trim.check()
        self._timers.schedule(
            HOUSEKEEPING, time.monotonic() + _memory.TRIM_PERIOD_S, self._housekeep
        )

    def _fetched(self, name: str, obj: Mapping[str, Any], size_bytes: int) -> None:
        """On the worker: an object read again, parsed there and applied on the loop."""
        self._post(self._store.apply_fetched, name, self._parser.parse(LAYERS, obj, size_bytes))

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        if not self._loop.is_closed():  # shutting down: nothing is applied any more
            self._loop.call_soon_threadsafe(fn, *args)
