"""kube-scheduler's verbs over HTTP (``/prioritize``, ``/filter``): each request's body read
within its deadline, a place taken under the concurrency limit (past it, answered at once
without work: neutral scores, every node passing), decoded, answered, timed and counted,
and every error a JSON answer with its 4xx/5xx status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from layersched.core.errors import InputError, LayerschedError
from layersched.extender._prioritize import Extender
from layersched.extender._wire import ErrorBody, ExtenderArgs, FilterArgs, NamesOnlyArgs
from layersched.serving import (
    HTTP_BAD_REQUEST,
    HTTP_CLIENT_CLOSED,
    HTTP_OK,
    HTTP_REQUEST_TIMEOUT,
    HTTP_SERVER_ERROR,
    HTTP_TOO_LARGE,
    HTTP_UNAVAILABLE,
    decode_json,
    json_response,
)

log = logging.getLogger("layersched.extender")

#: Requests worked on at once by default (``--max-concurrent-requests``): one
#: kube-scheduler sends one at a time; more is another scheduler or a flood. Past the
#: limit a request is answered at once without work (neutral scores, every node
#: passing). Bodies are read before a request takes a place, and at most twice the limit
#: are read at once; past that, 503 before reading (memory bound).
MAX_CONCURRENT_REQUESTS = 4
#: How long a request's body may take to arrive by default (``--request-read-timeout-s``):
#: kube-scheduler writes its body at once, in milliseconds; a client that trickles it
#: (a slow-loris) is answered 408 and cut off, and never holds a place meanwhile.
REQUEST_READ_TIMEOUT_S = 5.0
#: Retry-After of a 503 answered to a flood, in seconds.
OVERLOAD_RETRY_AFTER_S = 1

_ARGS = msgspec.json.Decoder(ExtenderArgs)
_FILTER_ARGS = msgspec.json.Decoder(FilterArgs)
_NAMES_ARGS = msgspec.json.Decoder(NamesOnlyArgs)
#: The key under which the app keeps its Extender.
EXTENDER_KEY: web.AppKey[Extender] = web.AppKey("extender", Extender)


def error_response(verb: str, message: str, status: int) -> web.Response:
    return json_response(ErrorBody(f"{verb}: {message}"), status)


class Gate:
    """How many verb requests are being read and answered, against the limits."""

    def __init__(self, limit: int, read_timeout_s: float = REQUEST_READ_TIMEOUT_S) -> None:
        self.limit = limit
        #: Bodies being read (at most twice ``limit``): a request takes a place to be
        #: worked on only once its body is in, so a slow client holds none.
        self.reading = 0
        self.read_timeout_s = read_timeout_s
        #: Requests being worked on (at most ``limit``).
        self.busy = 0
        #: Requests being answered without work because ``busy`` was at the limit.
        self.shedding = 0

    @property
    def read_limit(self) -> int:
        return 2 * self.limit


#: The key under which the app keeps its concurrency gate.
GATE_KEY: web.AppKey[Gate] = web.AppKey("gate", Gate)

Answer = Callable[[Extender, bytes], Awaitable[object]]


def _verb(
    name: str, answer: Answer, shed: Callable[[Extender, bytes], object]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler for extender verb ``name``: read the body (within the read deadline),
    decode, answer, time, count, map errors to 4xx/5xx.

    The body is read before the request takes a place: past twice the concurrency limit
    of bodies being read, 503 before reading; a body not in within the deadline, 408 (and
    the connection is closed). Then, past the concurrency limit, ``shed`` answers instead
    (no resolution, no scoring: neutral scores or every node passing), counted as
    overloaded.
    """

    async def handler(request: web.Request) -> web.Response:
        extender = request.app[EXTENDER_KEY]
        gate = request.app[GATE_KEY]
        metrics = extender.metrics
        started = time.perf_counter()
        if gate.reading >= gate.read_limit:
            metrics.overloaded.labels(name).inc()
            response = error_response(
                name,
                f"overloaded: {gate.reading} request bodies are being read; raise "
                "--max-concurrent-requests if this is one scheduler",
                HTTP_UNAVAILABLE,
            )
            response.headers["Retry-After"] = str(OVERLOAD_RETRY_AFTER_S)
            metrics.requests.labels(name, str(response.status)).inc()
            return response
        body = await _read(name, request, gate)
        if isinstance(body, web.Response):
            response = body
        else:
            response = await _answer(name, extender, gate, body, answer, shed)
        if response.status != HTTP_OK:
            log.info("%s: %d %s", name, response.status, response.text)
        metrics.latency_s.labels(name).observe(time.perf_counter() - started)
        metrics.requests.labels(name, str(response.status)).inc()
        return response

    return handler


async def _read(name: str, request: web.Request, gate: Gate) -> bytes | web.Response:
    """The request's body, read within the deadline while counted as being read; else the
    answer to send: 408 (the connection then closes), 413, or the client's hang-up."""
    gate.reading += 1
    try:
        return await asyncio.wait_for(request.read(), gate.read_timeout_s)
    except TimeoutError:
        response = error_response(
            name,
            f"the request body did not arrive within {gate.read_timeout_s:g} s "
            "(--request-read-timeout-s)",
            HTTP_REQUEST_TIMEOUT,
        )
        response.force_close()
        return response
    except web.HTTPRequestEntityTooLarge as err:
        return error_response(
            name,
            f"request body too large ({(err.text or '').rstrip('.')}): send NodeNames "
            "(nodeCacheCapable: true) instead of full Nodes, or raise --max-request-bytes",
            HTTP_TOO_LARGE,
        )
    except ConnectionResetError:
        # the client hung up before sending its whole body: nobody reads an answer
        return error_response(name, "the client closed the connection", HTTP_CLIENT_CLOSED)
    finally:
        gate.reading -= 1


async def _answer(
    name: str,
    extender: Extender,
    gate: Gate,
    body: bytes,
    answer: Answer,
    shed: Callable[[Extender, bytes], object],
) -> web.Response:
    """Work on a request whose body is in (or shed it past the concurrency limit)."""
    overloaded = gate.busy >= gate.limit
    if overloaded:
        gate.shedding += 1
    else:
        gate.busy += 1
    try:
        if overloaded:
            extender.metrics.overloaded.labels(name).inc()
            return json_response(shed(extender, body))
        return json_response(await answer(extender, body))
    except msgspec.DecodeError as err:
        return error_response(name, f"malformed ExtenderArgs: {err}", HTTP_BAD_REQUEST)
    except InputError as err:
        return error_response(name, str(err), HTTP_BAD_REQUEST)
    except LayerschedError as err:
        log.error("%s failed: %s", name, err)
        return error_response(name, str(err), HTTP_SERVER_ERROR)
    except Exception as err:
        # a bug: answered as JSON, counted and logged with its traceback (not aiohttp's
        # bare 500, which the metrics never saw)
        log.exception("%s failed unexpectedly (a bug: please report it with the traceback)", name)
        return error_response(name, f"internal error ({type(err).__name__})", HTTP_SERVER_ERROR)
    finally:
        if overloaded:
            gate.shedding -= 1
        else:
            gate.busy -= 1


async def _prioritize(extender: Extender, body: bytes) -> object:
    return await extender.prioritize(decode_json(_ARGS, body))


async def _filter(extender: Extender, body: bytes) -> object:
    return extender.filter(decode_json(_FILTER_ARGS, body))


def _shed_prioritize(extender: Extender, body: bytes) -> object:
    return extender.overloaded(decode_json(_NAMES_ARGS, body))


def _shed_filter(extender: Extender, body: bytes) -> object:
    return extender.filter(decode_json(_FILTER_ARGS, body))


def add_verb_routes(app: web.Application, gate: Gate) -> None:
    """``/prioritize`` and ``/filter`` on ``app`` (whose Extender is ``app[EXTENDER_KEY]``),
    under ``gate``."""
    app[GATE_KEY] = gate
    app.router.add_post("/prioritize", _verb("prioritize", _prioritize, _shed_prioritize))
    app.router.add_post("/filter", _verb("filter", _filter, _shed_filter))
