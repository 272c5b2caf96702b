"""The HTTP server: the extender's applications (its verbs, :mod:`._verbs`; its debug
endpoints, :mod:`._debug`; health and metrics), the inventory's loading and the memory
recycle, in the service shell (:mod:`layersched.serving`: probes, metrics, TLS, listening
and signals)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from layersched.core.layers import LayerSource
from layersched.core.strategies import Strategy
from layersched.extender import _memory
from layersched.extender._debug import add_debug_routes
from layersched.extender._metrics import ExtenderMetrics
from layersched.extender._platforms import Platforms
from layersched.extender._prioritize import Extender
from layersched.extender._providers import LayerIndexProvider, StaticLayerIndexProvider
from layersched.extender._pull_secrets import PullSecrets
from layersched.extender._resolver import DEFAULT_WORKERS, DeadlineResolver
from layersched.extender._verbs import (
    EXTENDER_KEY,
    GATE_KEY,
    MAX_CONCURRENT_REQUESTS,
    REQUEST_READ_TIMEOUT_S,
    Gate,
    add_verb_routes,
)
from layersched.registry import MemoryBudget
from layersched.serving import (
    HEALTHZ_PATH,
    LIVEZ_PATH,
    READYZ_PATH,
    Listener,
    ReloadingTls,
    Serving,
    ServingError,
    add_health_routes,
    always_ok,
)
from layersched.serving import serve as serve_listeners

log = logging.getLogger("layersched.extender")

#: Largest request accepted by default (``--max-request-bytes``), sized for ``NodeNames``
#: requests (``nodeCacheCapable: true``, the deployment's mode): a Pod of at most 1.5 MiB
#: (etcd's default request limit bounds the object kube-scheduler sends) and 5,000 names
#: (Kubernetes' supported maximum) of at most 253 characters, quoted and separated: 1.28
#: MB. 4 MiB holds both with 1.4x headroom. Full-``Nodes`` requests are far larger (42.8
#: MB at 5,000 nodes of 50 images): such a deployment passes ``--max-request-bytes
#: 67108864``. See docs/extender.md.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: After answering a request whose body was not read to its end (413, 408, 503), the rest
#: is read and dropped for at most this long, so that the client can read the answer;
#: then the connection closes (aiohttp's default is 10 s).
LINGERING_S = 1.0
#: How long SIGTERM waits for in-flight requests by default (``--shutdown-grace-s``):
#: an answer takes milliseconds; kube-scheduler's recommended httpTimeout is 1 s.
SHUTDOWN_GRACE_S = 5.0
#: Default deadline for resolving a pod's layers, well under kube-scheduler's
#: httpTimeout: a late answer delays every pod behind it.
DEFAULT_RESOLVE_TIMEOUT_S = 0.2
#: A full-Nodes request allocates tens of thousands of short-lived containers;
#: with CPython's default thresholds (700, 10, 10) they set off full collections
#: that scan every long-lived object and add ~20 ms to a request's tail. Collect
#: young objects less often (request objects hold no cycles: reference counting
#: frees them) and freeze what exists once the inventory is loaded.
GC_THRESHOLDS = (50_000, 20, 100)
#: Before re-executing, a request on a connection just accepted gets this long to reach
#: its handler, ...
RECYCLE_SETTLE_S = 0.05
#: ... and the requests in flight this long to finish.
RECYCLE_GRACE_S = 1.0


class ExtenderError(ServingError):
    """The extender server could not start or keep running."""


def make_extender(
    strategy: Strategy,
    source: LayerSource,
    provider: LayerIndexProvider | None = None,
    *,
    resolve_timeout_s: float = DEFAULT_RESOLVE_TIMEOUT_S,
    resolve_workers: int = DEFAULT_WORKERS,
    clock: Callable[[], float] = time.monotonic,
    platforms: Platforms | None = None,
    budget: MemoryBudget | None = None,
    pull_secrets: PullSecrets | None = None,
) -> Extender:
    """An Extender for ``strategy`` (provider: the ``NodeNames`` inventory; none = empty;
    ``clock``: the resolver's monotonic clock, injected by tests to cross TTLs;
    ``platforms``: a layer source per node platform, ``source`` being the default's;
    ``budget``: the memory budget every platform's layer cache is charged to, shared with
    the registries refused; ``pull_secrets``: pods' pull secrets and a resolver per
    credential, ``--pull-secrets``)."""
    resolver = DeadlineResolver(
        source, timeout_s=resolve_timeout_s, workers=resolve_workers, clock=clock, budget=budget
    )
    provider = provider or StaticLayerIndexProvider(None, source, platforms)
    metrics = ExtenderMetrics(source, resolver, provider.current)
    collector = provider.collector()
    if collector is not None:  # a watching provider reports its watches
        metrics.registry.register(collector)
    if pull_secrets is not None:
        metrics.registry.register(pull_secrets.collector())
    return Extender(strategy, resolver, provider, metrics, platforms, pull_secrets)


def create_app(
    extender: Extender,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    read_timeout_s: float = REQUEST_READ_TIMEOUT_S,
    debug_endpoints: bool = False,
) -> web.Application:
    """The aiohttp application serving ``extender``'s verbs (bodies above
    ``max_request_bytes`` get 413, bodies slower than ``read_timeout_s`` 408; past
    ``max_concurrent_requests`` requests are answered without work), its health and
    metrics, and ``/debug/*`` (to local clients only, unless ``debug_endpoints``)."""
    app = web.Application(client_max_size=max_request_bytes)
    app[EXTENDER_KEY] = extender
    gate = Gate(max_concurrent_requests, read_timeout_s)
    in_progress = extender.metrics.in_progress
    in_progress.labels("reading").set_function(lambda: gate.reading)
    in_progress.labels("working").set_function(lambda: gate.busy)
    in_progress.labels("shedding").set_function(lambda: gate.shedding)
    add_verb_routes(app, gate)
    _add_health_routes(app, debug_endpoints)
    return app


def create_health_app(extender: Extender, *, debug_endpoints: bool = False) -> web.Application:
    """The application of ``--health-port``: ``/livez``, ``/readyz``, ``/healthz`` and
    ``/metrics`` (and ``/debug/*``, to local clients only unless ``debug_endpoints``), so
    that probes and scrapes reach the pod while the verbs stay on loopback. Its bodies
    are bounded like any GET's (aiohttp's 1 MiB default)."""
    app = web.Application()
    app[EXTENDER_KEY] = extender
    _add_health_routes(app, debug_endpoints)
    return app


def _add_health_routes(app: web.Application, debug_endpoints: bool) -> None:
    provider = app[EXTENDER_KEY].provider
    add_health_routes(
        app,
        # ready once the inventory is loaded (a watch: listed once); while a watch
        # re-syncs the held inventory is still served, and the body says so. /healthz
        # is /readyz, kept for probes and configurations written before it.
        {HEALTHZ_PATH: provider.ready, LIVEZ_PATH: always_ok, READYZ_PATH: provider.ready},
        app[EXTENDER_KEY].metrics.registry,
    )
    add_debug_routes(app, debug_endpoints)


def _load_in_thread(provider: LayerIndexProvider) -> asyncio.Future[None]:
    """Run ``provider.load()`` on a daemon thread (a SIGTERM need not wait for it)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            provider.load()
        except Exception as err:  # noqa: BLE001 - handed to the event loop, raised there
            error = err
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="layersched-inventory", daemon=True).start()
    return future


async def _until_stopped(serving: Serving) -> None:
    await serving.stopped.wait()


async def _until_recycle(extender: Extender, recycler: _memory.Recycler) -> None:
    """Return once ``recycler`` wants a recycle: every check period, this process's
    resident memory against what it holds (the provider's objects and the layer
    caches)."""
    while True:
        await asyncio.sleep(_memory.RECYCLE_CHECK_PERIOD_S)
        held = extender.provider.held_bytes() + extender.cached_bytes()
        if recycler.check(_memory.rss_bytes(), held):
            return


async def _recycle(serving: Serving, recycler: _memory.Recycler) -> None:
    """Re-execute with the listening sockets: stop accepting (new connections wait in
    the backlog for the new process), let requests on connections just accepted reach
    their handler, close idle keep-alive connections, and give the requests in flight up
    to RECYCLE_GRACE_S (cut after that: kube-scheduler, whose extender is ignorable,
    scores those pods without us)."""
    await serving.drain(RECYCLE_SETTLE_S, RECYCLE_GRACE_S)
    log.warning(
        "recycling: resident memory is %d MiB over what a fresh process holding this "
        "inventory needs (bound %d MiB): memory freed after a burst is kept by the "
        "allocator; re-executing with the listening sockets (the new process answers "
        "neutral scores until it has listed the inventory)",
        recycler.excess_bytes // 2**20,
        recycler.bound_bytes() // 2**20,
    )
    try:
        _memory.reexec(serving.sockets, recycler)
    except OSError as err:  # the process then exits, and its container starts afresh
        raise ExtenderError(
            f"re-executing {sys.executable} for a recycle failed ({err.strerror}): the "
            "extender stops; --recycle-excess-mib 0 turns recycling off"
        ) from None


@dataclass(frozen=True, slots=True)
class HealthListener:
    """Where ``/livez``, ``/readyz``, ``/healthz`` and ``/metrics`` are served besides the
    verb port (``--health-host``, ``--health-port``): plain HTTP, for probes and scrapes."""

    host: str
    port: int


async def _run(
    serving: Serving,
    extender: Extender,
    gate: Gate,
    recycler: _memory.Recycler | None,
    shutdown_grace_s: float,
) -> None:
    """Load the provider's inventory (503 until then), then serve until the signal, or
    until ``recycler`` wants a recycle."""
    if recycler is not None and recycler.enabled:
        extender.metrics.registry.register(recycler)
    gc.set_threshold(*GC_THRESHOLDS)
    extender.provider.bind_loop(asyncio.get_running_loop())  # a watch applies changes here
    loading = _load_in_thread(extender.provider)
    stopping: asyncio.Future[None] = asyncio.ensure_future(_until_stopped(serving))
    recycling: asyncio.Future[None] | None = None
    try:
        await asyncio.wait([loading, stopping], return_when=asyncio.FIRST_COMPLETED)
        if loading.done():
            loading.result()  # raises the load error
            if recycler is not None:
                recycler.loaded()
                if recycler.ready_after_s is not None:
                    log.info(
                        "recycled (re-execution %d): the inventory is listed again, %.1f s "
                        "after the recycle was decided",
                        recycler.count,
                        recycler.ready_after_s,
                    )
            gc.collect()
            gc.freeze()  # the inventory lives as long as the process: keep the collector off it
            if recycler is not None and recycler.enabled:
                recycling = asyncio.ensure_future(_until_recycle(extender, recycler))
                await asyncio.wait([stopping, recycling], return_when=asyncio.FIRST_COMPLETED)
                if recycling.done() and not stopping.done():
                    await _recycle(serving, recycler)
            else:
                await stopping
        log.info(
            "stopping on signal: no new connections; %d requests in flight get up to %.1f s",
            gate.reading + gate.busy + gate.shedding,
            shutdown_grace_s,
        )
    finally:
        stopping.cancel()
        if recycling is not None:
            recycling.cancel()


def _listeners(
    app: web.Application,
    extender: Extender,
    host: str,
    port: int,
    tls: ReloadingTls | None,
    health: HealthListener | None,
    debug_endpoints: bool,
) -> list[Listener]:
    """The verb listener of ``app`` (on ``tls`` when given) and the health one, each on the
    sockets a recycled process was handed for it, else bound anew."""
    try:
        inherited = _memory.inherited_sockets()
    except ValueError as err:
        raise ExtenderError(str(err)) from None
    os.environ.pop(_memory.SOCKETS_ENV, None)  # not handed on to anything else
    listeners = [
        Listener(
            app,
            host,
            port,
            "--port",
            tls=tls,
            name="verb",
            inherited=inherited.get("verb", ()),
            lingering_s=LINGERING_S,
        )
    ]
    if health is not None:
        listeners.append(
            Listener(
                create_health_app(extender, debug_endpoints=debug_endpoints),
                health.host,
                health.port,
                "--health-port",
                label=" (health and metrics)",
                name="health",
                inherited=inherited.get("health", ()),
                lingering_s=LINGERING_S,
            )
        )
    return listeners


async def serve(
    extender: Extender,
    host: str,
    port: int,
    on_listening: Callable[[str], None] | None = None,
    *,
    tls: ReloadingTls | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    read_timeout_s: float = REQUEST_READ_TIMEOUT_S,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    health: HealthListener | None = None,
    debug_endpoints: bool = False,
    recycler: _memory.Recycler | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; load the provider's inventory meanwhile (503 until then).

    On the signal the listening sockets close at once, and requests in flight get up to
    ``shutdown_grace_s`` to finish. ``health``: a second listener for probes and metrics.
    ``recycler``: once it wants a recycle, the process re-executes itself with its
    listening sockets (extender/_memory.py); a re-executed process serves the sockets it
    was handed.
    Raises :class:`~layersched.serving.ServingError` if a port cannot be bound, and the
    provider's LayerschedError if the inventory cannot be loaded.
    """
    app = create_app(
        extender,
        max_request_bytes=max_request_bytes,
        max_concurrent_requests=max_concurrent_requests,
        read_timeout_s=read_timeout_s,
        debug_endpoints=debug_endpoints,
    )
    listeners = _listeners(app, extender, host, port, tls, health, debug_endpoints)
    gate = app[GATE_KEY]
    try:
        await serve_listeners(
            listeners,
            lambda running: _run(running, extender, gate, recycler, shutdown_grace_s),
            on_listening=on_listening,
            shutdown_grace_s=shutdown_grace_s,
        )
    finally:
        extender.close()
