"""The HTTP server: kube-scheduler's extender verbs, health and metrics on aiohttp."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from layersched.core.errors import InputError, LayerschedError
from layersched.core.layers import LayerSource
from layersched.core.strategies import Strategy
from layersched.extender._metrics import ExtenderMetrics
from layersched.extender._platforms import Platforms
from layersched.extender._prioritize import MAX_DECISIONS, Extender
from layersched.extender._providers import InventoryProvider, StaticInventoryProvider
from layersched.extender._resolver import DEFAULT_WORKERS, DeadlineResolver
from layersched.extender._wire import ErrorBody, ExtenderArgs, FilterArgs, NamesOnlyArgs

log = logging.getLogger("layersched.extender")

#: Largest request accepted by default (``--max-request-bytes``). kube-scheduler sends
#: at most the nodes it scores: with the adaptive percentageOfNodesToScore never more
#: than 781 (at 3,125 nodes), and 5,000 (Kubernetes' supported maximum) when it is set
#: to 100. A v1 Node with 50 images is ~8.6 KB of JSON (bench corpus: 42.8 MB for
#: 5,000 nodes), so 64 MiB holds the largest request with 1.5x headroom for fatter
#: node objects. See docs/extender.md.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: Requests worked on at once by default (``--max-concurrent-requests``): one
#: kube-scheduler sends one at a time; more is another scheduler or a flood. Past the
#: limit a request is answered at once without work (neutral scores, every node
#: passing); past twice the limit, with 503 before its body is read (memory bound).
MAX_CONCURRENT_REQUESTS = 4
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
HTTP_OK = 200
HTTP_BAD_REQUEST = 400
HTTP_NOT_FOUND = 404
HTTP_TOO_LARGE = 413
HTTP_SERVER_ERROR = 500
HTTP_UNAVAILABLE = 503
#: Counted (never sent) when a client hangs up mid-body: nginx's "client closed request".
HTTP_CLIENT_CLOSED = 499
#: Retry-After of a 503 answered to a flood, in seconds.
OVERLOAD_RETRY_AFTER_S = 1

_ENCODER = msgspec.json.Encoder()
_ARGS = msgspec.json.Decoder(ExtenderArgs)
_FILTER_ARGS = msgspec.json.Decoder(FilterArgs)
_NAMES_ARGS = msgspec.json.Decoder(NamesOnlyArgs)
#: The key under which the app keeps its Extender.
EXTENDER_KEY: web.AppKey[Extender] = web.AppKey("extender", Extender)


class ExtenderError(LayerschedError):
    """The extender server could not start or keep running."""


def _json(body: object, status: int = HTTP_OK) -> web.Response:
    return web.Response(body=_ENCODER.encode(body), status=status, content_type="application/json")


def _error(verb: str, message: str, status: int) -> web.Response:
    return _json(ErrorBody(f"{verb}: {message}"), status)


class _Gate:
    """How many verb requests are being answered, against ``--max-concurrent-requests``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Requests being worked on (at most ``limit``).
        self.busy = 0
        #: Requests being answered without work because ``busy`` was at the limit.
        self.shedding = 0


#: The key under which the app keeps its concurrency gate.
GATE_KEY: web.AppKey[_Gate] = web.AppKey("gate", _Gate)

Answer = Callable[[Extender, bytes], Awaitable[object]]


def _verb(
    name: str, answer: Answer, shed: Callable[[Extender, bytes], object]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler for extender verb ``name``: decode, answer, time, count, map errors to 4xx/5xx.

    Past the concurrency limit, ``shed`` answers instead (no resolution, no
    scoring: neutral scores or every node passing), counted as overloaded;
    past twice the limit the body is not even read (503).
    """

    async def handler(request: web.Request) -> web.Response:
        extender = request.app[EXTENDER_KEY]
        gate = request.app[GATE_KEY]
        metrics = extender.metrics
        started = time.perf_counter()
        overloaded = gate.busy >= gate.limit
        if overloaded and gate.shedding >= gate.limit:
            metrics.overloaded.labels(name).inc()
            response = _error(
                name,
                f"overloaded: {gate.busy} requests in progress and {gate.shedding} more being "
                "answered neutrally; raise --max-concurrent-requests if this is one scheduler",
                HTTP_UNAVAILABLE,
            )
            response.headers["Retry-After"] = str(OVERLOAD_RETRY_AFTER_S)
            metrics.requests.labels(name, str(response.status)).inc()
            return response
        if overloaded:
            gate.shedding += 1
        else:
            gate.busy += 1
        try:
            body = await request.read()
            if overloaded:
                metrics.overloaded.labels(name).inc()
                response = _json(shed(extender, body))
            else:
                response = _json(await answer(extender, body))
        except web.HTTPRequestEntityTooLarge as err:
            response = _error(
                name,
                f"request body too large ({(err.text or '').rstrip('.')}): send NodeNames "
                "(nodeCacheCapable: true) instead of full Nodes, or raise --max-request-bytes",
                HTTP_TOO_LARGE,
            )
        except msgspec.DecodeError as err:
            response = _error(name, f"malformed ExtenderArgs: {err}", HTTP_BAD_REQUEST)
        except InputError as err:
            response = _error(name, str(err), HTTP_BAD_REQUEST)
        except LayerschedError as err:
            log.error("%s failed: %s", name, err)
            response = _error(name, str(err), HTTP_SERVER_ERROR)
        except ConnectionResetError:
            # the client hung up before sending its whole body: nobody reads an answer
            response = _error(name, "the client closed the connection", HTTP_CLIENT_CLOSED)
        except Exception as err:
            # a bug: answered as JSON, counted and logged with its traceback (not aiohttp's
            # bare 500, which the metrics never saw)
            log.exception(
                "%s failed unexpectedly (a bug: please report it with the traceback)", name
            )
            response = _error(name, f"internal error ({type(err).__name__})", HTTP_SERVER_ERROR)
        finally:
            if overloaded:
                gate.shedding -= 1
            else:
                gate.busy -= 1
        if response.status != HTTP_OK:
            log.info("%s: %d %s", name, response.status, response.text)
        metrics.latency_s.labels(name).observe(time.perf_counter() - started)
        metrics.requests.labels(name, str(response.status)).inc()
        return response

    return handler


T = TypeVar("T")


def _decode(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """``decoder.decode(body)``; every way a body can be malformed is a DecodeError.

    msgspec raises two others, both the client's mistake, not a server error:
    RecursionError when it skips an unknown field nested 100,000 levels deep, and
    UnicodeDecodeError for a string that is not UTF-8.
    """
    try:
        return decoder.decode(body)
    except RecursionError:
        raise msgspec.DecodeError("JSON nested too deeply") from None
    except UnicodeDecodeError as err:
        raise msgspec.DecodeError(f"a string is not valid UTF-8 ({err.reason})") from None


async def _prioritize(extender: Extender, body: bytes) -> object:
    return await extender.prioritize(_decode(_ARGS, body))


async def _filter(extender: Extender, body: bytes) -> object:
    return extender.filter(_decode(_FILTER_ARGS, body))


def _shed_prioritize(extender: Extender, body: bytes) -> object:
    return extender.overloaded(_decode(_NAMES_ARGS, body))


def _shed_filter(extender: Extender, body: bytes) -> object:
    return extender.filter(_decode(_FILTER_ARGS, body))


async def _healthz(request: web.Request) -> web.Response:
    """Ready (the inventory is loaded, or listed once when watching); kept for the probes
    and configurations written before /readyz."""
    return await _readyz(request)


async def _livez(request: web.Request) -> web.Response:
    """The process serves requests (the event loop runs): restart it only when this fails."""
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    """Ready once the inventory is loaded (a watch: listed once). While a watch re-syncs
    the held inventory is still served, and the body says so."""
    ok, why = request.app[EXTENDER_KEY].provider.ready()
    return web.Response(status=HTTP_OK if ok else HTTP_UNAVAILABLE, text=f"{why}\n")


async def _inventory(request: web.Request) -> web.Response:
    """``/debug/inventory?node=NAME``: the image names the extender holds for a node
    (what it scores with), for operators and the testbed's freshness measurement."""
    provider = request.app[EXTENDER_KEY].provider
    node = request.query.get("node", "")
    names = provider.held_images(node)
    if names is None:
        return _error("inventory", f"node {node!r} is not in the inventory", HTTP_NOT_FOUND)
    return _json({"node": node, "images": names})


async def _decisions(request: web.Request) -> web.Response:
    """``/debug/decisions?pod=NAMESPACE/NAME``: the extender's latest answer for a pod
    (its uid, when, the mode, why it was neutral if it was, each node's 0..10 score, and
    the strategy with each node's held and needed bytes); without ``pod``, the pods it
    remembers, most recent last."""
    decisions = request.app[EXTENDER_KEY].decisions
    pod = request.query.get("pod")
    if pod is None:
        return _json({"pods": decisions.pods()})
    decision = decisions.get(pod)
    if decision is None:
        return _error(
            "decisions",
            f"no answer for pod {pod!r} is remembered (give NAMESPACE/NAME; the latest "
            f"{MAX_DECISIONS} pods are kept, fewer on large clusters)",
            HTTP_NOT_FOUND,
        )
    return _json(
        {
            "pod": decision.pod,
            "uid": decision.uid,
            "at_s": decision.at_s,
            "mode": decision.mode,
            "neutral": decision.neutral,
            "scores": decision.scores(),
            "strategy": decision.strategy,
            "bytes": decision.held(),
        }
    )


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
    clock: Callable[[], float] = time.monotonic,
    platforms: Platforms | None = None,
) -> Extender:
    """An Extender for ``strategy`` (provider: the ``NodeNames`` inventory; none = empty;
    ``clock``: the resolver's monotonic clock, injected by tests to cross TTLs;
    ``platforms``: a layer source per node platform, ``source`` being the default's)."""
    resolver = DeadlineResolver(
        source, timeout_s=resolve_timeout_s, workers=resolve_workers, clock=clock
    )
    provider = provider or StaticInventoryProvider(None, source, platforms)
    metrics = ExtenderMetrics(source, resolver, provider.current)
    collector = provider.collector()
    if collector is not None:  # a watching provider reports its watches
        metrics.registry.register(collector)
    return Extender(strategy, resolver, provider, metrics, platforms)


def create_app(
    extender: Extender,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
) -> web.Application:
    """The aiohttp application serving ``extender`` (bodies above ``max_request_bytes`` get
    413; past ``max_concurrent_requests`` requests are answered without work)."""
    app = web.Application(client_max_size=max_request_bytes)
    app[EXTENDER_KEY] = extender
    gate = _Gate(max_concurrent_requests)
    app[GATE_KEY] = gate
    in_progress = extender.metrics.in_progress
    in_progress.labels("working").set_function(lambda: gate.busy)
    in_progress.labels("shedding").set_function(lambda: gate.shedding)
    app.router.add_post("/prioritize", _verb("prioritize", _prioritize, _shed_prioritize))
    app.router.add_post("/filter", _verb("filter", _filter, _shed_filter))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/livez", _livez)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/debug/inventory", _inventory)
    app.router.add_get("/debug/decisions", _decisions)
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


def tls_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) for kube-scheduler's extender ``tlsConfig``.

    With ``client_ca_file`` a client must present a certificate signed by that CA
    (kube-scheduler's ``tlsConfig.certFile``/``keyFile``); without it any client
    may connect. Raises :class:`ExtenderError` naming the file that cannot be used.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as err:
        raise ExtenderError(
            f"loading the TLS certificate {cert_file!r} and key {key_file!r}: {err}: pass a PEM "
            "certificate (chain) with --tls-cert-file and its PEM private key with --tls-key-file"
        ) from None
    if client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise ExtenderError(
                f"loading the client CA {client_ca_file!r}: {err}: pass the PEM certificate of "
                "the CA that signed kube-scheduler's client certificate with --client-ca-file"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def serve(
    extender: Extender,
    host: str,
    port: int,
    on_listening: Callable[[str], None] | None = None,
    *,
    tls: ssl.SSLContext | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
) -> None:
    """Serve until SIGTERM/SIGINT; load the provider's inventory meanwhile (503 until then).

    On the signal the listening socket closes at once, and requests in flight
    get up to ``shutdown_grace_s`` to finish. Raises :class:`ExtenderError` if
    the port cannot be bound, and the provider's LayerschedError if the
    inventory cannot be loaded.
    """
    app = create_app(
        extender,
        max_request_bytes=max_request_bytes,
        max_concurrent_requests=max_concurrent_requests,
    )
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=shutdown_grace_s
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
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
        on_listening(f"{'https' if tls is not None else 'http'}://{host}:{port}")
    gc.set_threshold(*GC_THRESHOLDS)
    extender.provider.bind_loop(loop)  # a watching provider applies its changes on this loop
    loading = _load_in_thread(extender.provider)
    stopping: asyncio.Future[None] = asyncio.ensure_future(_until(stop))
    try:
        await asyncio.wait([loading, stopping], return_when=asyncio.FIRST_COMPLETED)
        if loading.done():
            loading.result()  # raises the load error
            gc.collect()
            gc.freeze()  # the inventory lives as long as the process: keep the collector off it
            await stopping
        gate = app[GATE_KEY]
        log.info(
            "stopping on signal: no new connections; %d requests in flight get up to %.1f s",
            gate.busy + gate.shedding,
            shutdown_grace_s,
        )
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        stopping.cancel()
        await runner.cleanup()
        extender.close()
