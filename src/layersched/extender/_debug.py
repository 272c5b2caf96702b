"""``/debug/inventory`` and ``/debug/decisions``: what the extender holds for a node and
what it answered for a pod, served to clients in its own network namespace only unless
``--debug-endpoints``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

from layersched.extender._decisions import MAX_DECISIONS
from layersched.extender._verbs import EXTENDER_KEY, error_response
from layersched.serving import HTTP_FORBIDDEN, HTTP_NOT_FOUND, json_response


async def _inventory(request: web.Request) -> web.Response:
    """``/debug/inventory?node=NAME``: the image names the extender holds for a node
    (what it scores with), for operators and the testbed's freshness measurement."""
    provider = request.app[EXTENDER_KEY].provider
    node = request.query.get("node", "")
    names = provider.held_images(node)
    if names is None:
        return error_response("inventory", f"node {node!r} is not in the inventory", HTTP_NOT_FOUND)
    return json_response({"node": node, "images": names})


async def _decisions(request: web.Request) -> web.Response:
    """``/debug/decisions?pod=NAMESPACE/NAME``: the extender's latest answer for a pod
    (its uid, when, the mode, why it was neutral if it was, each node's 0..10 score, and
    the strategy with each node's held and needed bytes); without ``pod``, the pods it
    remembers, most recent last."""
    decisions = request.app[EXTENDER_KEY].decisions
    pod = request.query.get("pod")
    if pod is None:
        return json_response({"pods": decisions.pods()})
    decision = decisions.get(pod)
    if decision is None:
        return error_response(
            "decisions",
            f"no answer for pod {pod!r} is remembered (give NAMESPACE/NAME; the latest "
            f"{MAX_DECISIONS} pods are kept, fewer on large clusters)",
            HTTP_NOT_FOUND,
        )
    return json_response(
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


Handler = Callable[[web.Request], Awaitable[web.Response]]


def _debug(handler: Handler, open_to_all: bool) -> Handler:
    """``handler`` for local clients only (unless ``open_to_all``): /debug/* tells which
    images each node holds and what was answered for each pod."""
    if open_to_all:
        return handler

    async def guarded(request: web.Request) -> web.Response:
        if not is_local_client(request):
            return error_response(
                request.path.removeprefix("/"),
                "served to clients in the extender's own network namespace only (loopback, "
                "kubectl port-forward, a sidecar): start the extender with --debug-endpoints "
                "to serve it to others",
                HTTP_FORBIDDEN,
            )
        return await handler(request)

    return guarded


def is_local_client(request: web.Request) -> bool:
    """Whether the client is in the extender's own network namespace: it connected from
    loopback, or from the very address it connected to (the kernel drops packets from
    outside that claim a local source address, so no remote client can)."""
    transport = request.transport
    if transport is None:
        return False
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    if not isinstance(peer, tuple) or not peer:
        return False
    try:
        address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return True
    return isinstance(local, tuple) and bool(local) and str(local[0]) == str(peer[0])


def add_debug_routes(app: web.Application, open_to_all: bool) -> None:
    """``/debug/*`` on ``app`` (whose Extender is ``app[EXTENDER_KEY]``), to local clients
    only unless ``open_to_all``."""
    app.router.add_get("/debug/inventory", _debug(_inventory, open_to_all))
    app.router.add_get("/debug/decisions", _debug(_decisions, open_to_all))
