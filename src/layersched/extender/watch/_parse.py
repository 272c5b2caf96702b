"""Watched objects parsed into what the store applies: on the watch threads, under caps.

The Go port's ``parse`` (inventorywatch/watch.go) turns a listed or watched object into
its ``parsed`` form; this does the same for both collections the extender watches. A Node
becomes a :class:`ParsedNode` (its status images capped and pooled, its labels and
annotations cut to layersched's own), a NodeLayerInventory a :class:`HeldLayers` (pooled
and charged against the budget, with the time it goes stale), and an object that cannot
be kept an :class:`Ignored` saying why. Nothing an object holds raises through here: a
hostile object is ignored, counted and warned about, and the watch goes on.

**Caps (issue 30).** An object over :data:`MAX_OBJECT_BYTES` is skipped undecoded; a
NodeLayerInventory over the CRD's list bounds is skipped before it is parsed; one that
does not fit its fair share of the budget is refused before anything of it is made.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import msgspec

from layersched.core.budget import NOTHING, Held, IndexPools
from layersched.core.errors import InputError
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.nodeindexing import node_info
from layersched.core.nodelayers import DEFAULT_MAX_OBJECT_BYTES, LIMITS, parse_document
from layersched.core.objects import decode_node
from layersched.extender._platforms import Platforms
from layersched.extender.watch._ignored import (
    MALFORMED,
    OVER_BUDGET,
    STALE,
    TOO_LARGE,
    UNKNOWN_NODE,
    Ignored,
    IgnoredLog,
)
from layersched.kube import Oversize

log = logging.getLogger(__name__)


class Store(Protocol):
    """What the parser reads of the store it feeds (``_store.Store``): the objects held now,
    whether a name is a Node, and the eviction it posts when the budget needs room."""

    nodes: dict[str, ParsedNode]
    layers: dict[str, HeldLayers]

    def is_node(self, name: str) -> bool: ...

    def evict(self, victim: Held) -> None: ...


#: The agent re-applies an unchanged object every ``--heartbeat-s`` (600 s by default,
#: ``layersched.agent.DEFAULT_HEARTBEAT_S``; a unit test holds the two equal).
AGENT_HEARTBEAT_S = 600.0
#: An object whose ``observedAt`` is older than this counts as missing (its agent is
#: gone or stuck): three heartbeats, so one or two lost applies are no reason.
DEFAULT_INVENTORY_MAX_AGE_S = 3 * AGENT_HEARTBEAT_S
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
#: The only keys of a Node's labels and annotations the watch keeps (pull-time's
#: bandwidth): a node's other metadata is neither scored nor held.
KEPT_METADATA_PREFIX = "layersched.io/"
#: Bytes a Node is charged per layer its annotation names (beside its kept metadata).
ANNOTATION_LAYER_BYTES = 64

#: The two watched collections (the ``resource`` label of the watch's metrics).
NODES = "nodes"
LAYERS = "nodelayerinventories"


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


#: What a watch thread hands the loop for one object.
Parsed = ParsedNode | HeldLayers | Ignored


class _Meta(msgspec.Struct):
    name: str = ""


class _NameOnly(msgspec.Struct):
    """An object's name, read without decoding the rest (to skip one too large)."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)


class Parser:
    """Objects as the compact forms the store applies, their share of the pools taken.

    Runs on the watch threads (and the warm-up worker); reads what the store holds for
    the object's node only to charge a replacement against what it replaces, and has the
    loop drop the objects the budget condemns to make room (``post``).
    """

    def __init__(
        self,
        pools: IndexPools,
        store: Store,
        platforms: Platforms | None,
        ignored_log: IgnoredLog,
        post: Callable[..., None],
        max_age_s: float,
    ) -> None:
        self._pools = pools
        self._store = store
        self._platforms = platforms
        self._ignored_log = ignored_log
        self._post = post
        #: How long an object may go without a new ``observedAt`` before it is stale.
        self.max_age_s = max_age_s
        #: Bytes of objects parsed or skipped (a counter; several threads add to it).
        self.parsed_bytes = 0

    def parse(
        self, kind: str, obj: Mapping[str, Any] | bytes, size_bytes: int, name: str = ""
    ) -> Parsed:
        """An object as the store applies it, or why it is ignored. Nothing an object
        holds can raise through here: whatever a decoder did not foresee ignores that
        object only."""
        name = name or object_name(obj)
        self.parsed_bytes += size_bytes
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

    def parse_raw(self, kind: str, raw: msgspec.Raw | Oversize) -> tuple[str, Parsed]:
        """A listed object, undecoded yet, and its name: skipped by its length before
        decoding if it is over the cap (its name only is read, or was, from its head, when
        it was over the page bound too)."""
        if isinstance(raw, Oversize):
            return raw.name, self.oversize(kind, raw.name, raw.size_bytes)
        size_bytes = len(raw)
        if size_bytes > MAX_OBJECT_BYTES:
            try:
                name = msgspec.json.decode(raw, type=_NameOnly).metadata.name
            except msgspec.DecodeError:
                name = ""
            return name, self.oversize(kind, name, size_bytes)
        data = bytes(raw)
        if kind == NODES:
            try:
                name = msgspec.json.decode(data, type=_NameOnly).metadata.name
            except msgspec.DecodeError:
                return "", Ignored(MALFORMED, "ignoring a listed Node that is not a JSON object")
            return name, self.parse(kind, data, size_bytes, name)
        try:
            obj = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return "", Ignored(MALFORMED, "ignoring a listed object that is not JSON")
        return object_name(obj), self.parse(kind, obj, size_bytes)

    def oversize(self, kind: str, name: str, size_bytes: int) -> Parsed:
        """An object over the byte cap, skipped undecoded (a Node stays a candidate)."""
        self.parsed_bytes += size_bytes
        if kind == NODES and name:
            return self._bare_node(name, size_bytes)
        what = "a Node" if kind == NODES else f"the layers published for node {name}"
        return Ignored(TOO_LARGE, f"ignoring {what}: {size_bytes} bytes, over {MAX_OBJECT_BYTES}")

    def drop(self, parsed: Parsed | None) -> None:
        """Give back what a parsed object held of the pools (it is not kept)."""
        if isinstance(parsed, ParsedNode | HeldLayers):
            self._pools.release(parsed.held)

    def _parse_node(self, name: str, obj: Mapping[str, Any] | bytes, size_bytes: int) -> Parsed:
        node = decode_node(obj, "Node watch")  # decoded once, for both uses
        problems: list[str] = []
        info = node_info(node, f"Node watch: node {name!r}", problems)
        for problem in problems:
            self._ignored_log.warn(MALFORMED, problem)
        key = self._platforms.key(node) if self._platforms is not None else ""
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
        extra_bytes += ANNOTATION_LAYER_BYTES * len(info.annotation_layers)
        replaced = self._store.nodes.get(name)  # released once this one is applied
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
        key = self._platforms.default_key if self._platforms is not None else ""
        message = _too_large_node(name, size_bytes, None)
        return ParsedNode(NodeInfo(name=name), key, NOTHING, TOO_LARGE, message)

    def _parse_layers(self, name: str, obj: Mapping[str, Any] | bytes, size_bytes: int) -> Parsed:
        what = f"ignoring the layers published for node {name}"
        if not self._store.is_node(name):
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
            return Ignored(STALE, stale_message(name, observed_at, self.max_age_s))
        replaced = self._store.layers.get(name)  # released once this one is applied
        replacing = replaced.held if replaced is not None else None
        if not self._pools.fits(*_counts(document), replacing):
            return over_budget(self._pools, what)  # refused before parsing: nothing is made
        # names are shared by pooling whole images: interning a hostile object's names
        # would grow the interpreter's table for good
        parsed = parse_document(document, "NodeLayerInventory watch", intern=str)
        held, victims = self._pools.hold_layers(parsed, replacing, f"{LAYERS}/{name}")
        self._evict_later(victims)
        if held is None:
            return over_budget(self._pools, what)
        return HeldLayers(name, held, fresh_until_s, observed_at)

    def _evict_later(self, victims: list[Held]) -> None:
        """Have the loop drop the objects condemned to make room for a smaller one."""
        for victim in victims:
            self._post(self._store.evict, victim)

    def _fresh_until(self, observed_at: str) -> float:
        """Unix time from which an object observed at ``observed_at`` counts as missing
        (no readable time: at once)."""
        try:
            observed_s = datetime.fromisoformat(observed_at).timestamp()
        except (TypeError, ValueError, OverflowError):
            return 0.0
        return min(observed_s, time.time()) + self.max_age_s


def over_budget(pools: IndexPools, what: str) -> Ignored:
    """An object refused (or dropped) for the budget, and the warning."""
    return Ignored(
        OVER_BUDGET,
        f"{what}: it is over its share of --max-inventory-bytes "
        f"({pools.share_bytes} of {pools.max_bytes} bytes), or the budget "
        "is held by objects no larger than it",
    )


def stale_message(name: str, observed_at: str, max_age_s: float) -> str:
    """The warning for node ``name``'s object observed too long ago."""
    return (
        f"node {name}: its NodeLayerInventory was observed at "
        f"{observed_at or '(never: no observedAt)'}, more than "
        f"{max_age_s:.0f} s ago: scoring the node as if it had no agent"
    )


def object_name(obj: object) -> str:
    """An object's ``metadata.name`` ("" when it has none, or not as a string)."""
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
