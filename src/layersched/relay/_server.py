"""The relay: a gRPC server on a unix socket that forwards every call to the runtime.

Calls are handled by one generic handler, as raw bytes: nothing is parsed
unless a feature needs it (the dump, pull telemetry, annotation injection), so
methods and CRI versions the relay has never heard of pass through unchanged.
A known CRI method is forwarded with its own shape (unary, or one request and a
stream of answers); an unknown one as a stream of messages each way, which
carries any shape.

* **Deadlines** propagate: the upstream call gets the time the client has left.
* **Cancellation** propagates: a cancelled client call cancels the upstream one.
* **Errors** come back with the runtime's own status code, details and
  trailing metadata; a runtime that is down is ``UNAVAILABLE``, as the client
  would see without the relay.
* **The dump never fails a call.** A dump that cannot be written (a full
  disk, a file removed under it) is counted in
  ``layersched_relay_dump_failures_total`` and logged (once a minute at most),
  and the runtime's answer goes back as if no dump were configured.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from aiohttp import web

from layersched.core.errors import InputError
from layersched.cri._client import MAX_RECEIVE_MESSAGE_BYTES, normalize_endpoint
from layersched.relay._annotate import Annotator
from layersched.relay._dump import Dumper
from layersched.relay._methods import Cardinality, Method, parse_method
from layersched.relay._metrics import RelayMetrics
from layersched.relay._pulls import PullTelemetry
from layersched.relay._recording import CallRecorder
from layersched.serving import HEALTHZ_PATH, Listener, Serving, add_health_routes, always_ok
from layersched.serving import serve as serve_listeners

_log = logging.getLogger(__name__)

#: Largest message either way: kubelet allows 16 MiB (ListImages, ListContainers
#: on a busy node), so the relay must too.
MAX_MESSAGE_BYTES = MAX_RECEIVE_MESSAGE_BYTES
#: After the runtime restarts, reconnect within about a second instead of
#: gRPC's default back-off (up to 2 minutes), during which every call fails.
_RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
_MESSAGE_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
#: Request metadata not forwarded: gRPC sets these itself on the upstream call.
_HOP_METADATA = ("user-agent", "te", "content-type")
#: How long an unknown method's handler waits for a second request message before
#: treating the call as client-streaming (a unary client's half-close comes with
#: its one message, so this is only ever waited out by a real stream).
STREAM_PROBE_S = 0.05
#: End of a request stream.
_END = object()
#: How long :meth:`Relay.stop` lets calls in flight finish.
DEFAULT_STOP_GRACE_S = 5.0


def _forwarded(metadata: Any) -> tuple[tuple[str, Any], ...]:
    if not metadata:
        return ()
    return tuple(
        (key, value)
        for key, value in metadata
        if not key.startswith((":", "grpc-")) and key not in _HOP_METADATA
    )


def _trailing(err: grpc.aio.AioRpcError) -> Any:
    """The runtime's trailing metadata, to send back with its status."""
    return tuple(err.trailing_metadata() or ())


@dataclass(frozen=True, slots=True)
class RelayOptions:
    """What the relay does besides forwarding (all off by default)."""

    #: Writes the selected calls; None = no dump.
    dumper: Dumper | None = None
    #: Adds ``imageLayer.*`` annotations; None = answers pass unchanged.
    annotator: Annotator | None = None
    #: Log one line per PullImage (image, node, result, duration, size).
    log_pulls: bool = False
    #: The node's name, for the pull log line.
    node_name: str = ""


class Relay:
    """One relay: listens on ``listen``, forwards to ``runtime``."""

    def __init__(
        self,
        listen: Path,
        runtime: str,
        options: RelayOptions | None = None,
        metrics: RelayMetrics | None = None,
    ) -> None:
        self.listen = listen
        self.runtime = normalize_endpoint(runtime)
        self.options = options or RelayOptions()
        self.metrics = metrics or RelayMetrics()
        self._ids = itertools.count(1)
        self._recorder = CallRecorder(self.metrics, self.options.dumper)
        self._channel: grpc.aio.Channel | None = None
        self._server: grpc.aio.Server | None = None
        self._pulls = PullTelemetry(
            self.metrics, self.options.log_pulls, self.options.node_name, lambda: self._channel
        )

    @property
    def endpoint(self) -> str:
        """The relay's own gRPC target, ``unix:///…``."""
        return f"unix://{self.listen}"

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Open the upstream channel and start serving on the socket."""
        self._channel = grpc.aio.insecure_channel(
            self.runtime, options=[*_MESSAGE_OPTIONS, *_RECONNECT_OPTIONS]
        )
        if self.listen.is_socket():
            self.listen.unlink()  # a previous relay's socket; a live one would hold a lock
        elif self.listen.exists():
            raise InputError(
                f"relay socket {self.listen} exists and is not a socket: choose another --listen"
            )
        self.listen.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server(options=list(_MESSAGE_OPTIONS))
        server.add_generic_rpc_handlers((_Handler(self),))
        try:
            server.add_insecure_port(f"unix:{self.listen}")
        except RuntimeError as err:
            raise InputError(f"listening on {self.listen}: {err}: check --listen") from err
        await server.start()
        self._server = server
        _log.info("relaying %s -> %s", self.endpoint, self.runtime)

    async def stop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        """Stop serving (calls in flight get ``grace_s``), close the channel."""
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        self._pulls.cancel()
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
        self.listen.unlink(missing_ok=True)

    async def wait(self) -> None:
        """Serve until the server stops."""
        if self._server is not None:
            await self._server.wait_for_termination()

    @property
    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            raise RuntimeError("relay not started")
        return self._channel

    # -------------------------------------------------------------- calls
    async def unary(
        self, method: Method, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> bytes:
        """Forward one unary call."""
        call_id = next(self._ids)
        started = time.perf_counter()
        level = self._recorder.request(call_id, method, request)
        code = grpc.StatusCode.OK
        details = ""
        response = b""
        upstream_s = 0.0
        failure: grpc.aio.AioRpcError | None = None
        self.metrics.in_flight.inc()
        try:
            rpc = self.channel.unary_unary(
                method.path, request_serializer=None, response_deserializer=None
            )
            upstream_started = time.perf_counter()
            try:
                response = await rpc(
                    request,
                    timeout=context.time_remaining(),
                    metadata=_forwarded(context.invocation_metadata()),
                )
            finally:
                upstream_s = time.perf_counter() - upstream_started
            response = await self._rewrite(method, response)
        except grpc.aio.AioRpcError as err:
            failure = err
            code, details = err.code(), err.details() or ""
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "cancelled by the client"
            raise
        finally:
            self.metrics.in_flight.dec()
            total_s = time.perf_counter() - started
            relay_s = max(total_s - upstream_s, 0.0)
            self.metrics.overhead_s.observe(relay_s)
            self._recorder.finished(
                call_id, level, method, code, details, total_s, response, relay_s
            )
            if method.is_image_call("PullImage"):
                self._pulls.pulled(method, request, response, code, total_s)
        # recorded above before the caller learns the outcome, so metrics never lag it
        if failure is not None:
            await context.abort(code, details, _trailing(failure))
        return response

    async def server_stream(
        self, method: Method, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        """Forward one call with a stream of answers (``GetContainerEvents``)."""
        call = self.channel.unary_stream(
            method.path, request_serializer=None, response_deserializer=None
        )(
            request,
            timeout=context.time_remaining(),
            metadata=_forwarded(context.invocation_metadata()),
        )
        async for message in self._streamed(method, call, context, request):
            yield message

    async def stream(
        self,
        method: Method,
        requests: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[bytes]:
        """Forward a call of unknown shape.

        A client that sends one request and half-closes (every CRI call does)
        is forwarded as one request with a stream of answers: gRPC sends that
        request and the half-close in one batch, so a runtime that refuses the
        method at once (``UNIMPLEMENTED``) has its own status come back, not a
        failed write. A client that keeps sending is forwarded message by
        message both ways.
        """
        first = await anext(requests, _END)
        following: asyncio.Task[bytes | object] = asyncio.ensure_future(anext(requests, _END))
        done, _ = await asyncio.wait({following}, timeout=STREAM_PROBE_S)
        timeout_s = context.time_remaining()
        metadata = _forwarded(context.invocation_metadata())
        call: Any
        if first is not _END and following in done and following.result() is _END:
            call = self.channel.unary_stream(
                method.path, request_serializer=None, response_deserializer=None
            )(first, timeout=timeout_s, metadata=metadata)
            request: bytes | None = first if isinstance(first, bytes) else None
        else:

            async def chained() -> AsyncIterator[bytes]:
                for message in (first, await following):
                    if not isinstance(message, bytes):
                        return
                    yield message
                async for message in requests:
                    yield message

            call = self.channel.stream_stream(
                method.path, request_serializer=None, response_deserializer=None
            )(chained(), timeout=timeout_s, metadata=metadata)
            request = None
        async for message in self._streamed(method, call, context, request):
            yield message

    async def _streamed(
        self,
        method: Method,
        call: Any,
        context: grpc.aio.ServicerContext[Any, Any],
        request: bytes | None,
    ) -> AsyncIterator[bytes]:
        call_id = next(self._ids)
        started = time.perf_counter()
        level = self._recorder.request(call_id, method, request)
        code, details = grpc.StatusCode.OK, ""
        failure: grpc.aio.AioRpcError | None = None
        self.metrics.in_flight.inc()
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as err:
            failure = err
            code, details = err.code(), err.details() or ""
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "cancelled by the client"
            call.cancel()
            raise
        finally:
            self.metrics.in_flight.dec()
            total_s = time.perf_counter() - started
            self._recorder.finished(call_id, level, method, code, details, total_s, None)
        if failure is not None:
            await context.abort(code, details, _trailing(failure))

    # ------------------------------------------------------------ features
    async def _rewrite(self, method: Method, response: bytes) -> bytes:
        annotator = self.options.annotator
        return response if annotator is None else await annotator.answer(method, response)


if TYPE_CHECKING:
    _HandlerBase = grpc.GenericRpcHandler[Any, Any]
else:  # grpc's runtime class is not generic; only its stubs are
    _HandlerBase = grpc.GenericRpcHandler


class _Handler(_HandlerBase):
    """Maps every method path to a forwarding handler of the right shape."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method = parse_method(handler_call_details.method)
        relay = self._relay
        shape = method.cardinality
        if shape is Cardinality.UNARY:

            async def unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
                return await relay.unary(method, request, context)

            return grpc.unary_unary_rpc_method_handler(unary)
        if shape is Cardinality.SERVER_STREAM:

            async def server_stream(
                request: bytes, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[bytes]:
                async for message in relay.server_stream(method, request, context):
                    yield message

            return grpc.unary_stream_rpc_method_handler(server_stream)

        async def stream(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[bytes]:
            async for message in relay.stream(method, requests, context):
                yield message

        return grpc.stream_stream_rpc_method_handler(stream)


def metrics_app(metrics: RelayMetrics) -> web.Application:
    """``--metrics-address``'s application: ``/metrics`` and ``/healthz`` (always ok: the
    process answers)."""
    app = web.Application()
    add_health_routes(app, {HEALTHZ_PATH: always_ok}, metrics.registry)
    return app


async def serve(
    relay: Relay,
    metrics_address: tuple[str, int] | None = None,
    on_ready: Callable[[str], None] | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
) -> None:
    """Run ``relay`` (and ``/metrics`` + ``/healthz`` on ``metrics_address``) until
    SIGTERM/SIGINT; calls in flight get ``stop_grace_s`` to finish."""
    listeners: list[Listener] = []
    if metrics_address is not None:
        host, port = metrics_address
        listeners.append(Listener(metrics_app(relay.metrics), host, port, "--metrics-address"))

    async def until_stopped(serving: Serving) -> None:
        if on_ready is not None:
            on_ready(relay.endpoint)
        await serving.stopped.wait()

    await relay.start()
    try:
        await serve_listeners(listeners, until_stopped, shutdown_grace_s=stop_grace_s)
    finally:
        await relay.stop(stop_grace_s)
