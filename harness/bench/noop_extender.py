"""An extender that answers zeros at once: the cost of the hop, without layersched's work.

``make bench-scheduler``'s ``extender-noop`` row runs kube-scheduler with this server as
its extender, configured exactly as ``extender-node-names`` configures layersched's
(``nodeCacheCapable: true``, ``prioritizeVerb: prioritize``, same timeout). It is a real
HTTP server on the same stack as layersched's extender (aiohttp, msgspec), speaking the
extender protocol: it reads the whole ``ExtenderArgs`` body, decodes the node names
(``NodeNames``, or the names of full ``Nodes``) and answers ``[{"Host": …, "Score": 0}]``
for each, without looking at the pod. kube-scheduler still encodes the pod, makes the
call and decodes the answer, so the difference between this row and the default is the
hop; between this row and ``extender-node-names``, layersched's own answer.

It serves ``/healthz`` and ``/metrics`` with the request histogram layersched's extender
exports (same name and buckets), so that both rows are read the same way.

Run: ``python harness/bench/noop_extender.py --host 10.250.72.1 --port 10452``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest

from layersched.extender import LATENCY_BUCKETS_S

#: The verb kube-scheduler is configured to call (``prioritizeVerb``).
PRIORITIZE_PATH = "/prioritize"
#: Same bound as layersched's extender (``MAX_REQUEST_BYTES``): full Nodes at 5,000
#: nodes with 50 images each is ~43 MB.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
HTTP_BAD_REQUEST = 400


class _Meta(msgspec.Struct):
    name: str = ""


class _Node(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _NodeList(msgspec.Struct):
    items: list[_Node] | None = None


class NoopArgs(msgspec.Struct):
    """``ExtenderArgs`` decoded for the node names only (the pod is skipped unread)."""

    Nodes: _NodeList | None = None
    NodeNames: list[str] | None = None


class HostPriority(msgspec.Struct):
    """One answer, spelled as ``k8s.io/kube-scheduler/extender/v1`` spells it."""

    Host: str
    Score: int


_DECODER = msgspec.json.Decoder(NoopArgs)
_ENCODER = msgspec.json.Encoder()


def zero_scores(body: bytes) -> bytes:
    """The answer to one prioritize request: every node it names, with score 0."""
    args = _DECODER.decode(body)
    if args.NodeNames is not None:
        names = args.NodeNames
    else:
        names = [node.metadata.name for node in (args.Nodes.items if args.Nodes else None) or []]
    return _ENCODER.encode([HostPriority(name, 0) for name in names])


def create_app() -> web.Application:
    """The server: ``POST /prioritize``, ``GET /healthz``, ``GET /metrics``."""
    registry = CollectorRegistry()
    latency_s = Histogram(
        "layersched_extender_request_duration_seconds",
        "Time to answer an extender request, by verb (the no-op extender).",
        ["verb"],
        buckets=LATENCY_BUCKETS_S,
        registry=registry,
    )

    async def prioritize(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            answer = zero_scores(await request.read())
        except msgspec.DecodeError as err:
            return web.json_response(
                {"Error": f"prioritize: malformed ExtenderArgs: {err}"}, status=HTTP_BAD_REQUEST
            )
        response = web.Response(body=answer, content_type="application/json")
        latency_s.labels("prioritize").observe(time.perf_counter() - started)
        return response

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_post(PRIORITIZE_PATH, prioritize)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    web.run_app(create_app(), host=args.host, port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
