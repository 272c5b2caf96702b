"""What every layersched server's HTTP side shares: the error a server fails with
(:class:`ServingError`), status codes and probe paths, JSON bodies out
(:func:`json_response`) and in (:func:`decode_json`: every malformed body a
:class:`msgspec.DecodeError`, the client's mistake, never a 500), and the probe and
metrics routes (:func:`add_health_routes`: each probe path answers its check, ``200`` or
``503`` with a one-line plain-text body saying why; ``/metrics`` serves a Prometheus
registry).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from layersched.core.errors import LayerschedError

HTTP_OK = 200
HTTP_BAD_REQUEST = 400
HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403
HTTP_NOT_FOUND = 404
HTTP_REQUEST_TIMEOUT = 408
HTTP_TOO_LARGE = 413
HTTP_SERVER_ERROR = 500
HTTP_UNAVAILABLE = 503
#: Counted (never sent) when a client hangs up mid-body: nginx's "client closed request".
HTTP_CLIENT_CLOSED = 499

LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
#: Kept by the extender for probes and configurations written before /readyz.
HEALTHZ_PATH = "/healthz"
METRICS_PATH = "/metrics"

#: A probe's check: whether it passes, and the line saying why (``"ok"`` when it does).
Check = Callable[[], tuple[bool, str]]

_ENCODER = msgspec.json.Encoder()
T = TypeVar("T")


class ServingError(LayerschedError):
    """A server could not start (a port, a certificate) or keep serving."""


def always_ok() -> tuple[bool, str]:
    """The check of a process that answers at all (an event loop that runs)."""
    return True, "ok"


# -- bodies -----------------------------------------------------------------------------


def json_response(body: object, status: int = HTTP_OK) -> web.Response:
    """``body`` encoded as JSON (msgspec: Structs, dicts, lists)."""
    return web.Response(body=_ENCODER.encode(body), status=status, content_type="application/json")


def decode_json(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
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


# -- probes and metrics -------------------------------------------------------------------


def _probe(check: Check) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        ok, why = check()
        return web.Response(status=HTTP_OK if ok else HTTP_UNAVAILABLE, text=f"{why}\n")

    return handler


def _metrics(registry: CollectorRegistry) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return handler


def add_health_routes(
    app: web.Application,
    checks: Mapping[str, Check],
    registry: CollectorRegistry | None = None,
) -> None:
    """Serve each ``checks`` path (``GET``: 200 or 503, the check's line as the body) and,
    given a ``registry``, ``/metrics``, read at scrape time."""
    for path, check in checks.items():
        app.router.add_get(path, _probe(check))
    if registry is not None:
        app.router.add_get(METRICS_PATH, _metrics(registry))
