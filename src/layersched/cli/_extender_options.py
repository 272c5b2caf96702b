"""``layersched extender``'s options: the verbs' and health ports, TLS, the inventory
(``--watch`` or ``--nodes``) and its bounds, the layer source and strategy, the memory
budget and allocator; and their checks, each naming the flag and what it takes, before
anything starts."""

from __future__ import annotations

import argparse

from layersched.cli._logging import add_log_options
from layersched.cli._sources import add_layer_source_options, add_strategy_options
from layersched.core.errors import InputError
from layersched.extender import (
    ALLOCATORS,
    DEFAULT_AGENT_GRACE_S,
    DEFAULT_IMAGE_QUORUM,
    DEFAULT_INVENTORY_MAX_AGE_S,
    DEFAULT_MAX_INVENTORY_BYTES,
    DEFAULT_RECYCLE_EXCESS_BYTES,
    DEFAULT_RESOLVE_TIMEOUT_S,
    MAX_CONCURRENT_REQUESTS,
    MAX_REQUEST_BYTES,
    PYMALLOC,
    REQUEST_READ_TIMEOUT_S,
    SHUTDOWN_GRACE_S,
)
from layersched.registry import DEFAULT_BUDGET_BYTES

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


def add_extender_options(p: argparse.ArgumentParser) -> None:
    """Every option of ``layersched extender``."""
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


def check_extender_options(args: argparse.Namespace) -> None:
    """Refuse options that cannot work together or are out of range."""
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
