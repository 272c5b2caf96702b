"""The stack's configuration, read once and typed (``pulumi config set <key> <value>``).

Every key has a default that brings up the scenario's testbed; docs/kind.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from layersched.core.errors import ImageReferenceError, InputError
from layersched.core.reference import ImageReference
from layersched.testbed.kind import (
    CRIO_SOCKET_PATH,
    EXTENDER_PORT,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    POD_IP_ENV,
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
DEFAULT_KUBERNETES_VERSION = "v1.30.0"
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
    extender_weight: int = 1
    extender_timeout_s: float = 1.0
    #: Empty: :attr:`extender_argv`'s default (layer-locality, trusting the testbed registry).
    extender_args: tuple[str, ...] = ()
    #: Deploy the node agent DaemonSet (reports each node's CRI-O image list in its log).
    agent: bool = False
    agent_args: tuple[str, ...] = (
        "agent", "--cri", f"unix://{CRIO_SOCKET_PATH}", "--node-name", "$(NODE_NAME)",
    )  # fmt: skip
    #: Also run the patched kube-scheduler (after sideload.yml pushed it) as a third scheduler.
    patched_scheduler: bool = False
    #: Empty: the image sideload.yml pushes to the testbed registry.
    patched_scheduler_image: str = ""
    patched_scheduler_api_version: str = KUBE_SCHEDULER_CONFIG_V1BETA2
    intree_plugin_weight: int = 1
    #: The second scheduler's config API; from_config derives it from kubernetesVersion
    #: unless set (v1beta2 for 1.22, v1beta3 for 1.23-1.24, v1 from 1.25).
    scheduler_api_version: str = KUBE_SCHEDULER_CONFIG_V1
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
        return f"{self.registry_address}/layersched:dev"

    @property
    def kube_scheduler_image(self) -> str:
        """The stock kube-scheduler of the cluster's Kubernetes version."""
        return f"registry.k8s.io/kube-scheduler:{self.kubernetes_version}"

    @property
    def extender_argv(self) -> tuple[str, ...]:
        """``layersched extender`` arguments: listen on the pod IP (the Service reaches it
        there; ``$(POD_IP)`` is the downward-API variable the Deployment sets), resolve
        layers from the testbed registry over plain HTTP (full Nodes arrive with every
        request)."""
        return self.extender_args or (
            "extender",
            "--host", f"$({POD_IP_ENV})",
            "--port", str(EXTENDER_PORT),
            "--strategy", "layer-locality",
            "--insecure-registry", self.registry_address,
        )  # fmt: skip

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

        timeout = config.get_float("extenderTimeoutS")
        kubernetes_version = text("kubernetesVersion", defaults.kubernetes_version)
        prebuilt = flag("usePrebuiltNodeImage", defaults.use_prebuilt_node_image)
        kind_node_image = text("kindNodeImage", defaults.kind_node_image)
        if not prebuilt:  # a prebuilt image's version is what kubernetesVersion says
            check_node_image_version(kind_node_image, kubernetes_version)
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
            extender_weight=number("extenderWeight", defaults.extender_weight),
            extender_timeout_s=defaults.extender_timeout_s if timeout is None else timeout,
            extender_args=strings("extenderArgs", defaults.extender_args),
            agent=flag("agent", defaults.agent),
            agent_args=strings("agentArgs", defaults.agent_args),
            patched_scheduler=flag("patchedScheduler", defaults.patched_scheduler),
            patched_scheduler_image=text("patchedSchedulerImage", ""),
            patched_scheduler_api_version=text(
                "patchedSchedulerApiVersion", defaults.patched_scheduler_api_version
            ),
            intree_plugin_weight=number("intreePluginWeight", defaults.intree_plugin_weight),
            # Unset: the newest API kube-scheduler:<kubernetesVersion> reads.
            scheduler_api_version=text(
                "schedulerApiVersion", scheduler_api_version_for(kubernetes_version)
            ),
            extra_registry_hosts=strings("extraRegistryHosts", ()),
        )
