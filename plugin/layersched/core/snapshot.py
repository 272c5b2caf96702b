"""A compact, read-only node inventory built in bulk: the extender's hot path.

:class:`~layersched.core.inventory.ClusterInventory` keeps a Python set per node
and per layer so the simulator can mutate it; at 5,000 nodes × 50 images that
costs ~400 MB and seconds to build, and a full-``Nodes`` extender request would
rebuild it every time. :class:`NodeSnapshot` answers the same queries with the
same results (the unit tests compare both on random clusters) from a few arrays:

* every distinct ``status.images`` entry is interned once as a *slot* holding
  its names, size and layer ids; the same entry on 3,000 nodes is one slot;
* the nodes' images are two parallel arrays ``(node, slot)``, sorted by node;
* a layer's holders are the nodes of the pairs whose slot contains the layer:
  computed on first use, or for every layer at once by :meth:`index_layers`
  (worth it for a long-lived snapshot).

Node images are resolved as ``ClusterInventory`` resolves them: a published
``layers`` map (b) as-is, else each name in turn through the layer source (a),
memoised by the first name; ``imageLayer.<digest>`` annotations (c) count as one
more nameless image of the node. Unresolvable images are counted and listed in
``warnings`` but, unlike ``ClusterInventory``, not logged one by one: a server
building a snapshot per request decides itself what is worth a log line.
A builder made with ``skip_invalid`` also survives an image its ``describe``
refuses: the image counts as held by nobody and :meth:`SnapshotBuilder.invalid_images`
says which node listed it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError
from layersched.core.inventory import (
    ClusterInventory,
    IndexArray,
    NodeImage,
    NodeInfo,
    names_resolver,
    resolve_node_image,
)
from layersched.core.layers import Layer, LayerSource

_Int32Array = npt.NDArray[np.int32]
#: Key of the pseudo-image that carries a node's ``imageLayer.<digest>`` annotations.
_ANNOTATIONS_KEY = "imageLayer annotations"
_EMPTY = np.empty(0, dtype=np.int64)


def _same_image(key: Any) -> NodeImage:
    image: NodeImage = key
    return image


class SlotCache:
    """Image entries already described and resolved, shared by successive snapshots.

    A server building a snapshot per request sees the same few thousand
    ``status.images`` entries every time; with this cache only new ones are
    described and resolved. Layer ids become shared too, so a snapshot's
    :meth:`NodeSnapshot.layer_size` is the size first seen by the cache.
    Unresolved entries are kept only with ``keep_unresolved`` (an offline source,
    whose answer cannot change; a registry may answer next time), together with
    their warning, which every snapshot using them still counts and lists.
    One cache serves builders of one layer source (its answers are what is
    cached). Call :meth:`reset` to forget everything (e.g. when tags may have
    moved); entries beyond ``max_entries`` reset it too.
    """

    def __init__(self, max_entries: int, *, keep_unresolved: bool = False) -> None:
        self.max_entries = max_entries
        self.keep_unresolved = keep_unresolved
        #: key -> (names, size in bytes, layer ids, the warning if unresolved)
        self.entries: dict[Hashable, tuple[tuple[str, ...], int, list[int], str | None]] = {}
        self.layer_id: dict[str, int] = {}
        self.layer_size: list[int] = []

    def reset(self) -> None:
        """Forget every entry (snapshots already built keep their own references)."""
        self.entries = {}
        self.layer_id = {}
        self.layer_size = []

    def trim(self) -> None:
        """Reset if the cache has outgrown ``max_entries``."""
        if len(self.entries) > self.max_entries:
            self.reset()

    def __len__(self) -> int:
        return len(self.entries)


class SnapshotBuilder:
    """Collects nodes, then :meth:`build` returns the :class:`NodeSnapshot`.

    ``add_node`` takes each node's images as hashable *keys* plus a ``describe``
    function turning a key seen for the first time into a :class:`NodeImage`:
    a caller decoding wire objects can intern them without converting the
    25,000 entries of a request, only the few thousand distinct ones. With
    ``skip_invalid``, a key ``describe`` refuses (InputError) is held by nobody
    instead of failing the build, and :meth:`invalid_images` names it per node.
    """

    def __init__(
        self,
        source: LayerSource | None = None,
        cache: SlotCache | None = None,
        *,
        skip_invalid: bool = False,
    ) -> None:
        self._source = source
        self._names_resolver = names_resolver(source) if source is not None else None
        self._skip_invalid = skip_invalid
        #: slot -> why ``describe`` refused its key
        self._invalid: dict[int, str] = {}
        self._nodes: list[NodeInfo] = []
        self._node_index: dict[str, int] = {}
        self._pair_slot: list[int] = []
        self._pairs_per_node: list[int] = []
        self._pairs_start: list[int] = []
        self._slot_of: dict[Hashable, int] = {}
        self._slot_names: list[tuple[str, ...]] = []
        self._slot_size: list[int] = []
        self._slot_lids: list[list[int]] = []
        if cache is not None:
            cache.trim()
        self._cache = cache
        self._layer_id: dict[str, int] = {} if cache is None else cache.layer_id
        self._layer_size: list[int] = [] if cache is None else cache.layer_size
        self._resolved: dict[str, tuple[Layer, ...] | None] = {}
        self._resolved_warning: dict[str, str] = {}
        self._unresolved = 0
        self._warnings: list[str] = []

    def add_node(
        self,
        name: str,
        images: Iterable[Hashable] = (),
        *,
        describe: Callable[[Any], NodeImage] = _same_image,
        annotation_layers: tuple[Layer, ...] = (),
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> int:
        """Add a node holding ``images`` (keys; ``describe`` makes a NodeImage of one)."""
        if name in self._node_index:
            raise InputError(f"node {name!r} appears twice: node names must be unique")
        idx = len(self._nodes)
        self._node_index[name] = idx
        self._nodes.append(NodeInfo(name, labels=labels or {}, annotations=annotations or {}))
        get = self._slot_of.get
        count = len(self._pair_slot)
        append = self._pair_slot.append
        for key in images:
            slot = get(key)
            append(self._new_slot(key, describe) if slot is None else slot)
        if annotation_layers:
            key = (_ANNOTATIONS_KEY, annotation_layers)
            slot = get(key)
            if slot is None:
                slot = self._new_slot(key, lambda _: NodeImage((), 0, annotation_layers))
            append(slot)
        self._pairs_start.append(count)
        self._pairs_per_node.append(len(self._pair_slot) - count)
        return idx

    def add_node_info(self, node: NodeInfo) -> int:
        """Add a parsed :class:`NodeInfo` (its images are hashable keys already)."""
        return self.add_node(
            node.name,
            node.images,
            annotation_layers=node.annotation_layers,
            labels=node.labels,
            annotations=node.annotations,
        )

    @property
    def has_invalid(self) -> bool:
        """Whether ``describe`` refused any key so far (see :meth:`invalid_images`)."""
        return bool(self._invalid)

    def invalid_images(self, node: int) -> list[str]:
        """Why each image of node index ``node`` that ``describe`` refused was skipped."""
        if not self._invalid:
            return []
        start = self._pairs_start[node]
        slots = self._pair_slot[start : start + self._pairs_per_node[node]]
        return [self._invalid[slot] for slot in dict.fromkeys(slots) if slot in self._invalid]

    def _new_slot(self, key: Hashable, describe: Callable[[Any], NodeImage]) -> int:
        entry = self._cache.entries.get(key) if self._cache is not None else None
        if entry is not None and entry[3] is not None:
            self._note_unresolved(entry[0][0], None, entry[3])
        if entry is None:
            try:
                image = describe(key)
            except InputError as err:
                if not self._skip_invalid:
                    raise
                # never cached: the next snapshot names the nodes listing it again
                self._invalid[len(self._slot_names)] = str(err)
                image = NodeImage((), 0)
            layers = image.layers if image.layers is not None else self._resolve(image)
            lids: dict[int, None] = {}
            for layer in layers or ():
                lid = self._layer_id.get(layer.digest)
                if lid is None:
                    lid = self._layer_id[layer.digest] = len(self._layer_size)
                    self._layer_size.append(layer.size_bytes)
                lids[lid] = None
            unresolved = layers is None and bool(image.names) and self._source is not None
            warning = self._resolved_warning.get(image.names[0]) if unresolved else None
            entry = (image.names, image.size_bytes, list(lids), warning)
            # an unresolved image is remembered only from an offline source: a registry
            # may answer next time
            if (
                self._cache is not None
                and (not unresolved or self._cache.keep_unresolved)
                and len(self._slot_names) not in self._invalid
            ):
                self._cache.entries[key] = entry
        slot = len(self._slot_names)
        self._slot_of[key] = slot
        self._slot_names.append(entry[0])
        self._slot_size.append(entry[1])
        self._slot_lids.append(entry[2])
        return slot

    def _resolve(self, image: NodeImage) -> tuple[Layer, ...] | None:
        if not image.names:
            return None
        key = image.names[0]
        if key in self._resolved:
            return self._resolved[key]
        layers, message = resolve_node_image(image, self._source, self._names_resolver)
        self._note_unresolved(key, layers, message)
        return layers

    def _note_unresolved(
        self, key: str, layers: tuple[Layer, ...] | None, message: str | None
    ) -> None:
        """Memoise the answer for first name ``key``; count and list it if unresolved."""
        if key in self._resolved:
            return
        self._resolved[key] = layers
        if message is not None:
            self._unresolved += 1
            self._warnings.append(message)
            self._resolved_warning[key] = message

    def build(self) -> NodeSnapshot:
        """The snapshot of every node added so far."""
        node_count = len(self._nodes)
        pair_node = np.repeat(
            np.arange(node_count, dtype=np.int32),
            np.asarray(self._pairs_per_node, dtype=np.int64),
        )
        pair_slot = np.asarray(self._pair_slot, dtype=np.int32)
        slot_len = np.fromiter(
            (len(lids) for lids in self._slot_lids), dtype=np.int64, count=len(self._slot_lids)
        )
        slot_offsets = np.zeros(len(slot_len) + 1, dtype=np.int64)
        np.cumsum(slot_len, out=slot_offsets[1:])
        slot_lids = np.fromiter(
            (lid for lids in self._slot_lids for lid in lids),
            dtype=np.int32,
            count=int(slot_offsets[-1]),
        )
        return NodeSnapshot(
            nodes=self._nodes,
            node_index=self._node_index,
            pair_node=pair_node,
            pair_slot=pair_slot,
            slot_names=self._slot_names,
            slot_size=self._slot_size,
            slot_lids=slot_lids,
            slot_offsets=slot_offsets,
            layer_id=self._layer_id,
            layer_size=self._layer_size,
            unresolved_images=self._unresolved,
            warnings=self._warnings,
        )


def _csr(keys: _Int32Array, values: _Int32Array, key_count: int) -> tuple[IndexArray, IndexArray]:
    """Group ``values`` by ``keys``: (offsets of length key_count + 1, values sorted by key)."""
    order = np.argsort(keys, kind="stable")
    offsets = np.zeros(key_count + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=key_count), out=offsets[1:])
    return offsets, values[order].astype(np.int64)


def _dedupe_sorted(values: IndexArray) -> IndexArray:
    """Drop consecutive repeats of a sorted array."""
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


class NodeSnapshot(ClusterInventory):
    """A read-only :class:`ClusterInventory` answering the strategies' queries from arrays.

    It *is* a ClusterInventory so every strategy takes it unchanged, but the
    mutation methods raise: build a new snapshot instead. ``nodes[i]`` carries
    the node's name, labels and annotations; its ``images`` are empty because
    the images live interned in the snapshot.
    """

    def __init__(
        self,
        *,
        nodes: list[NodeInfo],
        node_index: dict[str, int],
        pair_node: _Int32Array,
        pair_slot: _Int32Array,
        slot_names: list[tuple[str, ...]],
        slot_size: list[int],
        slot_lids: _Int32Array,
        slot_offsets: IndexArray,
        layer_id: dict[str, int],
        layer_size: list[int],
        unresolved_images: int,
        warnings: list[str],
    ) -> None:
        super().__init__()
        self.nodes = nodes
        self._node_index = node_index
        self._pair_node = pair_node
        self._pair_slot = pair_slot
        self._slot_names = slot_names
        self._slot_size = slot_size
        self._slot_offsets = slot_offsets
        self._layer_id = layer_id
        self._layer_size = layer_size
        # a shared layer table (SlotCache) may grow later: ids past this are not in the snapshot
        self._layer_count = len(layer_size)
        self.unresolved_images = unresolved_images
        self.warnings = warnings
        slot_of_lid = np.repeat(np.arange(len(slot_size), dtype=np.int32), np.diff(slot_offsets))
        self._slot_lids = slot_lids
        # layer id -> slots containing it
        self._lid_offsets, self._lid_slots = _csr(slot_lids, slot_of_lid, self._layer_count)
        self._holders: dict[int, IndexArray] = {}
        self._indexed: tuple[IndexArray, IndexArray] | None = None
        self._name_slots: dict[str, list[int]] | None = None
        self._name_states: dict[str, tuple[int, IndexArray] | None] = {}

    @classmethod
    def build(
        cls, nodes: Iterable[NodeInfo], source: LayerSource | None = None
    ) -> ClusterInventory:
        """A snapshot of ``nodes``, as ``ClusterInventory.build`` would make them."""
        builder = SnapshotBuilder(source)
        for node in nodes:
            builder.add_node_info(node)
        return builder.build()

    @property
    def pair_count(self) -> int:
        """Number of (node, image) entries."""
        return len(self._pair_slot)

    @property
    def slot_count(self) -> int:
        """Number of distinct image entries."""
        return len(self._slot_names)

    # ----------------------------------------------------------------- holders
    def _nodes_with_slots(self, slots: IndexArray | Sequence[int]) -> tuple[IndexArray, int]:
        """Sorted distinct nodes holding any of ``slots``, and the first such pair (or -1)."""
        mask = np.zeros(len(self._slot_names), dtype=bool)
        mask[slots] = True
        selected = mask[self._pair_slot]
        nodes = self._pair_node[selected].astype(np.int64)
        first = int(np.argmax(selected)) if len(nodes) else -1
        return _dedupe_sorted(nodes), first

    def index_layers(self) -> None:
        """Compute every layer's holders now (a long-lived snapshot answers faster)."""
        node_count = max(len(self.nodes), 1)
        lens = np.diff(self._slot_offsets)[self._pair_slot]
        total = int(lens.sum())
        starts = np.repeat(self._slot_offsets[:-1][self._pair_slot] - np.cumsum(lens) + lens, lens)
        lids = self._slot_lids[np.arange(total, dtype=np.int64) + starts]
        keys = np.unique(lids.astype(np.int64) * node_count + np.repeat(self._pair_node, lens))
        del lids, starts
        layer_of_key = keys // node_count
        offsets = np.searchsorted(layer_of_key, np.arange(self._layer_count + 1))
        self._indexed = (offsets.astype(np.int64), keys % node_count)
        self._holders.clear()

    def layer_holders(self, digest: str) -> IndexArray:
        lid = self._layer_id.get(digest)
        if lid is None or lid >= self._layer_count:
            return _EMPTY
        if self._indexed is not None:
            offsets, holders = self._indexed
            return holders[offsets[lid] : offsets[lid + 1]]
        arr = self._holders.get(lid)
        if arr is None:
            slots = self._lid_slots[self._lid_offsets[lid] : self._lid_offsets[lid + 1]]
            arr = self._holders[lid] = self._nodes_with_slots(slots)[0]
        return arr

    def layer_size(self, digest: str) -> int | None:
        lid = self._layer_id.get(digest)
        return None if lid is None or lid >= self._layer_count else self._layer_size[lid]

    def node_holds_layer(self, node: int, digest: str) -> bool:
        holders = self.layer_holders(digest)
        pos = int(np.searchsorted(holders, node))
        return pos < len(holders) and int(holders[pos]) == node

    def node_layer_digests(self, node: int) -> Iterator[str]:
        digests = list(self._layer_id)
        lo, hi = np.searchsorted(self._pair_node, [node, node + 1])
        seen: set[int] = set()
        for slot in self._pair_slot[lo:hi]:
            start, end = self._slot_offsets[slot], self._slot_offsets[slot + 1]
            seen.update(int(lid) for lid in self._slot_lids[start:end])
        return (digests[lid] for lid in seen)

    # ------------------------------------------------------------ image states
    def _name_state(self, name: str) -> tuple[int, IndexArray] | None:
        if name in self._name_states:
            return self._name_states[name]
        if self._name_slots is None:
            index: dict[str, list[int]] = {}
            for slot, names in enumerate(self._slot_names):
                for n in dict.fromkeys(names):
                    index.setdefault(n, []).append(slot)
            self._name_slots = index
        slots = self._name_slots.get(name)
        state = None
        if slots:
            holders, first = self._nodes_with_slots(slots)
            if first >= 0:
                state = (self._slot_size[int(self._pair_slot[first])], holders)
        self._name_states[name] = state
        return state

    def image_state(self, name: str) -> tuple[int, int] | None:
        state = self._name_state(name)
        return None if state is None else (state[0], len(state[1]))

    def image_holders(self, name: str) -> IndexArray:
        state = self._name_state(name)
        return _EMPTY if state is None else state[1]

    # --------------------------------------------------------------- read-only
    def _read_only(self, *_: object) -> NoReturn:
        raise TypeError("a NodeSnapshot is read-only: build a new one with SnapshotBuilder")

    def add_node(self, node: NodeInfo, source: LayerSource | None = None) -> int:
        self._read_only()

    def upsert_node(self, node: NodeInfo) -> int:
        self._read_only()

    def remove_node(self, name: str) -> bool:
        self._read_only()

    def add_layers(self, node: int, layers: Iterable[Layer]) -> None:
        self._read_only()

    def remove_layers(self, node: int, digests: Iterable[str]) -> None:
        self._read_only()

    def add_image_name(self, node: int, name: str, size_bytes: int) -> None:
        self._read_only()

    def remove_image_name(self, node: int, name: str) -> None:
        self._read_only()
