"""Layer resolution with a deadline, so a slow registry never stalls kube-scheduler.

kube-scheduler waits up to ``httpTimeout`` for an extender (30 s by default) and
schedules nothing meanwhile. A pod whose layers are not known yet therefore gets
an answer within ``timeout_s`` regardless: if the layer source has not answered
by then the caller scores neutrally, while the resolution runs on in a bounded
worker pool and its result warms the cache for the next pod with that image.

Pod images come first. Node images of full-``Nodes`` requests (thousands on a
cold start) are warmed on a pool and queue of their own, so they never hold up
a pod image. A warm-up is found by the name it resolves (a repo digest when
kubelet reports one): a pod naming its image that way and finding it still
queued moves it to the pod pool, or joins it if it is running.

Offline sources (``--layers``, or none) answer from memory, so they are called
inline: no thread hop, no cache in front of them.

Remote answers are kept in the one layer cache (:class:`~layersched.registry.LayerCache`:
TTLs, revalidation by digest, failures as text; the registry source is a plain fetcher),
charged to the extender's one :class:`~layersched.registry.MemoryBudget`, which every
platform's resolver and the registries refused share (issue 44).
A digest-pinned name never expires; a tag's layers are revalidated in the background
once ``POSITIVE_TTL_S`` has passed, and the old answer is served meanwhile (and kept if
the registry cannot be reached). Names whose layers changed on revalidation are reported
by :meth:`DeadlineResolver.changed`, so that caches built from them (the full-``Nodes``
slot cache) drop just those.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from layersched.core.errors import LayerResolutionError, LayerschedError
from layersched.core.layers import Layer, LayerSource, NoLayerSource, StaticLayerSource
from layersched.core.reference import ImageName
from layersched.extender._cached_source import CachedSource, preferred_order
from layersched.extender._failure_log import FailureLog
from layersched.registry import Entry, LayerCache, MemoryBudget

log = logging.getLogger(__name__)

#: Pod-image resolutions in flight or queued at most; beyond this a pod is
#: answered neutrally without queueing more work (no unbounded queue).
MAX_PENDING = 256
#: Node-image resolutions in flight or queued at most; the rest are queued by a
#: later request (a cold 500-node request names ~2,000 distinct images).
MAX_WARMING = 1024
#: Parallel registry conversations for pod images.
DEFAULT_WORKERS = 4

Future = concurrent.futures.Future[tuple[Layer, ...]]


def _retrieve(future: asyncio.Future[tuple[Layer, ...]]) -> None:
    """Mark a wrapper's outcome as seen: a late failure must not be logged as
    "Future exception was never retrieved" (the failure is logged once, by us)."""
    if not future.cancelled():
        future.exception()


def _resolve_offline(
    source: LayerSource, images: Sequence[ImageName], failures: FailureLog
) -> dict[ImageName, tuple[Layer, ...]] | None:
    """Layers of each of ``images`` from an offline source (inline), or None if any is
    unknown."""
    found: dict[ImageName, tuple[Layer, ...]] = {}
    for image in images:
        try:
            found[image] = source.resolve(image)
        except LayerResolutionError as err:
            failures.unknown_offline(image, err)
            return None
    return found


class DeadlineResolver:
    """Resolves images through ``source`` within a deadline; caches remote answers.

    ``workers`` threads resolve pod images; ``warm_workers`` more (default half as
    many, at least one) warm node images, so the two never queue behind each other.
    ``budget``: the memory budget its cache is charged to (the extender's one, shared by
    every platform's resolver), else one of its own.
    """

    def __init__(
        self,
        source: LayerSource,
        *,
        timeout_s: float,
        workers: int = DEFAULT_WORKERS,
        max_pending: int = MAX_PENDING,
        warm_workers: int | None = None,
        max_warming: int = MAX_WARMING,
        clock: Callable[[], float] = time.monotonic,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.source = source
        #: Monotonic seconds; injected by tests to cross the TTLs without waiting.
        self.clock = clock
        self.timeout_s = timeout_s
        #: Offline sources are answered inline.
        self.local = isinstance(source, StaticLayerSource | NoLayerSource)
        self._max_pending = max_pending
        self._max_warming = max_warming
        #: The one cache of remote answers (never used for an offline source).
        self.cache = LayerCache(clock=clock, budget=budget)
        self._pending: dict[ImageName, Future] = {}
        self._warming: dict[ImageName, Future] = {}
        # re-entrant: cancelling a queued warm-up runs its done callback, which locks
        self._lock = threading.RLock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._warm_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._workers = workers
        self._warm_workers = warm_workers if warm_workers is not None else max(1, workers // 2)
        self._failures = FailureLog(clock)
        #: Pods answered neutrally because resolution missed the deadline.
        self.timeouts = 0
        #: Pod images not queued because MAX_PENDING resolutions were already under way.
        self.rejected = 0

    def sibling(self, source: LayerSource) -> DeadlineResolver:
        """A resolver for ``source`` with this one's deadline, pools' sizes and clock
        (another platform's)."""
        return DeadlineResolver(
            source,
            timeout_s=self.timeout_s,
            workers=self._workers,
            max_pending=self._max_pending,
            warm_workers=self._warm_workers,
            max_warming=self._max_warming,
            clock=self.clock,
            budget=self.cache.budget,
        )

    @property
    def revalidations(self) -> int:
        """Tag entries revalidated (answered again by the source, changed or not)."""
        return self.cache.revalidations

    # ---------------------------------------------------------------- cache
    def _lookup(self, image: ImageName) -> Entry | None:
        """The cached answer for ``image``, or None. A failure is forgotten once it expires
        (retried); expired layers are still returned, and revalidated in the background."""
        entry, stale = self.cache.get(image)
        if stale:
            self.warm(image)  # stale while revalidating
        return entry

    def revalidate_due(self) -> None:
        """Queue the revalidation of every tag entry past its TTL (call it per request: it
        costs nothing until one is due). Node images the slot cache answers are never
        looked up, so this is what refreshes them."""
        with self._lock:
            room = self._max_warming - len(self._warming)
        if room <= 0:
            return  # the next request queues the rest
        for image in self.cache.due(limit=room):
            self.warm(image)

    def changed(self) -> set[ImageName]:
        """Names whose layers changed on revalidation since the last call (then forgotten)."""
        return self.cache.changed()

    def _resolve_now(self, image: ImageName, for_pod: bool) -> tuple[Layer, ...]:
        failures = self._failures
        try:
            return self.cache.refresh(image, self.source, lambda err: failures.kept(image, err))
        except LayerschedError as err:
            if for_pod:
                failures.pod_failed(image, err)
            else:
                failures.node_failed(image, err)
            raise
        except Exception as err:
            # a bug in the layer source: negative-cached like any failure, so pods do not
            # queue it again and again
            self.cache.store(image, None, err)
            failures.bug(image, err, for_pod=for_pod)
            kept_layers = self.cache.layers_of(image)  # kept through a failed revalidation
            if kept_layers is not None:
                return kept_layers
            raise LayerResolutionError(
                f"resolving layers of {image!r}: the layer source failed unexpectedly ({err!r})"
            ) from err

    def _joined_warm_up(self, image: ImageName, future: Future) -> None:
        """Done callback of a node-image warm-up a pod waits for: the warm-up logs its
        failure as a node image's (once per 5 min); the pod's own warning is logged here."""
        if future.cancelled():
            return
        err = future.exception()
        if err is not None:
            self._failures.pod_failed(image, err)

    def _finished(self, queue: dict[ImageName, Future], image: ImageName, future: Future) -> None:
        with self._lock:
            if queue.get(image) is future:
                del queue[image]

    def _start(self, image: ImageName, *, for_pod: bool) -> Future:
        """Queue ``image`` on its pool (lock held by the caller)."""
        if for_pod:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self._workers, thread_name_prefix="layersched-resolve"
                )
            pool, queue = self._pool, self._pending
        else:
            if self._warm_pool is None:
                self._warm_pool = concurrent.futures.ThreadPoolExecutor(
                    self._warm_workers, thread_name_prefix="layersched-warm"
                )
            pool, queue = self._warm_pool, self._warming
        future = pool.submit(self._resolve_now, image, for_pod)
        queue[image] = future
        return future

    def _submit(self, image: ImageName) -> Future | None:
        """The in-flight resolution of pod image ``image``, started if needed; None when
        saturated. A node-image warm-up of it (under this very name) still queued is
        moved to the pod pool; one already running is joined."""
        with self._lock:
            future = self._pending.get(image)
            if future is not None:
                return future
            warming = self._warming.get(image)
            if warming is not None and (warming.running() or warming.done()):
                return self._join(image, warming)  # under way: as quick as starting it again
            if len(self._pending) >= self._max_pending:
                self.rejected += 1
                return None
            if warming is not None:
                if not warming.cancel():
                    return self._join(image, warming)  # a worker picked it up meanwhile
                self._warming.pop(image, None)
            future = self._start(image, for_pod=True)
        future.add_done_callback(lambda f: self._finished(self._pending, image, f))
        return future

    def _join(self, image: ImageName, warming: Future) -> Future:
        """Wait for a node-image warm-up as a pod: its failure gets the pod's warning too."""
        warming.add_done_callback(lambda f: self._joined_warm_up(image, f))
        return warming

    def known_layers(self, image: ImageName) -> tuple[Layer, ...] | None:
        """The source's answer for ``image`` when it has one already (an offline source
        answers at once); else None, and its resolution is started in the background,
        never awaited. A digest-pinned image's answer is kept for good (its digest names
        its content), so the source is asked once."""
        if self.local:
            try:
                return self.source.resolve(image)
            except LayerResolutionError:
                return None
        entry = self._lookup(image)
        if entry is None:
            self.warm(image)
            return None
        return entry.layers

    def cached_names(self, names: Sequence[ImageName]) -> tuple[Layer, ...] | None:
        """A node image's layers as cached, never asking the source (the event loop's
        view): the layers of the first of ``names`` (a digest first) that has an answer
        of its own, stale or not; None when none has. A name answers only for itself
        (issue 44): what another name of the image resolved to is never its answer."""
        if self.local:
            for name in preferred_order(names):
                try:
                    return self.source.resolve(name)
                except LayerResolutionError:
                    continue
            return None
        layers_of = self.cache.layers_of
        for name in preferred_order(names):
            layers = layers_of(name)
            if layers is not None:
                return layers
        return None

    def resolve_names_now(
        self, names: Sequence[ImageName]
    ) -> tuple[tuple[Layer, ...] | None, float | None]:
        """A node image's layers, blocking (the warm-up's worker): each of ``names`` in
        turn (a digest first) until one has layers of its own, from the cache while its
        answer is fresh, else through the source now (an expired failure is retried, a
        stale tag revalidated). Returns (layers or None, seconds until the answer should
        be looked at again: a tag's TTL, a failure's; None for a digest's, or an offline
        source's, which never change)."""
        if self.local:
            return self.cached_names(names), None
        now = self.clock()
        for name in preferred_order(names):
            entry, stale = self.cache.get(name)
            if entry is not None and not stale:
                if entry.layers is None:
                    continue  # failed recently: retried once its TTL is over
                return entry.layers, _until(entry.expires_at, now)
            try:
                layers = self._resolve_now(name, for_pod=False)
            except LayerschedError:
                continue
            entry, _ = self.cache.get(name)
            return layers, _until(entry.expires_at, now) if entry is not None else None
        return None, self.cache.negative_ttl_s

    def warm(self, image: ImageName) -> None:
        """Resolve node image ``image`` in the background, behind every pod image."""
        with self._lock:
            if image in self._pending or image in self._warming:
                return
            if len(self._warming) >= self._max_warming:
                return  # a later request queues it again
            future = self._start(image, for_pod=False)
        future.add_done_callback(lambda f: self._finished(self._warming, image, f))

    # ------------------------------------------------------------ interface
    async def resolve_pod(
        self, images: Sequence[ImageName]
    ) -> dict[ImageName, tuple[Layer, ...]] | None:
        """Layers of each of ``images``, or None if any is unknown or late (score neutrally)."""
        distinct = list(dict.fromkeys(images))
        if self.local:
            return _resolve_offline(self.source, distinct, self._failures)
        found: dict[ImageName, tuple[Layer, ...]] = {}
        waiting: list[Future] = []
        names: list[ImageName] = []
        for image in distinct:
            entry = self._lookup(image)
            if entry is not None:
                if entry.layers is None:
                    # failed recently: answer at once, retried after NEGATIVE_TTL_S; warned
                    # here if a node-image warm-up failed it (no pod warning yet)
                    self._failures.pod_failed(image, entry.error, warning_only=True)
                    return None
                found[image] = entry.layers
                continue
            future = self._submit(image)
            if future is None:
                return None
            waiting.append(future)
            names.append(image)
        if waiting:
            wrapped = [asyncio.wrap_future(f) for f in waiting]
            for task in wrapped:
                task.add_done_callback(_retrieve)
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
                # cancelled: its resolver was closed meanwhile (a platform dropped, a pull
                # credential past the bound): unresolved, as a failure is
                if task.cancelled() or task.exception() is not None:
                    return None
                found[image] = task.result()
        return found

    def cached_source(self) -> LayerSource:
        """A source that never blocks: cached layers, else schedules resolution and fails.

        For a request's node images: thousands of them cannot wait for a registry.
        """
        return self.source if self.local else CachedSource(self._lookup, self.warm)

    def close(self, *, forget: bool = False) -> None:
        """Stop the workers (running resolutions are abandoned); with ``forget``, also drop
        every cached answer and leave the budget (a platform no node reports any more)."""
        for pool in (self._pool, self._warm_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._warm_pool = None
        if forget:
            self.cache.clear()


def _until(expires_at: float, now: float) -> float | None:
    """Seconds from ``now`` until ``expires_at`` (at least one), None for never."""
    return None if expires_at == math.inf else max(1.0, expires_at - now)
