"""The webhook server: ``POST /validate`` (AdmissionReview v1) over HTTPS, on aiohttp.

Bounded by construction. A body is read first, **before** a review slot is taken (issue
30: sixteen slow connections held every slot, and the API server got 503): it is at most
``max_request_bytes`` (413), must arrive within ``body_timeout_s`` (408), and the bodies
being read or worked on hold at most ``max_request_bytes x max_concurrent_reviews`` bytes
in all (past that, 503: a slow connection holds the few bytes it sent, not a slot). Then
at most ``max_concurrent_reviews`` reviews are worked on (past that, 503: the API server
applies the webhook's ``failurePolicy``), and a review's lookups must finish within
``review_timeout_s`` (else the write is refused as unchecked).

**The caller is authenticated** when a client CA is given (``--client-ca-file``, which
install/kustomize/ sets): ``/validate`` answers only a client whose certificate that CA issued, with
the common name ``--client-name`` (the API server's, from its admission configuration's
kubeconfig); any other caller gets 401 before its body is read. The probes and
``/metrics`` need no certificate (kubelet's probes present none).

The serving certificate is re-read when its files change (a renewed Secret), without a
restart. ``/livez``, ``/readyz`` (the API
server answered once) and ``/metrics`` are served on the same port.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import msgspec
from aiohttp import web

from layersched.admission._metrics import AdmissionMetrics
from layersched.admission._review import (
    ADMISSION_API_VERSION,
    ADMISSION_KIND,
    AdmissionReview,
    AgentIdentities,
    ClusterLookup,
    Verdict,
    decide,
    refuse,
    response,
)
from layersched.core.errors import LayerschedError
from layersched.serving import (
    HTTP_BAD_REQUEST,
    HTTP_REQUEST_TIMEOUT,
    HTTP_TOO_LARGE,
    HTTP_UNAUTHORIZED,
    HTTP_UNAVAILABLE,
    LIVEZ_PATH,
    READYZ_PATH,
    Listener,
    ReloadingTls,
    Serving,
    add_health_routes,
    always_ok,
    decode_json,
    json_response,
)
from layersched.serving import serve as serve_listeners

log = logging.getLogger("layersched.admission")

#: The common name of the API server's client certificate (``--client-name``'s default;
#: install/kustomize/ issues it so).
CLIENT_COMMON_NAME = "layersched-admission-apiserver"
#: The path the ValidatingWebhookConfiguration calls.
VALIDATE_PATH = "/validate"
#: Largest AdmissionReview read (``--max-request-bytes``). An UPDATE carries the object
#: and the old object; the API server takes request bodies of at most 3 MiB and etcd
#: stores objects of at most 1.5 MiB, so a review is below ~5 MiB of JSON: 8 MiB leaves
#: headroom and bounds memory at 8 MiB x the concurrent reviews.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
#: Reviews worked on at once (``--max-concurrent-reviews``): each may wait on two API
#: lookups; agents write a few times a minute each, and most lookups are cached.
MAX_CONCURRENT_REVIEWS = 8
#: The API server calls with ``timeoutSeconds`` (install/kustomize/: 5 s); answer well before it.
REVIEW_TIMEOUT_S = 3.0
BODY_TIMEOUT_S = 2.0
#: How long SIGTERM waits for reviews in flight.
SHUTDOWN_GRACE_S = 5.0
#: The readiness check's retry interval (GET /version until the API answers).
READY_RETRY_S = 2.0

_REVIEW = msgspec.json.Decoder(AdmissionReview)


@dataclass
class _State:
    agents: AgentIdentities
    lookup: ClusterLookup
    metrics: AdmissionMetrics
    pool: ThreadPoolExecutor
    limit: int
    review_timeout_s: float
    body_timeout_s: float
    max_request_bytes: int
    #: The common name a caller's verified client certificate must have (None: any
    #: caller, no client authentication).
    client_name: str | None
    busy: int = 0
    #: Bytes of bodies being read or worked on (at most max_request_bytes x limit).
    body_bytes: int = 0
    ready: bool = False
    #: /readyz's line: why not ready, or "ok".
    ready_why: str = "the API server has not answered yet"


STATE_KEY: web.AppKey[_State] = web.AppKey("state", _State)


def _rejected(state: _State, status: int, message: str) -> web.Response:
    state.metrics.rejected_requests.labels(str(status)).inc()
    log.warning("review request not answered: %d %s", status, message)
    return json_response({"error": message}, status)


def _decode(body: bytes) -> AdmissionReview:
    """The review; DecodeError on anything that is not one (JSON nested 100,000 deep and
    strings that are not UTF-8 included)."""
    review = decode_json(_REVIEW, body)
    if (review.apiVersion, review.kind) != (ADMISSION_API_VERSION, ADMISSION_KIND):
        raise msgspec.DecodeError(
            f"expected {ADMISSION_KIND} {ADMISSION_API_VERSION}, got {review.kind!r} "
            f"{review.apiVersion!r}: set admissionReviewVersions: [v1] in the webhook"
        )
    if review.request is None:
        raise msgspec.DecodeError(f"the {ADMISSION_KIND} has no request")
    return review


class _Refused(Exception):
    """A request not answered with a review: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _caller(request: web.Request, expected: str) -> str:
    """Why the caller is not the API server, or "": its verified client certificate must
    carry the common name ``expected``."""
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    if not peer:
        return "no client certificate: only the API server may call (--client-ca-file)"
    names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
    if names != [expected]:
        return f"client certificate for {names!r}, not {expected!r} (--client-name)"
    return ""


async def _read_body(request: web.Request, state: _State, held: list[int]) -> bytes:
    """The body, read within the limits (module docstring); what it holds of the bytes in
    flight is added to ``held[0]`` (the caller gives it back)."""
    limit = state.max_request_bytes
    too_large = _Refused(
        HTTP_TOO_LARGE,
        f"AdmissionReview too large (over {limit} bytes): raise --max-request-bytes if "
        "NodeLayerInventory objects are this large",
    )
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    body = bytearray()
    try:
        async with asyncio.timeout(state.body_timeout_s):
            while chunk := await request.content.readany():
                if len(body) + len(chunk) > limit:
                    raise too_large
                if state.body_bytes + len(chunk) > limit * state.limit:
                    raise _Refused(
                        HTTP_UNAVAILABLE,
                        f"overloaded: {state.body_bytes} bytes of reviews being read; raise "
                        "--max-concurrent-reviews or run more replicas",
                    )
                state.body_bytes += len(chunk)
                held[0] += len(chunk)
                body += chunk
    except TimeoutError:
        raise _Refused(
            HTTP_REQUEST_TIMEOUT, f"the body did not arrive within {state.body_timeout_s} s"
        ) from None
    return bytes(body)


async def _validate(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if state.client_name is not None:
        why = _caller(request, state.client_name)
        if why:
            return _rejected(state, HTTP_UNAUTHORIZED, why)
    started = time.perf_counter()
    held = [0]
    try:
        try:
            body = await _read_body(request, state, held)
        except _Refused as refused:
            return _rejected(state, refused.status, refused.message)
        if state.busy >= state.limit:
            return _rejected(
                state,
                HTTP_UNAVAILABLE,
                f"overloaded: {state.busy} reviews in progress; raise --max-concurrent-reviews "
                "or run more replicas",
            )
        state.busy += 1
        state.metrics.in_progress.inc()
        try:
            return await _review(state, body)
        finally:
            state.busy -= 1
            state.metrics.in_progress.dec()
    finally:
        state.body_bytes -= held[0]
        state.metrics.latency_s.observe(time.perf_counter() - started)


async def _review(state: _State, body: bytes) -> web.Response:
    """Decode, decide and answer one review (a slot is held)."""
    try:
        review = _decode(body)
    except msgspec.DecodeError as err:
        return _rejected(state, HTTP_BAD_REQUEST, f"not an AdmissionReview: {err}")
    assert review.request is not None  # _decode checked
    loop = asyncio.get_running_loop()
    work = loop.run_in_executor(state.pool, decide, review.request, state.agents, state.lookup)
    try:
        verdict: Verdict = await asyncio.wait_for(work, state.review_timeout_s)
    except TimeoutError:
        verdict = refuse(
            "lookup-timeout",
            f"could not check the layersched agent's node within {state.review_timeout_s} s "
            "(the API server is slow to answer the admission server): retry",
            500,
        )
    state.metrics.reviews.labels(review.request.operation, verdict.result).inc()
    if not verdict.allowed:
        state.metrics.refusals.labels(verdict.reason).inc()
        log.info(
            "refused %s %s by %s: %s",
            review.request.operation,
            review.request.name or "(unnamed)",
            review.request.userInfo.username,
            verdict.message,
        )
    return json_response(response(review, verdict))


def create_app(
    agents: AgentIdentities,
    lookup: ClusterLookup,
    metrics: AdmissionMetrics,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_concurrent_reviews: int = MAX_CONCURRENT_REVIEWS,
    review_timeout_s: float = REVIEW_TIMEOUT_S,
    body_timeout_s: float = BODY_TIMEOUT_S,
    client_name: str | None = None,
) -> web.Application:
    """The aiohttp application (its thread pool is closed with the app); ``client_name``:
    the common name of the only caller's client certificate (serve it with a
    :class:`ReloadingTls` given the client CA), or None to authenticate no caller."""
    app = web.Application(client_max_size=max_request_bytes)
    pool = ThreadPoolExecutor(max_concurrent_reviews, thread_name_prefix="layersched-admission")
    app[STATE_KEY] = _State(
        agents,
        lookup,
        metrics,
        pool,
        max_concurrent_reviews,
        review_timeout_s,
        body_timeout_s,
        max_request_bytes,
        client_name,
    )

    async def close_pool(_app: web.Application) -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(close_pool)
    app.router.add_post(VALIDATE_PATH, _validate)
    state = app[STATE_KEY]
    add_health_routes(
        app,
        {LIVEZ_PATH: always_ok, READYZ_PATH: lambda: (state.ready, state.ready_why)},
        metrics.registry,
    )
    return app


async def _become_ready(state: _State, probe: Callable[[], object]) -> None:
    """Call ``probe`` (GET /version) until it succeeds; then /readyz answers 200."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            await loop.run_in_executor(state.pool, probe)
        except LayerschedError as err:
            state.ready_why = f"the API server did not answer: {err}"
            log.warning("not ready: %s", state.ready_why)
            await asyncio.sleep(READY_RETRY_S)
            continue
        state.ready, state.ready_why = True, "ok"
        log.info("ready: the API server answered")
        return


async def serve(
    app: web.Application,
    host: str,
    port: int,
    tls: ReloadingTls,
    probe: Callable[[], object],
    on_listening: Callable[[str], None] | None = None,
    *,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
) -> None:
    """Serve ``app`` over HTTPS until SIGTERM/SIGINT; ready once ``probe`` succeeds; the
    certificate is re-read when its files change."""
    state = app[STATE_KEY]

    async def until_stopped(serving: Serving) -> None:
        await serving.stopped.wait()
        log.info(
            "stopping on signal: %d reviews in flight get up to %.1f s",
            state.busy,
            shutdown_grace_s,
        )

    await serve_listeners(
        [Listener(app, host, port, "--port", tls=tls, on_tls_reload=state.metrics.tls_reloads.inc)],
        until_stopped,
        on_listening=on_listening,
        shutdown_grace_s=shutdown_grace_s,
        background=[lambda: _become_ready(state, probe)],
    )
