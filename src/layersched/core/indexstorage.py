"""The layer index's two storage forms (:mod:`layersched.core.layerindex`): sorted 32-bit
id arrays, the form a node-by-node index lives in, and the packed form a bulk build makes
(:class:`Packed`: each distinct image entry interned once as a slot, the nodes' images two
parallel arrays, a layer's holders computed on first use).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

IndexArray = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
EMPTY = np.empty(0, dtype=np.int64)


# ------------------------------------------------------------------- id arrays

#: Node and layer ids in the inventory's two-way maps: 32-bit, 4 bytes an entry (a Python
#: set spends about 60 bytes an entry; at 5,000 nodes the maps held 108 MB as sets).
_ID_TYPECODE = "i"


def ids(values: Iterable[int] = ()) -> array[int]:
    """A sorted, duplicate-free array of ids."""
    return array(_ID_TYPECODE, sorted(set(values)))


#: The holders of a freed layer id (never changed: a reused id gets an array of its own).
NO_IDS = ids()


def has_id(ids: array[int], value: int) -> bool:
    at = bisect_left(ids, value)
    return at < len(ids) and ids[at] == value


def insert_id(ids: array[int], value: int) -> bool:
    """Insert ``value`` in order; False if it was there."""
    if not ids or ids[-1] < value:  # a node being added has the highest index
        ids.append(value)
        return True
    at = bisect_left(ids, value)
    if at < len(ids) and ids[at] == value:
        return False
    ids.insert(at, value)
    return True


def discard_id(ids: array[int], value: int) -> bool:
    """Remove ``value``; False if it was not there."""
    at = bisect_left(ids, value)
    if at < len(ids) and ids[at] == value:
        del ids[at]
        return True
    return False


# ---------------------------------------------------------------- packed form


def csr(keys: Int32Array, values: Int32Array, key_count: int) -> tuple[IndexArray, IndexArray]:
    """Group ``values`` by ``keys``: (offsets of length key_count + 1, values sorted by key)."""
    order = np.argsort(keys, kind="stable")
    offsets = np.zeros(key_count + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=key_count), out=offsets[1:])
    return offsets, values[order].astype(np.int64)


def dedupe_sorted(values: IndexArray) -> IndexArray:
    """Drop consecutive repeats of a sorted array."""
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


class Packed:
    """A bulk-built inventory's images: interned slots and ``(node, slot)`` pairs.

    ``layer_id``/``layer_size`` may be shared with a :class:`SlotCache` that grows after
    the build: ids from ``layer_count`` on are not in this inventory.
    """

    def __init__(
        self,
        *,
        pair_node: Int32Array,
        pair_slot: Int32Array,
        slot_names: list[tuple[str, ...]],
        slot_size: list[int],
        slot_lids: Int32Array,
        slot_offsets: IndexArray,
        layer_id: dict[str, int],
        layer_size: list[int],
    ) -> None:
        self.pair_node = pair_node
        self.pair_slot = pair_slot
        self.slot_names = slot_names
        self.slot_size = slot_size
        self.slot_offsets = slot_offsets
        self.slot_lids = slot_lids
        self.layer_id = layer_id
        self.layer_size = layer_size
        self.layer_count = len(layer_size)
        slot_of_lid = np.repeat(np.arange(len(slot_size), dtype=np.int32), np.diff(slot_offsets))
        # layer id -> slots containing it
        self.lid_offsets, self.lid_slots = csr(slot_lids, slot_of_lid, self.layer_count)
        self.holders: dict[int, IndexArray] = {}
        self.indexed: tuple[IndexArray, IndexArray] | None = None
        self.name_slots: dict[str, list[int]] | None = None
        self.name_states: dict[str, tuple[int, IndexArray] | None] = {}

    def slots_of(self, node: int) -> Int32Array:
        lo, hi = np.searchsorted(self.pair_node, [node, node + 1])
        return self.pair_slot[lo:hi]

    def slot_layers(self, slot: int) -> Int32Array:
        return self.slot_lids[self.slot_offsets[slot] : self.slot_offsets[slot + 1]]

    def nodes_with_slots(self, slots: IndexArray | Sequence[int]) -> tuple[IndexArray, int]:
        """Sorted distinct nodes holding any of ``slots``, and the first such pair (or -1)."""
        mask = np.zeros(len(self.slot_names), dtype=bool)
        mask[slots] = True
        selected = mask[self.pair_slot]
        nodes = self.pair_node[selected].astype(np.int64)
        first = int(np.argmax(selected)) if len(nodes) else -1
        return dedupe_sorted(nodes), first

    def index_layers(self, node_count: int) -> None:
        node_count = max(node_count, 1)
        lens = np.diff(self.slot_offsets)[self.pair_slot]
        total = int(lens.sum())
        starts = np.repeat(self.slot_offsets[:-1][self.pair_slot] - np.cumsum(lens) + lens, lens)
        lids = self.slot_lids[np.arange(total, dtype=np.int64) + starts]
        keys = np.unique(lids.astype(np.int64) * node_count + np.repeat(self.pair_node, lens))
        del lids, starts
        layer_of_key = keys // node_count
        offsets = np.searchsorted(layer_of_key, np.arange(self.layer_count + 1))
        self.indexed = (offsets.astype(np.int64), keys % node_count)
        self.holders.clear()

    def lid(self, digest: str) -> int | None:
        lid = self.layer_id.get(digest)
        return None if lid is None or lid >= self.layer_count else lid

    def layer_holders(self, digest: str) -> IndexArray:
        lid = self.lid(digest)
        if lid is None:
            return EMPTY
        if self.indexed is not None:
            offsets, holders = self.indexed
            return holders[offsets[lid] : offsets[lid + 1]]
        arr = self.holders.get(lid)
        if arr is None:
            slots = self.lid_slots[self.lid_offsets[lid] : self.lid_offsets[lid + 1]]
            arr = self.holders[lid] = self.nodes_with_slots(slots)[0]
        return arr

    def node_lids(self, node: int) -> set[int]:
        seen: set[int] = set()
        for slot in self.slots_of(node):
            seen.update(int(lid) for lid in self.slot_layers(int(slot)))
        return seen

    def name_state(self, name: str) -> tuple[int, IndexArray] | None:
        if name in self.name_states:
            return self.name_states[name]
        if self.name_slots is None:
            index: dict[str, list[int]] = {}
            for slot, names in enumerate(self.slot_names):
                for n in dict.fromkeys(names):
                    index.setdefault(n, []).append(slot)
            self.name_slots = index
        slots = self.name_slots.get(name)
        state = None
        if slots:
            holders, first = self.nodes_with_slots(slots)
            if first >= 0:
                state = (self.slot_size[int(self.pair_slot[first])], holders)
        self.name_states[name] = state
        return state
