"""A full-``Nodes`` request's own index (a ``NodeNames`` request is scored in the provider's):
built from the request's Node objects over the image entries of earlier requests, so only
new ones are resolved, with the entries of names whose layers changed dropped; its
problems counted and each logged once (:class:`LogOnce`: the most recently seen messages).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence

from layersched.core.indexbuilder import LayerIndexBuilder, SlotCache
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import LayerSource
from layersched.core.nodeindexing import add_node_object
from layersched.core.objects import Node
from layersched.extender._metrics import ExtenderMetrics
from layersched.extender._platforms import PlatformSource
from layersched.extender._pod_layers import PodLayers
from layersched.registry import MAX_CACHED_IMAGES

log = logging.getLogger("layersched.extender")

#: Distinct unresolvable node images logged, likewise.
MAX_LOGGED_UNRESOLVED_IMAGES = 10_000
#: Distinct (node, image) problems in request node data logged, likewise.
MAX_LOGGED_INVALID_NODE_DATA = 10_000


class LogOnce:
    """Which messages were logged already: the ``max_entries`` most recently seen.

    Least recently seen first to go, so a full memory never silences a new
    message; a forgotten one that comes back is logged again.
    """

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first(self, message: str) -> bool:
        """Whether ``message`` is new (it is remembered from now on)."""
        if message in self._seen:
            self._seen.move_to_end(message)
            return False
        self._seen[message] = None
        if len(self._seen) > self._max_entries:
            self._seen.popitem(last=False)
        return True

    def warn(self, warnings: Sequence[str]) -> None:
        """Log each warning not logged recently."""
        for warning in warnings:
            if self.first(warning):
                log.warning("%s", warning)


def request_index(
    nodes: list[Node],
    source: LayerSource | None,
    where: str,
    cache: SlotCache | None = None,
    problems: list[str] | None = None,
    platform_keys: Sequence[str | None] | None = None,
) -> LayerIndex:
    """The inventory of a request's ``Nodes.items`` (``cache``: entries seen by earlier
    requests; ``problems``: collects malformed images and annotations, ignored, instead of
    raising; ``platform_keys``: per node, its platform when not the default, else None)."""
    builder = LayerIndexBuilder(source, cache, skip_invalid=problems is not None)
    for i, node in enumerate(nodes):
        key = platform_keys[i] if platform_keys is not None else None
        add_node_object(builder, node, f"{where}[{i}]", problems, key)
    return builder.build()


class RequestIndexes:
    """The index of a full-Nodes request, built from the request's own Node objects
    (a NodeNames request is scored in the provider's), over the node-image entries of
    earlier requests: only new ones are resolved."""

    def __init__(self, needs_layers: bool, pod_layers: PodLayers, metrics: ExtenderMetrics) -> None:
        self._needs_layers = needs_layers
        self._pod_layers = pod_layers
        self._metrics = metrics
        #: The default platform's resolver.
        self._resolver = pod_layers.resolver(pod_layers.default_key)
        self._logged_unresolved = LogOnce(MAX_LOGGED_UNRESOLVED_IMAGES)
        self._logged_invalid = LogOnce(MAX_LOGGED_INVALID_NODE_DATA)
        #: Image entries of earlier requests (an offline source's misses too: its answer
        #: cannot change).
        self._slots = SlotCache(MAX_CACHED_IMAGES, keep_unresolved=self._resolver.local)

    def build(self, items: list[Node], node_keys: Sequence[str] | None) -> LayerIndex:
        """The index of ``items`` (``node_keys``: each one's platform; None: all the
        default's), its problems counted and logged once each."""
        needs_layers = self._needs_layers
        source: LayerSource | None = self._resolver.cached_source() if needs_layers else None
        platform_keys: list[str | None] | None = None
        if node_keys is not None:
            default = self._pod_layers.default_key
            if any(key != default for key in node_keys):
                source = PlatformSource(
                    lambda key: self._pod_layers.resolver(key).cached_source(), default
                )
                platform_keys = [None if key == default else key for key in node_keys]
        if needs_layers and not self._resolver.local:
            self._refresh_slots()
        problems: list[str] = []
        inventory = request_index(
            items,
            source,
            "Nodes.items",
            self._slots,
            problems,
            platform_keys,
        )
        if problems:
            self._metrics.invalid_node_data.inc(len(problems))
            self._logged_invalid.warn(problems)
        if needs_layers and inventory.unresolved_images:
            self._metrics.unresolved_node_images.inc(inventory.unresolved_images)
            if not self._resolver.local:
                # being resolved, or failed: the resolver logs the failure and its reason
                log.debug("%d node images ignored for now", inventory.unresolved_images)
                return inventory
            self._logged_unresolved.warn(inventory.warnings)
        return inventory

    def _refresh_slots(self) -> None:
        """Revalidate tags past their TTL in the background, and forget the slot-cache
        entries of names whose layers changed (only those: the rest stay valid)."""
        changed = self._pod_layers.changed()
        if changed:
            entries = self._slots.entries
            stale = [key for key, entry in entries.items() if not changed.isdisjoint(entry[0])]
            for key in stale:
                del entries[key]
            log.info(
                "layers of %d images changed on revalidation: %d cached node image entries dropped",
                len(changed),
                len(stale),
            )
