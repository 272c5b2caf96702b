"""``KubeSchedulerConfiguration`` for the second scheduler.

The one generator of these files: ``install/kustomize/`` (the install), the plugin's README and the
docs' examples use it, and so do the testbeds' and benchmarks' configurations, built from
it where they live (:mod:`layersched_harness.testbed.scheduler_configs`, which the wheel does not
carry). The default scheduler stays untouched: it is the ImageLocality baseline. The
second scheduler (``layer-locality``) is the same kube-scheduler with one profile and the
layersched extender; or a layersched-built kube-scheduler (1.20, or 1.35 and later) with
the LayerLocality score plugin in its profile instead (``src/kube-scheduler``; that
profile and the plugin's args are :mod:`layersched.deploy._plugin_config`'s, built on this
module's base: the config API a version reads, leader election, the scheduler's name).

Leader election, when asked for (:class:`LeaderElectionSpec`), takes a Lease of
the scheduler's own name in its own namespace: it never competes with the
default scheduler's ``kube-system/kube-scheduler`` lease, and its RBAC names
only that Lease.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from layersched.core.errors import InputError

KUBE_SCHEDULER_CONFIG_V1 = "kubescheduler.config.k8s.io/v1"
#: Kubernetes 1.22 (the Ryax fork's base) only serves the beta API.
KUBE_SCHEDULER_CONFIG_V1BETA2 = "kubescheduler.config.k8s.io/v1beta2"
KUBE_SCHEDULER_CONFIG_V1BETA3 = "kubescheduler.config.k8s.io/v1beta3"
#: Kubernetes 1.19 to 1.21 read only this one.
KUBE_SCHEDULER_CONFIG_V1BETA1 = "kubescheduler.config.k8s.io/v1beta1"
KUBE_SCHEDULER_API_VERSIONS = (
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA3,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
)
#: Which config API a kube-scheduler minor reads (KEP-785): v1beta1 came in 1.19,
#: v1beta2 in 1.22, v1beta3 in 1.23, v1 (GA) in 1.25; v1beta1 was removed in 1.23,
#: v1beta2 in 1.28 and v1beta3 in 1.29. Each entry is the newest API served from
#: that minor on.
_API_VERSION_SINCE_MINOR = (
    (25, KUBE_SCHEDULER_CONFIG_V1),
    (23, KUBE_SCHEDULER_CONFIG_V1BETA3),
    (22, KUBE_SCHEDULER_CONFIG_V1BETA2),
    (19, KUBE_SCHEDULER_CONFIG_V1BETA1),
)
_KUBERNETES_VERSION = re.compile(r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.\d+)?(?:[-+].*)?$")

#: Scheduler names; pods pick one with ``spec.schedulerName``.
DEFAULT_SCHEDULER = "default-scheduler"
LAYER_LOCALITY_SCHEDULER = "layer-locality"

#: Nodes that must publish the same layers for a pod image: the extender's
#: ``--image-quorum`` default (core/votes.py DEFAULT_IMAGE_QUORUM, which a unit test
#: holds this to; not imported, as rendering must not load the extender's server).
DEFAULT_IMAGE_QUORUM = 2
MAX_IMAGE_QUORUM = 100_000
#: The registries layersched resolves images from when an install names none (the
#: extender's ``--allow-registry`` and the plugin's ``registry.allowRegistries``): the
#: public ones most images come from. An install names its own (``layersched deploy
#: render|overlay --allow-registry``); images from any other registry get no layer score
#: from a registry, and that registry is sent nothing.
DEFAULT_ALLOWED_REGISTRIES = ("docker.io", "registry.k8s.io", "ghcr.io", "quay.io")

#: The extender answers from memory in milliseconds; anything slower means it is
#: stuck, and with ``ignorable`` the scheduler then carries on without it rather
#: than blocking every pod for upstream's 30 s default.
DEFAULT_EXTENDER_TIMEOUT_S = 1.0
#: Upstream's bounds on an extender weight (positive, and int64 arithmetic after
#: multiplying by MaxNodeScore/MaxExtenderPriority = 10 must not overflow).
MIN_EXTENDER_WEIGHT = 1
MAX_EXTENDER_WEIGHT = 1_000_000
_MS_PER_S = 1000


#: Upstream's leader-election timing (kube-scheduler's defaults): a leader that stops
#: renewing is replaced within about LEASE_DURATION_S + RETRY_PERIOD_S.
LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
RETRY_PERIOD_S = 2.0
#: Only Leases: the default ("endpointsleases" before 1.24) would need Endpoints RBAC too.
LEASES_LOCK = "leases"


@dataclass(frozen=True, slots=True)
class LeaderElectionSpec:
    """Leader election on a Lease of the scheduler's own (name, namespace)."""

    #: The Lease's name (the scheduler's name) and namespace (the install's).
    resource_name: str
    resource_namespace: str
    lease_duration_s: float = LEASE_DURATION_S
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_period_s: float = RETRY_PERIOD_S

    def to_config(self) -> dict[str, Any]:
        """The ``leaderElection`` block (field names as every config API version spells them)."""
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise InputError(
                f"leader election of {self.resource_name!r}: need retryPeriod "
                f"({self.retry_period_s} s) < renewDeadline ({self.renew_deadline_s} s) < "
                f"leaseDuration ({self.lease_duration_s} s), as client-go requires"
            )
        return {
            "leaderElect": True,
            "resourceLock": LEASES_LOCK,
            "resourceName": self.resource_name,
            "resourceNamespace": self.resource_namespace,
            "leaseDuration": go_duration(self.lease_duration_s),
            "renewDeadline": go_duration(self.renew_deadline_s),
            "retryPeriod": go_duration(self.retry_period_s),
        }


@dataclass(frozen=True, slots=True)
class ExtenderSpec:
    """How kube-scheduler calls the layersched extender."""

    #: Base URL, e.g. ``http://layersched-extender.layersched.svc.cluster.local:8888``.
    url_prefix: str
    #: Multiplies the extender's 0..10 score (after upstream's ×10 rescale).
    weight: int = 1
    #: Per-call timeout; short, as the extender is ignorable.
    http_timeout_s: float = DEFAULT_EXTENDER_TIMEOUT_S
    #: Path appended to ``url_prefix`` for scoring.
    prioritize_verb: str = "prioritize"
    #: ``NodeNames`` mode: kube-scheduler sends node names only, and the extender scores
    #: from its own live inventory (``layersched extender --watch``). Off: full Node
    #: objects in every request, and the extender needs no API access.
    node_cache_capable: bool = False


def go_duration(seconds: float) -> str:
    """``seconds`` as a Go ``time.Duration`` string (``"1s"``, ``"250ms"``)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError(f"duration {seconds!r} s must be a positive number of seconds")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    millis = round(seconds * _MS_PER_S)
    if millis == 0:
        raise InputError(f"duration {seconds!r} s is below 1 ms: use at least 0.001")
    return f"{millis}ms"


def kubernetes_minor(version: str, what: str = "kubernetesVersion") -> tuple[int, int]:
    """``(major, minor)`` of a Kubernetes version such as ``v1.22.6`` or ``1.30``."""
    match = _KUBERNETES_VERSION.match(version)
    if match is None:
        raise InputError(
            f"{what} {version!r} is not a Kubernetes version: write it like v1.30.0 or v1.22.6"
        )
    return int(match["major"]), int(match["minor"])


def scheduler_api_version_for(kubernetes_version: str) -> str:
    """The ``KubeSchedulerConfiguration`` apiVersion kube-scheduler ``kubernetes_version`` reads."""
    major, minor = kubernetes_minor(kubernetes_version)
    if major == 1:
        for since_minor, api_version in _API_VERSION_SINCE_MINOR:
            if minor >= since_minor:
                return api_version
    elif major > 1:
        return KUBE_SCHEDULER_CONFIG_V1
    oldest = _API_VERSION_SINCE_MINOR[-1][0]
    raise InputError(
        f"kubernetesVersion {kubernetes_version!r}: kube-scheduler before 1.{oldest} reads none "
        f"of {', '.join(KUBE_SCHEDULER_API_VERSIONS)}: use Kubernetes 1.{oldest} or newer"
    )


def _check_api_version(api_version: str) -> str:
    if api_version not in KUBE_SCHEDULER_API_VERSIONS:
        raise InputError(
            f"KubeSchedulerConfiguration apiVersion {api_version!r} is not supported: "
            f"choose one of {', '.join(KUBE_SCHEDULER_API_VERSIONS)}"
        )
    return api_version


def base_config(
    api_version: str, scheduler_name: str, leader_election: LeaderElectionSpec | None
) -> dict[str, Any]:
    return {
        "apiVersion": _check_api_version(api_version),
        "kind": "KubeSchedulerConfiguration",
        # Without a spec: one replica and no lease (no RBAC on leases needed). With
        # one: the scheduler's own Lease, never the default scheduler's.
        "leaderElection": (
            leader_election.to_config() if leader_election else {"leaderElect": False}
        ),
        "profiles": [{"schedulerName": scheduler_name}],
    }


def default_scheduler_config(
    scheduler_name: str = DEFAULT_SCHEDULER, api_version: str = KUBE_SCHEDULER_CONFIG_V1
) -> dict[str, Any]:
    """Upstream's default profile under ``scheduler_name``, nothing of layersched's: the
    baseline a benchmark compares the other configurations with."""
    return base_config(api_version, scheduler_name, None)


def extender_scheduler_config(
    extender: ExtenderSpec,
    scheduler_name: str = LAYER_LOCALITY_SCHEDULER,
    api_version: str = KUBE_SCHEDULER_CONFIG_V1,
    leader_election: LeaderElectionSpec | None = None,
) -> dict[str, Any]:
    """The second scheduler: default plugins plus the layersched extender as a scorer."""
    if not MIN_EXTENDER_WEIGHT <= extender.weight <= MAX_EXTENDER_WEIGHT:
        raise InputError(
            f"extender weight {extender.weight} is out of range: "
            f"choose {MIN_EXTENDER_WEIGHT}..{MAX_EXTENDER_WEIGHT}"
        )
    if not extender.url_prefix.startswith(("http://", "https://")):
        raise InputError(
            f"extender urlPrefix {extender.url_prefix!r} must start with http:// or https://"
        )
    config = base_config(api_version, scheduler_name, leader_election)
    config["extenders"] = [
        {
            "urlPrefix": extender.url_prefix,
            "prioritizeVerb": extender.prioritize_verb,
            "weight": extender.weight,
            "enableHTTPS": extender.url_prefix.startswith("https://"),
            "httpTimeout": go_duration(extender.http_timeout_s),
            # True: names only, the extender's --watch inventory supplies the layers.
            # False: full Node objects (with status.images) in every request, so the
            # extender needs no API access and no cache of its own.
            "nodeCacheCapable": extender.node_cache_capable,
            # An unreachable extender must not stop scheduling, only its scores.
            "ignorable": True,
        }
    ]
    return config
