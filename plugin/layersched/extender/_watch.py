"""The live inventory: Nodes and NodeLayerInventory objects, listed and watched.

This is what makes ``NodeNames`` mode (``nodeCacheCapable: true``) work on a live
cluster. Two watch threads (Nodes, and layersched's NodeLayerInventory objects) each
list, then watch from the list's resourceVersion; a watch that ends is resumed from the
last version seen, a 410 Gone relists, and a failure backs off and retries. The held
inventory keeps answering meanwhile.

Changes are applied to one :class:`~layersched.core.inventory.ClusterInventory` node by
node (:meth:`~ClusterInventory.upsert_node`, :meth:`~ClusterInventory.remove_node`),
never by a rebuild, and always on the event loop's thread (posted with
``call_soon_threadsafe``), so a scoring pass never sees a half-applied change.

A node's layers come from its NodeLayerInventory when the agent published one, and
otherwise from its ``status.images`` resolved through the layer source (the registry),
as in full-``Nodes`` mode. A malformed object is ignored with a warning naming the
node: the node then falls back to its ``status.images``, and other nodes are untouched.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from layersched.core.errors import InputError, KubeError, LayerschedError
from layersched.core.inventory import (
    ClusterInventory,
    NodeImage,
    NodeInfo,
    names_resolver,
    node_from_json,
    resolve_node_image,
)
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodelayers import NodeLayers, parse_document
from layersched.core.reference import normalized_image_name
from layersched.extender._platforms import Platforms
from layersched.extender._wire import Node
from layersched.kube import NODE_LAYERS_PATH, NODES_PATH, Gone, KubeClient

log = logging.getLogger(__name__)

#: Back-off after a failed list or watch: 0.5 s doubling to 30 s.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
#: Pod image -> layers remembered from the agents' objects (names and digests).
MAX_KNOWN_IMAGES = 100_000
#: Node-image resolutions (nodes without an agent) remembered, by first name.
MAX_RESOLVED = 50_000
#: A new node's agent publishes within seconds of the node registering; only a node that
#: published nothing for this long has its status images resolved through the registry.
DEFAULT_AGENT_GRACE_S = 60.0

NODES = "nodes"
LAYERS = "nodelayerinventories"


@dataclass
class WatchState:
    """How one watched collection is doing (for /readyz and /metrics)."""

    synced: bool = False
    connected: bool = False
    resource_version: str = ""
    events: int = 0
    relists: int = 0
    failures: int = 0
    last_error: str = ""
    since: float = field(default_factory=time.monotonic)


class WatchInventoryProvider:
    """An :class:`~layersched.extender.InventoryProvider` kept current by the API."""

    def __init__(
        self,
        kube_factory: Callable[[], KubeClient],
        source: LayerSource | None,
        platforms: Platforms | None = None,
        *,
        agent_grace_s: float = DEFAULT_AGENT_GRACE_S,
    ) -> None:
        self._kube_factory = kube_factory
        self._source = source
        self._resolver = names_resolver(source) if source is not None else None
        self.platforms = platforms if platforms is not None and platforms.enabled else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inventory: ClusterInventory | None = None
        #: Per node index, its platform key (None: every node is the default platform).
        self.platform_keys: list[str] | None = None
        self._keys: dict[str, str] = {}
        # what the watches last saw, by node name (loop thread only)
        self._nodes: dict[str, dict[str, Any]] = {}
        self._layers: dict[str, NodeLayers] = {}
        self._known: OrderedDict[tuple[str, str], tuple[Layer, ...]] = OrderedDict()
        # watch-thread caches
        self._resolved: OrderedDict[str, tuple[Layer, ...] | None] = OrderedDict()
        self.state = {NODES: WatchState(), LAYERS: WatchState()}
        self._stop = threading.Event()
        #: Node images resolved through the layer source (nodes without an agent).
        self.node_image_resolutions = 0
        #: How long a node may go without a NodeLayerInventory before its status images
        #: are resolved through the layer source (its agent is starting, usually).
        self.agent_grace_s = agent_grace_s
        self._first_seen: dict[str, float] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._grace_lock = threading.Lock()
        self._timers: set[str] = set()
        #: Called on the loop after a node's entry changed (tests and metrics hook in).
        self.on_change: Callable[[str], None] | None = None

    # ------------------------------------------------------------ provider API
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop changes are applied on (the extender's)."""
        self._loop = loop

    def current(self) -> ClusterInventory | None:
        return self._inventory

    def load(self) -> None:
        """List both collections (retrying until the API answers), publish the first
        inventory, then keep watching on daemon threads."""
        if self._loop is None:
            raise LayerschedError("WatchInventoryProvider.load before bind_loop")
        first: dict[str, tuple[list[dict[str, Any]], str]] = {}
        for kind, path in ((NODES, NODES_PATH), (LAYERS, NODE_LAYERS_PATH)):
            first[kind] = self._list_until_ok(kind, path)
        nodes, layers = first[NODES][0], first[LAYERS][0]
        published = {_name(item) for item in layers}
        for node in nodes:  # nodes without an agent: resolve their images before serving
            if _name(node) not in published:
                self._warm(node)
        done = threading.Event()

        def install() -> None:
            self._inventory = ClusterInventory()
            self._replace_all(NODES, nodes)
            self._replace_all(LAYERS, layers)
            done.set()

        self._loop.call_soon_threadsafe(install)
        done.wait()
        for kind, path in ((NODES, NODES_PATH), (LAYERS, NODE_LAYERS_PATH)):
            threading.Thread(
                target=self._watch_forever,
                args=(kind, path, first[kind][1]),
                name=f"watch-{kind}",
                daemon=True,
            ).start()
        inventory = self._inventory
        assert inventory is not None
        log.info(
            "inventory listed: %d nodes, %d with published layers",
            inventory.node_count,
            len(self._layers),
        )

    def stop(self) -> None:
        self._stop.set()

    def collect(self) -> Iterator[Metric]:
        """The watches' state, for /metrics (a prometheus_client collector)."""
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "events": CounterMetricFamily(
                "layersched_extender_watch_events",
                "Watch events received, by resource.",
                labels=["resource"],
            ),
            "relists": CounterMetricFamily(
                "layersched_extender_watch_relists",
                "Full lists after a 410 Gone, by resource.",
                labels=["resource"],
            ),
            "failures": CounterMetricFamily(
                "layersched_extender_watch_failures",
                "Failed lists and watches (retried), by resource.",
                labels=["resource"],
            ),
            "connected": GaugeMetricFamily(
                "layersched_extender_watch_connected",
                "1 while the resource's watch is connected, 0 while re-syncing.",
                labels=["resource"],
            ),
        }
        for kind, state in self.state.items():
            families["events"].add_metric([kind], float(state.events))
            families["relists"].add_metric([kind], float(state.relists))
            families["failures"].add_metric([kind], float(state.failures))
            families["connected"].add_metric([kind], 1.0 if state.connected else 0.0)
        yield from families.values()
        resolved = CounterMetricFamily(
            "layersched_extender_watch_node_image_resolutions",
            "Node images resolved through the layer source because their node published no "
            "NodeLayerInventory (0 when every node runs the agent).",
        )
        resolved.add_metric([], float(self.node_image_resolutions))
        yield resolved
        published = GaugeMetricFamily(
            "layersched_extender_watch_nodes_with_layers",
            "Nodes whose layers come from their agent's NodeLayerInventory.",
        )
        published.add_metric([], float(len(self._layers)))
        yield published

    def ready(self) -> tuple[bool, str]:
        """(ready, why): ready once both collections were listed; the text says whether
        the watches are connected or the inventory is being served stale."""
        lines = []
        for kind, state in self.state.items():
            if not state.synced:
                lines.append(f"[-]{kind}: not listed yet ({state.last_error or 'listing'})")
            elif state.connected:
                lines.append(f"[+]{kind}: watching at resourceVersion {state.resource_version}")
            else:
                stale_s = time.monotonic() - state.since
                lines.append(
                    f"[+]{kind}: serving the last inventory, re-syncing for {stale_s:.0f} s "
                    f"({state.last_error})"
                )
        return self._inventory is not None, "\n".join(lines)

    def image_layers(self, image: str, key: str = "") -> tuple[Layer, ...] | None:
        """Layers of pod image ``image`` when some node's agent published it (by name or
        digest), for platform ``key``; None when no node holds it."""
        for name in _lookup_names(image):
            layers = self._known.get((key, name))
            if layers is not None:
                return layers
        return None

    def held_images(self, node: str) -> list[str] | None:
        """The image names the inventory holds for ``node`` (None: unknown node)."""
        inventory = self._inventory
        if inventory is None or inventory.index_of(node) is None:
            return None
        idx = inventory.index_of(node)
        assert idx is not None
        return sorted({n for image in inventory.nodes[idx].images for n in image.names})

    # ------------------------------------------------------------ watch threads
    def _list_until_ok(self, kind: str, path: str) -> tuple[list[dict[str, Any]], str]:
        state = self.state[kind]
        pause_s = RETRY_FIRST_S
        while True:
            try:
                with self._kube_factory() as kube:
                    items, version = kube.list(path)
                state.last_error = ""
                return items, version
            except KubeError as err:
                state.failures += 1
                state.last_error = str(err)
                log.warning("listing %s: %s: retrying in %.1f s", kind, err, pause_s)
                if self._stop.wait(pause_s):
                    raise
                pause_s = min(RETRY_MAX_S, pause_s * 2)

    def _watch_forever(self, kind: str, path: str, version: str) -> None:
        state = self.state[kind]
        state.resource_version = version
        pause_s = RETRY_FIRST_S
        while not self._stop.is_set():
            try:
                with self._kube_factory() as kube:
                    state.connected = True
                    for event in kube.watch(path, state.resource_version):
                        state.events += 1
                        if event.resource_version:
                            state.resource_version = event.resource_version
                        if event.type != "BOOKMARK":
                            self._post(self._apply_event, kind, event.type, event.object)
                        if kind == NODES and event.type != "DELETED" and self._warm(event.object):
                            self._post(self._refresh, _name(event.object))
                        pause_s = RETRY_FIRST_S
                # the server ended the watch (its timeout): resume from where it was
            except Gone as err:
                state.connected = False
                state.since = time.monotonic()
                state.relists += 1
                state.last_error = str(err)
                log.info("%s: %s: listing again", kind, err)
                items, state.resource_version = self._list_until_ok(kind, path)
                self._post(self._replace_all, kind, items)
            except KubeError as err:
                if state.connected:
                    state.since = time.monotonic()
                state.connected = False
                state.failures += 1
                state.last_error = str(err)
                log.warning("watching %s: %s: retrying in %.1f s", kind, err, pause_s)
                self._stop.wait(pause_s)
                pause_s = min(RETRY_MAX_S, pause_s * 2)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------ loop thread
    def _replace_all(self, kind: str, items: list[dict[str, Any]]) -> None:
        """A full list: apply what differs from what is held, drop what is gone."""
        names = set()
        for item in items:
            name = ((item.get("metadata") or {}).get("name")) if isinstance(item, dict) else None
            if isinstance(name, str):
                names.add(name)
                self._apply_event(kind, "ADDED", item)
        held = self._nodes if kind == NODES else self._layers
        for gone in set(held) - names:
            self._apply_event(kind, "DELETED", {"metadata": {"name": gone}})
        self.state[kind].synced = True
        self.state[kind].connected = True

    def _apply_event(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return
        if kind == NODES:
            if event == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = obj
        elif event == "DELETED":
            self._layers.pop(name, None)
        else:
            try:
                parsed = parse_document(obj, "NodeLayerInventory watch")
            except InputError as err:
                log.warning("ignoring the layers published for node %s: %s", name, err)
                self._layers.pop(name, None)
            else:
                self._layers[name] = parsed
        self._refresh(name)

    def _refresh(self, name: str) -> None:
        inventory = self._inventory
        if inventory is None:
            return
        node_obj = self._nodes.get(name)
        if node_obj is None:  # no Node (yet, or any more): not a candidate
            if inventory.remove_node(name):
                self._keys.pop(name, None)
                self._reindex_keys()
            return
        try:
            info = node_from_json(node_obj, "Node watch")
        except InputError as err:
            log.warning("ignoring node %s: %s", name, err)
            if inventory.remove_node(name):
                self._reindex_keys()
            return
        key = self._platform_key(node_obj)
        published = self._layers.get(name)
        if published is not None:
            images = published.node_images()
            for image in published.images:
                self._remember(key, image.names, image.digest, image.layers)
        else:
            images = tuple(self._resolved_image(image) for image in info.images)
        was = inventory.index_of(name)
        inventory.upsert_node(
            NodeInfo(
                name=info.name,
                images=images,
                annotation_layers=info.annotation_layers,
                labels=info.labels,
                annotations=info.annotations,
                allocatable=info.allocatable,
            )
        )
        if was is None or self._keys.get(name) != key:
            self._keys[name] = key
            self._reindex_keys()
        if self.on_change is not None:
            self.on_change(name)

    def _platform_key(self, node_obj: Mapping[str, Any]) -> str:
        if self.platforms is None:
            return ""
        try:
            node = msgspec.convert(node_obj, Node)
        except msgspec.ValidationError:
            return self.platforms.default_key
        return self.platforms.key(node)

    def _reindex_keys(self) -> None:
        inventory = self._inventory
        if self.platforms is None or inventory is None:
            self.platform_keys = None
            return
        default = self.platforms.default_key
        # a new list object: the extender's memo of platform groups keys on identity
        self.platform_keys = [self._keys.get(n.name, default) for n in inventory.nodes]

    def _remember(
        self, key: str, names: tuple[str, ...], digest: str, layers: tuple[Layer, ...]
    ) -> None:
        for name in (*names, digest):
            for lookup in _lookup_names(name):
                self._known[(key, lookup)] = layers
                self._known.move_to_end((key, lookup))
        while len(self._known) > MAX_KNOWN_IMAGES:
            self._known.popitem(last=False)

    def _warm(self, node_obj: dict[str, Any]) -> bool:
        """On a watch thread: resolve the status images of a node without an agent
        through the layer source (the registry), so the loop finds them resolved. True
        when something new was resolved (the node is then refreshed)."""
        name = _name(node_obj)
        if self._source is None or name in self._layers:
            return False
        with self._grace_lock:
            self._latest[name] = node_obj
            first = self._first_seen.setdefault(name, time.monotonic())
            waited_s = time.monotonic() - first
            if waited_s < self.agent_grace_s:
                if name not in self._timers:
                    self._timers.add(name)
                    timer = threading.Timer(
                        self.agent_grace_s - waited_s + 0.1, self._grace_over, (name,)
                    )
                    timer.daemon = True
                    timer.start()
                return False
        try:
            info = node_from_json(node_obj, "Node watch")
        except InputError:
            return False
        fresh = False
        for image in info.images:
            if image.layers is not None or not image.names or image.names[0] in self._resolved:
                continue
            layers, warning = resolve_node_image(image, self._source, self._resolver)
            self.node_image_resolutions += 1
            if warning is not None:
                log.warning(warning)
            self._resolved[image.names[0]] = layers
            fresh = fresh or layers is not None
        while len(self._resolved) > MAX_RESOLVED:
            self._resolved.popitem(last=False)
        return fresh

    def _grace_over(self, name: str) -> None:
        """A node's agent grace period ended: resolve its status images if it still has
        published nothing (on the timer's thread, never the loop)."""
        with self._grace_lock:
            self._timers.discard(name)
            node_obj = self._latest.get(name)
        if node_obj is not None and not self._stop.is_set() and self._warm(node_obj):
            self._post(self._refresh, name)

    def _resolved_image(self, image: NodeImage) -> NodeImage:
        """On the loop: a status image with the layers a watch thread resolved (names
        only until then: no registry call ever blocks the loop)."""
        if image.layers is not None or not image.names:
            return image
        layers = self._resolved.get(image.names[0])
        return image if layers is None else NodeImage(image.names, image.size_bytes, layers)


def _name(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _lookup_names(image: str) -> tuple[str, ...]:
    """``image`` as written and normalised (``busybox`` -> ``docker.io/library/busybox:
    latest``), and its digest alone for a digest reference."""
    names = [image]
    try:
        normalized = normalized_image_name(image)
    except LayerschedError:
        normalized = image
    if normalized != image:
        names.append(normalized)
    if "@" in image:
        names.append(image.rpartition("@")[2])
    return tuple(names)
