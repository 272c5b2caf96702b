"""The HTTP server: kube-scheduler's extender verbs, health and metrics on aiohttp."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from layersched.core.errors import InputError, LayerschedError
from layersched.core.layers import LayerSource
from layersched.core.strategies import Strategy
from layersched.extender._inventory import InventoryProvider, StaticInventoryProvider
from layersched.extender._metrics import ExtenderMetrics
from layersched.extender._prioritize import Extender
from layersched.extender._resolver import DEFAULT_WORKERS, DeadlineResolver
from layersched.extender._wire import ErrorBody, ExtenderArgs, FilterArgs

log = logging.getLogger("layersched.extender")

#: Largest request accepted. A full-Nodes request for 5,000 nodes with 50 images
#: each is ~50 MB of JSON; aiohttp's own 1 MiB default would refuse 500 nodes.
MAX_REQUEST_BYTES = 256 * 1024 * 1024
#: Default deadline for resolving a pod's layers, well under kube-scheduler's
#: httpTimeout: a late answer delays every pod behind it.
DEFAULT_RESOLVE_TIMEOUT_S = 0.2
#: A full-Nodes request allocates tens of thousands of short-lived containers;
#: with CPython's default thresholds (700, 10, 10) they set off full collections
#: that scan every long-lived object and add ~20 ms to a request's tail. Collect
#: young objects less often (request objects hold no cycles: reference counting
#: frees them) and freeze what exists once the inventory is loaded.
GC_THRESHOLDS = (50_000, 20, 100)
HTTP_OK = 200
HTTP_BAD_REQUEST = 400
HTTP_TOO_LARGE = 413
HTTP_SERVER_ERROR = 500
HTTP_UNAVAILABLE = 503

_ENCODER = msgspec.json.Encoder()
_ARGS = msgspec.json.Decoder(ExtenderArgs)
_FILTER_ARGS = msgspec.json.Decoder(FilterArgs)
#: The key under which the app keeps its Extender.
EXTENDER_KEY: web.AppKey[Extender] = web.AppKey("extender", Extender)


class ExtenderError(LayerschedError):
    """The extender server could not start or keep running."""


def _json(body: object, status: int = HTTP_OK) -> web.Response:
    return web.Response(body=_ENCODER.encode(body), status=status, content_type="application/json")


def _error(verb: str, message: str, status: int) -> web.Response:
    return _json(ErrorBody(f"{verb}: {message}"), status)


def _verb(
    name: str, answer: Callable[[Extender, bytes], Awaitable[object]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler for extender verb ``name``: decode, answer, time, count, map errors to 4xx/5xx."""

    async def handler(request: web.Request) -> web.Response:
        extender = request.app[EXTENDER_KEY]
        started = time.perf_counter()
        try:
            response = _json(await answer(extender, await request.read()))
        except web.HTTPRequestEntityTooLarge as err:
            response = _error(
                name,
                f"request body too large ({(err.text or '').rstrip('.')}): send NodeNames "
                "(nodeCacheCapable: true) instead of full Nodes",
                HTTP_TOO_LARGE,
            )
        except msgspec.DecodeError as err:
            response = _error(name, f"malformed ExtenderArgs: {err}", HTTP_BAD_REQUEST)
        except InputError as err:
            response = _error(name, str(err), HTTP_BAD_REQUEST)
        except LayerschedError as err:
            log.error("%s failed: %s", name, err)
            response = _error(name, str(err), HTTP_SERVER_ERROR)
        if response.status != HTTP_OK:
            log.info("%s: %d %s", name, response.status, response.text)
        metrics = extender.metrics
        metrics.latency_s.labels(name).observe(time.perf_counter() - started)
        metrics.requests.labels(name, str(response.status)).inc()
        return response

    return handler


async def _prioritize(extender: Extender, body: bytes) -> object:
    return await extender.prioritize(_ARGS.decode(body))


async def _filter(extender: Extender, body: bytes) -> object:
    return extender.filter(_FILTER_ARGS.decode(body))


async def _healthz(request: web.Request) -> web.Response:
    if request.app[EXTENDER_KEY].provider.current() is None:
        return web.Response(status=HTTP_UNAVAILABLE, text="loading the node inventory\n")
    return web.Response(text="ok\n")


async def _metrics(request: web.Request) -> web.Response:
    registry = request.app[EXTENDER_KEY].metrics.registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def make_extender(
    strategy: Strategy,
    source: LayerSource,
    provider: InventoryProvider | None = None,
    *,
    resolve_timeout_s: float = DEFAULT_RESOLVE_TIMEOUT_S,
    resolve_workers: int = DEFAULT_WORKERS,
) -> Extender:
    """An Extender for ``strategy`` (provider: the ``NodeNames`` inventory; none = empty)."""
    resolver = DeadlineResolver(source, timeout_s=resolve_timeout_s, workers=resolve_workers)
    provider = provider or StaticInventoryProvider(None, source)
    metrics = ExtenderMetrics(source, resolver, provider.current)
    return Extender(strategy, resolver, provider, metrics)


def create_app(
    extender: Extender, *, max_request_bytes: int = MAX_REQUEST_BYTES
) -> web.Application:
    """The aiohttp application serving ``extender`` (bodies above ``max_request_bytes`` get 413)."""
    app = web.Application(client_max_size=max_request_bytes)
    app[EXTENDER_KEY] = extender
    app.router.add_post("/prioritize", _verb("prioritize", _prioritize))
    app.router.add_post("/filter", _verb("filter", _filter))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", _metrics)
    return app


def _load_in_thread(provider: InventoryProvider) -> asyncio.Future[None]:
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


async def _until(event: asyncio.Event) -> None:
    await event.wait()


async def serve(
    extender: Extender,
    host: str,
    port: int,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; load the provider's inventory meanwhile (503 until then).

    Raises :class:`ExtenderError` if the port cannot be bound, and the
    provider's LayerschedError if the inventory cannot be loaded.
    """
    runner = web.AppRunner(create_app(extender), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as err:
        await runner.cleanup()
        raise ExtenderError(
            f"cannot listen on {host}:{port} ({err.strerror}): is another process using "
            "the port? choose another one with --port"
        ) from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if on_listening is not None:
        on_listening(f"http://{host}:{port}")
    gc.set_threshold(*GC_THRESHOLDS)
    loading = _load_in_thread(extender.provider)
    stopping: asyncio.Future[None] = asyncio.ensure_future(_until(stop))
    try:
        await asyncio.wait([loading, stopping], return_when=asyncio.FIRST_COMPLETED)
        if loading.done():
            loading.result()  # raises the load error
            gc.collect()
            gc.freeze()  # the inventory lives as long as the process: keep the collector off it
            await stopping
        log.info("stopping on signal")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        stopping.cancel()
        await runner.cleanup()
        extender.resolver.close()
