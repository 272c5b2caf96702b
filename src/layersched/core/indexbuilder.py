"""Building a :class:`~layersched.core.layerindex.LayerIndex` in bulk: a request's, a
file's or a simulated cluster's nodes, every distinct ``status.images`` entry described and
resolved once (:class:`LayerIndexBuilder`), and the entries shared by successive builds
(:class:`SlotCache`). What it builds is packed
(:class:`~layersched.core.indexstorage.Packed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from layersched.core.errors import InputError
from layersched.core.indexstorage import Packed
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeimages import NodeImage, NodeInfo, names_resolver, resolve_node_image

log = logging.getLogger(__name__)


# -------------------------------------------------------------------- builder

#: Key of the pseudo-image that carries a node's ``imageLayer.<digest>`` annotations.
_ANNOTATIONS_KEY = "imageLayer annotations"


def _same_image(key: Any) -> NodeImage:
    image: NodeImage = key
    return image


class SlotCache:
    """Image entries already described and resolved, shared by successive builds.

    A server building an inventory per request sees the same few thousand
    ``status.images`` entries every time; with this cache only new ones are
    described and resolved. Layer ids become shared too, so an inventory's
    :meth:`~LayerIndex.layer_size` is the size first seen by the cache.
    Unresolved entries are kept only with ``keep_unresolved`` (an offline source,
    whose answer cannot change; a registry may answer next time), together with
    their warning, which every inventory using them still counts and lists.
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
        """Forget every entry (inventories already built keep their own references)."""
        self.entries = {}
        self.layer_id = {}
        self.layer_size = []

    def trim(self) -> None:
        """Reset if the cache has outgrown ``max_entries``."""
        if len(self.entries) > self.max_entries:
            self.reset()

    def __len__(self) -> int:
        return len(self.entries)


class LayerIndexBuilder:
    """Collects nodes, then :meth:`build` returns their (packed) :class:`LayerIndex`.

    ``add_node`` takes each node's images as hashable *keys* plus a ``describe``
    function turning a key seen for the first time into a :class:`NodeImage`:
    a caller decoding wire objects interns them without converting the 25,000
    entries of a request, only the few thousand distinct ones
    (:func:`~layersched.core.nodeindexing.add_node_object` does so for a decoded v1
    Node). With ``skip_invalid``, a key ``describe`` refuses (InputError) is held by
    nobody instead of failing the build, and :meth:`invalid_images` names it per node.
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
        allocatable: Mapping[str, str] | None = None,
    ) -> int:
        """Add a node holding ``images`` (keys; ``describe`` makes a NodeImage of one)."""
        if name in self._node_index:
            raise InputError(f"node {name!r} appears twice: node names must be unique")
        idx = len(self._nodes)
        self._node_index[name] = idx
        self._nodes.append(
            NodeInfo(
                name,
                labels=labels or {},
                annotations=annotations or {},
                allocatable=allocatable or {},
            )
        )
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
        """Add a described :class:`NodeInfo` (its images are hashable keys already)."""
        return self.add_node(
            node.name,
            node.images,
            annotation_layers=node.annotation_layers,
            labels=node.labels,
            annotations=node.annotations,
            allocatable=node.allocatable,
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
                # never cached: the next build names the nodes listing it again
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

    def build(self) -> LayerIndex:
        """The inventory of every node added so far (packed)."""
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
        packed = Packed(
            pair_node=pair_node,
            pair_slot=pair_slot,
            slot_names=self._slot_names,
            slot_size=self._slot_size,
            slot_lids=slot_lids,
            slot_offsets=slot_offsets,
            layer_id=self._layer_id,
            layer_size=self._layer_size,
        )
        return LayerIndex._of_packed(
            self._nodes, self._node_index, packed, self._unresolved, self._warnings
        )


def build_layer_index(nodes: Iterable[NodeInfo], source: LayerSource | None = None) -> LayerIndex:
    """A (packed) index of ``nodes``; ``source`` resolves images lacking layer data.

    Without a source such images only contribute their names (all that
    image-locality reads) and are neither counted nor warned about.
    """
    builder = LayerIndexBuilder(source)
    for node in nodes:
        builder.add_node_info(node)
    return builder.build()
