"""``layersched extender``: serve kube-scheduler's extender protocol."""

from __future__ import annotations

import argparse
import asyncio
import sys

from layersched.cli._sources import (
    add_layer_source_options,
    add_strategy_options,
    open_layer_source,
    strategy_from_args,
)
from layersched.core.errors import InputError
from layersched.core.layers import LayerSource, NoLayerSource
from layersched.extender import (
    DEFAULT_RESOLVE_TIMEOUT_S,
    StaticInventoryProvider,
    make_extender,
    serve,
)

#: Highest TCP port number.
MAX_PORT = 65_535
#: Parallel layer resolutions against registries.
DEFAULT_RESOLVE_WORKERS = 4
#: A registry request of the extender: a manifest takes well under a second, and a
#: pod's deadline is --resolve-timeout-s anyway; a hung request only ties up a worker.
EXTENDER_REGISTRY_TIMEOUT_S = 2.0
#: One retry rides out a blip; more would keep a worker on a dead registry.
EXTENDER_REGISTRY_RETRIES = 1
#: A whole attempt (token, redirects, manifest): 2.5 read timeouts. A registry that
#: trickles bytes holds a worker at most (1 + retries) x 5 s.
EXTENDER_REGISTRY_DEADLINE_S = 5.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``extender`` subcommand."""
    p = sub.add_parser(
        "extender",
        help="serve kube-scheduler's extender protocol (prioritize, filter, healthz, metrics)",
        description=(
            "Score nodes for kube-scheduler by the pod's layer bytes they already hold. "
            "See docs/extender.md for the KubeSchedulerConfiguration."
        ),
    )
    p.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    add_strategy_options(p)
    p.add_argument(
        "--nodes",
        metavar="NODES.json",
        help="v1 NodeList to answer NodeNames requests (nodeCacheCapable: true) from",
    )
    p.add_argument(
        "--resolve-timeout-s",
        type=float,
        default=DEFAULT_RESOLVE_TIMEOUT_S,
        help="answer neutral scores if a pod's layers are not resolved within this "
        "(resolution goes on in the background; default: %(default)s)",
    )
    p.add_argument(
        "--resolve-workers",
        type=int,
        default=DEFAULT_RESOLVE_WORKERS,
        help="parallel registry resolutions of pod images; node images are warmed on "
        "half as many more threads (default: %(default)s)",
    )
    add_layer_source_options(
        p,
        registry_timeout_s=EXTENDER_REGISTRY_TIMEOUT_S,
        registry_retries=EXTENDER_REGISTRY_RETRIES,
        registry_deadline_s=EXTENDER_REGISTRY_DEADLINE_S,
    )
    p.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    if not 0 < args.port <= MAX_PORT:
        raise InputError(f"--port {args.port}: choose a TCP port between 1 and {MAX_PORT}")
    if not args.resolve_timeout_s > 0:
        raise InputError(f"--resolve-timeout-s {args.resolve_timeout_s}: must be > 0 seconds")
    if args.resolve_workers < 1:
        raise InputError(f"--resolve-workers {args.resolve_workers}: must be at least 1")


def _listening(url: str) -> None:
    print(f"layersched extender: listening on {url}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT."""
    _check(args)
    strategy = strategy_from_args(args)
    source: LayerSource = open_layer_source(args) if strategy.needs_layers else NoLayerSource()
    extender = make_extender(
        strategy,
        source,
        # a strategy without layers (image-locality) reads names only: resolve nothing
        StaticInventoryProvider(args.nodes, source if strategy.needs_layers else None),
        resolve_timeout_s=args.resolve_timeout_s,
        resolve_workers=args.resolve_workers,
    )
    asyncio.run(serve(extender, args.host, args.port, _listening))
    return 0
