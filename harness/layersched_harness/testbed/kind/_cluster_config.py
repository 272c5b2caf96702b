"""The kind ``v1alpha4`` Cluster config for a CRI-O cluster trusting the testbed registry.

CRI-O replaces containerd in the node image, so kubeadm must be told where the
CRI socket is: ``nodeRegistration.criSocket`` in the control plane's
Init/JoinConfiguration and in every worker's JoinConfiguration (CRI-O's
crio-in-kind recipe). The registry drop-in is bind-mounted into every node, so
CRI-O trusts the registry from its first start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from layersched.core.errors import InputError

KIND_API_VERSION = "kind.x-k8s.io/v1alpha4"
KIND_CLUSTER_KIND = "Cluster"
#: Where CRI-O listens inside a node (CRI-O's default, as kubeadm expects a URL).
CRIO_SOCKET = "unix:///var/run/crio/crio.sock"
#: Inside a node: CRI-O reads every file in this directory after registries.conf.
REGISTRIES_DROPIN_NODE_PATH = "/etc/containers/registries.conf.d/50-layersched-registry.conf"
#: kind node names derive from the cluster name: DNS-1123 label rules, short
#: enough that "<name>-control-plane" and "<name>-worker10" stay under 63 chars.
_CLUSTER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
#: kind's own bound on a sensible local cluster; more workers rarely fit a laptop.
MAX_WORKERS = 16
#: A kind release as ``kind version`` prints it (``kind v0.23.0 go1.21.10 linux/amd64``).
_KIND_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+)$")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What the kind cluster looks like."""

    #: kind cluster name; nodes are ``<name>-control-plane``, ``<name>-worker``, ``<name>-worker2``…
    name: str
    #: Node image with CRI-O inside (built from harness/infra/kind/node-image or prebuilt).
    node_image: str
    #: Absolute host path of the registries.conf.d drop-in to mount into every node.
    registries_dropin_host_path: str
    #: Number of worker nodes (the scenario needs 3).
    workers: int = 3
    #: ClusterConfiguration ``kubernetesVersion``; only needed with patched control-plane images.
    kubernetes_version: str | None = None
    #: ClusterConfiguration ``imageRepository`` holding patched control-plane images.
    image_repository: str | None = None


def check_cluster_name(name: str) -> str:
    """``name`` if kind and Kubernetes accept it as a cluster name, else :class:`InputError`."""
    if not _CLUSTER_NAME.match(name):
        raise InputError(
            f"kind cluster name {name!r} is invalid: use 1-32 lowercase letters, digits or '-'"
        )
    return name


def check_kind_version(version: str) -> str:
    """``version`` (``0.23.0`` or ``v0.23.0``) as ``kind version`` prints it: ``v0.23.0``."""
    match = _KIND_VERSION.match(version.strip())
    if match is None:
        raise InputError(
            f"kindVersion {version!r} is not a kind release: write it like v0.23.0 "
            "(see `kind version`)"
        )
    return f"v{match[1]}"


def _patch(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)


def _node_registration(kind: str) -> str:
    return _patch({"kind": kind, "nodeRegistration": {"criSocket": CRIO_SOCKET}})


def kind_cluster_config(spec: ClusterSpec) -> dict[str, Any]:
    """The kind Cluster document for ``spec`` (a plain dict, ready for YAML)."""
    check_cluster_name(spec.name)
    if not 1 <= spec.workers <= MAX_WORKERS:
        raise InputError(
            f"kind cluster {spec.name!r}: workers={spec.workers}: choose 1..{MAX_WORKERS}"
        )
    if not PurePosixPath(spec.registries_dropin_host_path).is_absolute():
        raise InputError(
            f"registries drop-in path {spec.registries_dropin_host_path!r} must be absolute: "
            "kind resolves extraMounts on the Docker host"
        )
    mounts = [
        {
            "hostPath": spec.registries_dropin_host_path,
            "containerPath": REGISTRIES_DROPIN_NODE_PATH,
            "readOnly": True,
        }
    ]
    control_patches = [
        _node_registration("InitConfiguration"),
        _node_registration("JoinConfiguration"),
    ]
    cluster_configuration: dict[str, Any] = {"kind": "ClusterConfiguration"}
    if spec.kubernetes_version:
        cluster_configuration["kubernetesVersion"] = spec.kubernetes_version
    if spec.image_repository:
        cluster_configuration["imageRepository"] = spec.image_repository
    if len(cluster_configuration) > 1:
        control_patches.append(_patch(cluster_configuration))
    nodes: list[dict[str, Any]] = [
        {
            "role": "control-plane",
            "image": spec.node_image,
            "extraMounts": mounts,
            "kubeadmConfigPatches": control_patches,
        }
    ]
    nodes.extend(
        {
            "role": "worker",
            "image": spec.node_image,
            "extraMounts": mounts,
            "kubeadmConfigPatches": [_node_registration("JoinConfiguration")],
        }
        for _ in range(spec.workers)
    )
    return {
        "kind": KIND_CLUSTER_KIND,
        "apiVersion": KIND_API_VERSION,
        "name": spec.name,
        "nodes": nodes,
    }


def node_names(cluster_name: str, workers: int) -> tuple[str, ...]:
    """kind's node (= Docker container = Kubernetes node) names, control plane first."""
    check_cluster_name(cluster_name)
    suffixes = ["control-plane", "worker"] + [f"worker{i}" for i in range(2, workers + 1)]
    return tuple(f"{cluster_name}-{suffix}" for suffix in suffixes[: workers + 1])
