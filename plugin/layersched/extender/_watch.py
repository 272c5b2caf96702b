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
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from layersched.core.errors import InputError, KubeError, LayerschedError
from layersched.core.inventory import (
    ClusterInventory,
    NodeImage,
    NodeInfo,
    names_resolver,
    resolve_node_image,
)
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodelayers import HeldImage, NodeLayers, parse_document
from layersched.core.objects import decode_node, node_info
from layersched.core.reference import normalized_image_name
from layersched.extender._platforms import Platforms
from layersched.extender._providers import held_images
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
#: Objects per list page: a page of NodeLayerInventory objects is parsed and dropped
#: before the next is fetched (100 x ~40 KB of JSON), so a relist never holds them all.
LIST_PAGE_SIZE = 100

NODES = "nodes"
LAYERS = "nodelayerinventories"


@dataclass(frozen=True, slots=True)
class ParsedNode:
    """A Node as the inventory needs it: its parsed facts and its platform key."""

    info: NodeInfo
    key: str


#: What a watch thread hands the loop for one object: parsed, or why it is ignored.
Parsed = ParsedNode | NodeLayers | str


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
        # what the watches last saw, by node name, parsed (loop thread only)
        self._nodes: dict[str, ParsedNode] = {}
        self._layers: dict[str, NodeLayers] = {}
        #: One Layer object per digest, and one object per distinct image entry, shared
        #: by every node's parsed objects (the pools only grow: distinct images, not nodes).
        self._pool: dict[str, Layer] = {}
        self._images: dict[NodeImage, NodeImage] = {}
        self._held: dict[HeldImage, HeldImage] = {}
        self._as_node_image: dict[HeldImage, NodeImage] = {}
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
        self._latest: dict[str, NodeInfo] = {}
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
        """List both collections page by page (retrying until the API answers), publish
        the first inventory, then keep watching on daemon threads."""
        if self._loop is None:
            raise LayerschedError("WatchInventoryProvider.load before bind_loop")
        first: dict[str, tuple[dict[str, Parsed], str]] = {}
        for kind, path in ((NODES, NODES_PATH), (LAYERS, NODE_LAYERS_PATH)):
            first[kind] = self._list_until_ok(kind, path)
        nodes, layers = first[NODES][0], first[LAYERS][0]
        for name, parsed in nodes.items():  # nodes without an agent may need the registry
            if name not in layers and isinstance(parsed, ParsedNode):
                self._warm(name, parsed.info)
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

    def collector(self) -> Collector | None:
        """The watches' metrics (this provider is a prometheus_client collector)."""
        return self

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
        return held_images(self._inventory, node)

    # ------------------------------------------------------------ watch threads
    def _parse(self, kind: str, obj: dict[str, Any]) -> Parsed:
        """On a watch thread: an object as the compact form the loop applies (a parsed
        Node and its platform key, a parsed NodeLayerInventory), or why it is ignored."""
        name = _name(obj)
        try:
            if kind == NODES:
                node = decode_node(obj, "Node watch")  # decoded once, for both uses
                info = node_info(node, f"Node watch: node {name!r}")
                images = tuple(self._shared(image) for image in info.images)
                key = self.platforms.key(node) if self.platforms is not None else ""
                return ParsedNode(dataclasses.replace(info, images=images), key)
            parsed = parse_document(obj, "NodeLayerInventory watch", self._pool)
            held = tuple(self._shared_held(image) for image in parsed.images)
            return dataclasses.replace(parsed, images=held)
        except InputError as err:
            what = "node" if kind == NODES else "the layers published for node"
            return f"ignoring {what} {name}: {err}"

    def _shared(self, image: NodeImage) -> NodeImage:
        """One object per distinct image entry: 5,000 nodes list the same few thousand
        images, and the extender must hold each once (``dict.setdefault`` is atomic, the
        two watch threads may share the pool)."""
        return self._images.setdefault(image, image)

    def _shared_held(self, image: HeldImage) -> HeldImage:
        return self._held.setdefault(image, image)

    def _list_until_ok(self, kind: str, path: str) -> tuple[dict[str, Parsed], str]:
        state = self.state[kind]
        pause_s = RETRY_FIRST_S
        while True:
            try:
                parsed: dict[str, Parsed] = {}
                version = ""
                with self._kube_factory() as kube:
                    for page, page_version in kube.list_pages(path, LIST_PAGE_SIZE):
                        version = page_version
                        for obj in page:
                            name = _name(obj)
                            if name:
                                parsed[name] = self._parse(kind, obj)
                state.last_error = ""
                return parsed, version
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
                        if event.type == "BOOKMARK":
                            continue
                        name = _name(event.object)
                        if not name:
                            continue
                        if event.type == "DELETED":
                            self._post(self._apply, kind, name, None)
                            continue
                        parsed = self._parse(kind, event.object)
                        self._post(self._apply, kind, name, parsed)
                        if isinstance(parsed, ParsedNode) and self._warm(name, parsed.info):
                            self._post(self._refresh, name)
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
    def _replace_all(self, kind: str, items: dict[str, Parsed]) -> None:
        """A full list: apply what differs from what is held, drop what is gone."""
        for name, parsed in items.items():
            self._apply(kind, name, parsed)
        held = self._nodes if kind == NODES else self._layers
        for gone in set(held) - set(items):
            self._apply(kind, gone, None)
        self.state[kind].synced = True
        self.state[kind].connected = True

    def _apply(self, kind: str, name: str, parsed: Parsed | None) -> None:
        """One object added or changed (``parsed``) or deleted (None), then the node."""
        if isinstance(parsed, str):  # malformed: ignored, as if absent, with a warning
            log.warning("%s", parsed)
            parsed = None
        if kind == NODES:
            if isinstance(parsed, ParsedNode):
                self._nodes[name] = parsed
            else:
                self._nodes.pop(name, None)
        elif isinstance(parsed, NodeLayers):
            self._layers[name] = parsed
        else:
            self._layers.pop(name, None)
        self._refresh(name)

    def _refresh(self, name: str) -> None:
        inventory = self._inventory
        if inventory is None:
            return
        node = self._nodes.get(name)
        if node is None:  # no Node (yet, or any more): not a candidate
            if inventory.remove_node(name):
                self._keys.pop(name, None)
                self._reindex_keys()
            return
        info, key = node.info, node.key
        published = self._layers.get(name)
        if published is not None:
            images = tuple(self._node_image(image) for image in published.images)
            for image in published.images:
                # a node's update republishes its images: only new ones are indexed (the
                # name normalisation is the costly part, and this runs on the loop)
                if self._known.get((key, image.digest)) is not image.layers:
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

    def _warm(self, name: str, info: NodeInfo) -> bool:
        """On a watch thread: resolve the status images of a node without an agent
        through the layer source (the registry), so the loop finds them resolved. True
        when something new was resolved (the node is then refreshed)."""
        if self._source is None or name in self._layers:
            return False
        with self._grace_lock:
            self._latest[name] = info
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

    def _node_image(self, image: HeldImage) -> NodeImage:
        shared = self._as_node_image.get(image)
        if shared is None:
            shared = self._as_node_image[image] = self._shared(
                NodeImage(image.names, image.size_bytes, image.layers)
            )
        return shared

    def _grace_over(self, name: str) -> None:
        """A node's agent grace period ended: resolve its status images if it still has
        published nothing (on the timer's thread, never the loop)."""
        with self._grace_lock:
            self._timers.discard(name)
            info = self._latest.get(name)
        if info is not None and not self._stop.is_set() and self._warm(name, info):
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
