"""The one cache of image layers: image name -> layers, with TTLs, bounded in bytes.

Every caller that resolves images through a registry keeps its answers here: the
extender's deadline resolver (:class:`~layersched.extender.DeadlineResolver`, which adds
worker pools and deadlines around it), the agent's registry fallback and ``layersched
score`` (:class:`CachedLayerSource`). The registry source itself
(:class:`~layersched.registry.RegistryLayerSource`) is a plain fetcher.

* A digest-pinned name (``repo@sha256:…``) names immutable content: its entry never
  expires.
* A tag's entry expires after ``positive_ttl_s`` and is then *revalidated*: with a source
  that can tell a tag's current digest (:class:`DigestSource`, one ``HEAD``, which Docker
  Hub does not count against its pull limit), only a changed digest costs a manifest
  ``GET``. Until revalidated the old answer is still served (:meth:`LayerCache.get` says
  it is stale), and a failed revalidation keeps it: a node keeps the layers it was last
  known to hold, it never drops to "absent" on a timer. Names whose layers changed are
  reported by :meth:`LayerCache.changed`.
* A failure is remembered for ``negative_ttl_s``, so a down registry is asked once per
  period per image, not once per pod.
* Tags naming the same digest share one layer tuple, and the cache is bounded both in
  entries and in estimated bytes: past either bound the least recently used entries go.
  A manifest's layer count is capped by the registry client, so no one entry can be huge.

Thread-safe: network calls happen outside the lock (two concurrent refreshes of one cold
image may both fetch it; the answer is the same).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from layersched.core.errors import ImageReferenceError, LayerResolutionError, LayerschedError
from layersched.core.layers import Layer, LayerSource
from layersched.core.reference import ImageName, ImageReference, is_pinned

#: Registry tags move; revalidate a tag's layers after this long (serving the old answer
#: meanwhile). kubelet refreshes node images every ~30 s; a tag moving faster than 5 min
#: is rare. Digest-pinned names never expire.
POSITIVE_TTL_S = 300.0
#: A failed image is retried after this long, not on every pod.
NEGATIVE_TTL_S = 10.0
#: Images whose layers are remembered; a cluster runs far fewer distinct images.
MAX_CACHED_IMAGES = 65_536
#: What the entries may cost in all (estimated: a layer reference ~100 bytes, an entry
#: ~300): 64 MiB holds 65,536 images of ~10 layers each with room to spare, and bounds
#: what hostile registries can make the extender hold.
MAX_CACHED_BYTES = 64 * 1024 * 1024
#: Estimated bytes of one entry, and of one layer in it (a Layer, its digest string and
#: the tuple slot pointing at it).
ENTRY_BYTES = 300
LAYER_BYTES = 100


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a fetch found: the image's layers, and the manifest digest when known."""

    layers: tuple[Layer, ...]
    digest: str | None = None


@runtime_checkable
class DigestSource(Protocol):
    """A layer source that also tells the digest a name points to, cheaply (a registry:
    ``HEAD``), so that a tag is revalidated without fetching its manifest again."""

    def fetch(self, ref: ImageReference) -> Fetched:
        """The image's layers and manifest digest; LayschedError subclasses on failure."""
        ...

    def current_digest(self, ref: ImageReference) -> str | None:
        """The digest ``ref`` points to now, or None if the registry does not say."""
        ...


class Entry:
    """One cached answer: layers (None: the last attempt failed), when it expires, why it
    failed, and the manifest digest when known."""

    __slots__ = ("digest", "error", "expires_at", "layers")

    def __init__(
        self,
        layers: tuple[Layer, ...] | None,
        expires_at: float,
        error: BaseException | None,
        digest: str | None,
    ) -> None:
        self.layers = layers
        self.expires_at = expires_at
        self.error = error
        self.digest = digest

    @property
    def cost_bytes(self) -> int:
        """Estimated bytes the entry holds (:data:`ENTRY_BYTES` + a layer's each)."""
        return ENTRY_BYTES + LAYER_BYTES * len(self.layers or ())


class LayerCache:
    """Image name -> layers, with TTLs, revalidation and bounds (see the module docstring).

    ``clock`` is a monotonic clock, injected by tests to cross the TTLs without waiting.
    Counters (plain ints, exported as metrics): ``hits``, ``misses``, ``revalidations``
    (tag entries answered again after their TTL), ``unchanged`` (revalidations a digest
    check answered without a manifest fetch), ``evictions``.
    """

    def __init__(
        self,
        *,
        positive_ttl_s: float = POSITIVE_TTL_S,
        negative_ttl_s: float = NEGATIVE_TTL_S,
        max_entries: int = MAX_CACHED_IMAGES,
        max_bytes: int = MAX_CACHED_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < ENTRY_BYTES:
            raise ValueError(f"cache bounds too small: {max_entries} entries, {max_bytes} bytes")
        self.positive_ttl_s = positive_ttl_s
        self.negative_ttl_s = negative_ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries: OrderedDict[ImageName, Entry] = OrderedDict()
        #: digest -> (the layer tuple entries of that digest share, how many share it)
        self._shared: dict[str, tuple[tuple[Layer, ...], int]] = {}
        self._bytes = 0
        # re-entrant: a caller's callback may look up while it holds the lock
        self._lock = threading.RLock()
        #: (expiry, image) of tag entries in expiry order (the TTL is constant), so that
        #: those no lookup asks for (node images answered by a slot cache) are revalidated.
        self._due: deque[tuple[float, ImageName]] = deque()
        #: Names whose layers changed when revalidated, until :meth:`changed` drains them.
        self._changed: set[ImageName] = set()
        self.hits = 0
        self.misses = 0
        self.revalidations = 0
        self.unchanged = 0
        self.evictions = 0

    # ------------------------------------------------------------------ reading
    def get(self, image: ImageName) -> tuple[Entry | None, bool]:
        """(entry, stale): the cached answer for ``image``, or (None, False). An expired
        failure is forgotten (to be retried); expired layers are returned, stale."""
        with self._lock:
            entry = self._entries.get(image)
            if entry is None:
                self.misses += 1
                return None, False
            self._entries.move_to_end(image)
            if entry.expires_at >= self.clock():
                self.hits += 1
                return entry, False
            if entry.layers is None:
                self._drop(image)
                self.misses += 1
                return None, False
            self.hits += 1
            return entry, True

    def layers_of(self, image: ImageName) -> tuple[Layer, ...] | None:
        """The last known layers of ``image`` (stale or not), if any."""
        with self._lock:
            entry = self._entries.get(image)
            return entry.layers if entry is not None else None

    def due(self, limit: int | None = None) -> list[ImageName]:
        """Tag entries past their TTL that no lookup revalidated yet (each once, at most
        ``limit``: the rest wait for the next call), oldest first; a caller revalidates
        them (in the background)."""
        now = self.clock()
        found: list[ImageName] = []
        with self._lock:
            while self._due and self._due[0][0] < now and (limit is None or len(found) < limit):
                expires_at, image = self._due.popleft()
                entry = self._entries.get(image)
                if entry is not None and entry.expires_at == expires_at:
                    found.append(image)
        return found

    def changed(self) -> set[ImageName]:
        """Names whose layers changed on revalidation since the last call (then forgotten)."""
        with self._lock:
            names, self._changed = self._changed, set()
            return names

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def cost_bytes(self) -> int:
        """Estimated bytes the entries hold now."""
        return self._bytes

    # ------------------------------------------------------------------ writing
    def store(
        self,
        image: ImageName,
        fetched: Fetched | None,
        error: BaseException | None = None,
        *,
        unchanged: bool = False,
        pinned: bool | None = None,
    ) -> tuple[Layer, ...] | None:
        """Remember what resolving ``image`` gave (``fetched``, or None and ``error``);
        returns the layers now held for it. ``unchanged``: a digest check found the tag
        where it was, so the entry is only renewed; ``pinned``: whether a digest pins the
        name, when the caller parsed it already (a pinned name's layers never expire).

        A failure where layers are known (a failed revalidation) keeps them, retried after
        ``negative_ttl_s``."""
        now = self.clock()
        with self._lock:
            old = self._entries.get(image)
            if unchanged and old is not None and old.layers is not None:
                self.revalidations += 1
                self.unchanged += 1
                self._renew(image, old, now + self.positive_ttl_s)
                return old.layers
            if fetched is None:
                if old is not None and old.layers is not None:
                    self._renew(image, old, now + self.negative_ttl_s)
                    return old.layers
                self._put(image, Entry(None, now + self.negative_ttl_s, error, None))
                return None
            if old is not None and old.layers is not None:
                self.revalidations += 1
                if old.layers != fetched.layers:
                    self._changed.add(image)
            if pinned is None:
                pinned = is_pinned(image)
            expires_at = math.inf if pinned else now + self.positive_ttl_s
            layers = self._share(fetched)
            self._put(image, Entry(layers, expires_at, None, fetched.digest))
            return layers

    def refresh(
        self,
        image: ImageName,
        source: LayerSource,
        on_kept: Callable[[LayerschedError], None] | None = None,
    ) -> tuple[Layer, ...]:
        """Resolve ``image`` through ``source`` now and store the answer: a known tag is
        first checked by digest when ``source`` can (:class:`DigestSource`), and a digest
        reference whose manifest a tag already fetched is not fetched again. Raises the
        source's error when nothing is known of the image; a failed revalidation returns
        the layers last known (and tells ``on_kept`` why it failed)."""
        entry, _ = self._peek(image)
        ref, unparsed = _parsed(image)  # the one parse of the name on this path
        digest = ref.digest if ref is not None else None
        if digest is not None:
            with self._lock:
                shared = self._shared.get(digest)
            if shared is not None:
                layers = self.store(image, Fetched(shared[0], digest), pinned=True)
                assert layers is not None
                return layers
        try:
            if isinstance(source, DigestSource):
                if ref is None:
                    raise unparsed or LayerResolutionError(f"{image!r} is no image reference")
                if (
                    entry is not None
                    and entry.layers is not None
                    and entry.digest is not None
                    and digest is None
                    and source.current_digest(ref) == entry.digest
                ):
                    layers = self.store(image, None, unchanged=True)
                    assert layers is not None
                    return layers
                fetched = source.fetch(ref)
            else:
                fetched = Fetched(source.resolve(image))
        except LayerschedError as err:
            kept = self.store(image, None, err)
            if kept is None:
                raise
            if on_kept is not None:
                on_kept(err)
            return kept
        layers = self.store(image, fetched, pinned=digest is not None)
        assert layers is not None
        return layers

    def resolve(self, image: ImageName, source: LayerSource) -> tuple[Layer, ...]:
        """The layers of ``image``: cached, else (or when stale) refreshed through
        ``source`` inline. A recent failure raises without asking the source again."""
        entry, stale = self.get(image)
        if entry is not None and not stale:
            if entry.layers is None:
                raise LayerResolutionError(
                    f"resolving {image!r} failed recently ({entry.error}); retried after "
                    f"{self.negative_ttl_s:.0f} s"
                )
            return entry.layers
        return self.refresh(image, source)

    def _peek(self, image: ImageName) -> tuple[Entry | None, bool]:
        with self._lock:
            entry = self._entries.get(image)
            return entry, entry is not None and entry.expires_at < self.clock()

    def _renew(self, image: ImageName, entry: Entry, expires_at: float) -> None:
        entry.expires_at = expires_at
        self._entries.move_to_end(image)
        if expires_at != math.inf:
            self._due.append((expires_at, image))

    def _share(self, fetched: Fetched) -> tuple[Layer, ...]:
        """One layer tuple per digest: tags of one manifest hold the same object."""
        if fetched.digest is None:
            return fetched.layers
        shared = self._shared.get(fetched.digest)
        if shared is not None and shared[0] == fetched.layers:
            self._shared[fetched.digest] = (shared[0], shared[1] + 1)
            return shared[0]
        self._shared[fetched.digest] = (fetched.layers, 1 + (shared[1] if shared else 0))
        return fetched.layers

    def _put(self, image: ImageName, entry: Entry) -> None:
        self._drop(image)
        self._entries[image] = entry
        self._bytes += entry.cost_bytes
        if entry.layers is not None and entry.expires_at != math.inf:
            self._due.append((entry.expires_at, image))
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or self._bytes > self.max_bytes
        ):
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.evictions += 1

    def _drop(self, image: ImageName) -> None:
        entry = self._entries.pop(image, None)
        if entry is None:
            return
        self._bytes -= entry.cost_bytes
        if entry.digest is not None:
            shared = self._shared.get(entry.digest)
            if shared is not None:
                if shared[1] <= 1:
                    del self._shared[entry.digest]
                else:
                    self._shared[entry.digest] = (shared[0], shared[1] - 1)


def _parsed(image: ImageName) -> tuple[ImageReference | None, LayerResolutionError | None]:
    """``image`` as a reference, or None and the error naming it (a runtime's name such as
    ``<none>@<none>`` is none: a registry cannot be asked for it)."""
    try:
        return ImageReference.parse(image), None
    except ImageReferenceError as err:
        return None, LayerResolutionError(f"resolving layers of {image!r}: {err}")


class CachedLayerSource:
    """A :class:`~layersched.core.layers.LayerSource` through a :class:`LayerCache`: for
    callers that resolve inline (the agent's registry fallback, ``layersched score``)."""

    def __init__(self, source: LayerSource, cache: LayerCache | None = None) -> None:
        self.source = source
        self.cache = cache if cache is not None else LayerCache()

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        return self.cache.resolve(image, self.source)
