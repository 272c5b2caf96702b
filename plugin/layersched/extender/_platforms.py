"""Node platforms: which layers a node's images (and a pod on that node) have there.

A multi-platform image is an index of one manifest per platform, whose layers
differ: an arm64 node pulls the arm64 layers. So each node's images are resolved
for the node's platform (``kubernetes.io/os`` and ``kubernetes.io/arch`` labels,
else ``status.nodeInfo.operatingSystem``/``architecture``), and a pod is scored
on each node with its layers for that node's platform.

Every platform has a layer source of its own (a registry client picks one
platform from an index), made on first use by a factory, so caches are per
(reference, platform). Inside one snapshot the images of a node of another
platform than the default are told apart by a prefix on their names
(``"linux/arm64 repo:tag"``, :func:`layersched.core.layerindex.prefixed`), which
:class:`PlatformSource` strips to dispatch to that platform's source. Offline
sources (``--layers``) carry no platform: without a factory every node is
scored in the default platform.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import cast

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layerindex import PREFIX_SEPARATOR, NamesResolver, names_resolver
from layersched.core.layers import Layer, LayerSource
from layersched.core.manifest import Platform
from layersched.core.objects import Node
from layersched.core.reference import ImageName

log = logging.getLogger(__name__)

OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
#: Distinct platforms given sources of their own; nodes of any further platform are
#: scored in the default one (requests name platforms: they must not make clients
#: without bound). Real clusters run two or three.
MAX_PLATFORMS = 8

#: Distinct (os, arch) spellings whose key is remembered before the memory starts over.
MAX_MEMO = 1024

SourceFactory = Callable[[Platform], LayerSource]


def node_platform(node: Node) -> Platform | None:
    """The node's platform from its labels, else its ``status.nodeInfo``; None if unknown."""
    labels = node.metadata.labels or {}
    info = node.status.nodeInfo
    os_name = labels.get(OS_LABEL) or (info.operatingSystem if info is not None else "")
    arch = labels.get(ARCH_LABEL) or (info.architecture if info is not None else "")
    if not os_name or not arch:
        return None
    try:
        return Platform.parse(f"{os_name}/{arch}")
    except InputError:
        return None


class Platforms:
    """The default platform and a layer source per platform met (at most MAX_PLATFORMS)."""

    def __init__(
        self, default: Platform, source: LayerSource, factory: SourceFactory | None
    ) -> None:
        self.default = default.normalized()
        self.default_key = str(self.default)
        #: Whether nodes of other platforms get their own sources (a registry; not --layers).
        self.enabled = factory is not None
        self._factory = factory
        self._sources: dict[str, LayerSource] = {self.default_key: source}
        self._refused: set[str] = set()
        #: (os, arch) as a node states them -> its key; refused platforms included
        self._memo: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def key(self, node: Node) -> str:
        """The platform key ``node`` is scored in: its own, else the default."""
        if not self.enabled:
            return self.default_key
        labels = node.metadata.labels or {}
        info = node.status.nodeInfo
        os_name = labels.get(OS_LABEL) or (info.operatingSystem if info is not None else "")
        arch = labels.get(ARCH_LABEL) or (info.architecture if info is not None else "")
        known = self._memo.get((os_name, arch))  # the hot path: one dict lookup per node
        if known is not None:
            return known
        key = self._key(node)
        if len(self._memo) >= MAX_MEMO:
            self._memo.clear()  # labels in requests are anyone's: bound the memory
        self._memo[(os_name, arch)] = key
        return key

    def _key(self, node: Node) -> str:
        platform = node_platform(node)
        if platform is None:
            return self.default_key
        key = str(platform)
        if key in self._sources:
            return key
        with self._lock:
            if key in self._sources:
                return key
            if len(self._sources) >= MAX_PLATFORMS:
                if key not in self._refused:
                    self._refused.add(key)
                    log.warning(
                        "node %r: platform %s is one more than the %d handled: scoring its "
                        "nodes in %s",
                        node.metadata.name,
                        key,
                        MAX_PLATFORMS,
                        self.default_key,
                    )
                return self.default_key
            assert self._factory is not None
            self._sources[key] = self._factory(platform)
            log.info("nodes of platform %s: resolving their images for it", key)
        return key

    def source(self, key: str) -> LayerSource:
        """The layer source of platform ``key`` (one :meth:`key` returned)."""
        return self._sources[key]


class PlatformSource:
    """A LayerSource (a NodeImageSource) over per-platform sources: a name prefixed with a
    platform key is resolved by that platform's source (``source_of(key)``, asked once
    per key), any other by the default one."""

    def __init__(self, source_of: Callable[[str], LayerSource], default_key: str) -> None:
        self._source_of = source_of
        self._default_key = default_key
        self._resolvers: dict[str, NamesResolver] = {}

    def _resolver(self, key: str) -> NamesResolver:
        resolver = self._resolvers.get(key)
        if resolver is None:
            resolver = self._resolvers[key] = names_resolver(self._source_of(key))
        return resolver

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        return self.resolve_names((image,))

    def resolve_names(self, names: Sequence[ImageName]) -> tuple[Layer, ...]:
        if not names:
            raise LayerResolutionError("a node image without names cannot be resolved")
        key, separator, _ = names[0].partition(PREFIX_SEPARATOR)
        if not separator:
            return self._resolver(self._default_key)(names)
        stripped = cast("list[ImageName]", [name.partition(PREFIX_SEPARATOR)[2] for name in names])
        try:
            return self._resolver(key)(stripped)
        except LayerResolutionError as err:
            raise LayerResolutionError(f"{err} (platform {key})") from err
