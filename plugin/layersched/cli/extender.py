"""``layersched extender``: serve kube-scheduler's extender protocol."""

from __future__ import annotations

import argparse
import asyncio
import sys

from layersched.cli._logging import add_log_options
from layersched.cli._sources import (
    add_layer_source_options,
    add_strategy_options,
    credential_source_factory,
    open_layer_source,
    registry_source_factory,
    strategy_from_args,
)
from layersched.core.errors import InputError
from layersched.core.layers import LayerSource, NoLayerSource
from layersched.core.manifest import Platform
from layersched.extender import (
    ALLOCATORS,
    CREDENTIAL_WORKERS,
    DEFAULT_AGENT_GRACE_S,
    DEFAULT_IMAGE_QUORUM,
    DEFAULT_INVENTORY_MAX_AGE_S,
    DEFAULT_MAX_INVENTORY_BYTES,
    DEFAULT_RECYCLE_EXCESS_BYTES,
    DEFAULT_RESOLVE_TIMEOUT_S,
    GLIBC,
    MAX_CONCURRENT_REQUESTS,
    MAX_REQUEST_BYTES,
    PYMALLOC,
    REQUEST_READ_TIMEOUT_S,
    SHUTDOWN_GRACE_S,
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
from layersched.registry import DEFAULT_BUDGET_BYTES, MemoryBudget, PullCredential
from layersched.serving import ReloadingTls

#: Smallest --max-request-bytes accepted: below this not even a small pod fits.
MIN_REQUEST_BYTES = 4096
#: Smallest --max-inventory-bytes accepted: below this not even a few nodes fit.
MIN_INVENTORY_BYTES = 1024 * 1024
#: Smallest --max-cache-bytes accepted: a few thousand answers.
MIN_CACHE_BYTES = 1024 * 1024
#: Where --health-port listens by default: every address, so the kubelet's probes (to
#: the pod IP) reach it while the verbs stay on loopback.
DEFAULT_HEALTH_HOST = "0.0.0.0"  # health and metrics only, by design
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
    p.add_argument("--port", type=int, required=True, help="TCP port of the verbs")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the verbs (default: %(default)s, loopback: kube-scheduler in the "
        "same pod; probes and metrics go to --health-port)",
    )
    p.add_argument(
        "--health-port",
        type=int,
        metavar="PORT",
        help="also serve /livez, /readyz, /healthz and /metrics on this port (plain HTTP), "
        "for probes and scrapes while the verbs stay on loopback (default: on the verb "
        "port only)",
    )
    p.add_argument(
        "--health-host",
        default=DEFAULT_HEALTH_HOST,
        metavar="ADDRESS",
        help="address of --health-port (default: %(default)s)",
    )
    p.add_argument(
        "--debug-endpoints",
        action="store_true",
        help="serve /debug/inventory and /debug/decisions to every client (default: only to "
        "clients in the extender's own network namespace: loopback, port-forward, sidecars)",
    )
    p.add_argument(
        "--tls-cert-file",
        metavar="CERT.pem",
        help="serve HTTPS with this PEM certificate (chain); needs --tls-key-file "
        "(kube-scheduler: enableHTTPS: true)",
    )
    p.add_argument("--tls-key-file", metavar="KEY.pem", help="PEM private key of --tls-cert-file")
    p.add_argument(
        "--client-ca-file",
        metavar="CA.pem",
        help="require a client certificate signed by this CA (kube-scheduler's "
        "tlsConfig.certFile/keyFile); needs --tls-cert-file",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=MAX_REQUEST_BYTES,
        metavar="BYTES",
        help="larger request bodies get 413 (default: %(default)s = 4 MiB, a NodeNames request "
        "of a 1.5 MiB pod and 5,000 names with headroom; full-Nodes deployments pass "
        "67108864)",
    )
    p.add_argument(
        "--request-read-timeout-s",
        type=float,
        default=REQUEST_READ_TIMEOUT_S,
        metavar="SECONDS",
        help="a request body not in within this gets 408 and its connection is closed "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=MAX_CONCURRENT_REQUESTS,
        metavar="N",
        help="requests worked on at once; more are answered at once with neutral scores "
        "(prioritize) or every node passing (filter), and past twice as many with 503 "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--shutdown-grace-s",
        type=float,
        default=SHUTDOWN_GRACE_S,
        metavar="SECONDS",
        help="on SIGTERM, how long requests in flight may take to finish (default: %(default)s)",
    )
    add_log_options(p, top_level=False)
    add_strategy_options(p)
    inventory = p.add_mutually_exclusive_group()
    inventory.add_argument(
        "--nodes",
        metavar="NODES.json",
        help="v1 NodeList to answer NodeNames requests (nodeCacheCapable: true) from "
        "(offline; --watch keeps the inventory live instead)",
    )
    inventory.add_argument(
        "--watch",
        action="store_true",
        help="answer NodeNames requests from the live cluster: list and watch Nodes and the "
        "agents' NodeLayerInventory objects (docs/inventory.md)",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="API credentials for --watch and --pull-secrets (default: the pod's service account)",
    )
    p.add_argument(
        "--pull-secrets",
        action="store_true",
        help="resolve a pod's private images with the pull secrets it names "
        "(spec.imagePullSecrets), read one by one (get) from its namespace where a Role "
        "grants it; answers kept per credential, never shared (docs/extender.md, Pull "
        "secrets)",
    )
    p.add_argument(
        "--agent-grace-s",
        type=float,
        default=DEFAULT_AGENT_GRACE_S,
        metavar="SECONDS",
        help="with --watch: a node that published no NodeLayerInventory for this long has "
        "its status.images resolved through the registry instead (default: %(default)s)",
    )
    p.add_argument(
        "--image-quorum",
        type=int,
        default=DEFAULT_IMAGE_QUORUM,
        metavar="K",
        help="with --watch: a pod image's layers come from the agents' objects only when at "
        "least K nodes publish the same layers for it, else from the registry "
        "(default: %(default)s; 1 trusts any one node's word)",
    )
    p.add_argument(
        "--inventory-max-age-s",
        type=float,
        default=DEFAULT_INVENTORY_MAX_AGE_S,
        metavar="SECONDS",
        help="with --watch: a NodeLayerInventory observed longer ago than this counts as "
        "missing (default: %(default)s, three agent heartbeats)",
    )
    p.add_argument(
        "--allocator",
        choices=ALLOCATORS,
        default=PYMALLOC,
        help="CPython's allocator: pymalloc (default) answers fastest; glibc re-executes "
        "on glibc's malloc, which returns memory freed after a flood of large objects to "
        "the system, at about twice the cost per request (docs/extender.md, Memory)",
    )
    p.add_argument(
        "--recycle-excess-mib",
        type=int,
        default=DEFAULT_RECYCLE_EXCESS_BYTES // 2**20,
        metavar="MIB",
        help="with --watch: re-execute the extender (same PID, its listening sockets kept "
        "open) once its resident memory stays this far, and a fifth of a fresh process's, "
        "above what a fresh process holding as much needs: the residue the allocator "
        "keeps after a burst (at most every 10 min; neutral scores until the inventory "
        "is listed again; 0: never; default: %(default)s)",
    )
    p.add_argument(
        "--max-inventory-bytes",
        type=int,
        default=DEFAULT_MAX_INVENTORY_BYTES,
        metavar="BYTES",
        help="with --watch: the memory the watched objects may hold (estimated); objects "
        "past it are refused and counted (default: %(default)s = 256 MiB)",
    )
    p.add_argument(
        "--max-cache-bytes",
        type=int,
        default=DEFAULT_BUDGET_BYTES,
        metavar="BYTES",
        help="what every platform's layer cache, its failures and the registries refused "
        "may hold in all, as measured; past it the least recently used answers go "
        "(default: %(default)s = 64 MiB)",
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
    if args.max_request_bytes < MIN_REQUEST_BYTES:
        raise InputError(
            f"--max-request-bytes {args.max_request_bytes}: must be at least {MIN_REQUEST_BYTES} "
            "(a pod alone is a few KB)"
        )
    if args.max_concurrent_requests < 1:
        raise InputError(
            f"--max-concurrent-requests {args.max_concurrent_requests}: must be at least 1"
        )
    if not args.shutdown_grace_s >= 0:
        raise InputError(f"--shutdown-grace-s {args.shutdown_grace_s}: must be >= 0 seconds")
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        raise InputError("--tls-cert-file and --tls-key-file go together: pass both or neither")
    if not args.agent_grace_s >= 0:
        raise InputError(f"--agent-grace-s {args.agent_grace_s}: must be >= 0 seconds")
    if args.kubeconfig is not None and not (args.watch or args.pull_secrets):
        raise InputError(
            "--kubeconfig is for --watch and --pull-secrets: pass one of them too, or drop it"
        )
    if args.pull_secrets and args.layers:
        raise InputError(
            "--pull-secrets resolves private images at their registries: drop --layers "
            "(an offline source), or drop --pull-secrets"
        )
    if args.health_port is not None and not 0 < args.health_port <= MAX_PORT:
        raise InputError(
            f"--health-port {args.health_port}: choose a TCP port between 1 and {MAX_PORT}"
        )
    if args.health_port == args.port:
        raise InputError(f"--health-port {args.health_port} is --port: choose another port")
    if not args.request_read_timeout_s > 0:
        raise InputError(
            f"--request-read-timeout-s {args.request_read_timeout_s}: must be > 0 seconds"
        )
    if args.image_quorum < 1:
        raise InputError(f"--image-quorum {args.image_quorum}: must be at least 1 node")
    if not args.inventory_max_age_s > 0:
        raise InputError(f"--inventory-max-age-s {args.inventory_max_age_s}: must be > 0 seconds")
    if args.max_inventory_bytes < MIN_INVENTORY_BYTES:
        raise InputError(
            f"--max-inventory-bytes {args.max_inventory_bytes}: must be at least "
            f"{MIN_INVENTORY_BYTES} (1 MiB)"
        )
    if args.max_cache_bytes < MIN_CACHE_BYTES:
        raise InputError(
            f"--max-cache-bytes {args.max_cache_bytes}: must be at least {MIN_CACHE_BYTES} (1 MiB)"
        )
    if args.recycle_excess_mib < 0:
        raise InputError(
            f"--recycle-excess-mib {args.recycle_excess_mib}: must be >= 0 (0: never recycle)"
        )
    if args.client_ca_file is not None and args.tls_cert_file is None:
        raise InputError(
            "--client-ca-file verifies clients over TLS: pass --tls-cert-file and --tls-key-file"
        )


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
    _check(args)
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
