"""A cached, thread-safe :class:`~layersched.core.layers.LayerSource` backed by registries.

Two caches sit in front of :class:`RegistryClient`:

* digest -> layers, a bounded LRU: a digest names immutable content, so an
  entry never goes stale (the client's platform is fixed, so the key is just
  the digest the reference points to, index or manifest);
* tag -> digest, with a TTL: tags move. A fresh entry answers without any
  request; an expired one is revalidated with one ``HEAD`` (no body, and not
  counted against Docker Hub's pull limit), and only a changed digest costs
  a manifest ``GET``.

Network calls happen outside the lock, so concurrent resolves of one cold
image may both fetch it; the result is the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from layersched.core.errors import (
    InputError,
    LayerResolutionError,
    ManifestError,
    RegistryError,
    RegistryNotAllowedError,
)
from layersched.core.layers import Layer
from layersched.core.reference import ImageReference
from layersched.registry._client import RegistryClient

log = logging.getLogger(__name__)

# One entry is a handful of (digest, size) pairs (~1 kB); 4096 images ≈ 4 MB.
DEFAULT_CACHE_SIZE = 4096
# kubelet refreshes node images every ~30 s; a tag moving faster than 5 min is rare.
DEFAULT_TAG_TTL_S = 300.0


K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    """A bounded mapping that forgets the least recently used entry (not thread-safe)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class RegistryLayerSource:
    """Resolves image references to layers through a :class:`RegistryClient`, cached.

    Counters (plain ints, read by the extender's metrics): ``cache_hits``
    (answered from the digest cache), ``cache_misses`` (a manifest had to be
    fetched), ``registry_errors`` (resolution failed at the registry),
    ``tag_revalidations`` (an expired tag was re-checked with HEAD),
    ``not_allowed`` (an image named a registry outside the client's allowlist:
    no request, and one log line per registry).
    """

    def __init__(
        self,
        client: RegistryClient,
        cache_size: int = DEFAULT_CACHE_SIZE,
        tag_ttl_s: float = DEFAULT_TAG_TTL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.tag_ttl_s = tag_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._layers: _LRU[str, tuple[Layer, ...]] = _LRU(cache_size)
        # canonical tagged name -> (digest, expires_at); kept after expiry for revalidation.
        self._tags: _LRU[str, tuple[str, float]] = _LRU(cache_size)
        self.cache_hits = 0
        self.cache_misses = 0
        self.registry_errors = 0
        self.tag_revalidations = 0
        self.not_allowed = 0
        self._refused_registries: set[str] = set()

    def resolve(self, image: str) -> tuple[Layer, ...]:
        try:
            ref = ImageReference.parse(image)
        except InputError as err:
            raise LayerResolutionError(f"resolving layers of {image!r}: {err}") from err
        try:
            return self._resolve(image, ref)
        except RegistryNotAllowedError as err:
            with self._lock:
                self.not_allowed += 1
                first = ref.domain not in self._refused_registries
                self._refused_registries.add(ref.domain)
            if first:
                log.warning("%s (logged once per registry)", err)
            raise LayerResolutionError(str(err)) from err
        except (RegistryError, ManifestError) as err:
            with self._lock:
                self.registry_errors += 1
            raise LayerResolutionError(str(err)) from err

    def _resolve(self, image: str, ref: ImageReference) -> tuple[Layer, ...]:
        name = ref.canonical()
        digest = ref.digest
        with self._lock:
            tag_entry = None if digest else self._tags.get(name)
            if tag_entry is not None and self._clock() < tag_entry[1]:
                digest = tag_entry[0]
            cached = self._layers.get(digest) if digest else None
            if cached is not None:
                self.cache_hits += 1
                return cached
        if digest is None and tag_entry is not None:
            digest = self.client.manifest_digest(ref, image=image)
            with self._lock:
                self.tag_revalidations += 1
                if digest is not None:
                    self._tags.put(name, (digest, self._clock() + self.tag_ttl_s))
                    cached = self._layers.get(digest)
                    if cached is not None:
                        self.cache_hits += 1
                        return cached
        resolved = self.client.resolve(ref.with_digest(digest) if digest else ref)
        with self._lock:
            self.cache_misses += 1
            self._layers.put(resolved.digest, resolved.layers)
            if ref.digest is None:
                self._tags.put(name, (resolved.digest, self._clock() + self.tag_ttl_s))
        return resolved.layers

    def cached_images(self) -> int:
        """How many digests have their layers cached."""
        with self._lock:
            return len(self._layers)
