"""The live inventory: Nodes and NodeLayerInventory objects, listed and watched.

This is what makes ``NodeNames`` mode (``nodeCacheCapable: true``) work on a live
cluster. Two watch threads (Nodes, and layersched's NodeLayerInventory objects) each
list, then watch from the list's resourceVersion; a watch that ends is resumed from the
last version seen, a 410 Gone relists, and any failure (an API error, or anything else:
a bug, an object no decoder foresaw) marks the watch disconnected, backs off and retries.
The held inventory keeps answering meanwhile, and ``/readyz`` says so.

Changes are applied to one :class:`~layersched.core.inventory.ClusterInventory` node by
node (:meth:`~ClusterInventory.upsert_node`, :meth:`~ClusterInventory.remove_node`),
never by a rebuild, and always on the event loop's thread (posted with
``call_soon_threadsafe``), so a scoring pass never sees a half-applied change.

**Trust.** A node's NodeLayerInventory is believed for what the node says about itself:
the layers it holds. It is believed about *a pod image's* layers only when enough nodes
agree (:mod:`layersched.extender._trust`). An object for a node that does not exist is
ignored (counted), as is one whose ``observedAt`` is older than ``max_age_s``: its node
is then scored as if it had no agent, from its ``status.images`` resolved through the
layer source (the registry), as in full-``Nodes`` mode. A malformed object is ignored
with a warning naming the node: that node falls back, and other nodes are untouched.

**Memory is bounded by construction.** Lists are read in pages bounded in bytes, not
only in objects; an object over a byte or layer cap is skipped (counted); what the
objects kept hold is pooled, reference-counted and charged against a budget
(:mod:`layersched.extender._pools`); per-node state goes with the node; and the
deadlines (agent grace, staleness) share one timer thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
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
from layersched.core.nodelayers import (
    DEFAULT_MAX_OBJECT_BYTES,
    LIMITS,
    HeldImage,
    parse_document,
)
from layersched.core.objects import decode_node, node_info
from layersched.extender import _memory
from layersched.extender._platforms import Platforms
from layersched.extender._pools import NOTHING, Held, InventoryPools
from layersched.extender._providers import held_images
from layersched.extender._timers import TimerHeap
from layersched.extender._trust import DEFAULT_IMAGE_QUORUM, ImageVotes, ballots
from layersched.kube import (
    NODE_LAYERS_PATH,
    NODES_PATH,
    Gone,
    KubeClient,
    Oversize,
    WatchEvent,
    node_layers_path,
)

log = logging.getLogger(__name__)

#: Back-off after a failed list or watch: 0.5 s doubling to 30 s.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
#: Node-image resolutions (nodes without an agent) remembered, by first name.
MAX_RESOLVED = 50_000
#: A new node's agent publishes within seconds of the node registering; only a node that
#: published nothing for this long has its status images resolved through the registry.
DEFAULT_AGENT_GRACE_S = 60.0
#: The agent re-applies an unchanged object every ``--heartbeat-s`` (600 s by default,
#: ``layersched.agent.DEFAULT_HEARTBEAT_S``; a unit test holds the two equal).
AGENT_HEARTBEAT_S = 600.0
#: An object whose ``observedAt`` is older than this counts as missing (its agent is
#: gone or stuck): three heartbeats, so one or two lost applies are no reason.
DEFAULT_INVENTORY_MAX_AGE_S = 3 * AGENT_HEARTBEAT_S
#: Objects per list page at most, and a page's bytes at most: a page is parsed and
#: dropped before the next is read, and decoding multiplies JSON by about 3.5, so a
#: 4 MiB page costs ~15 MB while it is read (100 objects of 1 MiB would be 350 MB).
LIST_PAGE_SIZE = 100
LIST_PAGE_BYTES = 4 * 1024 * 1024
#: Objects larger than this (their JSON) are skipped undecoded, in a list as in a watch
#: (a watch event's line is cut as it arrives): the agent keeps its object under 1 MiB
#: (``DEFAULT_MAX_OBJECT_BYTES``); the API server adds metadata and managedFields. A Node
#: over it stays a candidate without its status images: a kubelet reporting 50 images of
#: 5 names writes ~40 KB, and etcd stores 1.5 MiB at most, but an empty status image is
#: 2 bytes of the protobuf a kubelet writes and 15 of JSON, so one Node's JSON can reach
#: 10 MB (issue 30).
MAX_OBJECT_BYTES = DEFAULT_MAX_OBJECT_BYTES + 256 * 1024
#: Status images kept per Node (kubelet reports 50 by default; more are dropped).
MAX_STATUS_IMAGES = 1_000
#: Names kept per status image: kubelet reports 5 at most (maxNamesPerImageInNodeStatus);
#: a Node of 1,000 images of 200 names each was charged 70 MiB of the budget (issue 30).
MAX_STATUS_IMAGE_NAMES = 5
#: What the watch may hold in all (an estimate, see _pools.py; the real memory is 0.5 to
#: 0.9 of it): 5,000 nodes and their objects of the benchmark corpus (50 images each,
#: 2,000 distinct images, 7,689 distinct layers) are charged 143 MB. Past the budget,
#: objects are refused and counted. With the process's own ~200 MB at most (code, layer
#: cache, request bodies), the extender stays within its 512 MiB container limit.
DEFAULT_MAX_INVENTORY_BYTES = 256 * 1024 * 1024
#: Names of objects whose Node did not exist, remembered so that the object is read
#: again (one GET) if the Node appears; the least recent go first.
MAX_ORPHANS = 10_000
#: Warnings about ignored objects: the first of each kind in this period is logged in
#: full, the others are counted and summed up in one line when the period ends. A flood
#: of hostile objects then costs a few log lines, and nothing is kept per message (a
#: string kept per object would pin memory the objects' garbage is freed from).
IGNORED_LOG_PERIOD_S = 60.0
#: A watch disconnected for longer than this makes /readyz answer 503.
DEFAULT_UNREADY_AFTER_S = 300.0
#: Every so often, if objects of this many bytes were parsed or released since the last
#: time, glibc is told to return its free pages (RSS then follows what is held).
TRIM_PERIOD_S = 5.0
TRIM_AFTER_BYTES = 16 * 1024 * 1024
#: The only keys of a Node's labels and annotations the watch keeps (pull-time's
#: bandwidth): a node's other metadata is neither scored nor held.
KEPT_METADATA_PREFIX = "layersched.io/"

NODES = "nodes"
LAYERS = "nodelayerinventories"

#: Why an object is ignored (the ``reason`` label of the ignored-objects counter).
MALFORMED = "malformed"
TOO_LARGE = "too_large"
OVER_BUDGET = "over_budget"
UNKNOWN_NODE = "unknown_node"
STALE = "stale"
IGNORED_REASONS = (MALFORMED, TOO_LARGE, OVER_BUDGET, UNKNOWN_NODE, STALE)


@dataclass(frozen=True, slots=True, eq=False)
class ParsedNode:
    """A Node as the inventory needs it: its parsed facts, its platform key, and what it
    holds of the pools."""

    info: NodeInfo
    key: str
    held: Held = NOTHING
    #: Why its status images are not held (a reason of IGNORED_REASONS, counted when it
    #: is applied, and the warning), or "".
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class HeldLayers:
    """A NodeLayerInventory as the watch keeps it: pooled, charged, and when it expires."""

    node: str
    held: Held
    #: Unix time from which it counts as missing: its ``observedAt`` (or when it
    #: arrived, if earlier: a clock ahead buys nothing) plus the maximum age.
    fresh_until_s: float
    observed_at: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """Why an object is ignored (one of :data:`IGNORED_REASONS`), and the warning."""

    reason: str
    message: str


#: What a watch thread hands the loop for one object.
Parsed = ParsedNode | HeldLayers | Ignored


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


class _Meta(msgspec.Struct):
    name: str = ""


class _NameOnly(msgspec.Struct):
    """An object's name, read without decoding the rest (to skip one too large)."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)


class WatchInventoryProvider:
    """An :class:`~layersched.extender.InventoryProvider` kept current by the API."""

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
        self._kube_factory = kube_factory
        self._source = source
        self._resolver = names_resolver(source) if source is not None else None
        self.platforms = platforms if platforms is not None and platforms.enabled else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inventory: ClusterInventory | None = None
        #: Per node index, its platform key (None: every node is the default platform).
        self.platform_keys: list[str] | None = None
        #: How long an object may go without a new ``observedAt`` before it counts as missing.
        self.max_age_s = max_age_s
        #: A watch disconnected for longer than this makes ready() false.
        self.unready_after_s = unready_after_s
        self._pools = InventoryPools(max_inventory_bytes)
        self._votes = ImageVotes(image_quorum)
        # per node, what the watches last saw (loop thread only)
        self._nodes: dict[str, ParsedNode] = {}
        self._layers: dict[str, HeldLayers] = {}
        self._keys: dict[str, str] = {}
        #: the (platform key, images) each node last voted with
        self._voted: dict[str, tuple[str, tuple[HeldImage, ...]]] = {}
        #: nodes whose object is stale (scored as without an agent until it is refreshed)
        self._stale: set[str] = set()
        #: names of objects whose Node did not exist (read again if it appears)
        self._orphans: OrderedDict[str, None] = OrderedDict()
        #: the names of the first Node list, before the inventory is installed
        self._listed_nodes: set[str] = set()
        self._ignored = {
            (kind, reason): 0 for kind in (NODES, LAYERS) for reason in IGNORED_REASONS
        }
        self._log_lock = threading.Lock()
        self._log_period_end_s = 0.0
        #: kinds of warning logged in this period -> how many more were not
        self._log_suppressed: dict[str, int] = {}
        # node-image resolutions (worker thread writes, loop reads)
        self._resolved: OrderedDict[str, tuple[Layer, ...] | None] = OrderedDict()
        self.state = {NODES: WatchState(), LAYERS: WatchState()}
        self._stop = threading.Event()
        #: Node images resolved through the layer source (nodes without an agent).
        self.node_image_resolutions = 0
        #: How long a node may go without a NodeLayerInventory before its status images
        #: are resolved through the layer source (its agent is starting, usually).
        self.agent_grace_s = agent_grace_s
        #: Objects that went stale while held (their node fell back).
        self.expired = 0
        # the agent grace: the nodes watch thread writes, the worker reads, the loop prunes
        self._grace_lock = threading.Lock()
        self._first_seen: dict[str, float] = {}
        self._latest: dict[str, NodeInfo] = {}
        #: Every deadline (agent grace, staleness) on one thread.
        self._timers = TimerHeap("layersched-inventory-timers")
        # one worker thread for registry resolutions and re-reads, never on the loop
        self._work: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._work_lock = threading.Lock()
        self._work_pending: set[tuple[str, str]] = set()
        self._worker: threading.Thread | None = None
        #: Called on the loop after a node's entry changed (tests and metrics hook in).
        self.on_change: Callable[[str], None] | None = None
        #: Bytes of objects parsed or released since glibc last returned free pages
        #: (approximate: several threads add to it).
        self._churn_bytes = 0
        self._released_at_trim = 0
        #: Times glibc returned free pages.
        self.trims = 0

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
        nodes, nodes_version = self._list_until_ok(NODES, NODES_PATH)
        self._listed_nodes = set(nodes)
        self._pools.expected_nodes = max(1, len(nodes))
        layers, layers_version = self._list_until_ok(LAYERS, NODE_LAYERS_PATH)
        self._listed_nodes = set()
        for name, parsed in nodes.items():  # nodes without an agent may need the registry
            if isinstance(parsed, ParsedNode):
                has_layers = isinstance(layers.get(name), HeldLayers)
                self._note_node(name, parsed.info, has_layers=has_layers)
        done = threading.Event()

        def install() -> None:
            self._inventory = ClusterInventory()
            self._replace_all(NODES, nodes)
            self._replace_all(LAYERS, layers)
            done.set()

        self._loop.call_soon_threadsafe(install)
        done.wait()
        for kind, path, version in (
            (NODES, NODES_PATH, nodes_version),
            (LAYERS, NODE_LAYERS_PATH, layers_version),
        ):
            threading.Thread(
                target=self._watch_forever,
                args=(kind, path, version),
                name=f"watch-{kind}",
                daemon=True,
            ).start()
        self._timers.schedule("trim", time.monotonic() + TRIM_PERIOD_S, self._trim)
        inventory = self._inventory
        assert inventory is not None
        log.info(
            "inventory listed: %d nodes, %d with published layers",
            inventory.node_count,
            len(self._layers),
        )

    def stop(self) -> None:
        self._stop.set()
        self._timers.stop()
        self._work.put(("stop", ""))

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
        ignored = CounterMetricFamily(
            "layersched_extender_watch_ignored_objects",
            "Objects ignored, by resource and reason: malformed, too_large (over the byte, "
            "image or layer caps), over_budget (--max-inventory-bytes), unknown_node (no "
            "such Node), stale (observedAt older than --inventory-max-age-s).",
            labels=["resource", "reason"],
        )
        for (kind, reason), count in self._ignored.items():
            ignored.add_metric([kind, reason], float(count))
        yield ignored
        gauges = (
            (
                "layersched_extender_watch_nodes_with_layers",
                "Nodes whose layers come from their agent's NodeLayerInventory.",
                len(self._layers),
            ),
            (
                "layersched_extender_watch_stale_inventories",
                "Nodes whose NodeLayerInventory is older than --inventory-max-age-s (scored "
                "as if they had no agent).",
                len(self._stale),
            ),
            (
                "layersched_extender_watch_held_bytes",
                "Estimated bytes the watched objects hold (bounded by --max-inventory-bytes).",
                self._pools.held_bytes,
            ),
            (
                "layersched_extender_watch_pooled_layers",
                "Distinct layers held for the watched objects.",
                self._pools.layers,
            ),
            (
                "layersched_extender_watch_pooled_images",
                "Distinct image entries held for the watched objects.",
                self._pools.images,
            ),
            (
                "layersched_extender_watch_timers",
                "Nodes' deadlines pending (agent grace, staleness), all on one thread.",
                self._node_deadlines(),
            ),
        )
        for name, documentation, value in gauges:
            gauge = GaugeMetricFamily(name, documentation)
            gauge.add_metric([], float(value))
            yield gauge
        counters = (
            (
                "layersched_extender_watch_node_image_resolutions",
                "Node images resolved through the layer source because their node published "
                "no NodeLayerInventory (0 when every node runs the agent).",
                self.node_image_resolutions,
            ),
            (
                "layersched_extender_watch_expired_inventories",
                "NodeLayerInventory objects that went stale while held.",
                self.expired,
            ),
            (
                "layersched_extender_watch_memory_trims",
                "Times glibc was told to return freed pages after a burst of objects.",
                self.trims,
            ),
            (
                "layersched_extender_watch_pod_images_without_quorum",
                "Pod images some node published whose layers fewer than --image-quorum nodes "
                "agree on (or two answers did): resolved through the registry.",
                self._votes.without_quorum,
            ),
        )
        for name, documentation, value in counters:
            counter = CounterMetricFamily(name, documentation)
            counter.add_metric([], float(value))
            yield counter
        heap = _memory.malloc_bytes()
        if heap is not None:
            malloc = GaugeMetricFamily(
                "layersched_extender_malloc_bytes",
                "glibc's heaps: bytes in use (what the process holds) and free but kept "
                "(returned to the system by malloc_trim after a burst).",
                labels=["state"],
            )
            malloc.add_metric(["in_use"], float(heap[0]))
            malloc.add_metric(["free"], float(heap[1]))
            yield malloc

    def ready(self) -> tuple[bool, str]:
        """(ready, why): ready once both collections were listed and while no watch has
        been disconnected for longer than ``unready_after_s``; the text says whether the
        watches are connected or the inventory is being served stale, and why."""
        lines = []
        stale_too_long = False
        for kind, state in self.state.items():
            if not state.synced:
                lines.append(f"[-]{kind}: not listed yet ({state.last_error or 'listing'})")
            elif state.connected:
                lines.append(f"[+]{kind}: watching at resourceVersion {state.resource_version}")
            else:
                stale_s = time.monotonic() - state.since
                mark = "+"
                if stale_s > self.unready_after_s:
                    stale_too_long, mark = True, "-"
                lines.append(
                    f"[{mark}]{kind}: serving the last inventory, re-syncing for {stale_s:.0f} s "
                    f"({state.last_error})"
                )
        return self._inventory is not None and not stale_too_long, "\n".join(lines)

    def collector(self) -> Collector | None:
        """The watches' metrics (this provider is a prometheus_client collector)."""
        return self

    def held_bytes(self) -> int:
        """Estimated bytes the watched objects hold (the pools' charge)."""
        return self._pools.held_bytes

    def image_layers(self, image: str, key: str = "") -> tuple[Layer, ...] | None:
        """Layers of pod image ``image`` for platform ``key`` when at least the quorum of
        nodes publish the same layers for it (and no other answer has a quorum too);
        None otherwise: the registry is asked."""
        return self._votes.layers(image, key)

    def held_images(self, node: str) -> list[str] | None:
        """The image names the inventory holds for ``node`` (None: unknown node)."""
        return held_images(self._inventory, node)

    def tracked(self) -> dict[str, int]:
        """How many entries each piece of per-node and pooled state holds (for tests and
        operators: everything here goes with the node or the object)."""
        with self._grace_lock:
            grace = {"first_seen": len(self._first_seen), "latest": len(self._latest)}
        return grace | {
            "nodes": len(self._nodes),
            "layers": len(self._layers),
            "keys": len(self._keys),
            "voted": len(self._voted),
            "stale": len(self._stale),
            "orphans": len(self._orphans),
            "timers": self._node_deadlines(),
            "timer_heap": self._timers.heap_entries,
            "pooled_layers": self._pools.layers,
            "pooled_images": self._pools.images,
            "votes": len(self._votes),
            "held_bytes": self._pools.held_bytes,
        }

    def _node_deadlines(self) -> int:
        """Deadlines pending for nodes (not the housekeeping's own)."""
        return len(self._timers) - (1 if self._timers.scheduled("trim") else 0)

    # ------------------------------------------------------------ watch threads
    def _parse(
        self, kind: str, obj: Mapping[str, Any] | bytes, size_bytes: int, name: str = ""
    ) -> Parsed:
        """On a watch thread: an object as the compact form the loop applies, its share
        of the pools taken, or why it is ignored. Nothing an object holds can raise
        through here: whatever a decoder did not foresee ignores that object only."""
        name = name or _name(obj)
        self._churn_bytes += size_bytes
        what = "node" if kind == NODES else "the layers published for node"
        try:
            if kind == NODES:
                return self._parse_node(name, obj, size_bytes)
            return self._parse_layers(name, obj, size_bytes)
        except InputError as err:
            return Ignored(MALFORMED, f"ignoring {what} {name}: {err}")
        except Exception as err:  # a hostile object must not end the watch
            log.debug("parsing %s %s", kind, name, exc_info=True)
            return Ignored(MALFORMED, f"ignoring {what} {name}: {type(err).__name__}: {err}")

    def _parse_node(self, name: str, obj: Mapping[str, Any] | bytes, size_bytes: int) -> Parsed:
        node = decode_node(obj, "Node watch")  # decoded once, for both uses
        problems: list[str] = []
        info = node_info(node, f"Node watch: node {name!r}", problems)
        for problem in problems:
            self._log_ignored(MALFORMED, problem)
        key = self.platforms.key(node) if self.platforms is not None else ""
        images: tuple[NodeImage, ...] = info.images
        reason = message = ""
        if size_bytes > MAX_OBJECT_BYTES or len(images) > MAX_STATUS_IMAGES:
            reason, message = TOO_LARGE, _too_large_node(name, size_bytes, len(images))
            images = ()
        if any(len(image.names) > MAX_STATUS_IMAGE_NAMES for image in images):
            images = tuple(_first_names(image) for image in images)
        labels = _kept(info.labels)
        annotations = _kept(info.annotations)
        extra_bytes = sum(len(k) + len(v) for m in (labels, annotations) for k, v in m.items())
        extra_bytes += 64 * len(info.annotation_layers)
        replaced = self._nodes.get(name)  # released once this one is applied
        held, victims = self._pools.hold_status(
            images, extra_bytes, replaced.held if replaced is not None else None, f"{NODES}/{name}"
        )
        self._evict_later(victims)
        if held is None:  # over the budget: the node stays a candidate, without its images
            reason = OVER_BUDGET
            message = (
                f"node {name}: its status images are over its share of --max-inventory-bytes"
                f" ({self._pools.share_bytes} bytes) or the budget"
            )
            held = NOTHING
        info = dataclasses.replace(
            info, images=held.node_images, labels=labels, annotations=annotations, allocatable={}
        )
        return ParsedNode(info, key, held, reason, message)

    def _bare_node(self, name: str, size_bytes: int) -> ParsedNode:
        """A Node over the byte cap, never decoded: a candidate without images, labels
        or annotations (what it holds is unknown: it scores as holding nothing)."""
        key = self.platforms.default_key if self.platforms is not None else ""
        message = _too_large_node(name, size_bytes, None)
        return ParsedNode(NodeInfo(name=name), key, NOTHING, TOO_LARGE, message)

    def _parse_layers(self, name: str, obj: Mapping[str, Any] | bytes, size_bytes: int) -> Parsed:
        what = f"ignoring the layers published for node {name}"
        if not self._is_node(name):
            return Ignored(UNKNOWN_NODE, f"{what}: there is no such Node")
        if size_bytes > MAX_OBJECT_BYTES:
            return Ignored(TOO_LARGE, f"{what}: {size_bytes} bytes, over {MAX_OBJECT_BYTES}")
        document = msgspec.json.decode(obj) if isinstance(obj, bytes) else obj
        over = _over_limits(document)
        if over:
            return Ignored(TOO_LARGE, f"{what}: {over}")
        observed_at = document.get("observedAt") if isinstance(document, dict) else None
        observed_at = observed_at if isinstance(observed_at, str) else ""
        fresh_until_s = self._fresh_until(observed_at)
        if fresh_until_s <= time.time():
            return Ignored(
                STALE,
                f"node {name}: its NodeLayerInventory was observed at "
                f"{observed_at or '(never: no observedAt)'}, more than "
                f"{self.max_age_s:.0f} s ago: scoring the node as if it had no agent",
            )
        replaced = self._layers.get(name)  # released once this one is applied
        replacing = replaced.held if replaced is not None else None
        if not self._pools.fits(*_counts(document), replacing):
            return self._over_budget(what)  # refused before parsing: nothing is made
        # names are shared by pooling whole images: interning a hostile object's names
        # would grow the interpreter's table for good
        parsed = parse_document(document, "NodeLayerInventory watch", intern=str)
        held, victims = self._pools.hold_layers(parsed, replacing, f"{LAYERS}/{name}")
        self._evict_later(victims)
        if held is None:
            return self._over_budget(what)
        return HeldLayers(name, held, fresh_until_s, observed_at)

    def _over_budget(self, what: str) -> Ignored:
        return Ignored(
            OVER_BUDGET,
            f"{what}: it is over its share of --max-inventory-bytes "
            f"({self._pools.share_bytes} of {self._pools.max_bytes} bytes), or the budget "
            "is held by objects no larger than it",
        )

    def _evict_later(self, victims: list[Held]) -> None:
        """Have the loop drop the objects condemned to make room for a smaller one."""
        for victim in victims:
            self._post(self._evict, victim)

    def _is_node(self, name: str) -> bool:
        """Whether Node ``name`` exists (as the first list, or the loop, last saw)."""
        return name in (self._nodes if self._inventory is not None else self._listed_nodes)

    def _fresh_until(self, observed_at: str) -> float:
        """Unix time from which an object observed at ``observed_at`` counts as missing
        (no readable time: at once)."""
        try:
            observed_s = datetime.fromisoformat(observed_at).timestamp()
        except (TypeError, ValueError, OverflowError):
            return 0.0
        return min(observed_s, time.time()) + self.max_age_s

    def _trim(self) -> None:
        """On the timer thread, every TRIM_PERIOD_S: after a burst of objects parsed or
        released, have glibc return its free pages, so that RSS follows what is held;
        and sum up the warnings of ignored objects of a period that ended."""
        self._flush_ignored()
        released_bytes = self._pools.released_bytes
        churn_bytes = self._churn_bytes + released_bytes - self._released_at_trim
        if churn_bytes > TRIM_AFTER_BYTES:
            self._churn_bytes, self._released_at_trim = 0, released_bytes
            if _memory.trim():
                self.trims += 1
        self._timers.schedule("trim", time.monotonic() + TRIM_PERIOD_S, self._trim)

    def _drop(self, parsed: Parsed | None) -> None:
        """Give back what a parsed object held of the pools (it is not kept)."""
        if isinstance(parsed, ParsedNode | HeldLayers):
            self._pools.release(parsed.held)

    def _parse_raw(self, kind: str, raw: msgspec.Raw | Oversize) -> tuple[str, Parsed]:
        """A listed object, undecoded yet: skipped by its length before decoding if it is
        over the cap (its name only is read, or was, from its head, when it was over the
        page bound too)."""
        if isinstance(raw, Oversize):
            return raw.name, self._oversize(kind, raw.name, raw.size_bytes)
        size_bytes = len(raw)
        if size_bytes > MAX_OBJECT_BYTES:
            try:
                name = msgspec.json.decode(raw, type=_NameOnly).metadata.name
            except msgspec.DecodeError:
                name = ""
            return name, self._oversize(kind, name, size_bytes)
        data = bytes(raw)
        if kind == NODES:
            try:
                name = msgspec.json.decode(data, type=_NameOnly).metadata.name
            except msgspec.DecodeError:
                return "", Ignored(MALFORMED, "ignoring a listed Node that is not a JSON object")
            return name, self._parse(kind, data, size_bytes, name)
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return "", Ignored(MALFORMED, "ignoring a listed object that is not JSON")
        return _name(obj), self._parse(kind, obj, size_bytes)

    def _oversize(self, kind: str, name: str, size_bytes: int) -> Parsed:
        """An object over the byte cap, skipped undecoded (a Node stays a candidate)."""
        self._churn_bytes += size_bytes
        if kind == NODES and name:
            return self._bare_node(name, size_bytes)
        what = "a Node" if kind == NODES else f"the layers published for node {name}"
        return Ignored(TOO_LARGE, f"ignoring {what}: {size_bytes} bytes, over {MAX_OBJECT_BYTES}")

    def _list_until_ok(self, kind: str, path: str) -> tuple[dict[str, Parsed], str]:
        state = self.state[kind]
        pause_s = RETRY_FIRST_S
        while True:
            parsed: dict[str, Parsed] = {}
            try:
                version = ""
                with self._kube_factory() as kube:
                    for page, page_version in kube.list_raw_pages(
                        path, LIST_PAGE_SIZE, LIST_PAGE_BYTES
                    ):
                        version = page_version
                        for raw in page:
                            name, item = self._parse_raw(kind, raw)
                            if name:
                                self._drop(parsed.get(name))
                                parsed[name] = item
                            elif isinstance(item, Ignored):  # no name to keep it by
                                self._post(self._apply, kind, "", item)
                state.last_error = ""
                return parsed, version
            except Exception as err:  # an API error, or a bug: retried
                for item in parsed.values():
                    self._drop(item)
                state.failures += 1
                state.last_error = _describe(err)
                self._log_failure(f"listing {kind}", err, pause_s)
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
                    if not state.connected:
                        state.since = time.monotonic()
                    state.connected = True
                    for event in kube.watch(
                        path, state.resource_version, max_event_bytes=MAX_OBJECT_BYTES
                    ):
                        self._on_event(kind, state, event)
                        pause_s = RETRY_FIRST_S
                # the server ended the watch (its timeout): resume from where it was
            except Gone as err:
                self._disconnected(state, err)
                state.relists += 1
                log.info("%s: %s: listing again", kind, err)
                try:
                    items, state.resource_version = self._list_until_ok(kind, path)
                except Exception:  # noqa: BLE001 - stopping: _list_until_ok gave up
                    return
                self._post(self._replace_all, kind, items)
            except Exception as err:  # noqa: BLE001 - an API error, or a bug: logged, retried
                self._disconnected(state, err)
                state.failures += 1
                self._log_failure(f"watching {kind}", err, pause_s)
                self._stop.wait(pause_s)
                pause_s = min(RETRY_MAX_S, pause_s * 2)

    def _on_event(self, kind: str, state: WatchState, event: WatchEvent) -> None:
        """One watch event: parsed here, applied on the loop (nothing of it stays on the
        watch thread once posted)."""
        state.events += 1
        if event.resource_version:
            state.resource_version = event.resource_version
        if event.type == "BOOKMARK":
            return
        name = _name(event.object)
        if not name:
            if event.oversize:  # nothing to apply it to: counted
                self._post(self._apply, kind, "", self._oversize(kind, "", event.size_bytes))
            return
        if event.type == "DELETED":
            self._post(self._apply, kind, name, None)
            return
        if event.oversize:
            parsed = self._oversize(kind, name, event.size_bytes)
        else:
            parsed = self._parse(kind, event.object, event.size_bytes)
        self._post(self._apply, kind, name, parsed)
        if isinstance(parsed, ParsedNode):
            self._note_node(name, parsed.info)

    @staticmethod
    def _disconnected(state: WatchState, err: BaseException) -> None:
        if state.connected:
            state.since = time.monotonic()
        state.connected = False
        state.last_error = _describe(err)

    @staticmethod
    def _log_failure(what: str, err: BaseException, pause_s: float) -> None:
        if isinstance(err, KubeError):
            log.warning("%s: %s: retrying in %.1f s", what, err, pause_s)
        else:  # not the API's doing: a bug, with its traceback
            log.error(
                "%s failed unexpectedly (a bug: please report it): retrying in %.1f s",
                what,
                pause_s,
                exc_info=err,
            )

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        if not self._loop.is_closed():  # shutting down: nothing is applied any more
            self._loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------ the agent grace
    def _note_node(self, name: str, info: NodeInfo, *, has_layers: bool | None = None) -> None:
        """On the nodes watch thread: remember a node's latest facts, and if it has no
        published layers, have its status images resolved once its agent grace is over."""
        now_s = time.monotonic()
        with self._grace_lock:
            self._latest[name] = info
            first_s = self._first_seen.setdefault(name, now_s)
        if has_layers is None:
            has_layers = name in self._layers
        if self._source is None or has_layers:
            return
        due_s = first_s + self.agent_grace_s
        if now_s < due_s:
            if not self._timers.scheduled(("grace", name)):
                self._timers.schedule(
                    ("grace", name), due_s, functools.partial(self._want, "warm", name)
                )
        else:
            self._want("warm", name)

    def _forget_node(self, name: str, gone: ParsedNode | None) -> None:
        """On the loop: a node is gone; drop its grace state unless the nodes watch has
        seen it again since (it re-registered)."""
        with self._grace_lock:
            latest = self._latest.get(name)
            if latest is None or gone is None or latest is gone.info:
                self._latest.pop(name, None)
                self._first_seen.pop(name, None)
        self._timers.cancel(("grace", name))
        self._timers.cancel(("expire", name))

    def _want(self, job: str, name: str) -> None:
        """Queue ``job`` ("warm": resolve the node's status images; "fetch": read its
        object again) for the worker thread, once."""
        if job == "warm" and self._source is None:
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
            if job == "stop":
                return
            with self._work_lock:
                self._work_pending.discard((job, name))
            try:
                if job == "warm" and self._warm(name):
                    self._post(self._refresh, name)
                elif job == "fetch":
                    self._fetch(name)
            except Exception:  # one node's trouble must not end the worker
                log.exception("inventory worker: %s %s failed (a bug: please report it)", job, name)

    def _warm(self, name: str) -> bool:
        """On the worker: resolve the status images of a node without published layers
        through the layer source (the registry), so the loop finds them resolved. True
        when some of its images have layers (the node is then refreshed)."""
        with self._grace_lock:
            info = self._latest.get(name)
            first_s = self._first_seen.get(name)
        if self._source is None or info is None or first_s is None or name in self._layers:
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
        size_bytes = len(json.dumps(obj, separators=(",", ":")))
        self._post(self._apply_fetched, name, self._parse(LAYERS, obj, size_bytes))

    # ------------------------------------------------------------ loop thread
    def _replace_all(self, kind: str, items: dict[str, Parsed]) -> None:
        """A full list: apply what differs from what is held, drop what is gone."""
        for name, parsed in items.items():
            self._apply(kind, name, parsed)
        if kind == NODES:
            held = set(self._nodes)
        else:  # the objects held, and those ignored whose names are remembered
            held = set(self._layers) | self._stale | set(self._orphans)
        for gone in held - set(items):
            self._apply(kind, gone, None)
        self.state[kind].synced = True
        self.state[kind].connected = True

    def _apply(self, kind: str, name: str, parsed: Parsed | None) -> None:
        """One object added or changed (``parsed``) or deleted (None), then the node."""
        if parsed is not None:
            condemned = self._condemned(parsed)
            if condemned is not parsed and isinstance(parsed, ParsedNode | HeldLayers):
                self._pools.release(parsed.held)  # never applied
            parsed = condemned
        if isinstance(parsed, ParsedNode) and parsed.reason:
            self._ignored[(kind, parsed.reason)] += 1
            self._log_ignored(parsed.reason, parsed.message)
        if isinstance(parsed, Ignored):
            if parsed.reason == UNKNOWN_NODE and name in self._nodes:
                # its Node arrived between the parse and now: read the object again
                self._want("fetch", name)
                return
            self._ignored[(kind, parsed.reason)] += 1
            if parsed.reason == UNKNOWN_NODE:
                self._remember_orphan(name)
                log.debug("%s", parsed.message)
            else:
                self._log_ignored(parsed.reason, parsed.message)
        if not name:  # an object whose name could not be read: counted only
            return
        if kind == NODES:
            self._apply_node(name, parsed if isinstance(parsed, ParsedNode) else None)
        else:
            self._apply_layers(name, parsed)

    def _evict(self, victim: Held) -> None:
        """On the loop: drop ``victim`` if it is still applied (a smaller object took its
        room): a NodeLayerInventory's node falls back, a Node keeps no images. One not
        applied yet is dropped when it is (:meth:`_condemned`)."""
        kind, _, name = victim.holder.partition("/")
        if kind == LAYERS:
            held = self._layers.get(name)
            if held is not None and held.held is victim:
                self._apply(LAYERS, name, self._over_budget(f"dropping the layers of node {name}"))
        elif kind == NODES:
            node = self._nodes.get(name)
            if node is not None and node.held is victim:
                self._apply(NODES, name, self._condemned(node))

    def _condemned(self, parsed: Parsed) -> Parsed:
        """``parsed`` as applied: itself, or if its charge was condemned to make room
        for a smaller object, a Node without images (an inventory: ignored). Releases
        nothing: the caller does."""
        if isinstance(parsed, ParsedNode | HeldLayers) and self._pools.condemned(parsed.held):
            if isinstance(parsed, HeldLayers):
                return self._over_budget(f"ignoring the layers published for node {parsed.node}")
            message = (
                f"node {parsed.info.name}: its status images give their room to smaller objects"
            )
            bare = dataclasses.replace(parsed.info, images=())
            return ParsedNode(bare, parsed.key, NOTHING, OVER_BUDGET, message)
        return parsed

    def _apply_node(self, name: str, parsed: ParsedNode | None) -> None:
        old = self._nodes.pop(name, None)
        dropped: HeldLayers | None = None
        if parsed is not None:
            self._nodes[name] = parsed
            if old is None and name in self._orphans:
                del self._orphans[name]
                self._want("fetch", name)  # its object came before it: read it again
        else:  # deleted (or unreadable): not a candidate, and nothing of it is kept
            dropped = self._layers.pop(name, None)
            if dropped is not None:
                self._remember_orphan(name)  # its object may outlive it a moment
            self._stale.discard(name)
            self._forget_node(name, old)
        self._pools.expected_nodes = max(1, len(self._nodes))
        self._refresh(name)
        if old is not None:
            self._pools.release(old.held)
        if dropped is not None:
            self._pools.release(dropped.held)

    def _apply_layers(self, name: str, parsed: Parsed | None) -> None:
        old = self._layers.pop(name, None)
        self._stale.discard(name)
        if isinstance(parsed, HeldLayers) and name not in self._nodes:
            # its Node went between the parse and now
            self._ignored[(LAYERS, UNKNOWN_NODE)] += 1
            self._remember_orphan(name)
            self._pools.release(parsed.held)
            parsed = None
        if isinstance(parsed, HeldLayers):
            self._orphans.pop(name, None)
            self._layers[name] = parsed
            due_s = time.monotonic() + (parsed.fresh_until_s - time.time())
            self._timers.schedule(
                ("expire", name), due_s, functools.partial(self._post, self._expire, name, parsed)
            )
        else:
            self._timers.cancel(("expire", name))
            if isinstance(parsed, Ignored) and parsed.reason == STALE and name in self._nodes:
                self._stale.add(name)
            elif parsed is None:
                self._orphans.pop(name, None)
        self._refresh(name)
        if old is not None:
            self._pools.release(old.held)
        if name not in self._layers and name in self._nodes:
            self._want("warm", name)  # it falls back to its status images

    def _apply_fetched(self, name: str, parsed: Parsed) -> None:
        """An object read again because its Node appeared: applied unless the watch
        brought a newer one meanwhile, or the node went again."""
        if name in self._layers or name not in self._nodes:
            self._drop(parsed)
            return
        self._apply(LAYERS, name, parsed)

    def _expire(self, name: str, held: HeldLayers) -> None:
        """``held``'s maximum age passed: unless its agent published since, its node
        falls back as if it had no agent."""
        if self._layers.get(name) is not held:
            return
        del self._layers[name]
        self._stale.add(name)
        self.expired += 1
        self._ignored[(LAYERS, STALE)] += 1
        self._log_ignored(
            STALE,
            f"node {name}: its NodeLayerInventory was observed at {held.observed_at}, more "
            f"than {self.max_age_s:.0f} s ago: scoring the node as if it had no agent",
        )
        self._refresh(name)
        self._pools.release(held.held)
        self._want("warm", name)

    def _remember_orphan(self, name: str) -> None:
        self._orphans[name] = None
        self._orphans.move_to_end(name)
        while len(self._orphans) > MAX_ORPHANS:
            self._orphans.popitem(last=False)

    def _log_ignored(self, kind: str, message: str) -> None:
        """Warn about an ignored object (or part of one): the first of ``kind`` in each
        period in full, the rest counted (:meth:`_flush_ignored` sums them up)."""
        with self._log_lock:
            if time.monotonic() >= self._log_period_end_s:
                self._flush_ignored_locked()
            if kind in self._log_suppressed:
                self._log_suppressed[kind] += 1
                return
            self._log_suppressed[kind] = 0
        log.warning("%s", message)

    def _flush_ignored(self) -> None:
        with self._log_lock:
            if time.monotonic() >= self._log_period_end_s:
                self._flush_ignored_locked()

    def _flush_ignored_locked(self) -> None:
        more = {kind: count for kind, count in self._log_suppressed.items() if count}
        if more:
            log.warning(
                "%d more objects (or parts of objects) ignored in the last %.0f s: %s (see "
                "layersched_extender_watch_ignored_objects_total)",
                sum(more.values()),
                IGNORED_LOG_PERIOD_S,
                ", ".join(f"{count} {kind}" for kind, count in sorted(more.items())),
            )
        self._log_suppressed = {}
        self._log_period_end_s = time.monotonic() + IGNORED_LOG_PERIOD_S

    def _vote(self, name: str, key: str, published: HeldLayers | None) -> None:
        """The node's votes on pod images follow its held object."""
        old = self._voted.pop(name, None)
        new = (key, published.held.images) if published is not None else None
        if old is not None and new is not None and old[0] == new[0] and old[1] is new[1]:
            self._voted[name] = old
            return
        self._votes.change(
            ballots(*old) if old is not None else set(),
            ballots(*new) if new is not None else set(),
        )
        if new is not None:
            self._voted[name] = new

    def _refresh(self, name: str) -> None:
        inventory = self._inventory
        if inventory is None:
            return
        node = self._nodes.get(name)
        published = self._layers.get(name) if node is not None else None
        self._vote(name, node.key if node is not None else "", published)
        if node is None:  # no Node (yet, or any more): not a candidate
            if inventory.remove_node(name):
                self._keys.pop(name, None)
                self._reindex_keys()
            return
        info, key = node.info, node.key
        if published is not None:
            images = published.held.node_images
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

    def _resolved_image(self, image: NodeImage) -> NodeImage:
        """On the loop: a status image with the layers the worker resolved (names only
        until then: no registry call ever blocks the loop)."""
        if image.layers is not None or not image.names:
            return image
        layers = self._resolved.get(image.names[0])
        return image if layers is None else self._pools.resolved_status(image, layers)


def _name(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _first_names(image: NodeImage) -> NodeImage:
    """``image`` with kubelet's most names at most (a Node may say anything)."""
    if len(image.names) <= MAX_STATUS_IMAGE_NAMES:
        return image
    return NodeImage(image.names[:MAX_STATUS_IMAGE_NAMES], image.size_bytes, image.layers)


def _too_large_node(name: str, size_bytes: int, images: int | None) -> str:
    held = f"{size_bytes} bytes" + (f" with {images} images" if images is not None else "")
    return (
        f"node {name}: its status images are ignored: the Node is {held} (caps: "
        f"{MAX_OBJECT_BYTES} bytes, {MAX_STATUS_IMAGES} images)"
    )


def _kept(values: Mapping[str, str]) -> dict[str, str]:
    """The labels or annotations layersched reads (its own prefix), none of the rest."""
    return {k: v for k, v in values.items() if k.startswith(KEPT_METADATA_PREFIX)}


def _over_limits(document: object) -> str:
    """Why a NodeLayerInventory is over the caps (the CRD's own list bounds), or ""."""
    if not isinstance(document, dict):
        return ""
    layers, images = document.get("layers"), document.get("images")
    if isinstance(layers, list) and len(layers) > LIMITS.max_layers:
        return f"{len(layers)} layers, over the cap of {LIMITS.max_layers}"
    if isinstance(images, list):
        if len(images) > LIMITS.max_images:
            return f"{len(images)} images, over the cap of {LIMITS.max_images}"
        for i, image in enumerate(images):
            refs = image.get("layers") if isinstance(image, dict) else None
            if isinstance(refs, list) and len(refs) > LIMITS.max_layers_per_image:
                cap = LIMITS.max_layers_per_image
                return f"images[{i}] has {len(refs)} layers, over the cap of {cap}"
    return ""


def _counts(document: Mapping[str, Any]) -> tuple[int, int, int]:
    """A NodeLayerInventory's layers, images and names, counted without parsing it."""
    layers, images = document.get("layers"), document.get("images")
    names = 0
    if isinstance(images, list):
        for image in images:
            listed = image.get("names") if isinstance(image, dict) else None
            names += len(listed) if isinstance(listed, list) else 0
    return (
        len(layers) if isinstance(layers, list) else 0,
        len(images) if isinstance(images, list) else 0,
        names,
    )


def _describe(err: BaseException) -> str:
    return str(err) if isinstance(err, LayerschedError) else f"{type(err).__name__}: {err}"
