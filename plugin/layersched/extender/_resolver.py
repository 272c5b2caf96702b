"""Layer resolution with a deadline, so a slow registry never stalls kube-scheduler.

kube-scheduler waits up to ``httpTimeout`` for an extender (30 s by default) and
schedules nothing meanwhile. A pod whose layers are not known yet therefore gets
an answer within ``timeout_s`` regardless: if the layer source has not answered
by then the caller scores neutrally, while the resolution runs on in a bounded
worker pool and its result warms the cache for the next pod with that image.

Offline sources (``--layers``, or none) answer from memory, so they are called
inline: no thread hop, no cache in front of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from layersched.core.errors import LayerResolutionError, LayerschedError
from layersched.core.layers import Layer, LayerSource, NoLayerSource, StaticLayerSource

log = logging.getLogger(__name__)

#: Registry tags move; re-resolve a tag's layers after this long.
POSITIVE_TTL_S = 300.0
#: A failed image is retried after this long, not on every pod (a down registry
#: would otherwise get one request per scheduling cycle per image).
NEGATIVE_TTL_S = 10.0
#: Images whose layers are remembered; a cluster runs far fewer distinct images.
MAX_CACHED_IMAGES = 65_536
#: Resolutions in flight or queued at most; beyond this a pod is answered
#: neutrally without queueing more work (no unbounded queue).
MAX_PENDING = 256
#: Parallel registry conversations.
DEFAULT_WORKERS = 4


class _Entry:
    __slots__ = ("expires_at", "layers")

    def __init__(self, layers: tuple[Layer, ...] | None, expires_at: float) -> None:
        self.layers = layers
        self.expires_at = expires_at


class DeadlineResolver:
    """Resolves images through ``source`` within a deadline; caches remote answers."""

    def __init__(
        self,
        source: LayerSource,
        *,
        timeout_s: float,
        workers: int = DEFAULT_WORKERS,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.source = source
        self.timeout_s = timeout_s
        #: Offline sources are answered inline.
        self.local = isinstance(source, StaticLayerSource | NoLayerSource)
        self._max_pending = max_pending
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._pending: dict[str, concurrent.futures.Future[tuple[Layer, ...]]] = {}
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._workers = workers
        #: Pods answered neutrally because resolution missed the deadline.
        self.timeouts = 0
        #: Images not queued because MAX_PENDING resolutions were already under way.
        self.rejected = 0

    # ---------------------------------------------------------------- cache
    def _lookup(self, image: str) -> _Entry | None:
        with self._lock:
            entry = self._cache.get(image)
            if entry is not None and entry.expires_at < time.monotonic():
                del self._cache[image]
                return None
            return entry

    def _store(self, image: str, layers: tuple[Layer, ...] | None) -> None:
        ttl_s = POSITIVE_TTL_S if layers is not None else NEGATIVE_TTL_S
        with self._lock:
            self._cache[image] = _Entry(layers, time.monotonic() + ttl_s)
            self._cache.move_to_end(image)
            while len(self._cache) > MAX_CACHED_IMAGES:
                self._cache.popitem(last=False)

    def _resolve_now(self, image: str) -> tuple[Layer, ...]:
        try:
            layers = self.source.resolve(image)
        except LayerschedError as err:
            self._store(image, None)
            log.info("resolving layers of %r failed: %s", image, err)
            raise
        self._store(image, layers)
        return layers

    def _finished(self, image: str) -> None:
        with self._lock:
            self._pending.pop(image, None)

    def _submit(self, image: str) -> concurrent.futures.Future[tuple[Layer, ...]] | None:
        """The in-flight resolution of ``image``, started if needed; None when saturated."""
        with self._lock:
            future = self._pending.get(image)
            if future is not None:
                return future
            if len(self._pending) >= self._max_pending:
                self.rejected += 1
                return None
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self._workers, thread_name_prefix="layersched-resolve"
                )
            future = self._pool.submit(self._resolve_now, image)
            self._pending[image] = future
        future.add_done_callback(lambda _: self._finished(image))
        return future

    # ------------------------------------------------------------ interface
    async def resolve_pod(self, images: Sequence[str]) -> dict[str, tuple[Layer, ...]] | None:
        """Layers of each of ``images``, or None if any is unknown or late (score neutrally)."""
        distinct = list(dict.fromkeys(images))
        if self.local:
            try:
                return {image: self.source.resolve(image) for image in distinct}
            except LayerResolutionError as err:
                log.info("pod image layers unknown: %s", err)
                return None
        found: dict[str, tuple[Layer, ...]] = {}
        waiting: list[concurrent.futures.Future[tuple[Layer, ...]]] = []
        names: list[str] = []
        for image in distinct:
            entry = self._lookup(image)
            if entry is not None:
                if entry.layers is None:
                    return None  # failed recently: answer at once, retried after NEGATIVE_TTL_S
                found[image] = entry.layers
                continue
            future = self._submit(image)
            if future is None:
                return None
            waiting.append(future)
            names.append(image)
        if waiting:
            wrapped = [asyncio.wrap_future(f) for f in waiting]
            done, _ = await asyncio.wait(wrapped, timeout=self.timeout_s)
            if len(done) < len(wrapped):
                self.timeouts += 1
                log.info(
                    "layers of %s not resolved within %.3f s: scoring neutrally, "
                    "resolution continues in the background",
                    ", ".join(repr(n) for n in names),
                    self.timeout_s,
                )
                return None
            for image, task in zip(names, wrapped, strict=True):
                if task.exception() is not None:
                    return None
                found[image] = task.result()
        return found

    def cached_source(self) -> LayerSource:
        """A source that never blocks: cached layers, else schedules resolution and fails.

        For a request's node images: thousands of them cannot wait for a registry.
        """
        return self.source if self.local else _CachedOnly(self)

    def close(self) -> None:
        """Stop the workers (running resolutions are abandoned)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


class _CachedOnly:
    """A LayerSource view of the resolver's cache for node images."""

    def __init__(self, resolver: DeadlineResolver) -> None:
        self._resolver = resolver

    def resolve(self, image: str) -> tuple[Layer, ...]:
        entry = self._resolver._lookup(image)
        if entry is not None and entry.layers is not None:
            return entry.layers
        if entry is None:
            self._resolver._submit(image)
        raise LayerResolutionError(f"layers of {image!r} are not cached yet (being resolved)")
