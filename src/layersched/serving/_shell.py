"""The service shell every layersched server runs in: listening and signals.

:func:`serve` binds every :class:`Listener` (or takes over sockets already bound), serves
until SIGTERM/SIGINT, then stops taking connections and gives requests in flight a grace
period. The component's own work runs meanwhile as its ``main``; a listener's reloading
certificate (:mod:`layersched.serving._tls`) is re-read while it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from layersched.serving._http import ServingError
from layersched.serving._tls import ReloadingTls, keep_reloading

log = logging.getLogger("layersched.serving")

#: Connections the kernel queues on a listening socket (aiohttp's default): they wait
#: there while a process hands its sockets over (the extender's recycle).
LISTEN_BACKLOG = 128
#: aiohttp's server defaults, each listener may set its own: how long the rest of a body
#: not read to its end is read and dropped so the client can read the answer ...
DEFAULT_LINGERING_S = 10.0
#: ... and how long a connection may stay idle, its first request included (a client
#: that connects and sends nothing, or trickles its headers, is cut off after this).
#: Long by default: a client that keeps its connection (kube-scheduler, the API server)
#: should not race a close on its next request.
DEFAULT_KEEPALIVE_S = 3630.0
#: How long SIGTERM waits for requests in flight by default.
SHUTDOWN_GRACE_S = 5.0


# -- listening ------------------------------------------------------------------------------


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Listener:
    """One application served on one address."""

    app: web.Application
    host: str
    port: int
    #: The option that chose the port, named when it cannot be bound.
    flag: str
    #: None: plain HTTP.
    tls: ReloadingTls | None = None
    #: Appended to the address announced once listening, e.g. " (health and metrics)".
    label: str = ""
    #: The key of its sockets in :attr:`Serving.sockets` (a recycle hands them over by it).
    name: str = ""
    #: Listening sockets already bound (handed over by the process before this one);
    #: empty: bind ``host``:``port``.
    inherited: Sequence[socket.socket] = ()
    lingering_s: float = DEFAULT_LINGERING_S
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    #: Connections held at once; past it a new one is closed as soon as it is accepted
    #: (None: no cap, as the extender's verbs need: kube-scheduler is never refused).
    #: asyncio accepts up to :data:`LISTEN_BACKLOG` waiting connections in one batch
    #: before any of them counts, so a burst can pass the cap by at most that many.
    max_connections: int | None = None
    #: Called each time the certificate was re-read (a counter's ``inc``).
    on_tls_reload: Callable[[], None] = _nothing

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.port}"


class _Refused(asyncio.Protocol):
    """A connection past a listener's cap: closed at once, nothing read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


def _protocols(server: web.Server, max_connections: int | None) -> Callable[[], asyncio.Protocol]:
    """The protocol of each accepted connection: aiohttp's, or past the cap, a refusal."""
    if max_connections is None:
        return server

    def protocol() -> asyncio.Protocol:
        return _Refused() if len(server.connections) >= max_connections else server()

    return protocol


def bind(host: str, port: int, flag: str) -> list[socket.socket]:
    """Listening sockets for ``host``:``port`` (one per address the name resolves to, as
    asyncio's own server binds them). Raises :class:`ServingError` naming ``flag``."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as err:
        raise ServingError(
            f"cannot listen on {host}:{port} ({err}): check the host given with {flag}"
        ) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError as err:
        for sock in sockets:
            sock.close()
        raise ServingError(
            f"cannot listen on {host}:{port} ({err.strerror}): is another process using "
            f"the port? choose another one with {flag}"
        ) from None
    return sockets


@dataclass
class Serving:
    """A running shell, as its component's ``main`` sees it."""

    #: Set by SIGTERM or SIGINT.
    stopped: asyncio.Event
    runners: list[web.AppRunner]
    #: Each listener's listening sockets, by :attr:`Listener.name`.
    sockets: dict[str, list[socket.socket]] = field(default_factory=dict)

    def stop_accepting(self) -> None:
        """Stop taking connections but keep the sockets open (new connections wait in the
        kernel's backlog for whichever process serves them next)."""
        loop = asyncio.get_running_loop()
        for listeners in self.sockets.values():
            for sock in listeners:
                loop.remove_reader(sock.fileno())

    async def drain(self, settle_s: float, grace_s: float) -> None:
        """Before handing the sockets over: stop accepting, give requests on connections
        just accepted ``settle_s`` to reach their handler, close idle keep-alive
        connections, and give the requests in flight up to ``grace_s``."""
        self.stop_accepting()
        await asyncio.sleep(settle_s)
        servers = [runner.server for runner in self.runners if runner.server is not None]
        for server in servers:
            server.pre_shutdown()
        await asyncio.gather(*(server.shutdown(grace_s) for server in servers))


async def _until_stopped(serving: Serving) -> None:
    await serving.stopped.wait()


async def serve(
    listeners: Sequence[Listener],
    main: Callable[[Serving], Awaitable[None]] = _until_stopped,
    *,
    on_listening: Callable[[str], None] | None = None,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    background: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
) -> None:
    """Serve ``listeners`` while ``main`` runs (by default: until SIGTERM/SIGINT).

    Every listener is bound first (:class:`ServingError` if one cannot be: nothing is left
    listening), then the signals set :attr:`Serving.stopped`, ``on_listening`` is told each
    address, ``background`` coroutines and certificate reloads start, and ``main`` runs.
    When it returns (or raises), the background work is cancelled, the listening sockets
    close and requests in flight get up to ``shutdown_grace_s`` to finish.
    """
    runners = [
        web.AppRunner(
            listener.app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=shutdown_grace_s,
            lingering_time=listener.lingering_s,
            keepalive_timeout=listener.keepalive_s,
        )
        for listener in listeners
    ]
    serving = Serving(asyncio.Event(), runners)
    loop = asyncio.get_running_loop()
    servers = await _listen(listeners, serving)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, serving.stopped.set)
    tasks: list[asyncio.Future[None]] = []
    try:
        for listener in listeners:
            if on_listening is not None:
                on_listening(listener.url + listener.label)
            tls = listener.tls
            if tls is not None and tls.reload_period_s is not None:
                reloading = keep_reloading(tls, tls.reload_period_s, listener.on_tls_reload)
                tasks.append(asyncio.ensure_future(reloading))
        tasks += [asyncio.ensure_future(work()) for work in background]
        await main(serving)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await _close(servers, runners)


async def _listen(listeners: Sequence[Listener], serving: Serving) -> list[asyncio.Server]:
    """Set up every runner of ``serving`` and serve each listener's sockets (inherited, else
    bound; recorded in ``serving.sockets``). On a :class:`ServingError` whatever was set
    up is closed before it is raised."""
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    try:
        for runner in serving.runners:
            await runner.setup()
        for listener, runner in zip(listeners, serving.runners, strict=True):
            assert runner.server is not None  # set up above
            sockets = list(listener.inherited) or bind(listener.host, listener.port, listener.flag)
            serving.sockets[listener.name] = sockets
            protocols = _protocols(runner.server, listener.max_connections)
            ssl_context = listener.tls.context if listener.tls is not None else None
            for sock in sockets:
                servers.append(
                    await loop.create_server(
                        protocols, sock=sock, ssl=ssl_context, backlog=LISTEN_BACKLOG
                    )
                )
    except ServingError:
        await _close(servers, serving.runners)
        raise
    return servers


async def _close(servers: Sequence[asyncio.Server], runners: Sequence[web.AppRunner]) -> None:
    for server in servers:  # no new connections; those open get the grace period
        server.close()
    for runner in runners:
        await runner.cleanup()
