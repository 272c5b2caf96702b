"""``layersched extender``: serve kube-scheduler's extender protocol."""

from __future__ import annotations

import argparse
import asyncio
import sys

from layersched.cli._extender_options import add_extender_options, check_extender_options
from layersched.cli._sources import (
    credential_source_factory,
    open_layer_source,
    registry_source_factory,
    strategy_from_args,
)
from layersched.core.layers import LayerSource, NoLayerSource
from layersched.core.manifest import Platform
from layersched.extender import (
    CREDENTIAL_WORKERS,
    GLIBC,
    DeadlineResolver,
    HealthListener,
    Platforms,
    PullSecrets,
    Recycler,
    StaticLayerIndexProvider,
    WatchLayerIndexProvider,
    exec_with_glibc_malloc,
    limit_malloc_arenas,
    make_extender,
    recycled_before,
    serve,
)
from layersched.kube import KubeClient, load_config
from layersched.registry import MemoryBudget, PullCredential
from layersched.serving import ReloadingTls


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
    add_extender_options(p)
    p.set_defaults(handler=run)


def _pull_secrets(args: argparse.Namespace, budget: MemoryBudget) -> PullSecrets | None:
    """With ``--pull-secrets``: pods' pull secrets read with the extender's API identity,
    and a resolver per credential (its own registry client and cache, in the budget)."""
    if not args.pull_secrets:
        return None
    config = load_config(args.kubeconfig)  # fails here, early, without credentials
    make_source = credential_source_factory(args, budget)
    default = Platform.parse(args.platform)

    def make_resolver(credential: PullCredential, platform_key: str) -> DeadlineResolver:
        platform = Platform.parse(platform_key) if platform_key else default
        return DeadlineResolver(
            make_source(platform, credential),
            timeout_s=args.resolve_timeout_s,
            workers=CREDENTIAL_WORKERS,
            warm_workers=1,
            budget=budget,
        )

    return PullSecrets(lambda: KubeClient(config), make_resolver, timeout_s=args.resolve_timeout_s)


def _listening(url: str) -> None:
    print(f"layersched extender: listening on {url}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT."""
    check_extender_options(args)
    # on request, glibc's malloc, before any thread: freed memory goes back to the system
    # (extender/_memory.py); a re-executed process comes back here, and goes on
    if args.allocator == GLIBC:
        exec_with_glibc_malloc()
    limit_malloc_arenas()
    strategy = strategy_from_args(args)
    # one memory budget for everything a request can make the extender remember: every
    # platform's layer cache, its failures, the registries refused (issue 44)
    budget = MemoryBudget(args.max_cache_bytes)
    source: LayerSource = (
        open_layer_source(args, budget=budget) if strategy.needs_layers else NoLayerSource()
    )
    # each node's images (and a pod on it) are resolved for the node's platform: one
    # registry source per platform two nodes report, --platform's being ``source``
    factory = registry_source_factory(args, budget) if strategy.needs_layers else None
    platforms = Platforms(Platform.parse(args.platform), source, factory)
    # a strategy without layers (image-locality) reads names only: resolve nothing
    node_source = source if strategy.needs_layers else None
    provider: StaticLayerIndexProvider | WatchLayerIndexProvider
    recycler: Recycler | None = None
    if args.watch:
        count, last_at_s = recycled_before()
        recycler = Recycler(
            min_excess_bytes=args.recycle_excess_mib * 2**20, count=count, last_at_s=last_at_s
        )
        config = load_config(args.kubeconfig)  # fails here, early, without credentials
        provider = WatchLayerIndexProvider(
            lambda: KubeClient(config),
            node_source,
            platforms,
            agent_grace_s=args.agent_grace_s,
            image_quorum=args.image_quorum,
            max_age_s=args.inventory_max_age_s,
            max_inventory_bytes=args.max_inventory_bytes,
        )
    else:
        provider = StaticLayerIndexProvider(args.nodes, node_source, platforms)
    extender = make_extender(
        strategy,
        source,
        provider,
        resolve_timeout_s=args.resolve_timeout_s,
        resolve_workers=args.resolve_workers,
        platforms=platforms,
        budget=budget,
        pull_secrets=_pull_secrets(args, budget) if strategy.needs_layers else None,
    )
    tls = (
        ReloadingTls(
            args.tls_cert_file,
            args.tls_key_file,
            args.client_ca_file,
            reload_period_s=None,  # read once, at start
            client="kube-scheduler",
        )
        if args.tls_cert_file is not None
        else None
    )
    asyncio.run(
        serve(
            extender,
            args.host,
            args.port,
            _listening,
            tls=tls,
            max_request_bytes=args.max_request_bytes,
            max_concurrent_requests=args.max_concurrent_requests,
            read_timeout_s=args.request_read_timeout_s,
            shutdown_grace_s=args.shutdown_grace_s,
            health=(
                HealthListener(args.health_host, args.health_port)
                if args.health_port is not None
                else None
            ),
            debug_endpoints=args.debug_endpoints,
            recycler=recycler,
        )
    )
    return 0
