"""Where the extender's inventory comes from: request bodies, a ``--nodes`` file, the API.

In ``NodeNames`` mode (``nodeCacheCapable: true``) kube-scheduler sends names only, so the
extender must already know what every node holds. An :class:`LayerIndexProvider` is that
seam, and declares everything the extender asks of it: the ``--nodes`` snapshot
(:class:`StaticLayerIndexProvider`, here) and the live watch of Nodes and
NodeLayerInventory objects (:class:`~layersched.extender.watch._provider.WatchLayerIndexProvider`,
in the parts of the Go port's watch: the list/watch loop, the parser, the store, the votes
and the metrics).
In full-``Nodes`` mode each request's nodes are built into an inventory of their own
(:mod:`layersched.extender._request_indexes`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

from prometheus_client.registry import Collector

from layersched.core.errors import InputError
from layersched.core.indexbuilder import LayerIndexBuilder
from layersched.core.layerindex import LayerIndex, held_image_names
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeindexing import add_node_object
from layersched.core.objects import decode_node_list
from layersched.core.reference import ImageName
from layersched.extender._platforms import Platforms, PlatformSource
from layersched.extender.watch._pending import (
    PendingPods,
)
from layersched.extender.watch._warmup import StatusImages

log = logging.getLogger(__name__)


class LayerIndexProvider(Protocol):
    """Supplies the inventory ``NodeNames`` are resolved against, and what goes with it."""

    #: Per node index of the held inventory, its platform key; None: all the default.
    platform_keys: list[str] | None

    def current(self) -> LayerIndex | None:
        """The inventory now, or None while it is still loading (/readyz answers 503)."""
        ...

    def load(self) -> None:
        """Load (blocking; run in a thread); raise a LayerschedError if it cannot."""
        ...

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the inventory is changed on (a static one never changes)."""
        ...

    def ready(self) -> tuple[bool, str]:
        """(ready, why) for /readyz."""
        ...

    def image_layers(self, image: ImageName, key: str) -> tuple[Layer, ...] | None:
        """Layers of pod image ``image`` for platform ``key`` when the inventory knows them
        without a registry (an agent published them); None otherwise."""
        ...

    def held_images(self, node: str) -> list[str] | None:
        """The image names held for ``node`` (None: unknown node), for /debug/inventory."""
        ...

    def collector(self) -> Collector | None:
        """Metrics of the provider's own (a watch's), or None."""
        ...

    def held_bytes(self) -> int:
        """Estimated bytes what the provider keeps holds (0: a file, loaded once)."""
        ...

    def use_resolvers(self, images: StatusImages) -> None:
        """Resolve nodes' status images through ``images`` (the extender's resolvers, one
        per platform, and their cache), if the provider resolves any."""
        ...

    def track_pending(self, pods: PendingPods) -> bool:
        """Keep ``pods`` current (``in-flight``): watch the pods bound to nodes whose
        containers have not started, and tell it when a node's layers change. False when
        this provider cannot (no API to watch)."""
        ...


class StaticLayerIndexProvider:
    """The inventory of a ``--nodes NODES.json`` file (a v1 NodeList), loaded once.

    The file is decoded node by node (:func:`layersched.core.objects.decode_node_list`,
    the decoder ``layersched score --nodes`` uses too), so a 50 MB NodeList never exists
    as Python objects all at once; the inventory's layers are indexed once loaded.
    """

    def __init__(
        self, path: str | None, source: LayerSource | None, platforms: Platforms | None = None
    ) -> None:
        self.path = path
        self._source = source
        #: Per-platform sources: each node's images are resolved for its platform.
        self.platforms = platforms if platforms is not None and platforms.enabled else None
        self._index: LayerIndex | None = None
        self.platform_keys: list[str] | None = None

    def current(self) -> LayerIndex | None:
        return self._index

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Nothing changes a file's inventory."""

    def ready(self) -> tuple[bool, str]:
        if self._index is None:
            return False, "loading the node inventory"
        return True, "ok"

    def image_layers(self, image: ImageName, key: str) -> tuple[Layer, ...] | None:
        """A file has no agent-published images: pods resolve through the layer source."""
        return None

    def held_images(self, node: str) -> list[str] | None:
        return held_image_names(self._index, node)

    def collector(self) -> Collector | None:
        return None

    def held_bytes(self) -> int:
        return 0

    def use_resolvers(self, images: StatusImages) -> None:
        """A file's node images are resolved once, at load, through its source."""

    def track_pending(self, pods: PendingPods) -> bool:
        """A file says nothing of pods: no pull is known to be in flight."""
        return False

    def load(self) -> None:
        if self.path is None:
            self._index = LayerIndexBuilder(self._source).build()
            return
        path = self.path
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise InputError(f"{path}: cannot read it ({err.strerror}): check the path") from None
        platforms = self.platforms
        source = self._source
        if platforms is not None and source is not None:
            source = PlatformSource(platforms.source, platforms.default_key)
        builder = LayerIndexBuilder(source)
        keys: list[str] = []
        if platforms is not None:
            # a first pass for the platforms alone (the file is decoded node by node): a
            # platform two of its nodes report gets its source; a lone node of another
            # platform is scored in the default one
            for node in decode_node_list(data, path):
                keys.append(platforms.key(node))
                platforms.note(None, keys[-1])
            keys = [platforms.effective(key) for key in keys]
        for i, node in enumerate(decode_node_list(data, path)):
            own = keys[i] if keys else None
            platform_key = own if platforms is not None and own != platforms.default_key else None
            add_node_object(builder, node, f"{path}: items[{i}]", platform_key=platform_key)
        del data
        inventory = builder.build()
        inventory.index_layers()
        for warning in inventory.warnings:
            log.warning("%s: %s", path, warning)
        log.info(
            "%s: %d nodes, %d distinct images, %d unresolved",
            path,
            inventory.node_count,
            inventory.slot_count,
            inventory.unresolved_images,
        )
        if (keys and any(key != keys[0] for key in keys)) or (
            keys and platforms is not None and keys[0] != platforms.default_key
        ):
            self.platform_keys = keys
        self._index = inventory
