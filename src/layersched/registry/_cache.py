"""The one cache of image layers: image name -> layers, with TTLs, bounded in bytes.

Every caller that resolves images through a registry keeps its answers here: the
extender's deadline resolver (:class:`~layersched.extender.DeadlineResolver`, which adds
worker pools and deadlines around it), the agent's registry fallback and ``layersched
score`` (:class:`~layersched.registry.CachedLayerSource`). The registry source itself
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
  period per image, not once per pod. It is remembered as **text** (at most
  :data:`MAX_ERROR_CHARS`), never as the exception: an exception keeps its chained cause,
  its traceback and every frame's locals, 5.8 KB where 300 bytes were charged (issue 44).
  Expired failures are swept as others are stored, not only when their name is asked
  for again.
* Tags naming the same digest share one layer tuple. Every entry is charged what it
  really costs (measured with tracemalloc: tests/unit/test_layer_cache_memory.py) to a
  :class:`~layersched.registry.MemoryBudget`, which the extender shares between the
  caches of every platform and the registries it refused: past the budget, the least
  recently used entries of the cache holding the most go. A manifest's layer count is
  capped by the registry client, so no one entry can be huge.

Thread-safe: network calls happen outside the lock (two concurrent refreshes of one cold
image may both fetch it; the answer is the same). The lock is the budget's, shared by
its caches.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from layersched.core.errors import ImageReferenceError, LayerResolutionError, LayerschedError
from layersched.core.layers import Layer, LayerSource
from layersched.core.reference import ImageName, ImageReference, is_pinned
from layersched.registry._budget import DEFAULT_BUDGET_BYTES, MemoryBudget
from layersched.registry._entries import (
    ENTRY_BYTES,
    EXPIRY_BYTES,
    DigestSource,
    Entry,
    Fetched,
    SharedLayers,
    entry_cost_bytes,
    error_text,
)

#: Registry tags move; revalidate a tag's layers after this long (serving the old answer
#: meanwhile). kubelet refreshes node images every ~30 s; a tag moving faster than 5 min
#: is rare. Digest-pinned names never expire.
POSITIVE_TTL_S = 300.0
#: A failed image is retried after this long, not on every pod.
NEGATIVE_TTL_S = 10.0
#: Images whose layers are remembered by one cache; a cluster runs far fewer distinct
#: images (the budget bounds what they cost in all).
MAX_CACHED_IMAGES = 65_536
#: What a cache's entries may cost when it has a budget of its own (the extender shares
#: one between every platform's cache: ``DEFAULT_BUDGET_BYTES``).
MAX_CACHED_BYTES = DEFAULT_BUDGET_BYTES
#: Expired failures dropped per insertion at most (the rest go with later insertions, or
#: all at once with :meth:`LayerCache.due`).
SWEEP_BATCH = 16


class LayerCache:
    """Image name -> layers, with TTLs, revalidation and bounds (see the module docstring).

    ``clock`` is a monotonic clock, injected by tests to cross the TTLs without waiting.
    ``budget``: the memory budget its entries are charged to (shared with other caches),
    else one of its own of ``max_bytes``.
    Counters (plain ints, exported as metrics): ``hits``, ``misses``, ``revalidations``
    (tag entries answered again after their TTL), ``unchanged`` (revalidations a digest
    check answered without a manifest fetch), ``evictions``, ``swept`` (expired failures
    dropped before their name was asked for again).
    """

    def __init__(
        self,
        *,
        positive_ttl_s: float | None = None,
        negative_ttl_s: float | None = None,
        max_entries: int = MAX_CACHED_IMAGES,
        max_bytes: int = MAX_CACHED_BYTES,
        clock: Callable[[], float] = time.monotonic,
        budget: MemoryBudget | None = None,
    ) -> None:
        if max_entries < 1 or (budget is None and max_bytes < ENTRY_BYTES):
            raise ValueError(f"cache bounds too small: {max_entries} entries, {max_bytes} bytes")
        # read at construction, so tests may change the module's TTLs
        self.positive_ttl_s = POSITIVE_TTL_S if positive_ttl_s is None else positive_ttl_s
        self.negative_ttl_s = NEGATIVE_TTL_S if negative_ttl_s is None else negative_ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self.budget = budget if budget is not None else MemoryBudget(max_bytes)
        self._entries: OrderedDict[ImageName, Entry] = OrderedDict()
        #: digest -> the layer tuple the entries of that digest share
        self._shared: dict[str, SharedLayers] = {}
        self._bytes = 0
        self._lock = self.budget.lock
        #: Entries with layers and an expiry (tags; layers kept through a failed
        #: revalidation), in expiry order, so that those no lookup asks for (node images
        #: answered by a slot cache) are revalidated.
        self._due: OrderedDict[ImageName, None] = OrderedDict()
        #: Failures in expiry order (one TTL: the order they were stored in), swept.
        self._failed: OrderedDict[ImageName, None] = OrderedDict()
        #: Names whose layers changed when revalidated, until :meth:`changed` drains them.
        self._changed: set[ImageName] = set()
        self.hits = 0
        self.misses = 0
        self.revalidations = 0
        self.unchanged = 0
        self.evictions = 0
        self.swept = 0
        self.budget.join(self)

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
        """Entries with layers past their TTL that no lookup revalidated yet (each once, at
        most ``limit``: the rest wait for the next call), oldest first; a caller
        revalidates them (in the background). Expired failures are swept meanwhile."""
        now = self.clock()
        found: list[ImageName] = []
        with self._lock:
            self._sweep(now, None)
            while self._due and (limit is None or len(found) < limit):
                image = next(iter(self._due))
                entry = self._entries[image]
                if entry.expires_at >= now:
                    break
                del self._due[image]
                self._bytes -= EXPIRY_BYTES  # out of the expiry order until renewed
                self.budget.charge(-EXPIRY_BYTES)
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
    def failures(self) -> int:
        """Failures remembered now."""
        return len(self._failed)

    @property
    def held_bytes(self) -> int:
        """What the entries cost now (as charged to the budget)."""
        return self._bytes

    cost_bytes = held_bytes

    # ------------------------------------------------------------------ writing
    def store(
        self,
        image: ImageName,
        fetched: Fetched | None,
        error: BaseException | str | None = None,
        *,
        unchanged: bool = False,
        pinned: bool | None = None,
    ) -> tuple[Layer, ...] | None:
        """Remember what resolving ``image`` gave (``fetched``, or None and ``error``, kept
        as text); returns the layers now held for it. ``unchanged``: a digest check found
        the tag where it was, so the entry is only renewed; ``pinned``: whether a digest
        pins the name, when the caller parsed it already (a pinned name's layers never
        expire).

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
                self._put(image, Entry(None, now + self.negative_ttl_s, error_text(error), None))
                return None
            if old is not None and old.layers is not None:
                self.revalidations += 1
                if old.layers != fetched.layers:
                    self._changed.add(image)
            if pinned is None:
                pinned = is_pinned(image)
            expires_at = math.inf if pinned else now + self.positive_ttl_s
            entry = self._entry(fetched, expires_at)
            self._put(image, entry)
            return entry.layers

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
                layers = self.store(image, Fetched(shared.layers, digest), pinned=True)
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

    def evict_oldest(self) -> bool:
        """Drop the least recently used entry (the budget asks, under its lock)."""
        if not self._entries:
            return False
        self._drop(next(iter(self._entries)))
        self.evictions += 1
        return True

    def clear(self) -> None:
        """Forget every entry and leave the budget (a platform no node reports any more)."""
        with self._lock:
            while self._entries:
                self._drop(next(iter(self._entries)))
            self.budget.leave(self)

    def _peek(self, image: ImageName) -> tuple[Entry | None, bool]:
        with self._lock:
            entry = self._entries.get(image)
            return entry, entry is not None and entry.expires_at < self.clock()

    def _renew(self, image: ImageName, entry: Entry, expires_at: float) -> None:
        self._unschedule(image, entry)
        entry.expires_at = expires_at
        self._entries.move_to_end(image)
        self._schedule(image, entry)

    def _schedule(self, image: ImageName, entry: Entry) -> None:
        """Into its expiry order (charged): a failure to be swept, layers to revalidate."""
        if entry.expires_at == math.inf:
            return
        (self._due if entry.layers is not None else self._failed)[image] = None
        self._bytes += EXPIRY_BYTES
        self.budget.charge(EXPIRY_BYTES)

    def _unschedule(self, image: ImageName, entry: Entry) -> None:
        order = self._due if entry.layers is not None else self._failed
        if order.pop(image, False) is None:
            self._bytes -= EXPIRY_BYTES
            self.budget.charge(-EXPIRY_BYTES)

    def _entry(self, fetched: Fetched, expires_at: float) -> Entry:
        """The entry of ``fetched``: its layers the tuple its digest's tags share (one per
        digest; a digest whose layers differ from the shared ones keeps its own)."""
        digest = fetched.digest
        if digest is None:
            return Entry(fetched.layers, expires_at, None, None)
        record = self._shared.get(digest)
        if record is None:
            record = self._shared[digest] = SharedLayers(digest, fetched.layers)
            self._bytes += record.cost_bytes
            self.budget.charge(record.cost_bytes)
        elif record.layers != fetched.layers:
            return Entry(fetched.layers, expires_at, None, digest)
        record.count += 1
        # the record's digest string and tuple: its entries hold no copy of their own
        return Entry(record.layers, expires_at, None, record.digest, shared=True)

    def _put(self, image: ImageName, entry: Entry) -> None:
        self._drop(image)
        self._entries[image] = entry
        cost = entry_cost_bytes(image, entry)
        self._bytes += cost
        self.budget.charge(cost)
        self._schedule(image, entry)
        self._sweep(self.clock(), SWEEP_BATCH)
        while len(self._entries) > self.max_entries:
            self.evict_oldest()
        self.budget.settle()

    def _sweep(self, now: float, limit: int | None) -> None:
        """Drop failures whose TTL passed (at most ``limit``), oldest first."""
        swept = 0
        while self._failed and (limit is None or swept < limit):
            image = next(iter(self._failed))
            if self._entries[image].expires_at >= now:
                return
            self._drop(image)
            swept += 1
        self.swept += swept

    def _drop(self, image: ImageName) -> None:
        entry = self._entries.pop(image, None)
        if entry is None:
            return
        self._unschedule(image, entry)
        cost = entry_cost_bytes(image, entry)
        if entry.shared:
            assert entry.digest is not None
            record = self._shared[entry.digest]
            record.count -= 1
            if record.count == 0:
                del self._shared[entry.digest]
                cost += record.cost_bytes
        self._bytes -= cost
        self.budget.charge(-cost)


def _parsed(image: ImageName) -> tuple[ImageReference | None, LayerResolutionError | None]:
    """``image`` as a reference, or None and the error naming it (a runtime's name such as
    ``<none>@<none>`` is none: a registry cannot be asked for it)."""
    try:
        return ImageReference.parse(image), None
    except ImageReferenceError as err:
        return None, LayerResolutionError(f"resolving layers of {image!r}: {err}")
