"""Node platforms: which layers a node's images (and a pod on that node) have there.

A multi-platform image is an index of one manifest per platform, whose layers
differ: an arm64 node pulls the arm64 layers. So each node's images are resolved
for the node's platform (``kubernetes.io/os`` and ``kubernetes.io/arch`` labels,
else ``status.nodeInfo.operatingSystem``/``architecture``), and a pod is scored
on each node with its layers for that node's platform.

A node's platform is what its kubelet writes: anyone's (issue 44: one kubelet cycling
its ``kubernetes.io/arch`` label through made-up values claimed every platform slot for
good, and a real arm64 node added later was scored as amd64). So:

* only **known** OS/architecture pairs count (:data:`KNOWN_PLATFORMS`: the pairs Go
  builds for the two OSes kubelet runs on); any other is the default platform;
* a platform gets a layer source (and the extender a resolver and a cache) only while
  **at least two nodes** report it (:data:`MIN_PLATFORM_NODES`): a lone node of another
  platform is scored in the default one. The count is over the watched nodes or a
  ``--nodes`` file (:meth:`Platforms.note`), or, for full-``Nodes`` requests, over each
  request's nodes (:meth:`Platforms.effective_keys`), a platform then staying while a
  request of :data:`PLATFORM_IDLE_S` named two of its nodes;
* a platform **is dropped** (its source, and the extender's resolver and cache for it)
  once it no longer has two nodes;
* at most :data:`MAX_PLATFORMS` platforms have sources at once.

Every platform has a layer source of its own (a registry client picks one platform from
an index), made on first use by a factory, so caches are per (reference, platform).
Inside one snapshot the images of a node of another platform than the default are told
apart by a prefix on their names (``"linux/arm64 repo:tag"``,
:func:`layersched.core.nodeimages.prefixed`), which :class:`PlatformSource` strips to
dispatch to that platform's source. Offline sources (``--layers``) carry no platform:
without a factory every node is scored in the default platform.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import cast

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layers import Layer, LayerSource
from layersched.core.manifest import Platform
from layersched.core.nodeimages import PREFIX_SEPARATOR, NamesResolver, names_resolver
from layersched.core.objects import Node
from layersched.core.reference import ImageName

log = logging.getLogger(__name__)

OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
#: Distinct platforms given sources of their own at once, the default's included (real
#: clusters run two or three).
MAX_PLATFORMS = 8
#: Nodes that must report a platform before it gets a source of its own: one kubelet's
#: word (its labels are its own to write) never makes one.
MIN_PLATFORM_NODES = 2
#: A platform that full-``Nodes`` requests named (two nodes of it in one request) keeps
#: its source this long after the last such request: requests name the feasible nodes
#: only, so a pod pinned to amd64 must not drop arm64's cache.
PLATFORM_IDLE_S = 600.0
#: The OS/architecture pairs a node may be scored in: Go's ``go tool dist list`` for
#: linux and windows, the OSes kubelet runs on (image indexes use Go's names, and
#: :class:`~layersched.core.manifest.Platform` folds the aliases ``x86_64``,
#: ``aarch64``, ``armhf``). Any other pair is scored in the default platform.
KNOWN_PLATFORMS = frozenset(
    {
        *(
            f"linux/{arch}"
            for arch in (
                "386", "amd64", "arm", "arm64", "loong64", "mips", "mips64", "mips64le",
                "mipsle", "ppc64", "ppc64le", "riscv64", "s390x",
            )
        ),
        *(f"windows/{arch}" for arch in ("386", "amd64", "arm", "arm64")),
    }
)  # fmt: skip

#: Distinct (os, arch) spellings whose key is remembered before the memory starts over.
MAX_MEMO = 1024

SourceFactory = Callable[[Platform], LayerSource]


def node_platform(node: Node) -> Platform | None:
    """The node's platform from its labels, else its ``status.nodeInfo``; None if unknown
    (or no known OS/architecture pair)."""
    labels = node.metadata.labels or {}
    info = node.status.nodeInfo
    os_name = labels.get(OS_LABEL) or (info.operatingSystem if info is not None else "")
    arch = labels.get(ARCH_LABEL) or (info.architecture if info is not None else "")
    if not os_name or not arch:
        return None
    try:
        platform = Platform.parse(f"{os_name}/{arch}")
    except InputError:
        return None
    return platform if str(platform) in KNOWN_PLATFORMS else None


class Platforms:
    """The default platform, and a layer source per platform reported by at least two
    nodes (at most MAX_PLATFORMS at once): see the module docstring.

    Thread-safe: the watch's parser reads keys, the loop counts nodes and asks for
    sources, the warm-up's worker asks for sources.
    """

    def __init__(
        self,
        default: Platform,
        source: LayerSource,
        factory: SourceFactory | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.default = default.normalized()
        self.default_key = str(self.default)
        #: Whether nodes of other platforms get their own sources (a registry; not --layers).
        self.enabled = factory is not None
        self._factory = factory
        self._clock = clock
        self._default_source = source
        #: The platforms with sources of their own now (the default always has one).
        self._active: set[str] = {self.default_key}
        self._sources: dict[str, LayerSource] = {self.default_key: source}
        #: Nodes reporting each platform, in the node sets held (the watch, a file).
        self._counts: Counter[str] = Counter()
        #: When a full-Nodes request last named two nodes of each platform.
        self._requested: dict[str, float] = {}
        #: Platforms dropped since :meth:`dropped` was last asked (their resolvers go).
        self._dropped: list[str] = []
        self._refused: set[str] = set()
        #: (os, arch) as a node states them -> its key
        self._memo: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ a node's platform
    def key(self, node: Node) -> str:
        """The platform ``node`` reports: its own when a known pair, else the default
        (whether it has a source of its own is :meth:`effective`'s to say)."""
        if not self.enabled:
            return self.default_key
        labels = node.metadata.labels or {}
        info = node.status.nodeInfo
        os_name = labels.get(OS_LABEL) or (info.operatingSystem if info is not None else "")
        arch = labels.get(ARCH_LABEL) or (info.architecture if info is not None else "")
        known = self._memo.get((os_name, arch))  # the hot path: one dict lookup per node
        if known is not None:
            return known
        platform = node_platform(node)
        key = str(platform) if platform is not None else self.default_key
        if len(self._memo) >= MAX_MEMO:
            self._memo.clear()  # labels in requests are anyone's: bound the memory
        self._memo[(os_name, arch)] = key
        return key

    def effective(self, key: str) -> str:
        """The platform a node reporting ``key`` is scored in: ``key`` while it has a
        source of its own, else the default."""
        return key if key in self._active else self.default_key

    def active(self) -> set[str]:
        """The platforms with sources of their own now (the default's included)."""
        with self._lock:
            return set(self._active)

    # ------------------------------------------------------------ counting nodes
    def note(self, old: str | None, new: str | None) -> bool:
        """A held node's platform went from ``old`` to ``new`` (None: it was not held /
        is gone). True when some platform got or lost its source: the keys nodes are
        scored in changed."""
        if old == new or not self.enabled:
            return False
        with self._lock:
            if old is not None:
                self._counts[old] -= 1
                if self._counts[old] <= 0:
                    del self._counts[old]
            if new is not None:
                self._counts[new] += 1
            changed = False
            for key in (old, new):
                if key is not None and key != self.default_key:
                    changed |= self._review(key, self._clock())
            return changed

    def effective_keys(self, keys: list[str]) -> list[str]:
        """The keys a full-``Nodes`` request's nodes are scored in (``keys``: the ones they
        report): a platform two of them report keeps (or gets) its source; a platform
        with fewer is the default's here. ``keys`` itself when nothing changes."""
        if not self.enabled:
            return keys
        default = self.default_key
        if all(key == default for key in keys):
            return keys
        counts = Counter(keys)
        now = self._clock()
        with self._lock:
            for key, count in counts.items():
                if key != default and count >= MIN_PLATFORM_NODES:
                    self._requested[key] = now
                    self._review(key, now)
            active = self._active
        if all(key in active for key in counts):
            return keys
        return [key if key in active else default for key in keys]

    def dropped(self) -> list[str]:
        """Platforms that lost their source since the last call (also those whose
        requests lapsed, checked now): their resolvers and caches go."""
        with self._lock:
            now = self._clock()
            for key in [k for k, at in self._requested.items() if now - at > PLATFORM_IDLE_S]:
                del self._requested[key]
                self._review(key, now)
            dropped, self._dropped = self._dropped, []
            return dropped

    def _review(self, key: str, now: float) -> bool:
        """Give ``key`` a source or take it away, as its nodes say (under the lock); True
        when it changed."""
        wanted = self._counts.get(key, 0) >= MIN_PLATFORM_NODES or (
            key in self._requested and now - self._requested[key] <= PLATFORM_IDLE_S
        )
        if wanted == (key in self._active):
            return False
        if not wanted:
            self._active.discard(key)
            self._sources.pop(key, None)
            self._dropped.append(key)
            self._refused.discard(key)
            log.info("nodes of platform %s: fewer than %d, scored in %s", key,
                     MIN_PLATFORM_NODES, self.default_key)  # fmt: skip
            return True
        if len(self._active) >= MAX_PLATFORMS:
            if key not in self._refused:
                self._refused.add(key)
                log.warning(
                    "platform %s is one more than the %d handled: scoring its nodes in %s",
                    key,
                    MAX_PLATFORMS,
                    self.default_key,
                )
            return False
        self._active.add(key)
        if key in self._dropped:
            self._dropped.remove(key)
        log.info("nodes of platform %s: resolving their images for it", key)
        return True

    # ------------------------------------------------------------ sources
    def source(self, key: str) -> LayerSource:
        """The layer source of platform ``key`` (one with a source of its own: the
        default's for any other)."""
        with self._lock:
            source = self._sources.get(key)
            if source is not None:
                return source
            if key not in self._active:
                return self._default_source
            assert self._factory is not None
            source = self._sources[key] = self._factory(Platform.parse(key))
            return source


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
