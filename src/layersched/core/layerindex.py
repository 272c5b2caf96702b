"""The layer index: which layers and image names each node holds, indexed for scoring.

One type holds it, :class:`LayerIndex` (the Go plugin's ``layers.Index``); the strategies
read it through the read-only :class:`LayerIndexView` protocol. A node's layers come from
three places, in this order of preference:

(a) ``status.images[*].names`` resolved through a :class:`LayerSource` (works on any
    unpatched cluster; the agents' ``NodeLayerInventory`` objects give the same layers
    without a registry);
(b) Ryax-style ``status.images[*].layers`` maps ``{digest: size}`` published by a patched
    kubelet;
(c) Ryax-style CRI annotations ``imageLayer.<digest>: "<size>"`` on the Node.

(b) and (c) are used as-is when present; (a) fills the rest. Images whose layers cannot be
resolved are counted and listed in ``warnings``, not errors (a node may hold images from
registries we cannot reach). The inventory also keeps upstream ImageLocality's "image
states": for every name reported in ``status.images[*].names`` the size first reported for
it and the number of nodes reporting it.

**Two ways to fill it.** Node by node (:meth:`~LayerIndex.add_node`,
:meth:`~LayerIndex.upsert_node`, :meth:`~LayerIndex.remove_node`, and the
layer- and name-level changes the simulator makes): each change costs the node's own size.
Node ids and layer ids then live in sorted 32-bit id arrays, per node and per layer (4
bytes an entry; a Python set spends about 60). Or in bulk
(:class:`~layersched.core.indexbuilder.LayerIndexBuilder`): a
request's, a file's or a simulated cluster's nodes, every distinct ``status.images`` entry
described and resolved once. A bulk-built inventory is *packed*: each distinct entry is
interned once as a slot (names, size, layer ids), the nodes' images are two parallel arrays
``(node, slot)``, and a layer's holders are computed on first use (or for every layer at
once, :meth:`~LayerIndex.index_layers`, for a long-lived one). Its first change
unpacks it into the id arrays, once; both forms answer every query identically
(``tests/unit/test_layer_index.py`` compares them on random clusters). The two forms are
:mod:`layersched.core.indexstorage`; the images a node holds, :mod:`layersched.core.nodeimages`.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from layersched.core.errors import InputError
from layersched.core.indexstorage import (
    EMPTY,
    NO_IDS,
    IndexArray,
    Packed,
    discard_id,
    has_id,
    ids,
    insert_id,
)
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeimages import (
    NodeImage,
    NodeInfo,
    resolve_node_image,
)

log = logging.getLogger(__name__)


class LayerIndexView(Protocol):
    """The read-only view strategies score against (a :class:`LayerIndex`)."""

    @property
    def nodes(self) -> Sequence[NodeInfo]:
        """The nodes by dense index ``0..node_count-1`` (a packed inventory's carry their
        name, labels, annotations and allocatable; their images live in the inventory)."""
        ...

    @property
    def node_count(self) -> int:
        """Number of nodes in the snapshot (upstream's ``totalNumNodes``)."""
        ...

    #: Node images whose layers are unknown (ignored), and why, one line each.
    unresolved_images: int
    warnings: list[str]
    #: Bumped by every change / when node indices change / when node facts may have changed.
    generation: int
    membership: int
    node_facts: int

    def index_of(self, node_name: str) -> int | None: ...

    def indices_of(self, node_names: Sequence[str]) -> tuple[IndexArray, list[str]]: ...

    def layer_size(self, digest: str) -> int | None: ...

    def layer_holders(self, digest: str) -> IndexArray: ...

    def node_holds_layer(self, node: int, digest: str) -> bool: ...

    def node_layer_digests(self, node: int) -> Iterator[str]: ...

    def node_image_names(self, node: int) -> list[str]: ...

    def image_state(self, name: str) -> tuple[int, int] | None: ...

    def image_holders(self, name: str) -> IndexArray: ...


def held_image_names(index: LayerIndexView | None, node: str) -> list[str] | None:
    """The image names ``index`` holds for node ``node`` (None: no index, or no such node):
    what ``/debug/inventory`` shows."""
    idx = index.index_of(node) if index is not None else None
    if index is None or idx is None:
        return None
    return index.node_image_names(idx)


#: A live inventory compacts its layer ids (and rebuilds the maps keyed by layer or
#: name) once this many more entries were freed than are held: its tables then follow
#: what its nodes hold now, not the most they ever held (Python lists and dicts never
#: shrink by themselves). Amortised, each freed entry costs O(1).
COMPACT_SLACK = 4_096


# -------------------------------------------------------------------- the type


class LayerIndex:
    """Layers and image names per node, with inverted indexes for fast scoring.

    Node indices are dense ``0..len(nodes)-1`` in insertion order; removing a node moves
    the last one into its index. See the module docstring for the two ways to fill it.
    """

    def __init__(self) -> None:
        self._nodes: list[NodeInfo] = []
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
        #: Layer ids whose last holder went: reused by the next new layer, so a live
        #: inventory whose nodes keep publishing fresh digests does not grow without bound.
        self._free_lids: list[int] = []
        #: Image names forgotten since the name maps were last rebuilt.
        self._names_freed = 0
        # upstream image states, keyed by name exactly as reported
        self._name_holders: dict[str, set[int]] = {}
        self._name_size: dict[str, int] = {}
        self._name_holders_arr: dict[str, IndexArray] = {}
        # resolution bookkeeping
        self._resolved: dict[str, tuple[Layer, ...] | None] = {}
        #: A bulk-built inventory's images until its first change (see the module docstring).
        self._packed: Packed | None = None
        self.unresolved_images = 0
        self.warnings: list[str] = []
        #: Times the layer tables were compacted (see _compact_layers).
        self.compactions = 0
        #: Bumped by every change (caches keyed on the inventory compare it).
        self.generation = 0
        #: Bumped when node indices change (a node added or removed).
        self.membership = 0
        #: Bumped when nodes' own facts (labels, annotations, allocatable) may have changed.
        self.node_facts = 0

    # ----------------------------------------------------------------- building
    # (in bulk: :func:`layersched.core.indexbuilder.build_layer_index`, which imports this
    # module, and :class:`~layersched.core.indexbuilder.LayerIndexBuilder`)
    @classmethod
    def _of_packed(
        cls,
        nodes: list[NodeInfo],
        node_index: dict[str, int],
        packed: Packed,
        unresolved_images: int,
        warnings: list[str],
    ) -> LayerIndex:
        inventory = cls()
        inventory._nodes = nodes
        inventory._node_index = node_index
        inventory._packed = packed
        inventory.unresolved_images = unresolved_images
        inventory.warnings = warnings
        return inventory

    @property
    def nodes(self) -> Sequence[NodeInfo]:
        """The nodes by index (see :class:`LayerIndexView`)."""
        return self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def node_count(self) -> int:
        """Number of nodes in the snapshot (upstream's ``totalNumNodes``)."""
        return len(self._nodes)

    @property
    def packed(self) -> bool:
        """Whether the inventory is still in its bulk-built form."""
        return self._packed is not None

    @property
    def slot_count(self) -> int:
        """Distinct image entries (packed) or distinct image names (unpacked)."""
        if self._packed is not None:
            return len(self._packed.slot_names)
        return len(self._name_holders)

    @property
    def pair_count(self) -> int:
        """Number of (node, image) entries."""
        if self._packed is not None:
            return len(self._packed.pair_slot)
        return sum(len(node.images) for node in self._nodes)

    def index_layers(self) -> None:
        """Compute every layer's holders now (a long-lived packed inventory answers faster;
        an unpacked one keeps its holders indexed anyway)."""
        if self._packed is not None:
            self._packed.index_layers(len(self._nodes))

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

    # ----------------------------------------------------------------- mutation
    def _unpack(self) -> None:
        """Turn a packed inventory into the id arrays of node-by-node changes, once."""
        packed = self._packed
        if packed is None:
            return
        self._packed = None
        digests = list(packed.layer_id)[: packed.layer_count]
        self._layer_id = {digest: lid for lid, digest in enumerate(digests)}
        self._layer_size = list(packed.layer_size[: packed.layer_count])
        self._layer_digest = digests
        self._layer_holders = [ids() for _ in digests]
        self._node_layers = []
        slot_images: list[NodeImage | None] = [None] * len(packed.slot_names)
        for idx, node in enumerate(self._nodes):
            images: list[NodeImage] = []
            annotation: list[Layer] = []
            for slot in packed.slots_of(idx).tolist():
                image = slot_images[slot]
                if image is None:
                    layers = tuple(
                        Layer(digests[lid], self._layer_size[lid])
                        for lid in packed.slot_layers(slot).tolist()
                    )
                    image = slot_images[slot] = NodeImage(
                        packed.slot_names[slot], packed.slot_size[slot], layers or None
                    )
                if image.names:
                    images.append(image)
                else:  # the pseudo-image of the node's imageLayer annotations
                    annotation.extend(image.layers or ())
            self._nodes[idx] = replace(
                node, images=tuple(images), annotation_layers=tuple(annotation)
            )
            held = packed.node_lids(idx)
            self._node_layers.append(ids(held))
            for lid in held:
                self._layer_holders[lid].append(idx)  # nodes in order: stays sorted
            for image in images:
                for name in image.names:
                    self.add_image_name(idx, name, image.size_bytes)
        self._layer_holders_arr.clear()
        for lid in range(len(digests)):  # layers of a shared slot cache no node here holds
            self._free_if_unheld(lid)
        self._compact_layers()

    def add_node(self, node: NodeInfo, source: LayerSource | None = None) -> int:
        """Add ``node`` (its names, and its layers from (b)/(c) or ``source``)."""
        self._unpack()
        if node.name in self._node_index:
            raise InputError(f"node {node.name!r} is already in the inventory")
        idx = len(self._nodes)
        self._nodes.append(node)
        self._node_index[node.name] = idx
        self._node_layers.append(ids())
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
        self._unpack()
        idx = self._node_index.get(node.name)
        if idx is None:
            return self.add_node(node)
        old = self._nodes[idx]
        new_layers = {
            self._layer(layer)
            for layer in (
                *(layer for image in node.images for layer in image.layers or ()),
                *node.annotation_layers,
            )
        }
        held = set(self._node_layers[idx])
        for lid in held - new_layers:
            discard_id(self._layer_holders[lid], idx)
            self._layer_holders_arr.pop(lid, None)
            self._free_if_unheld(lid)
        for lid in new_layers - held:
            insert_id(self._layer_holders[lid], idx)
            self._layer_holders_arr.pop(lid, None)
        if held != new_layers:
            self._node_layers[idx] = ids(new_layers)
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
        self._nodes[idx] = node
        self.generation += 1
        self._compact_layers()
        return idx

    def remove_node(self, name: str) -> bool:
        """Forget node ``name``; the last node takes its index (indices stay dense).
        False when it was not there."""
        self._unpack()
        idx = self._node_index.pop(name, None)
        if idx is None:
            return False
        for lid in self._node_layers[idx]:
            discard_id(self._layer_holders[lid], idx)
            self._layer_holders_arr.pop(lid, None)
            self._free_if_unheld(lid)
        for image in self._nodes[idx].images:
            for image_name in image.names:
                self.remove_image_name(idx, image_name)
        last = len(self._nodes) - 1
        if idx != last:
            moved = self._nodes[last]
            for lid in self._node_layers[last]:
                holders = self._layer_holders[lid]
                discard_id(holders, last)
                insert_id(holders, idx)
                self._layer_holders_arr.pop(lid, None)
            for image in moved.images:
                for image_name in image.names:
                    holders_of = self._name_holders.get(image_name)
                    if holders_of is not None and last in holders_of:
                        holders_of.discard(last)
                        holders_of.add(idx)
                        self._name_holders_arr.pop(image_name, None)
            self._nodes[idx] = moved
            self._node_layers[idx] = self._node_layers[last]
            self._node_index[moved.name] = idx
        self._nodes.pop()
        self._node_layers.pop()
        self.generation += 1
        self.membership += 1
        self.node_facts += 1
        self._compact_layers()
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

    def _layer(self, layer: Layer) -> int:
        lid = self._layer_id.get(layer.digest)
        if lid is None:
            if self._free_lids:  # an id no node holds any more
                lid = self._free_lids.pop()
                self._layer_size[lid] = layer.size_bytes
                self._layer_digest[lid] = layer.digest
                self._layer_holders[lid] = ids()
            else:
                lid = len(self._layer_size)
                self._layer_size.append(layer.size_bytes)
                self._layer_digest.append(layer.digest)
                self._layer_holders.append(ids())
            self._layer_id[layer.digest] = lid
        return lid

    def _free_if_unheld(self, lid: int) -> None:
        """Forget layer id ``lid`` once no node holds it (its id is reused)."""
        if self._layer_holders[lid] or not self._layer_digest[lid]:
            return
        del self._layer_id[self._layer_digest[lid]]
        self._layer_digest[lid] = ""
        self._layer_size[lid] = 0
        self._layer_holders[lid] = NO_IDS  # a fresh array when the id is reused
        self._layer_holders_arr.pop(lid, None)
        self._free_lids.append(lid)

    def _compact_layers(self) -> None:
        """Once many more layer ids are free than held: move the held layers whose ids
        are past the held count into the free ids below it, and cut the tables to that
        count (their dict rebuilt: a dict never shrinks). Every other id stays, so only
        the nodes holding a moved layer get a new id array: after a flood of fresh layers
        is dropped, the layers the cluster held before it keep their ids and no node's
        array is reallocated (5,000 small arrays made amid the flood's freed memory would
        pin its pages: glibc returns only whole free pages). Called at the end of a
        change, never amid one."""
        if len(self._free_lids) <= len(self._layer_id) + COMPACT_SLACK:
            return
        count = len(self._layer_id)
        digests, sizes, holders = self._layer_digest, self._layer_size, self._layer_holders
        free = sorted(lid for lid in self._free_lids if lid < count)
        moved = [lid for lid in range(count, len(digests)) if digests[lid]]
        mapping = dict(zip(moved, free, strict=True))
        touched: set[int] = set()
        for old, new in mapping.items():
            digests[new], sizes[new], holders[new] = digests[old], sizes[old], holders[old]
            touched.update(holders[new])
        for node in touched:
            self._node_layers[node] = ids(mapping.get(lid, lid) for lid in self._node_layers[node])
        self._layer_digest, self._layer_size = digests[:count], sizes[:count]
        self._layer_holders = holders[:count]
        self._layer_id = {digest: lid for lid, digest in enumerate(self._layer_digest)}
        self._layer_holders_arr = {}
        self._free_lids = []
        self.compactions += 1

    @property
    def layer_count(self) -> int:
        """Distinct layers the inventory knows (unpacked: exactly those some node holds)."""
        if self._packed is not None:
            return self._packed.layer_count
        return len(self._layer_id)

    def add_layers(self, node: int, layers: Iterable[Layer]) -> None:
        """Record that node index ``node`` holds ``layers``."""
        self._unpack()
        held = self._node_layers[node]
        new = {self._layer(layer) for layer in layers}.difference(held)
        if not new:
            return
        # one sorted rebuild, not an insertion per layer (a node holds hundreds)
        self._node_layers[node] = ids((*held, *new))
        for lid in new:
            insert_id(self._layer_holders[lid], node)
            self._layer_holders_arr.pop(lid, None)

    def remove_layers(self, node: int, digests: Iterable[str]) -> None:
        """Forget that node index ``node`` holds the layers ``digests`` (eviction)."""
        self._unpack()
        held = self._node_layers[node]
        for digest in digests:
            lid = self._layer_id.get(digest)
            if lid is not None and discard_id(held, lid):
                discard_id(self._layer_holders[lid], node)
                self._free_if_unheld(lid)
                self._layer_holders_arr.pop(lid, None)
        self._compact_layers()

    def add_image_name(self, node: int, name: str, size_bytes: int) -> None:
        """Record an image state name on a node (upstream keeps the first size seen)."""
        self._unpack()
        holders = self._name_holders.get(name)
        if holders is None:
            holders = self._name_holders[name] = set()
            self._name_size[name] = size_bytes
        if node not in holders:
            holders.add(node)
            self._name_holders_arr.pop(name, None)

    def remove_image_name(self, node: int, name: str) -> None:
        """Forget an image name on a node; the state disappears with its last holder."""
        self._unpack()
        holders = self._name_holders.get(name)
        if holders is not None and node in holders:
            holders.discard(node)
            self._name_holders_arr.pop(name, None)
            if not holders:
                del self._name_holders[name]
                del self._name_size[name]
                self._names_freed += 1
                if self._names_freed > len(self._name_holders) + COMPACT_SLACK:
                    self._name_holders = dict(self._name_holders)
                    self._name_size = dict(self._name_size)
                    self._name_holders_arr = dict(self._name_holders_arr)
                    self._names_freed = 0

    # ---------------------------------------------------------------- queries
    def layer_size(self, digest: str) -> int | None:
        """Known compressed size of a layer, if any node holds it."""
        packed = self._packed
        if packed is not None:
            lid = packed.lid(digest)
            return None if lid is None else packed.layer_size[lid]
        lid = self._layer_id.get(digest)
        return None if lid is None else self._layer_size[lid]

    def layer_holders(self, digest: str) -> IndexArray:
        """Sorted node indices holding layer ``digest`` (empty if none)."""
        if self._packed is not None:
            return self._packed.layer_holders(digest)
        lid = self._layer_id.get(digest)
        if lid is None:
            return EMPTY
        arr = self._layer_holders_arr.get(lid)
        if arr is None:
            # already sorted: one copy in C (a live inventory rebuilds these after every
            # change to a holder)
            arr = np.array(self._layer_holders[lid], dtype=np.int64)
            self._layer_holders_arr[lid] = arr
        return arr

    def node_holds_layer(self, node: int, digest: str) -> bool:
        """Whether node index ``node`` holds layer ``digest``."""
        if self._packed is not None:
            holders = self._packed.layer_holders(digest)
            pos = int(np.searchsorted(holders, node))
            return pos < len(holders) and int(holders[pos]) == node
        lid = self._layer_id.get(digest)
        return lid is not None and has_id(self._node_layers[node], lid)

    def node_layer_digests(self, node: int) -> Iterator[str]:
        """Digests of the layers node index ``node`` holds (unordered)."""
        packed = self._packed
        if packed is not None:
            digests = list(packed.layer_id)
            return (digests[lid] for lid in packed.node_lids(node))
        return (self._layer_digest[lid] for lid in self._node_layers[node])

    def node_image_names(self, node: int) -> list[str]:
        """The image names node index ``node`` reports, sorted."""
        packed = self._packed
        if packed is not None:
            slots = packed.slots_of(node).tolist()
            return sorted({name for slot in slots for name in packed.slot_names[slot]})
        return sorted({name for image in self._nodes[node].images for name in image.names})

    def image_state(self, name: str) -> tuple[int, int] | None:
        """Upstream's ImageStateSummary for ``name``: (size in bytes, number of nodes)."""
        if self._packed is not None:
            state = self._packed.name_state(name)
            return None if state is None else (state[0], len(state[1]))
        holders = self._name_holders.get(name)
        if not holders:
            return None
        return self._name_size[name], len(holders)

    def image_holders(self, name: str) -> IndexArray:
        """Sorted node indices reporting image name ``name``."""
        if self._packed is not None:
            state = self._packed.name_state(name)
            return EMPTY if state is None else state[1]
        arr = self._name_holders_arr.get(name)
        if arr is None:
            arr = np.fromiter(sorted(self._name_holders.get(name, ())), dtype=np.int64)
            self._name_holders_arr[name] = arr
        return arr
