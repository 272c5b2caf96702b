"""The install a ``layersched deploy render|overlay`` asks for: its options
(``--kubernetes-version 1.X[.Y]|auto``, namespace, weight, images and the record pinning
them, allowed registries, pull-secret namespaces, the API server's and registries'
addresses) and the :class:`Install` they make, reading the cluster (its version and the
API server's addresses) for ``auto``."""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layersched import __version__
from layersched.cli._kube import client_config
from layersched.core.errors import InputError, KubeError
from layersched.core.inflight import PULL_MODES, SERIAL
from layersched.core.strategies import STRATEGY_NAMES
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY_STRATEGY
from layersched.deploy import (
    AUTO,
    DEFAULT_ALLOWED_REGISTRIES,
    DEFAULT_STRATEGY,
    IN_FLIGHT_WEIGHT,
    KUBERNETES_VERSION,
    LAYER_LOCALITY_WEIGHT,
    NAMESPACE,
    NEWEST_MINOR,
    OLDEST_MINOR,
    PLUGIN_STRATEGIES,
    PUBLISHED_IMAGE,
    SCHEDULER_EXTENDER,
    SCHEDULER_PLUGIN,
    UPSTREAM_KUBE_SCHEDULER,
    EgressPeer,
    EgressSpec,
    ImageRef,
    KubernetesVersion,
    PublishedImages,
    StackSpec,
    default_published,
    parse_image_ref,
    parse_kubernetes_version,
    read_published_images,
    upstream_kube_scheduler,
)
from layersched.kube import (
    VERSION_PATH,
    KubeClient,
    KubeConfig,
    checked_name,
    namespace_path,
)

#: The ``kubernetes`` Service in ``default``: its endpoints are the API server's addresses.
API_SERVICE_NAMESPACE = "default"
API_SERVICE = "kubernetes"
HTTPS_PORT = 443


def add_images_record_option(q: argparse.ArgumentParser) -> None:
    """``--images RECORD``: the published images' digests."""
    q.add_argument(
        "--images",
        type=Path,
        metavar="RECORD",
        help="pin the images by the digests of a release's record (the images.json `make "
        "images` writes; default: the release's tags, which no registry has before it)",
    )


def published_images(args: argparse.Namespace) -> PublishedImages:
    """The record of ``--images`` (the minors it lists, nothing else: a minor it leaves out
    was not published there); the release's tags without it."""
    record: Path | None = getattr(args, "images", None)
    return default_published() if record is None else read_published_images(record)


def add_install_options(q: argparse.ArgumentParser) -> None:
    """The Kubernetes version an install is rendered for, and what it may reach."""
    q.add_argument(
        "--kubernetes-version",
        metavar="1.X[.Y]|auto",
        help=f"render the install for this Kubernetes version (1.{OLDEST_MINOR}-1.{NEWEST_MINOR}; "
        "without a patch, the newest we know of); 'auto' reads it from the cluster of "
        f"--kubeconfig. Without it: install/kustomize/, the install for {KUBERNETES_VERSION}",
    )
    q.add_argument(
        "--kubeconfig",
        type=Path,
        help="the cluster --kubernetes-version auto reads (default: $KUBECONFIG's files "
        "merged, else ~/.kube/config), as kubectl reads it: exec credential plugins too",
    )
    q.add_argument(
        "--context", metavar="NAME", help="its kubeconfig context (default: its current-context)"
    )
    q.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help=f"the namespace the install goes into (default: {NAMESPACE}, install/kustomize/'s)",
    )
    q.add_argument(
        "--strategy",
        choices=STRATEGY_NAMES,
        default=DEFAULT_STRATEGY,
        help=f"how layers are scored, by the extender or the plugin (default: %(default)s, "
        f"which counts the pulls in flight, docs/in-flight.md; {LAYER_LOCALITY_STRATEGY}: "
        f"the bytes a node holds; the plugin scores {' and '.join(PLUGIN_STRATEGIES)})",
    )
    q.add_argument(
        "--pull-mode",
        choices=PULL_MODES,
        default=SERIAL,
        help=f"how the nodes' kubelets pull, for {IN_FLIGHT_STRATEGY} (default: %(default)s, "
        "the kubelet's own; parallel where their serializeImagePulls is false)",
    )
    q.add_argument(
        "--weight",
        type=int,
        metavar="N",
        help="weight of the layer scores against the default plugins: the extender's "
        "(its 0-10 score x 10 x N) or the plugin's (default and recommended: "
        f"{IN_FLIGHT_WEIGHT} for {IN_FLIGHT_STRATEGY}, docs/in-flight.md, "
        f"{LAYER_LOCALITY_WEIGHT} for the others, docs/extender.md)",
    )
    q.add_argument(
        "--image",
        metavar="REPOSITORY[:TAG|@DIGEST]",
        help=f"the layersched image the nodes pull (default: {PUBLISHED_IMAGE}:{__version__}, "
        "what the release publishes and the chart's default; `deploy overlay` pins the image "
        "it pushes instead)",
    )
    q.add_argument(
        "--kube-scheduler-image",
        metavar="REPOSITORY",
        default=UPSTREAM_KUBE_SCHEDULER,
        help="where the nodes pull kube-scheduler from: upstream's or a mirror of its tags "
        "(default: %(default)s; the tag is the version's)",
    )
    q.add_argument(
        "--allow-registry",
        action="append",
        metavar="HOST[:PORT]",
        help="a registry the extender may resolve pod images from (repeatable; default: "
        f"{' '.join(DEFAULT_ALLOWED_REGISTRIES)}); images from others get neutral scores",
    )
    q.add_argument(
        "--pull-secret-namespace",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="let the extender read the pull secrets pods of NAMESPACE name (a Role granting "
        "get on its secrets; repeatable; default: none: private images resolve only through "
        "the nodes' agents)",
    )
    q.add_argument(
        "--pull-secret-name",
        action="append",
        default=[],
        metavar="SECRET",
        help="with --pull-secret-namespace: only these secrets (the Roles' resourceNames; "
        "repeatable; default: any secret a pod names)",
    )
    q.add_argument(
        "--api-server",
        action="append",
        default=[],
        metavar="ADDRESS:PORT",
        help="the API server's address as the pods reach it, for the scheduler pods' egress "
        "policy (repeatable; with --kubernetes-version auto: read from the cluster; "
        "without either: any address on 443 and 6443)",
    )
    q.add_argument(
        "--registry-address",
        action="append",
        default=[],
        metavar="ADDRESS[/PREFIX]:PORT",
        help="a registry on an internal address the extender must reach (repeatable; public "
        "addresses on 443 are open anyway)",
    )


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What ``--kubernetes-version auto`` reads from the cluster."""

    version: KubernetesVersion
    #: The API server's endpoints and the ``kubernetes`` Service's cluster IP on 443.
    api_server: tuple[EgressPeer, ...]


def _peer(address: str, port: int) -> EgressPeer:
    network = ipaddress.ip_network(address)
    return EgressPeer(str(network), port)


def api_server_peers(endpoints: dict[str, Any], service: dict[str, Any]) -> tuple[EgressPeer, ...]:
    """The addresses a pod reaches the API server at: ``default/kubernetes``' endpoints (its
    ``https`` port) and, for network plugins that match before the Service is translated,
    its cluster IP on 443."""
    peers: list[EgressPeer] = []
    try:
        for subset in endpoints.get("subsets") or []:
            ports = [p["port"] for p in subset.get("ports") or [] if p.get("name") == "https"]
            for address in subset.get("addresses") or []:
                peers += [_peer(address["ip"], int(port)) for port in ports]
        cluster_ip = (service.get("spec") or {}).get("clusterIP")
        if cluster_ip:
            peers.append(_peer(cluster_ip, HTTPS_PORT))
    except (KeyError, TypeError, ValueError) as err:
        raise KubeError(
            f"reading the API server's addresses from {API_SERVICE_NAMESPACE}/{API_SERVICE}: "
            f"unexpected answer ({err}); pass --api-server ADDRESS:PORT instead"
        ) from None
    return tuple(dict.fromkeys(peers))


def read_cluster(config: KubeConfig) -> ClusterFacts:
    """The server's version (``/version``) and addresses, through ``config``."""
    base = f"{namespace_path(API_SERVICE_NAMESPACE)}"
    with KubeClient(config) as kube:
        version = str(kube.get(VERSION_PATH).get("gitVersion", ""))
        endpoints = kube.get(f"{base}/endpoints/{API_SERVICE}")
        service = kube.get(f"{base}/services/{API_SERVICE}")
    return ClusterFacts(
        parse_kubernetes_version(version, f"the cluster's version ({config.origin})"),
        api_server_peers(endpoints, service),
    )


@dataclass(frozen=True, slots=True)
class Install:
    """An install for one Kubernetes version: its objects' spec and kube-scheduler's image."""

    spec: StackSpec
    kube_scheduler: ImageRef
    layersched: ImageRef


def install_for(args: argparse.Namespace) -> Install | None:
    """The install the options ask for; None without ``--kubernetes-version``
    (install/kustomize/)."""
    if args.kubernetes_version is None:
        given = [
            flag
            for flag, value in (
                ("--allow-registry", args.allow_registry),
                ("--api-server", args.api_server),
                ("--registry-address", args.registry_address),
                ("--pull-secret-namespace", args.pull_secret_namespace),
                ("--pull-secret-name", args.pull_secret_name),
                ("--kubeconfig", args.kubeconfig),
                ("--context", args.context),
                ("--namespace", args.namespace),
            )
            if value
        ]
        if args.weight is not None:
            given.append("--weight")
        if args.strategy != DEFAULT_STRATEGY:
            given.append("--strategy")
        if args.pull_mode != SERIAL:
            given.append("--pull-mode")
        if args.kube_scheduler_image != UPSTREAM_KUBE_SCHEDULER:
            given.append("--kube-scheduler-image")
        if getattr(args, "image", None):
            given.append("--image")
        if given:
            raise InputError(
                f"{', '.join(given)} shape an install for a Kubernetes version: pass "
                "--kubernetes-version 1.X[.Y] or auto too (without it, install/kustomize/ is "
                "rendered, "
                "the local testbed's)"
            )
        return None
    api_server = tuple(EgressPeer.parse(a, "--api-server") for a in args.api_server)
    registries = tuple(EgressPeer.parse(a, "--registry-address") for a in args.registry_address)
    if args.kubernetes_version == AUTO:
        facts = read_cluster(client_config(args))
        version = facts.version
        api_server = api_server or facts.api_server
    else:
        version = parse_kubernetes_version(args.kubernetes_version)
    allowed = tuple(args.allow_registry or DEFAULT_ALLOWED_REGISTRIES)
    scheduler = getattr(args, "scheduler", SCHEDULER_EXTENDER)
    spec = StackSpec(
        allowed_registries=allowed,
        egress=EgressSpec(api_server, registries),
        weight=args.weight,
        strategy=args.strategy,
        pull_mode=args.pull_mode,
        namespace=checked_name(args.namespace or NAMESPACE, "--namespace"),
        scheduler=scheduler,
        kubernetes_version=version.tag,
        pull_secret_namespaces=tuple(dict.fromkeys(args.pull_secret_namespace)),
        pull_secret_names=tuple(dict.fromkeys(args.pull_secret_name)),
    ).for_version(version.tag)
    published = published_images(args)
    if scheduler == SCHEDULER_PLUGIN:
        plugin = published.plugin_image(version.minor)
        kube_scheduler = plugin.ref
        if args.kube_scheduler_image != UPSTREAM_KUBE_SCHEDULER:  # a mirror of ours
            kube_scheduler = ImageRef(args.kube_scheduler_image, tag=plugin.tag)
    else:
        kube_scheduler = upstream_kube_scheduler(version, args.kube_scheduler_image)
    layersched = published.layersched.ref
    if args.image:
        layersched = parse_image_ref(args.image, "--image")
    return Install(spec, kube_scheduler, layersched)


def install_summary(install: Install) -> str:
    spec = install.spec
    ref = install.kube_scheduler
    api = ", ".join(f"{p.cidr}:{p.port}" for p in spec.egress.api_server) or "any address"
    return (
        f"{spec.scheduler_api_version}, kube-scheduler {ref.name}:{ref.tag}, layersched "
        f"{install.layersched.reference}, extender allowed "
        f"{', '.join(spec.allowed_registries)}, API server egress to {api}"
    )
