"""The registry client's transport: a whole-request deadline, an address check at every
connection, and body caps on every response.

Three defences against a hostile or broken registry sit under ``httpx``:

* **A deadline per attempt** (:func:`deadline`). httpx's timeouts apply to each
  socket read, so a server that dribbles one byte per second never trips a
  2 s read timeout and can hold a caller for hours (h11 alone accepts 16 KiB
  of headers). :class:`DeadlineHTTPTransport` gives httpcore a network
  backend whose connect, read and write calls are clamped to the time left
  before the current deadline, headers included.
* **Addresses checked where they are connected to** (``guard``, an
  :class:`~layersched.registry._addresses.AddressGuard`). The same network
  backend resolves each host name once, has the guard check every address
  it resolved to, and connects to those addresses, not to the name: no
  second resolution can swap the address after the check (DNS rebinding).
  TLS verification, SNI and ``Host`` still use the name.
* **Body caps** (:class:`CappedTransport`). Every response body is counted as it
  streams, also the ones httpx reads by itself inside the auth flow (a
  ``401``'s body, a token answer). A success body past its cap raises
  :class:`BodyTooLargeError` naming the URL and the cap; an error body is
  cut short at :data:`MAX_ERROR_BODY_BYTES` (it only ever feeds a message).
  The cap of one request is set with the request extension :data:`MAX_BODY_EXTENSION`.
  Requests ask for ``identity`` encoding and a ``Content-Encoding`` in the
  answer is dropped, so a cap on the wire is a cap in memory (no gzip bombs).
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
import typing
from collections.abc import Iterable, Iterator

import httpcore
import httpx
from httpx._utils import get_environment_proxies  # what httpx.Client(trust_env=True) reads

from layersched.registry._addresses import AddressGuard

#: Request extension carrying the body cap of that request, in bytes.
MAX_BODY_EXTENSION = "layersched.max_body_bytes"
#: Error bodies (4xx/5xx) only go into messages: a registry's is a few hundred bytes of
#: JSON; 2 KiB keeps the whole of any real one and nothing of a hostile one.
MAX_ERROR_BODY_BYTES = 2048
_FIRST_ERROR_STATUS = 400

# the deadline of the attempt running in this thread (monotonic seconds), if any
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "layersched_registry_deadline", default=None
)


class BodyTooLargeError(Exception):
    """A response body went past its cap (turned into a ManifestError or RegistryError upstream)."""

    def __init__(self, url: httpx.URL, cap_bytes: int, declared_bytes: int | None) -> None:
        size = f" ({declared_bytes} bytes)" if declared_bytes is not None else ""
        super().__init__(f"the answer of {url} is larger than the {cap_bytes}-byte cap{size}")
        self.url = url
        self.cap_bytes = cap_bytes
        self.declared_bytes = declared_bytes


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Every socket operation in this block must finish within ``seconds`` of its start."""
    ends_at = time.monotonic() + seconds
    token = _DEADLINE.set(ends_at)
    try:
        yield ends_at
    finally:
        _DEADLINE.reset(token)


def _clamped(timeout: float | None, what: str) -> float | None:
    """``timeout`` shortened to the time left before the current deadline."""
    ends_at = _DEADLINE.get()
    if ends_at is None:
        return timeout
    left = ends_at - time.monotonic()
    if left <= 0:
        # httpx maps this to httpx.ReadTimeout/WriteTimeout/ConnectTimeout like a real one
        error = {"connect": httpcore.ConnectTimeout, "write": httpcore.WriteTimeout}
        raise error.get(what, httpcore.ReadTimeout)(f"request deadline passed before {what}")
    return left if timeout is None else min(timeout, left)


def _check_deadline(url: httpx.URL) -> None:
    ends_at = _DEADLINE.get()
    if ends_at is not None and time.monotonic() >= ends_at:
        raise httpx.ReadTimeout(f"request deadline passed while reading {url}")


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamped(timeout, "read"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamped(timeout, "write"))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, _clamped(timeout, "connect"))
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend with every timeout clamped to the current deadline, and
    (with a ``guard``) every TCP connection made to an address the guard checked."""

    def __init__(self, inner: httpcore.NetworkBackend, guard: AddressGuard | None = None) -> None:
        self._inner = inner
        self._guard = guard

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        if self._guard is None:
            stream = self._inner.connect_tcp(
                host, port, _clamped(timeout, "connect"), local_address, socket_options
            )
            return _DeadlineStream(stream)
        try:
            addresses = self._guard.addresses(host, port)
        except OSError as err:  # what the socket's own resolution would have raised
            raise httpcore.ConnectError(f"resolving {host}: {err}") from err
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:  # in the resolver's order, as socket.create_connection
            try:
                stream = self._inner.connect_tcp(
                    str(address), port, _clamped(timeout, "connect"), local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                failure = err
                continue
            return _DeadlineStream(stream)
        assert failure is not None  # addresses is never empty
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, _clamped(timeout, "connect"), socket_options)
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class DeadlineHTTPTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` whose sockets obey :func:`deadline` and, with a ``guard``,
    connect only to addresses the guard checked.

    httpx does not take a network backend, so the one of its connection pool
    is wrapped after construction; :attr:`enforces_deadline` (and
    :attr:`checks_addresses`) say whether that worked (a test holds it, so an
    httpx/httpcore upgrade that moves the attribute fails loudly instead of
    silently dropping the defences).
    """

    def __init__(self, *, guard: AddressGuard | None = None, **kwargs: typing.Any) -> None:
        super().__init__(**kwargs)
        pool = getattr(self, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        self.enforces_deadline = isinstance(backend, httpcore.NetworkBackend)
        self.checks_addresses = self.enforces_deadline and guard is not None
        if isinstance(backend, httpcore.NetworkBackend):
            pool._network_backend = _DeadlineBackend(backend, guard)  # type: ignore[union-attr]


class _CappedStream(httpx.SyncByteStream):
    def __init__(
        self, inner: httpx.SyncByteStream, url: httpx.URL, cap_bytes: int, truncate: bool
    ) -> None:
        self._inner = inner
        self._url = url
        self._cap_bytes = cap_bytes
        self._truncate = truncate

    def __iter__(self) -> Iterator[bytes]:
        seen_bytes = 0
        for chunk in self._inner:
            _check_deadline(self._url)  # a body that keeps coming stops at the deadline too
            seen_bytes += len(chunk)
            if seen_bytes > self._cap_bytes:
                if not self._truncate:
                    raise BodyTooLargeError(self._url, self._cap_bytes, None)
                yield chunk[: len(chunk) - (seen_bytes - self._cap_bytes)]
                return
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CappedTransport(httpx.BaseTransport):
    """Wraps a transport: every body counted against its cap, never decompressed.

    The client asks for ``Accept-Encoding: identity``; a ``Content-Encoding``
    a server sends anyway is dropped, so the body stays as counted.
    """

    def __init__(self, inner: httpx.BaseTransport, default_max_body_bytes: int) -> None:
        self.inner = inner
        self.default_max_body_bytes = default_max_body_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        cap_bytes = int(request.extensions.get(MAX_BODY_EXTENSION, self.default_max_body_bytes))
        response = self.inner.handle_request(request)
        failed = response.status_code >= _FIRST_ERROR_STATUS
        declared = response.headers.get("Content-Length", "")
        # A HEAD answer has no body: its Content-Length is the size of what a GET would
        # send (a blob's, when a push checks whether the registry has it), not a body.
        bodiless = request.method == "HEAD"
        if not failed and not bodiless and declared.isdigit() and int(declared) > cap_bytes:
            response.close()
            raise BodyTooLargeError(request.url, cap_bytes, int(declared))
        headers = httpx.Headers(response.headers)
        headers.pop("Content-Encoding", None)
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)
        cap_bytes = min(cap_bytes, MAX_ERROR_BODY_BYTES) if failed else cap_bytes
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_CappedStream(stream, request.url, cap_bytes, truncate=failed),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.inner.close()


def proxy_mounts(max_body_bytes: int) -> dict[str, httpx.BaseTransport | None]:
    """HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, read as httpx reads them, on our transport.

    httpx only reads them when it builds its own transports; ours carry the
    deadline and the body caps, so the proxies are mounted here.
    """
    mounts: dict[str, httpx.BaseTransport | None] = {}
    for pattern, proxy in get_environment_proxies().items():
        mounts[pattern] = (
            None
            if proxy is None
            else CappedTransport(DeadlineHTTPTransport(proxy=proxy), max_body_bytes)
        )
    return mounts
