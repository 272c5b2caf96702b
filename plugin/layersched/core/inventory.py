"""Node layer inventory: which layers (and which image names) each node holds.

A node's layers come from three places, in this order of preference:

(a) ``status.images[*].names`` resolved through a :class:`LayerSource`
    (works on any unpatched cluster);
(b) Ryax-style ``status.images[*].layers`` maps ``{digest: size}`` published by a
    patched kubelet;
(c) Ryax-style CRI annotations ``imageLayer.<digest>: "<size>"``, carried on the
    Node's ``metadata.annotations`` by a node agent.

(b) and (c) are used as-is when present; (a) fills the rest. Images whose
layers cannot be resolved are skipped with a warning and counted; they are not
errors (a node may hold images from registries we cannot reach).

The inventory also keeps upstream ImageLocality's "image states": for every
name reported in ``status.images[*].names`` the size first reported for it and
the number of nodes reporting it.

Holder sets are kept as Python sets (cheap to mutate for the simulator) and
turned into numpy index arrays lazily for vectorised scoring.
"""

from __future__ import annotations

import logging
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layers import (
    Layer,
    LayerSource,
    check_digest,
    check_size,
)

log = logging.getLogger(__name__)

#: Prefix of the per-layer annotations the Ryax-patched CRI-O sets (CONTEXT §4).
LAYER_ANNOTATION_PREFIX = "imageLayer."

IndexArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class NodeImage:
    """One entry of ``Node.status.images``."""

    names: tuple[str, ...]
    size_bytes: int
    #: Ryax-patched kubelet ``layers`` map, when published (source b).
    layers: tuple[Layer, ...] | None = None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the scheduler knows of a node."""

    name: str
    images: tuple[NodeImage, ...] = ()
    #: Layers from ``imageLayer.<digest>`` annotations (source c).
    annotation_layers: tuple[Layer, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


def _layers_map(value: Any, where: str) -> tuple[Layer, ...]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a map of layer digest -> size in bytes")
    return tuple(
        Layer(check_digest(d, f"{where} key"), check_size(s, f"{where}[{d!r}]"))
        for d, s in value.items()
    )


def _annotation_layer(key: str, value: str, where: str) -> Layer:
    digest = check_digest(key[len(LAYER_ANNOTATION_PREFIX) :], f"{where}[{key!r}]")
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise InputError(
            f"{where}[{key!r}]: value {value!r} must be the layer size in decimal bytes"
        ) from None
    return Layer(digest, check_size(size, f"{where}[{key!r}]"))


def annotation_layers(
    annotations: Mapping[str, str], where: str, problems: list[str] | None = None
) -> tuple[Layer, ...]:
    """Layers carried as ``imageLayer.<digest>: "<decimal size>"`` annotations.

    A malformed one is an InputError, unless ``problems`` is given: then it is
    skipped and described there.
    """
    layers = []
    for key, value in annotations.items():
        if not key.startswith(LAYER_ANNOTATION_PREFIX):
            continue
        try:
            layers.append(_annotation_layer(key, value, where))
        except InputError as err:
            if problems is None:
                raise
            problems.append(f"ignoring annotation {key!r}: {err}")
    return tuple(layers)


#: How a node image is resolved from all its names at once (see :func:`names_resolver`).
NamesResolver = Callable[[Sequence[str]], tuple[Layer, ...]]


def names_resolver(source: LayerSource) -> NamesResolver:
    """How ``source`` resolves a node image from its names: its own ``resolve_names``
    (a :class:`~layersched.core.layers.NodeImageSource`), else each name in turn.

    Ask once per source, not per image: ``isinstance`` against a runtime-checkable
    Protocol costs microseconds, a full-``Nodes`` request has thousands of images.
    """
    own: NamesResolver | None = getattr(source, "resolve_names", None)
    if own is not None:
        return own
    resolve = source.resolve

    def each_name(names: Sequence[str]) -> tuple[Layer, ...]:
        reason = "it has no name to resolve"
        for name in names:
            try:
                return resolve(name)
            except LayerResolutionError as err:
                reason = str(err)
        raise LayerResolutionError(reason)

    return each_name


def resolve_node_image(
    image: NodeImage, source: LayerSource | None, resolver: NamesResolver | None = None
) -> tuple[tuple[Layer, ...] | None, str | None]:
    """Source (a): the layers of the first of ``image.names`` that ``source`` resolves.

    Returns ``(layers, None)``, or ``(None, warning)`` saying why the image is
    ignored (the last name's reason). Without a source (a strategy that needs no
    layers, such as image-locality) nothing is resolved and nothing is reported:
    ``(None, None)``. ``resolver`` is ``names_resolver(source)``, when the caller
    resolves many images through one source.
    """
    if source is None:
        return None, None
    try:
        return (resolver or names_resolver(source))(image.names), None
    except LayerResolutionError as err:
        reason = str(err)
    key = image.names[0] if image.names else ""
    return None, f"ignoring node image {key!r}: its layers are unknown ({reason})"


def node_from_json(document: Any, origin: str) -> NodeInfo:
    """Parse one v1 Node object (``kubectl get node -o json``)."""
    if not isinstance(document, dict):
        raise InputError(f"{origin}: expected a v1 Node object")
    meta = document.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise InputError(f"{origin}: metadata.name is missing: every Node needs a name")
    name: str = meta["name"]
    where = f"{origin}: node {name!r}"
    status = document.get("status") or {}
    if not isinstance(status, dict):
        raise InputError(f"{where}: status must be an object")
    raw_images = status.get("images") or []
    if not isinstance(raw_images, list):
        raise InputError(f"{where}: status.images must be a list")
    images = []
    for i, raw in enumerate(raw_images):
        iw = f"{where}: status.images[{i}]"
        if not isinstance(raw, dict):
            raise InputError(f"{iw}: expected an object with names and sizeBytes")
        names = raw.get("names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InputError(f"{iw}.names must be a list of strings")
        size = check_size(raw.get("sizeBytes", 0), f"{iw}.sizeBytes")
        layers = _layers_map(raw["layers"], f"{iw}.layers") if raw.get("layers") else None
        # names repeat on every node holding the image: one string each
        images.append(NodeImage(tuple(sys.intern(n) for n in names), size, layers))
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    allocatable = status.get("allocatable") or {}
    for key, value in (("annotations", annotations), ("labels", labels)):
        if not isinstance(value, dict):
            raise InputError(f"{where}: metadata.{key} must be a map of strings")
    if not isinstance(allocatable, dict):
        raise InputError(f"{where}: status.allocatable must be a map of quantities")
    return NodeInfo(
        name=name,
        images=tuple(images),
        annotation_layers=annotation_layers(annotations, f"{where}: metadata.annotations"),
        labels={str(k): str(v) for k, v in labels.items()},
        annotations={str(k): str(v) for k, v in annotations.items()},
        allocatable={str(k): str(v) for k, v in allocatable.items()},
    )


#: What ``kubectl get nodes -o json`` prints (``List``) or the API returns (``NodeList``).
NODE_LIST_KINDS = (None, "NodeList", "List")
NODE_KIND = "Node"


def check_node_list_kind(kind: object, origin: str) -> None:
    """A node file's top-level ``kind`` must be absent, ``NodeList`` or ``List``."""
    if kind not in NODE_LIST_KINDS:
        raise InputError(
            f"{origin}: kind is {kind!r}, expected 'NodeList': "
            "write it with 'kubectl get nodes -o json'"
        )


def check_node_kind(kind: object, where: str) -> None:
    """A node list item's ``kind``, when present, must be ``Node``."""
    if kind is not None and kind != NODE_KIND:
        raise InputError(
            f"{where}: kind is {kind!r}, expected 'Node': a node list holds Nodes only "
            "(write it with 'kubectl get nodes -o json')"
        )


def nodes_from_json(document: Any, origin: str) -> list[NodeInfo]:
    """Parse a v1 NodeList (``kubectl get nodes -o json``); a bare list is accepted too."""
    if isinstance(document, dict):
        check_node_list_kind(document.get("kind"), origin)
        items = document.get("items")
    else:
        items = document
    if not isinstance(items, list):
        raise InputError(f"{origin}: expected a v1 NodeList with an 'items' list")
    for i, item in enumerate(items):
        if isinstance(item, dict):
            check_node_kind(item.get("kind"), f"{origin}: items[{i}]")
    nodes = [node_from_json(item, f"{origin}: items[{i}]") for i, item in enumerate(items)]
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise InputError(f"{origin}: node {node.name!r} appears twice: names must be unique")
        seen.add(node.name)
    return nodes


#: Node and layer ids in the inventory's two-way maps: 32-bit, 4 bytes an entry (a Python
#: set spends about 60 bytes an entry; at 5,000 nodes the maps held 108 MB as sets).
_ID_TYPECODE = "i"


def _ids(values: Iterable[int] = ()) -> array[int]:
    """A sorted, duplicate-free array of ids."""
    return array(_ID_TYPECODE, sorted(set(values)))


def _has(ids: array[int], value: int) -> bool:
    at = bisect_left(ids, value)
    return at < len(ids) and ids[at] == value


def _insert(ids: array[int], value: int) -> bool:
    """Insert ``value`` in order; False if it was there."""
    if not ids or ids[-1] < value:  # a node being added has the highest index
        ids.append(value)
        return True
    at = bisect_left(ids, value)
    if at < len(ids) and ids[at] == value:
        return False
    ids.insert(at, value)
    return True


def _discard(ids: array[int], value: int) -> bool:
    """Remove ``value``; False if it was not there."""
    at = bisect_left(ids, value)
    if at < len(ids) and ids[at] == value:
        del ids[at]
        return True
    return False


class ClusterInventory:
    """Layers and image names per node, with inverted indexes for fast scoring.

    Node indices are dense ``0..len(nodes)-1`` in insertion order. Layer and
    image-name holder sets map to node indices.
    """

    def __init__(self) -> None:
        self.nodes: list[NodeInfo] = []
        self._node_index: dict[str, int] = {}
        # layers
        self._layer_id: dict[str, int] = {}
        self._layer_size: list[int] = []
        self._layer_digest: list[str] = []
        #: layer id -> the node indices holding it; node index -> its layer ids (both
        #: sorted id arrays, see _ids)
        self._layer_holders: list[array[int]] = []
        self._layer_holders_arr: dict[int, IndexArray] = {}
        self._node_layers: list[array[int]] = []
        # upstream image states, keyed by name exactly as reported
        self._name_holders: dict[str, set[int]] = {}
        self._name_size: dict[str, int] = {}
        self._name_holders_arr: dict[str, IndexArray] = {}
        # resolution bookkeeping
        self._resolved: dict[str, tuple[Layer, ...] | None] = {}
        self.unresolved_images = 0
        self.warnings: list[str] = []
        #: Bumped by every change (caches keyed on the inventory compare it).
        self.generation = 0
        #: Bumped when node indices change (a node added or removed).
        self.membership = 0
        #: Bumped when nodes' own facts (labels, annotations, allocatable) may have changed.
        self.node_facts = 0

    # ----------------------------------------------------------------- building
    @classmethod
    def build(
        cls, nodes: Iterable[NodeInfo], source: LayerSource | None = None
    ) -> ClusterInventory:
        """An inventory of ``nodes``; ``source`` resolves images lacking layer data.

        Without a source such images only contribute their names (all that
        image-locality reads) and are neither counted nor warned about.
        """
        inventory = cls()
        for node in nodes:
            inventory.add_node(node, source)
        return inventory

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def node_count(self) -> int:
        """Number of nodes in the snapshot (upstream's ``totalNumNodes``)."""
        return len(self.nodes)

    def index_of(self, node_name: str) -> int | None:
        """The dense index of ``node_name``, or None if unknown."""
        return self._node_index.get(node_name)

    def indices_of(self, node_names: Sequence[str]) -> tuple[IndexArray, list[str]]:
        """Indices of the known names, in order, and the names that are unknown."""
        get = self._node_index.get
        found = [get(n, -1) for n in node_names]
        arr = np.fromiter(found, dtype=np.int64, count=len(found))
        missing = [n for n, i in zip(node_names, found, strict=True) if i < 0]
        return arr[arr >= 0] if missing else arr, missing

    def add_node(self, node: NodeInfo, source: LayerSource | None = None) -> int:
        """Add ``node`` (its names, and its layers from (b)/(c) or ``source``)."""
        if node.name in self._node_index:
            raise InputError(f"node {node.name!r} is already in the inventory")
        idx = len(self.nodes)
        self.nodes.append(node)
        self._node_index[node.name] = idx
        self._node_layers.append(_ids())
        self.generation += 1
        self.membership += 1
        self.node_facts += 1
        held: list[Layer] = []
        for image in node.images:
            for name in image.names:
                self.add_image_name(idx, name, image.size_bytes)
            layers = image.layers if image.layers is not None else self._resolve(image, source)
            if layers is not None:
                held.extend(layers)
        held.extend(node.annotation_layers)
        if held:
            self.add_layers(idx, held)
        return idx

    def upsert_node(self, node: NodeInfo) -> int:
        """Add ``node``, or bring the node of that name up to date, changing only what
        differs (its layers and names; images without layers contribute names only).

        This is the live inventory's update: the cost is the node's own size, never the
        cluster's, and no other node's index moves.
        """
        idx = self._node_index.get(node.name)
        if idx is None:
            return self.add_node(node)
        old = self.nodes[idx]
        new_layers = {
            self._layer(layer)
            for layer in (
                *(layer for image in node.images for layer in image.layers or ()),
                *node.annotation_layers,
            )
        }
        held = set(self._node_layers[idx])
        for lid in held - new_layers:
            _discard(self._layer_holders[lid], idx)
            self._layer_holders_arr.pop(lid, None)
        for lid in new_layers - held:
            _insert(self._layer_holders[lid], idx)
            self._layer_holders_arr.pop(lid, None)
        if held != new_layers:
            self._node_layers[idx] = _ids(new_layers)
        old_names = {name for image in old.images for name in image.names}
        new_sizes = {name: image.size_bytes for image in node.images for name in image.names}
        for name in old_names - new_sizes.keys():
            self.remove_image_name(idx, name)
        for name in new_sizes.keys() - old_names:
            self.add_image_name(idx, name, new_sizes[name])
        if (old.labels, old.annotations, old.allocatable) != (
            node.labels,
            node.annotations,
            node.allocatable,
        ):
            self.node_facts += 1
        self.nodes[idx] = node
        self.generation += 1
        return idx

    def remove_node(self, name: str) -> bool:
        """Forget node ``name``; the last node takes its index (indices stay dense).
        False when it was not there."""
        idx = self._node_index.pop(name, None)
        if idx is None:
            return False
        for lid in self._node_layers[idx]:
            _discard(self._layer_holders[lid], idx)
            self._layer_holders_arr.pop(lid, None)
        for image in self.nodes[idx].images:
            for image_name in image.names:
                self.remove_image_name(idx, image_name)
        last = len(self.nodes) - 1
        if idx != last:
            moved = self.nodes[last]
            for lid in self._node_layers[last]:
                holders = self._layer_holders[lid]
                _discard(holders, last)
                _insert(holders, idx)
                self._layer_holders_arr.pop(lid, None)
            for image in moved.images:
                for image_name in image.names:
                    holders_of = self._name_holders.get(image_name)
                    if holders_of is not None and last in holders_of:
                        holders_of.discard(last)
                        holders_of.add(idx)
                        self._name_holders_arr.pop(image_name, None)
            self.nodes[idx] = moved
            self._node_layers[idx] = self._node_layers[last]
            self._node_index[moved.name] = idx
        self.nodes.pop()
        self._node_layers.pop()
        self.generation += 1
        self.membership += 1
        self.node_facts += 1
        return True

    def _resolve(self, image: NodeImage, source: LayerSource | None) -> tuple[Layer, ...] | None:
        if not image.names:
            return None
        key = image.names[0]
        if key in self._resolved:
            return self._resolved[key]
        layers, message = resolve_node_image(image, source)
        if message is not None:
            self.unresolved_images += 1
            self.warnings.append(message)
            log.warning(message)
        self._resolved[key] = layers
        return layers

    # --------------------------------------------------------------- mutation
    def _layer(self, layer: Layer) -> int:
        lid = self._layer_id.get(layer.digest)
        if lid is None:
            lid = len(self._layer_size)
            self._layer_id[layer.digest] = lid
            self._layer_size.append(layer.size_bytes)
            self._layer_digest.append(layer.digest)
            self._layer_holders.append(_ids())
        return lid

    def add_layers(self, node: int, layers: Iterable[Layer]) -> None:
        """Record that node index ``node`` holds ``layers``."""
        held = self._node_layers[node]
        new = {self._layer(layer) for layer in layers}.difference(held)
        if not new:
            return
        # one sorted rebuild, not an insertion per layer (a node holds hundreds)
        self._node_layers[node] = _ids((*held, *new))
        for lid in new:
            _insert(self._layer_holders[lid], node)
            self._layer_holders_arr.pop(lid, None)

    def remove_layers(self, node: int, digests: Iterable[str]) -> None:
        """Forget that node index ``node`` holds the layers ``digests`` (eviction)."""
        held = self._node_layers[node]
        for digest in digests:
            lid = self._layer_id.get(digest)
            if lid is not None and _discard(held, lid):
                _discard(self._layer_holders[lid], node)
                self._layer_holders_arr.pop(lid, None)

    def add_image_name(self, node: int, name: str, size_bytes: int) -> None:
        """Record an image state name on a node (upstream keeps the first size seen)."""
        holders = self._name_holders.get(name)
        if holders is None:
            holders = self._name_holders[name] = set()
            self._name_size[name] = size_bytes
        if node not in holders:
            holders.add(node)
            self._name_holders_arr.pop(name, None)

    def remove_image_name(self, node: int, name: str) -> None:
        """Forget an image name on a node; the state disappears with its last holder."""
        holders = self._name_holders.get(name)
        if holders is not None and node in holders:
            holders.discard(node)
            self._name_holders_arr.pop(name, None)
            if not holders:
                del self._name_holders[name]
                del self._name_size[name]

    # ---------------------------------------------------------------- queries
    def layer_size(self, digest: str) -> int | None:
        """Known compressed size of a layer, if any node holds or held it."""
        lid = self._layer_id.get(digest)
        return None if lid is None else self._layer_size[lid]

    def layer_holders(self, digest: str) -> IndexArray:
        """Sorted node indices holding layer ``digest`` (empty if none)."""
        lid = self._layer_id.get(digest)
        if lid is None:
            return np.empty(0, dtype=np.int64)
        arr = self._layer_holders_arr.get(lid)
        if arr is None:
            # already sorted: one copy in C (a live inventory rebuilds these after every
            # change to a holder)
            arr = np.array(self._layer_holders[lid], dtype=np.int64)
            self._layer_holders_arr[lid] = arr
        return arr

    def node_holds_layer(self, node: int, digest: str) -> bool:
        """Whether node index ``node`` holds layer ``digest``."""
        lid = self._layer_id.get(digest)
        return lid is not None and _has(self._node_layers[node], lid)

    def node_layer_digests(self, node: int) -> Iterator[str]:
        """Digests of the layers node index ``node`` holds (unordered)."""
        return (self._layer_digest[lid] for lid in self._node_layers[node])

    def image_state(self, name: str) -> tuple[int, int] | None:
        """Upstream's ImageStateSummary for ``name``: (size in bytes, number of nodes)."""
        holders = self._name_holders.get(name)
        if not holders:
            return None
        return self._name_size[name], len(holders)

    def image_holders(self, name: str) -> IndexArray:
        """Sorted node indices reporting image name ``name``."""
        arr = self._name_holders_arr.get(name)
        if arr is None:
            arr = np.fromiter(sorted(self._name_holders.get(name, ())), dtype=np.int64)
            self._name_holders_arr[name] = arr
        return arr
