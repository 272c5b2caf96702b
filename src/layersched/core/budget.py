"""The live inventory's shared objects: one per distinct value, counted, within a budget.

5,000 nodes list the same few thousand images and layers, so the watch keeps one
:class:`~layersched.core.layers.Layer` per distinct layer and one image entry per distinct
image, shared by every node's parsed object. Each is counted by the objects holding it
and dropped with the last of them: a node that republishes fresh digests releases the
old ones (before issue 23 the pools only grew).

What the pools hold is also **bounded by construction**. Every object the watch keeps
(a NodeLayerInventory, a Node's status images) is charged an estimate of the memory it
adds: the distinct layers and image entries it brings into the pools, and what its own
references cost. The estimate's constants were measured with tracemalloc on CPython 3.11
(``tests/unit/test_extender_budget.py`` holds them to it). An object that would take the
total past ``max_bytes`` is refused, counted, and its node falls back as if it had no
agent; the memory held never passes the budget, whatever the objects say.

**Fair shares (issue 30).** Admission was first come, first served: six hostile 1.15 MiB
inventories were charged 251 of the 256 MiB, and every honest object after them, even
one of a single image, was refused. Now each node's object may be charged at most its
share (the budget over the nodes known, and never less than :data:`MIN_SHARE_BYTES`);
and an object that does not fit takes the room of the objects charged more than it,
the largest first: those are *condemned* (their charge no longer counts) and the watch
drops them (their nodes fall back). A flood from a few nodes can then only take what
honest objects leave free, and an honest object smaller than the flood's always gets in.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayers import NodeLayerInventory

#: Estimated bytes held for each distinct layer the pools keep, beyond its digest's
#: characters: the Layer, its digest and size objects, the pool entry, and the
#: inventory's per-layer tables (id map, size, digest, holders array and its cache).
LAYER_ENTRY_BYTES = 480
#: ... for each distinct image entry: the NodeImage, its tuples and pool entry, beyond
#: its names and layer slots (measured when each image also had a twin for the layer
#: index: since issue 31 one NodeImage serves both, so this bounds it from above).
IMAGE_ENTRY_BYTES = 400
#: ... for each name of a distinct image entry (its digest too), beyond its characters:
#: the string object and the pod-image votes keyed by it.
NAME_BYTES = 800
#: ... for each name of a distinct status image (no votes are keyed by those).
STATUS_NAME_BYTES = 300
#: ... for each slot of a tuple (an image's layers).
SLOT_BYTES = 8
#: ... for each distinct layer of an object (the node's and the layer's sorted id arrays).
LAYER_REF_BYTES = 16
#: ... for each image of an object (the slots of its node's image tuples).
IMAGE_REF_BYTES = 32
#: ... for each name of each image of an object (the inventory's name-holder sets).
NAME_REF_BYTES = 64
#: ... for each object: its parsed form, its node's inventory entry, its bookkeeping.
OBJECT_BYTES = 3_000
#: What the watch may hold in all (an estimate, see above; the real memory is 0.5 to
#: 0.9 of it): 5,000 nodes and their objects of the benchmark corpus (50 images each,
#: 2,000 distinct images, 7,689 distinct layers) are charged 143 MB. Past the budget,
#: objects are refused and counted. With the process's own ~200 MB at most (code, layer
#: cache, request bodies), the extender stays within its 512 MiB container limit.
DEFAULT_MAX_INVENTORY_BYTES = 256 * 1024 * 1024
#: The least share of the budget one node's object may be charged, whatever the number
#: of nodes: an honest agent's object of 500 images of 10 fresh layers is charged
#: ~3.8 MB, a kubelet's 50 status images of 5 names ~130 KB.
MIN_SHARE_BYTES = 4 * 1024 * 1024
#: The pools' dicts are rebuilt once this many more entries were dropped than are held
#: (a Python dict never shrinks by itself: after a flood it would keep its peak size).
COMPACT_SLACK = 4_096


@dataclass(frozen=True, slots=True)
class Held:
    """What one object holds of the pools: its distinct entries, and its charge."""

    #: A NodeLayerInventory's images (pooled NodeImages), or () for a Node.
    images: tuple[NodeImage, ...]
    #: What the layer index takes: those same images (a NodeLayerInventory), or a Node's
    #: status images (pooled NodeImages).
    node_images: tuple[NodeImage, ...]
    cost_bytes: int
    #: Who holds it ("nodes/NAME" or "nodelayerinventories/NAME"): the watch drops it by
    #: that name if a smaller object takes its room.
    holder: str = ""


NOTHING = Held((), (), 0)


class IndexPools:
    """Pooled layers and image entries with reference counts, and the memory budget.

    Thread-safe: the watch threads intern what they parse, and the event loop releases
    what it replaces.
    """

    def __init__(self, max_bytes: int, min_share_bytes: int = MIN_SHARE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.min_share_bytes = min_share_bytes
        #: Nodes the cluster has (the watch keeps it current): the budget is shared by them.
        self.expected_nodes = 1
        #: Estimated bytes held by every object kept now: never above ``max_bytes`` but
        #: for the condemned objects the watch is about to drop (their charge is freed
        #: for the objects that took their room).
        self.held_bytes = 0
        #: Objects charged (by id), and those condemned to make room for smaller ones.
        self._charged: dict[int, Held] = {}
        self._condemned: dict[int, Held] = {}
        self._condemned_bytes = 0
        #: Estimated bytes released in all (a counter).
        self.released_bytes = 0
        self._lock = threading.Lock()
        #: value -> [shared object, references]
        self._layers: dict[Layer, list[Any]] = {}
        #: value -> [shared NodeImage, references]
        self._images: dict[NodeImage, list[Any]] = {}
        #: status image value -> [shared NodeImage, references, its resolved twin?]
        self._status: dict[NodeImage, list[Any]] = {}
        #: Entries dropped since the dicts were last rebuilt.
        self._dropped = 0

    @property
    def share_bytes(self) -> int:
        """What one node's object may be charged at most: its share of the budget."""
        fair = self.max_bytes // max(1, self.expected_nodes)
        return max(fair, min(self.min_share_bytes, self.max_bytes))

    def condemned(self, held: Held) -> bool:
        """Whether ``held`` was condemned to make room for a smaller object (the watch
        drops it instead of applying it)."""
        return id(held) in self._condemned

    @property
    def layers(self) -> int:
        """Distinct layers held."""
        return len(self._layers)

    @property
    def images(self) -> int:
        """Distinct image entries held (published images and Nodes' status images)."""
        return len(self._images) + len(self._status)

    def fits(
        self, layer_count: int, images: int, names: int, replacing: Held | None = None
    ) -> bool:
        """Whether an object of ``layer_count`` distinct layers and ``images`` images of
        ``names`` names in all can fit: its own references are charged whatever it
        brings into the pools, so an object whose references alone would pass its share,
        or the budget with the room of every larger object, is refused before it is
        even parsed."""
        least = (
            OBJECT_BYTES
            + LAYER_REF_BYTES * layer_count
            + IMAGE_REF_BYTES * images
            + NAME_REF_BYTES * names
        )
        with self._lock:
            if least > self.share_bytes:
                return False
            need = least - self._free_bytes(replacing)
            return need <= 0 or self._larger_bytes(least, replacing) >= need

    def _free_bytes(self, replacing: Held | None) -> int:
        """The budget's room (under the lock), counting ``replacing``'s charge as free."""
        held = self.held_bytes - self._condemned_bytes
        key = id(replacing)
        if replacing is not None and key in self._charged and key not in self._condemned:
            held -= replacing.cost_bytes
        return self.max_bytes - held

    def _larger(self, cost_bytes: int, replacing: Held | None) -> list[Held]:
        """Objects charged more than ``cost_bytes`` (under the lock)."""
        return [
            held
            for key, held in self._charged.items()
            if held.cost_bytes > cost_bytes and key not in self._condemned and held is not replacing
        ]

    def _evictable(self, cost_bytes: int, replacing: Held | None) -> list[Held]:
        """Objects charged more than ``cost_bytes``, the largest first (under the lock)."""
        larger = self._larger(cost_bytes, replacing)
        return sorted(larger, key=lambda held: held.cost_bytes, reverse=True)

    def _larger_bytes(self, cost_bytes: int, replacing: Held | None) -> int:
        return sum(held.cost_bytes for held in self._larger(cost_bytes, replacing))

    def _admit(self, held: Held, replacing: Held | None) -> list[Held] | None:
        """Charge ``held`` (under the lock): the objects condemned to make room for it
        (the largest charged more than it, first), or None when it is refused (over its
        share, or no larger objects to take room from)."""
        if held.cost_bytes > self.share_bytes:
            return None
        need = held.cost_bytes - self._free_bytes(replacing)
        victims: list[Held] = []
        if need > 0:
            for victim in self._evictable(held.cost_bytes, replacing):
                victims.append(victim)
                need -= victim.cost_bytes
                if need <= 0:
                    break
            if need > 0:
                return None
            for victim in victims:
                self._condemned[id(victim)] = victim
                self._condemned_bytes += victim.cost_bytes
        self.held_bytes += held.cost_bytes
        if held.cost_bytes:
            self._charged[id(held)] = held
        return victims

    def hold_layers(
        self, parsed: NodeLayerInventory, replacing: Held | None = None, holder: str = ""
    ) -> tuple[Held | None, list[Held]]:
        """Intern ``parsed``'s images and layers and charge them: what it holds (None:
        nothing, it is refused: over its share, or past the budget with no larger object
        to take room from), and the objects condemned to make room for it, which the
        caller drops (``replacing``: the object it replaces, released once it is
        applied; ``holder``: who holds it)."""
        with self._lock:
            cost = OBJECT_BYTES
            held_layers: dict[int, Layer] = {}  # pooled layers this object holds, by id
            pooled_of: dict[int, Layer] = {}  # the document's layer objects -> pooled
            images: list[NodeImage] = []
            held_entries: set[int] = set()  # pool entries this object holds, by id
            for image in parsed.images:
                layers = []
                for layer in image.known_layers:
                    shared = pooled_of.get(id(layer))
                    if shared is None:
                        shared = pooled_of[id(layer)] = self._layer(layer)
                        if id(shared) not in held_layers:
                            held_layers[id(shared)] = shared
                            self._layers[shared][1] += 1
                            cost += LAYER_REF_BYTES
                    layers.append(shared)
                pooled = NodeImage.held(image.names, image.digest, tuple(layers))
                entry = self._images.get(pooled)
                if entry is None:
                    entry = self._images[pooled] = [pooled, 0]
                    cost += IMAGE_ENTRY_BYTES + SLOT_BYTES * len(layers)
                    cost += sum(NAME_BYTES + len(name) for name in (*image.names, image.digest))
                elif id(entry) in held_entries:
                    continue  # a repeated entry counts once: the pool's lookup finds it
                held_entries.add(id(entry))
                entry[1] += 1
                images.append(entry[0])
                cost += IMAGE_REF_BYTES + NAME_REF_BYTES * len(image.names)
            cost += sum(LAYER_ENTRY_BYTES + len(layer.digest) for layer in held_layers.values()
                        if self._layers[layer][1] == 1)  # fmt: skip
            pooled_images = tuple(images)  # the layer index takes the same objects
            held = Held(pooled_images, pooled_images, cost, holder)
            victims = self._admit(held, replacing)
            if victims is None:
                self._release(held, charged=False)
            return (held, victims) if victims is not None else (None, [])

    def _layer(self, layer: Layer) -> Layer:
        """The pooled object equal to ``layer`` (made with no references)."""
        entry = self._layers.get(layer)
        if entry is None:
            entry = self._layers[layer] = [layer, 0]
        shared: Layer = entry[0]
        return shared

    def hold_status(
        self,
        images: Sequence[NodeImage],
        extra_bytes: int = 0,
        replacing: Held | None = None,
        holder: str = "",
    ) -> tuple[Held | None, list[Held]]:
        """Intern a Node's status images and charge them (``extra_bytes``: what else the
        Node's parsed form keeps, its labels and annotations), as :meth:`hold_layers`."""
        with self._lock:
            cost = OBJECT_BYTES + extra_bytes
            pooled: list[NodeImage] = []
            held_entries: set[int] = set()  # pool entries this Node holds, by id
            for image in images:
                entry = self._status.get(image)
                if entry is not None and id(entry) in held_entries:
                    continue  # a repeated entry counts once: the pool's lookup finds it
                if entry is None:
                    entry = self._status[image] = [image, 0]
                    cost += IMAGE_ENTRY_BYTES + SLOT_BYTES * len(image.layers or ())
                    cost += sum(STATUS_NAME_BYTES + len(name) for name in image.names)
                    cost += sum(
                        LAYER_ENTRY_BYTES + len(layer.digest) for layer in image.layers or ()
                    )
                held_entries.add(id(entry))
                entry[1] += 1
                pooled.append(entry[0])
                cost += IMAGE_REF_BYTES + NAME_REF_BYTES * len(image.names)
            held = Held((), tuple(pooled), cost, holder)
            victims = self._admit(held, replacing)
            if victims is None:
                self._release(held, charged=False)
            return (held, victims) if victims is not None else (None, [])

    def resolved_status(self, image: NodeImage, layers: tuple[Layer, ...]) -> NodeImage:
        """Status image ``image`` with the ``layers`` the registry gave it: one object
        for every node holding the pooled ``image`` (it goes with the pool's entry), not
        one per node. 1,000 nodes falling back to their status images after a flood made
        50,000 of them, each small and long-lived amid the flood's freed memory."""
        with self._lock:
            entry = self._status.get(image)
            if entry is None or entry[0] is not image:  # not pooled: nothing to share
                return NodeImage(image.names, image.size_bytes, layers)
            twin: NodeImage | None = entry[2] if len(entry) > 2 else None
            if twin is None or twin.layers is not layers:
                twin = NodeImage(image.names, image.size_bytes, layers)
                entry[2:] = [twin]
            return twin

    def release(self, held: Held) -> None:
        """Drop ``held``'s references and charge (entries go with their last holder)."""
        with self._lock:
            self._release(held, charged=True)
            self.released_bytes += held.cost_bytes

    def _release(self, held: Held, *, charged: bool) -> None:
        if charged:
            self.held_bytes -= held.cost_bytes
            self._charged.pop(id(held), None)
            if self._condemned.pop(id(held), None) is not None:
                self._condemned_bytes -= held.cost_bytes
        dropped = 0
        if held.images:
            seen: set[int] = set()
            for image in held.images:
                for layer in image.known_layers:
                    if id(layer) not in seen:
                        seen.add(id(layer))
                        dropped += _unref(self._layers, layer, 1)
                dropped += _unref(self._images, image, 1)
        else:
            for status in held.node_images:
                dropped += _unref(self._status, status, 1)
        self._dropped += dropped
        if self._dropped > len(self._layers) + len(self._images) + COMPACT_SLACK:
            self._layers, self._images = dict(self._layers), dict(self._images)
            self._status, self._charged = dict(self._status), dict(self._charged)
            self._condemned = dict(self._condemned)
            self._dropped = 0


def _unref(pool: dict[Any, list[Any]], value: object, slot: int) -> int:
    """Drop one reference to ``value``'s entry; 1 if that was its last (it is gone)."""
    entry = pool.get(value)
    if entry is None:  # pragma: no cover - a bug: every release matches a hold
        return 0
    entry[slot] -= 1
    if entry[slot] > 0:
        return 0
    del pool[value]
    return 1
