"""The stack's configuration, read once and typed (``pulumi config set <key> <value>``).

Every key has a default that brings up the scenario's testbed; docs/kind.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from layersched.core.errors import ImageReferenceError, InputError
from layersched.core.reference import ImageReference
from layersched.deploy import ImageRef
from layersched_harness.testbed.kind import (
    KIND_KUBERNETES_VERSION,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    KindTarget,
    check_cluster_name,
    check_kind_version,
    check_registry_host,
    kubernetes_minor,
    scheduler_api_version_for,
)

#: kind 0.23's node image for Kubernetes 1.30; CRI-O's crio-in-kind recipe builds on it.
DEFAULT_KIND_NODE_IMAGE = "kindest/node:v1.30.0"
#: The kind release that node image was published with (kind supports a node image
#: only with the release it shipped with); the cluster step checks `kind version`.
DEFAULT_KIND_VERSION = "v0.23.0"
#: CRI-O minor matching the Kubernetes minor (CRI-O follows Kubernetes' versioning).
DEFAULT_CRIO_VERSION = "v1.30"
DEFAULT_KUBERNETES_VERSION = KIND_KUBERNETES_VERSION
#: Seed 001's prebuilt node: Kubernetes 1.22.6 + CRI-O 1.23.2, for kind 0.11.1.
PREBUILT_NODE_IMAGE = "quay.io/aojea/kindnode:crio1639620432"
#: distribution 2.8: what Debian's docker-registry is too, so both testbeds log alike.
DEFAULT_REGISTRY_IMAGE = "registry:2.8.3"
#: A small image with a package manager, to get ``tc`` into the registry's netns.
DEFAULT_TC_IMAGE = "alpine:3.20"
#: 20 Mbit/s: an edge link, as the local testbed's default.
DEFAULT_LINK_RATE_BITS_PER_S = 20_000_000
#: Host port the registry is published on (127.0.0.1 only) for pushes from the host.
DEFAULT_REGISTRY_HOST_PORT = 5001
#: The registry's port inside the ``kind`` network, as nodes and pods reach it.
REGISTRY_PORT = 5000
#: Where deploy.yml pushes the layersched image (repository under the registry, tag).
LAYERSCHED_REPOSITORY = "layersched"
LAYERSCHED_TAG = "dev"
#: Keys of the parallel extender/scheduler/agent definitions the stack had before it
#: installed install/kustomize/, and what replaced them (a set key must not be silently ignored).
REMOVED_KEYS = {
    "extenderWeight": "install/kustomize/'s scheduler calls its extender sidecar with weight 1",
    "extenderTimeoutS": "install/kustomize/'s scheduler gives its extender sidecar 1 s",
    "extenderArgs": "the extender's arguments are install/kustomize/'s plus --insecure-registry",
    "agent": "install/kustomize/ always installs the agent (on CRI-O's storage and socket)",
    "agentArgs": "the agent's arguments come from layersched_harness.testbed.kind.kind_overlay",
    "schedulerApiVersion": "the config API follows kubernetesVersion",
}


def check_node_image_version(kind_node_image: str, kubernetes_version: str) -> str:
    """``kind_node_image`` if its tag (``kindest/node:v1.30.0``) has ``kubernetes_version``'s
    minor: the stack names kube-scheduler images and config APIs by kubernetesVersion, so
    it must describe the nodes. A tag that is no version (a custom image) is trusted."""
    try:
        tag = ImageReference.parse(kind_node_image).tag
    except ImageReferenceError as err:
        raise InputError(f"kindNodeImage: {err}") from err
    try:
        image_minor = kubernetes_minor(tag or "", "kindNodeImage tag")
    except InputError:
        return kind_node_image
    if image_minor != kubernetes_minor(kubernetes_version):
        raise InputError(
            f"kindNodeImage {kind_node_image!r} is Kubernetes {tag} but kubernetesVersion is "
            f"{kubernetes_version!r}: set both to the same minor "
            f"(pulumi config set kubernetesVersion {tag})"
        )
    return kind_node_image


@dataclass(frozen=True)
class Settings:
    """Typed stack configuration."""

    stack: str
    #: Absolute directory for generated files, the kubeconfig and exported logs.
    state_dir: Path
    #: Repository root (the Docker build context of the node image Dockerfile's directory).
    repo_root: Path
    cluster_name: str = "layersched"
    workers: int = 3
    kind_bin: str = "kind"
    #: The kind release ``kind version`` must report before the cluster is created.
    kind_version: str = DEFAULT_KIND_VERSION
    docker_bin: str = "docker"
    use_prebuilt_node_image: bool = False
    prebuilt_node_image: str = PREBUILT_NODE_IMAGE
    kind_node_image: str = DEFAULT_KIND_NODE_IMAGE
    crio_version: str = DEFAULT_CRIO_VERSION
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    registry_name: str = "kind-registry"
    registry_image: str = DEFAULT_REGISTRY_IMAGE
    registry_host_port: int = DEFAULT_REGISTRY_HOST_PORT
    #: 0 leaves the registry's link unshaped.
    link_rate_bits_per_s: int = DEFAULT_LINK_RATE_BITS_PER_S
    tc_image: str = DEFAULT_TC_IMAGE
    #: Also run the patched kube-scheduler (after sideload.yml pushed it) as a third scheduler.
    patched_scheduler: bool = False
    #: Empty: the image sideload.yml pushes to the testbed registry.
    patched_scheduler_image: str = ""
    patched_scheduler_api_version: str = KUBE_SCHEDULER_CONFIG_V1BETA2
    intree_plugin_weight: int = 1
    extra_registry_hosts: tuple[str, ...] = field(default_factory=tuple)

    @property
    def registry_address(self) -> str:
        """The registry as nodes and pods name it (``kind-registry:5000``)."""
        return check_registry_host(f"{self.registry_name}:{REGISTRY_PORT}")

    @property
    def registry_host_address(self) -> str:
        """The registry as the host pushes to it (``localhost:5001``)."""
        return f"localhost:{self.registry_host_port}"

    @property
    def layersched_image(self) -> str:
        """Where deploy.yml pushes the layersched image (nodes pull it from here)."""
        return f"{self.registry_address}/{LAYERSCHED_REPOSITORY}:{LAYERSCHED_TAG}"

    @property
    def kind_target(self) -> KindTarget:
        """What the kind overlay of ``install/kustomize/`` needs: the registry, the layersched
        image,
        the nodes' Kubernetes version (kube-scheduler's image tag and config API)."""
        return KindTarget(
            registry=self.registry_address,
            layersched_image=ImageRef(
                f"{self.registry_address}/{LAYERSCHED_REPOSITORY}", tag=LAYERSCHED_TAG
            ),
            kubernetes_version=self.kubernetes_version,
        )

    @property
    def intree_scheduler_image(self) -> str:
        """The patched kube-scheduler: as configured, or where sideload.yml pushes it."""
        return (
            self.patched_scheduler_image or f"{self.registry_address}/patched/kube-scheduler:latest"
        )

    @classmethod
    def from_config(cls, config: pulumi.Config, stack: str, repo_root: Path) -> Settings:
        """Read every key (camelCase, as Pulumi config keys are) with its default."""
        defaults = cls(stack=stack, state_dir=Path(), repo_root=repo_root)
        state_dir = Path(
            config.get("stateDir") or repo_root / ".testbed" / "kind" / stack
        ).resolve()

        def text(key: str, default: str) -> str:
            return config.get(key) or default

        def number(key: str, default: int) -> int:
            value = config.get_int(key)
            return default if value is None else value

        def flag(key: str, default: bool) -> bool:
            value = config.get_bool(key)
            return default if value is None else value

        def strings(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            value = config.get_object(key)
            return default if value is None else tuple(str(v) for v in value)

        for key, instead in REMOVED_KEYS.items():
            if config.get(key) is not None:
                raise InputError(
                    f"{key} is no longer read: the stack installs install/kustomize/ ({instead}); "
                    f"remove it with `pulumi config rm {key}` (docs/kind.md)"
                )
        kubernetes_version = text("kubernetesVersion", defaults.kubernetes_version)
        prebuilt = flag("usePrebuiltNodeImage", defaults.use_prebuilt_node_image)
        kind_node_image = text("kindNodeImage", defaults.kind_node_image)
        if not prebuilt:  # a prebuilt image's version is what kubernetesVersion says
            check_node_image_version(kind_node_image, kubernetes_version)
        # install/kustomize/'s scheduler must read a config API of that version (1.19 or newer).
        scheduler_api_version_for(kubernetes_version)
        return cls(
            stack=stack,
            state_dir=state_dir,
            repo_root=repo_root,
            cluster_name=check_cluster_name(text("clusterName", defaults.cluster_name)),
            workers=number("workers", defaults.workers),
            kind_bin=text("kindBin", defaults.kind_bin),
            kind_version=check_kind_version(text("kindVersion", defaults.kind_version)),
            docker_bin=text("dockerBin", defaults.docker_bin),
            use_prebuilt_node_image=prebuilt,
            prebuilt_node_image=text("prebuiltNodeImage", defaults.prebuilt_node_image),
            kind_node_image=kind_node_image,
            crio_version=text("crioVersion", defaults.crio_version),
            kubernetes_version=kubernetes_version,
            registry_name=text("registryName", defaults.registry_name),
            registry_image=text("registryImage", defaults.registry_image),
            registry_host_port=number("registryHostPort", defaults.registry_host_port),
            link_rate_bits_per_s=number("linkRateBitsPerS", defaults.link_rate_bits_per_s),
            tc_image=text("tcImage", defaults.tc_image),
            patched_scheduler=flag("patchedScheduler", defaults.patched_scheduler),
            patched_scheduler_image=text("patchedSchedulerImage", ""),
            patched_scheduler_api_version=text(
                "patchedSchedulerApiVersion", defaults.patched_scheduler_api_version
            ),
            intree_plugin_weight=number("intreePluginWeight", defaults.intree_plugin_weight),
            extra_registry_hosts=strings("extraRegistryHosts", ()),
        )
