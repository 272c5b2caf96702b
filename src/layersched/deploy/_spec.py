"""What varies between installs: :class:`StackSpec`, and the names and defaults it is made of.

Every generator of the install reads it (:mod:`._stack`, :mod:`._admission`,
:mod:`._chart`, :mod:`._tree`); it builds no object itself, so none of them imports
another to learn what an install is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from layersched.agent import DEFAULT_CRIO_STORAGE
from layersched.core.errors import InputError
from layersched.core.inflight import PULL_MODES, SERIAL, PullMode
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY_STRATEGY
from layersched.deploy._network import EgressSpec
from layersched.deploy._plugin_config import LAYER_LOCALITY_PLUGIN, PLUGIN_FRAMEWORK_SINCE_MINOR
from layersched.deploy._scheduler_config import (
    DEFAULT_ALLOWED_REGISTRIES,
    DEFAULT_IMAGE_QUORUM,
    KUBE_SCHEDULER_CONFIG_V1,
    LAYER_LOCALITY_SCHEDULER,
    MAX_EXTENDER_WEIGHT,
    MAX_IMAGE_QUORUM,
    MIN_EXTENDER_WEIGHT,
    kubernetes_minor,
    scheduler_api_version_for,
)
from layersched.deploy._workloads import NAMESPACE

#: Image names in the manifests; ``kustomization.yaml``'s ``images:`` maps them to
#: real references (a registry, a tag or digest).
LAYERSCHED_IMAGE = "layersched"
KUBE_SCHEDULER_IMAGE = "kube-scheduler"
#: What the base kustomization points them at (``layersched deploy images`` pushes them).
DEFAULT_LAYERSCHED_IMAGE = "localhost:5000/layersched/layersched"
DEFAULT_KUBE_SCHEDULER_IMAGE = "localhost:5000/layersched/kube-scheduler"
#: ``install/kustomize/``'s version: the local testbed's (the release ``make kubernetes`` builds,
#: held
#: equal to it by tests/unit/test_deploy.py), the one version checked live.
KUBERNETES_VERSION = "v1.37.2"
#: containerd's socket on a node (its default ``grpc.address``); the agent reads its
#: content store and image events through it.
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
#: Where other distributions' containerd listens on the host (the agent mounts it at
#: :data:`CONTAINERD_SOCKET`): k3s and RKE2 run their own containerd there.
K3S_CONTAINERD_SOCKET = "/run/k3s/containerd/containerd.sock"
RKE2_CONTAINERD_SOCKET = K3S_CONTAINERD_SOCKET
#: The node's runtime, as the agent reads its layers: containerd's content store through
#: its socket, or CRI-O's storage metadata (read-only files).
RUNTIME_CONTAINERD = "containerd"
RUNTIME_CRIO = "crio"
RUNTIMES = (RUNTIME_CONTAINERD, RUNTIME_CRIO)
#: The recommended weight of ``layer-locality`` scores against the default plugins (one
#: setting: the extender's ``weight``, or the plugin's score weight); docs/extender.md
#: explains it.
LAYER_LOCALITY_WEIGHT = 1
#: The recommended weight of ``in-flight`` scores (docs/in-flight.md, "How it combines"):
#: at 3 (TaintToleration's, the default profile's largest) a node that would start the
#: pod four times later loses 240 points, more than PodTopologySpread's largest penalty
#: (200), while between nodes of equal links (20 points a replica) spreading still wins.
IN_FLIGHT_WEIGHT = 3
#: The install's strategy, for the extender and the plugin alike, unless asked otherwise
#: (the chart's ``strategy``, ``deploy render --strategy``): ``layer-locality``.
#: ``in-flight`` started the replay's pods faster (1.45-1.57x the default profile's with
#: serial pulls, 1.30-1.38x with parallel ones, against layer-locality's 1.27-1.34x and
#: 0.94-1.19x: docs/replay.md), but the plugin's drain of 2,000 queued pods on 500 nodes
#: ran at 0.3-0.45x the default profile's rate under it, where layer-locality keeps
#: 0.84x (docs/bench-scheduler.md; issue 42): so it is the documented choice for
#: start-up, not yet the default.
DEFAULT_STRATEGY = LAYER_LOCALITY_STRATEGY
#: The strategies the plugin implements (the extender serves every one of the core's).
PLUGIN_STRATEGIES = (LAYER_LOCALITY_STRATEGY, IN_FLIGHT_STRATEGY)


def recommended_weight(strategy: str) -> int:
    """The weight an install of ``strategy`` gets when none is given."""
    return IN_FLIGHT_WEIGHT if strategy == IN_FLIGHT_STRATEGY else LAYER_LOCALITY_WEIGHT


SCHEDULER_REPLICAS = 2
#: How the second scheduler scores layers: the extender sidecar (every version), or the
#: LayerLocality plugin built into layersched's kube-scheduler (1.35 and newer).
SCHEDULER_EXTENDER = "extender"
SCHEDULER_PLUGIN = "plugin"
SCHEDULER_KINDS = (SCHEDULER_EXTENDER, SCHEDULER_PLUGIN)
#: Egress without the cluster's addresses: DNS, 443 and 6443 anywhere, public 443.
DEFAULT_EGRESS = EgressSpec()


@dataclass(frozen=True, slots=True)
class StackSpec:
    """What varies between installs (everything else is fixed by this module)."""

    namespace: str = NAMESPACE
    scheduler_name: str = LAYER_LOCALITY_SCHEDULER
    scheduler_api_version: str = KUBE_SCHEDULER_CONFIG_V1
    replicas: int = SCHEDULER_REPLICAS
    #: How layers are scored: the extender's ``--strategy``, or the plugin's ``strategy``
    #: (one of :data:`PLUGIN_STRATEGIES`).
    strategy: str = DEFAULT_STRATEGY
    #: How the nodes' kubelets pull, for ``in-flight``: ``serial`` (the kubelet's default,
    #: ``serializeImagePulls: true``) or ``parallel``.
    pull_mode: PullMode = SERIAL
    #: Extra extender arguments (e.g. ``--insecure-registry HOST:PORT``).
    extender_args: tuple[str, ...] = ()
    scheduler_verbosity: int = 2
    #: The cluster's Kubernetes version, where objects differ between versions (the
    #: PodDisruptionBudget's API, kube-scheduler's RBAC and probes);
    #: ``scheduler_api_version`` follows it too (:func:`stack_spec_for`).
    kubernetes_version: str = KUBERNETES_VERSION
    #: The registries the extender (``--allow-registry``, one each) or the plugin
    #: (``registry.allowRegistries``) may contact.
    allowed_registries: tuple[str, ...] = DEFAULT_ALLOWED_REGISTRIES
    #: Where the scheduler pods may connect (their egress NetworkPolicy).
    egress: EgressSpec = DEFAULT_EGRESS
    #: ``extender`` (a sidecar) or ``plugin`` (LayerLocality in kube-scheduler; 1.35+).
    scheduler: str = SCHEDULER_EXTENDER
    #: The weight of layer scores: the extender's (its 0-10 score x10 x weight) or the
    #: plugin's score weight; None: the strategy's (:func:`recommended_weight`).
    weight: int | None = None
    #: Nodes that must publish the same layers for a pod image (``--image-quorum``).
    image_quorum: int = DEFAULT_IMAGE_QUORUM
    #: Layer-locality's spread factor (the extender's ``--spread``, the plugin's
    #: ``spread``): on, so that an agent claiming layers it copied from other nodes'
    #: objects gains at most what their real holders share (docs/inventory.md, "Trust
    #: model"; issue 30).
    spread: bool = True
    #: The nodes' runtime (``containerd``, k3s and RKE2 included, or ``crio``).
    runtime: str = RUNTIME_CONTAINERD
    #: containerd's socket on the host (k3s, RKE2: :data:`K3S_CONTAINERD_SOCKET`).
    containerd_socket: str = CONTAINERD_SOCKET
    #: CRI-O's storage root on the host (``runtime`` ``crio``).
    crio_storage: str = DEFAULT_CRIO_STORAGE
    #: Namespaces whose pods' pull secrets the extender may read (``--pull-secrets``): a
    #: Role granting ``get`` on secrets in each, bound to the extender's account; none by
    #: default (docs/extender.md, "Pull secrets").
    pull_secret_namespaces: tuple[str, ...] = ()
    #: The secrets those Roles name (``resourceNames``); empty: any secret of the namespace.
    pull_secret_names: tuple[str, ...] = ()

    @property
    def extender_account(self) -> str:
        """The extender's own service account (read-only)."""
        return f"{self.scheduler_name}-extender"

    @property
    def extender_token_secret(self) -> str:
        """The Secret that holds the extender account's token."""
        return f"{self.extender_account}-token"

    def for_version(self, kubernetes_version: str) -> StackSpec:
        """The same install for a cluster of ``kubernetes_version``: its scheduler reads the
        newest ``KubeSchedulerConfiguration`` API that kube-scheduler serves."""
        return replace(
            self,
            kubernetes_version=kubernetes_version,
            scheduler_api_version=scheduler_api_version_for(kubernetes_version),
        )

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULER_KINDS:
            raise InputError(f"scheduler {self.scheduler!r}: choose {' or '.join(SCHEDULER_KINDS)}")
        if self.runtime not in RUNTIMES:
            raise InputError(f"runtime {self.runtime!r}: choose {' or '.join(RUNTIMES)}")
        weight = self.weight
        if weight is not None and not MIN_EXTENDER_WEIGHT <= weight <= MAX_EXTENDER_WEIGHT:
            raise InputError(
                f"weight {self.weight}: choose {MIN_EXTENDER_WEIGHT} to {MAX_EXTENDER_WEIGHT} "
                f"(recommended: {recommended_weight(self.strategy)} with strategy "
                f"{self.strategy}, docs/extender.md)"
            )
        if self.pull_mode not in PULL_MODES:
            raise InputError(
                f"pull mode {self.pull_mode!r}: choose {' or '.join(PULL_MODES)} (the nodes' "
                "kubelets pull serially unless their serializeImagePulls is false)"
            )
        if not 1 <= self.image_quorum <= MAX_IMAGE_QUORUM:
            raise InputError(
                f"image quorum {self.image_quorum}: choose 1 to {MAX_IMAGE_QUORUM} nodes"
            )
        for what, path in (
            ("containerd socket", self.containerd_socket),
            ("CRI-O storage", self.crio_storage),
        ):
            if not path.startswith("/"):
                raise InputError(f"{what} {path!r}: give the absolute path on the node")
        self._check_pull_secrets()
        if self.scheduler == SCHEDULER_PLUGIN and self.strategy not in PLUGIN_STRATEGIES:
            raise InputError(
                f"strategy {self.strategy!r} with scheduler {SCHEDULER_PLUGIN!r}: the "
                f"{LAYER_LOCALITY_PLUGIN} plugin scores {' or '.join(PLUGIN_STRATEGIES)}; "
                f"use {SCHEDULER_EXTENDER!r} for the others"
            )
        minor = kubernetes_minor(self.kubernetes_version)
        if self.scheduler == SCHEDULER_PLUGIN and minor < PLUGIN_FRAMEWORK_SINCE_MINOR:
            since = ".".join(map(str, PLUGIN_FRAMEWORK_SINCE_MINOR))
            raise InputError(
                f"scheduler {SCHEDULER_PLUGIN!r} on Kubernetes {self.kubernetes_version}: the "
                f"{LAYER_LOCALITY_PLUGIN} plugin is built for kube-scheduler {since} and newer "
                f"only; use {SCHEDULER_EXTENDER!r}, which serves every version (docs/deploy.md)"
            )

    def _check_pull_secrets(self) -> None:
        """Pull secrets are the extender's (the plugin resolves at no registry), in real
        namespaces, naming real secrets."""
        if self.pull_secret_names and not self.pull_secret_namespaces:
            raise InputError(
                "pull secret names without namespaces: name the namespaces whose pods' pull "
                "secrets the extender may read (--pull-secret-namespace)"
            )
        if self.pull_secret_namespaces and self.scheduler == SCHEDULER_PLUGIN:
            raise InputError(
                f"pull secrets with scheduler {SCHEDULER_PLUGIN!r}: the {LAYER_LOCALITY_PLUGIN} "
                "plugin resolves layers at no registry, so it reads no pull secret; use "
                f"{SCHEDULER_EXTENDER!r}, or drop the pull secret namespaces"
            )
        for what, names, label in (
            ("pull secret namespace", self.pull_secret_namespaces, True),
            ("pull secret name", self.pull_secret_names, False),
        ):
            for name in names:
                if not _object_name(name, label=label):
                    raise InputError(
                        f"{what} {name!r}: not a Kubernetes "
                        f"{'namespace' if label else 'object'} name (lowercase letters, "
                        "digits and '-')"
                    )

    @property
    def plugin(self) -> bool:
        """Whether LayerLocality scores in kube-scheduler (no extender sidecar)."""
        return self.scheduler == SCHEDULER_PLUGIN

    @property
    def score_weight(self) -> int:
        """The weight the install renders: the one given, else the strategy's."""
        return recommended_weight(self.strategy) if self.weight is None else self.weight

    @property
    def in_flight(self) -> bool:
        """Whether the install scores with ``in-flight``."""
        return self.strategy == IN_FLIGHT_STRATEGY

    @property
    def watches_pods(self) -> bool:
        """Whether the extender watches the pods bound to nodes (``in-flight``), and may
        list and watch pods."""
        return not self.plugin and self.in_flight


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name(name: str, *, label: bool) -> bool:
    """A namespace's name (a DNS-1123 label, 63 characters) or an object's (a subdomain)."""
    pattern, most = (_LABEL, 63) if label else (_SUBDOMAIN, 253)
    return len(name) <= most and pattern.fullmatch(name) is not None


def stack_spec_for(kubernetes_version: str, **fields: Any) -> StackSpec:
    """A :class:`StackSpec` of ``fields`` for a cluster of ``kubernetes_version``."""
    return StackSpec(**fields).for_version(kubernetes_version)
