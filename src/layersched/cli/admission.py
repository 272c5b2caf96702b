"""``layersched admission``: the validating webhook holding each agent to its own node.

Deployed by ``install/kustomize/`` on Kubernetes before 1.30 (from 1.30 a ValidatingAdmissionPolicy
does the same in the API server). See docs/inventory.md (trust model) and docs/deploy.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from layersched.admission import (
    AGENT_GROUP,
    AGENT_USER_PREFIX,
    BODY_TIMEOUT_S,
    CLIENT_COMMON_NAME,
    DEFAULT_NODE_TTL_S,
    MAX_CONCURRENT_REVIEWS,
    MAX_REQUEST_BYTES,
    REVIEW_TIMEOUT_S,
    SHUTDOWN_GRACE_S,
    AdmissionMetrics,
    AgentIdentities,
    ApiLookup,
    create_app,
    serve,
)
from layersched.core.errors import InputError
from layersched.kube import VERSION_PATH, KubeClient, load_config
from layersched.serving import ReloadingTls

MAX_PORT = 65_535
#: Smallest --max-request-bytes: an AdmissionReview of a small object is a few KiB.
MIN_REQUEST_BYTES = 16 * 1024
#: Each API lookup of a review gets this long (two at most per review, both cached).
LOOKUP_TIMEOUT_S = 1.0
#: Where the certificate files come from, for their errors.
ADMISSION_TLS_HINT = "install/kustomize/ mounts them from the Secret layersched-admission-tls"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``admission`` subcommand."""
    p = sub.add_parser(
        "admission",
        help="the validating webhook that lets an agent write only its own node's inventory",
        description=(
            "Serve admission.k8s.io/v1 AdmissionReviews over HTTPS: an agent may create or "
            "update only its own node's NodeLayerInventory, for a Node that exists, owned "
            "by that Node. See docs/inventory.md."
        ),
    )
    p.add_argument("--port", type=int, default=8443, help="HTTPS port (default: %(default)s)")
    p.add_argument(
        "--host",
        default="0.0.0.0",
        help="address to listen on (default: %(default)s: the API server calls it through "
        "its Service)",
    )
    p.add_argument("--tls-cert-file", required=True, metavar="CERT.pem", help="serving certificate")
    p.add_argument("--tls-key-file", required=True, metavar="KEY.pem", help="its private key")
    p.add_argument(
        "--agent-service-account",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="a service account the agents run as (repeatable); its tokens must be bound "
        "to the agent pod",
    )
    p.add_argument(
        "--agent-group",
        default=AGENT_GROUP,
        help="members of this group are agents named PREFIX<node> (default: %(default)s; "
        "'' for none)",
    )
    p.add_argument(
        "--agent-user-prefix",
        default=AGENT_USER_PREFIX,
        help="the name prefix of --agent-group's agents (default: %(default)s)",
    )
    p.add_argument(
        "--client-ca-file",
        metavar="CA.pem",
        help="answer /validate only for clients whose certificate this CA issued (the API "
        "server's, from its admission configuration; install/kustomize/ sets it); default: any "
        "caller",
    )
    p.add_argument(
        "--client-name",
        default=CLIENT_COMMON_NAME,
        help="with --client-ca-file, the common name the client certificate must have "
        "(default: %(default)s)",
    )
    p.add_argument("--kubeconfig", help="kubeconfig (default: the pod's service account)")
    p.add_argument(
        "--node-ttl-s",
        type=float,
        default=DEFAULT_NODE_TTL_S,
        help="how long a Node's existence is trusted without asking again (default: %(default)s)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=MAX_REQUEST_BYTES,
        help="largest AdmissionReview read (default: %(default)s)",
    )
    p.add_argument(
        "--max-concurrent-reviews",
        type=int,
        default=MAX_CONCURRENT_REVIEWS,
        help="reviews worked on at once; past it 503 (default: %(default)s)",
    )
    p.add_argument(
        "--review-timeout-s",
        type=float,
        default=REVIEW_TIMEOUT_S,
        help="a review's lookups must finish within this (below the webhook's "
        "timeoutSeconds; default: %(default)s)",
    )
    p.set_defaults(handler=run)


def _agents(args: argparse.Namespace) -> AgentIdentities:
    accounts = set()
    for text in args.agent_service_account:
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise InputError(
                f"--agent-service-account {text!r}: write NAMESPACE/NAME, e.g. "
                "layersched/layersched-agent"
            )
        accounts.add((namespace, name))
    group = args.agent_group or None
    if not accounts and group is None:
        raise InputError(
            "no agent identities: pass --agent-service-account NAMESPACE/NAME and/or "
            "--agent-group GROUP, or every write would be allowed"
        )
    return AgentIdentities(frozenset(accounts), group, args.agent_user_prefix)


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.port <= MAX_PORT:
        raise InputError(f"--port {args.port}: give a TCP port from 1 to {MAX_PORT}")
    if args.max_request_bytes < MIN_REQUEST_BYTES:
        raise InputError(
            f"--max-request-bytes {args.max_request_bytes}: at least {MIN_REQUEST_BYTES}"
        )
    if args.max_concurrent_reviews < 1:
        raise InputError("--max-concurrent-reviews: at least 1")
    if args.review_timeout_s <= LOOKUP_TIMEOUT_S:
        raise InputError(f"--review-timeout-s: more than {LOOKUP_TIMEOUT_S} (one lookup's timeout)")
    if args.node_ttl_s < 0:
        raise InputError("--node-ttl-s: 0 or more")


def _listening(url: str) -> None:
    print(f"layersched admission: listening on {url}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT."""
    _check(args)
    agents = _agents(args)
    tls = ReloadingTls(
        args.tls_cert_file,
        args.tls_key_file,
        args.client_ca_file,
        # a caller without a certificate is answered 401 with a reason, not cut off
        require_client_cert=False,
        client="the API server",
        hint=ADMISSION_TLS_HINT,
    )
    kube = KubeClient(load_config(args.kubeconfig), timeout_s=LOOKUP_TIMEOUT_S)
    lookup = ApiLookup(kube, node_ttl_s=args.node_ttl_s)
    metrics = AdmissionMetrics(lookup)
    app = create_app(
        agents,
        lookup,
        metrics,
        max_request_bytes=args.max_request_bytes,
        max_concurrent_reviews=args.max_concurrent_reviews,
        review_timeout_s=args.review_timeout_s,
        body_timeout_s=BODY_TIMEOUT_S,
        client_name=args.client_name if args.client_ca_file else None,
    )
    try:
        asyncio.run(
            serve(
                app,
                args.host,
                args.port,
                tls,
                lambda: kube.get(VERSION_PATH),
                _listening,
                shutdown_grace_s=SHUTDOWN_GRACE_S,
            )
        )
    finally:
        kube.close()
    return 0
