"""``KubeSchedulerConfiguration`` for the second scheduler.

The one generator of these files: ``deploy/`` (the install), the plugin's README and the
docs' examples use it, and so do the testbeds' and benchmarks' configurations, built from
it where they live (:mod:`layersched.testbed.scheduler_configs`, which the wheel does not
carry). The default scheduler stays untouched: it is the ImageLocality baseline. The
second scheduler (``layer-locality``) is the same kube-scheduler with one profile and the
layersched extender; or a layersched-built kube-scheduler (1.20, or 1.35 and later) with
the LayerLocality score plugin in its profile instead (:func:`plugin_scheduler_config`,
``plugin/kube-scheduler``).

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
from layersched.core.strategies.args import InFlightArgs
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.deploy._versions import NEWEST_MINOR

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

#: layersched's score plugin (plugin/kube-scheduler/pkg/layerlocality: ``Name``).
LAYER_LOCALITY_PLUGIN = "LayerLocality"
#: The kube-scheduler minor of the plugin's first build, v1.20.2, which reads ``v1beta1``
#: (its adapter and ``k8s120`` build tag went with the local testbed's 1.20 build);
#: :func:`plugin_scheduler_config` still renders for it. The install's plugin mode
#: (``StackSpec(scheduler="plugin")``) renders for the 1.35+ build only
#: (:data:`PLUGIN_FRAMEWORK_SINCE_MINOR`).
PLUGIN_KUBERNETES_MINOR = (1, 20)
#: The first minor whose scheduler framework (``k8s.io/kube-scheduler/framework``, Score
#: with a NodeInfo, SignPod) the plugin's other adapter is written for. layersched builds
#: it into kube-scheduler from Go modules at the release plugin/kube-scheduler/go.mod pins
#: (``layersched.builds.kubernetes_build()``, v1.37.2; another 1.35+ release is a re-pin
#: with hack/pin_kubernetes.py), which reads ``v1``. 1.21 to 1.34 have no build of the
#: plugin: the extender serves them.
PLUGIN_FRAMEWORK_SINCE_MINOR = (1, 35)
#: The plugin's args, as plugin/kube-scheduler/pkg/layerlocality/args.go bounds them.
PLUGIN_STRATEGY = "layer-locality"
DEFAULT_INVENTORY_MAX_AGE_S = 1800
MAX_INVENTORY_MAX_AGE_S = 7 * 24 * 3600
DEFAULT_INVENTORY_SYNC_TIMEOUT_S = 30
MAX_INVENTORY_SYNC_TIMEOUT_S = 600
#: Nodes that must publish the same layers for a pod image: the extender's
#: ``--image-quorum`` default (core/votes.py DEFAULT_IMAGE_QUORUM, which a unit test
#: holds this to; not imported, as rendering must not load the extender's server).
DEFAULT_IMAGE_QUORUM = 2
MAX_IMAGE_QUORUM = 100_000
#: Upstream's score plugin for images already on a node, by name.
IMAGE_LOCALITY_PLUGIN = "ImageLocality"
#: Whether the plugin's profile keeps upstream's ImageLocality beside LayerLocality
#: (issue 43): it does not. LayerLocality counts the bytes of a pod's layers a node holds,
#: whatever the image's name, and with ``spread`` scales them as ImageLocality scales
#: images: what ImageLocality rewards (the whole image present) it rewards too, and a node
#: holding part of the image as well. ImageLocality only added its own weight to the same
#: signal, at 10-13% of kube-scheduler's CPU. The replay (bench/results/replay.json, a7dc206,
#: 2 quiet rounds) placed better without it: 0.97x the default profile's mean start-up
#: against 0.87x with it, p95 1.00x against 0.72x; the seed scenario cannot differ
#: (ImageLocality scores 0 on every node there). docs/kube-scheduler-plugin.md says so.
PLUGIN_KEEPS_IMAGE_LOCALITY = False
#: The registries layersched resolves images from when an install names none (the
#: extender's ``--allow-registry`` and the plugin's ``registry.allowRegistries``): the
#: public ones most images come from. An install names its own (``layersched deploy
#: render|overlay --allow-registry``); images from any other registry get no layer score
#: from a registry, and that registry is sent nothing.
DEFAULT_ALLOWED_REGISTRIES = ("docker.io", "registry.k8s.io", "ghcr.io", "quay.io")
#: The plugin's registry resolution (``registry`` in its args, registry_args.go): each
#: default is the Python extender's (registry/_client.py DEFAULT_TIMEOUT_S,
#: DEFAULT_DEADLINE_S, DEFAULT_RETRIES; registry/_cache.py MAX_CACHED_IMAGES,
#: MAX_CACHED_BYTES, POSITIVE_TTL_S, NEGATIVE_TTL_S; extender/_resolver.py DEFAULT_WORKERS,
#: MAX_PENDING; resolveWaitMilliseconds: extender/_server.py DEFAULT_RESOLVE_TIMEOUT_S,
#: the first pod of an unresolved image's wait), which a unit test holds these to (not
#: imported, as rendering must not load the registry client); (least, most) bound each
#: as the Go side does.
DEFAULT_REGISTRY_PLATFORM = "linux/amd64"
PLUGIN_REGISTRY_BOUNDS: dict[str, tuple[int, int, int]] = {
    # field: (default, least, most)
    "timeoutSeconds": (10, 1, 300),
    "deadlineSeconds": (30, 1, 600),
    "retries": (3, 0, 10),
    "workers": (4, 1, 64),
    "queueSize": (256, 1, 65_536),
    "maxCachedImages": (65_536, 1, 1_000_000),
    "maxCachedBytes": (64 * 1024 * 1024, 64 * 1024, 4 * 1024 * 1024 * 1024),
    "cacheTTLSeconds": (300, 1, 24 * 3600),
    "failureTTLSeconds": (10, 1, 3600),
    "resolveWaitMilliseconds": (200, 0, 1000),
}


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


def _base(
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
    return _base(api_version, scheduler_name, None)


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
    config = _base(api_version, scheduler_name, leader_election)
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


def _registry_default(name: str) -> int:
    return PLUGIN_REGISTRY_BOUNDS[name][0]


@dataclass(frozen=True, slots=True)
class PluginRegistryArgs:
    """The plugin's ``registry`` args: resolving, in the background, the layers of pod
    images no quorum of nodes publishes from their registry, under the rules of
    layersched's registry client (docs/registry.md; ``RegistryArgs`` in Go, which is off
    when the args omit it: what layersched renders turns it on)."""

    enabled: bool = True
    #: The only registries contacted (``host`` or ``host:port``; the extender's
    #: ``--allow-registry``).
    allow_registries: tuple[str, ...] = DEFAULT_ALLOWED_REGISTRIES
    #: Registries reached over plain HTTP (the extender's ``--insecure-registry``).
    insecure_registries: tuple[str, ...] = ()
    #: ``REGISTRY=HOST`` entries (the extender's ``--registry-token-host``).
    token_hosts: tuple[str, ...] = ()
    #: Docker config files (mounted dockerconfigjson Secrets) with registries' auths.
    auth_files: tuple[str, ...] = ()
    #: What an index is resolved to for a node whose platform is unknown.
    platform: str = DEFAULT_REGISTRY_PLATFORM
    timeout_s: int = _registry_default("timeoutSeconds")
    deadline_s: int = _registry_default("deadlineSeconds")
    retries: int = _registry_default("retries")
    workers: int = _registry_default("workers")
    queue_size: int = _registry_default("queueSize")
    max_cached_images: int = _registry_default("maxCachedImages")
    max_cached_bytes: int = _registry_default("maxCachedBytes")
    cache_ttl_s: int = _registry_default("cacheTTLSeconds")
    failure_ttl_s: int = _registry_default("failureTTLSeconds")
    #: How long a scheduling cycle waits for the registry's answer for the first pod of
    #: an image no node publishes (0: never).
    resolve_wait_ms: int = _registry_default("resolveWaitMilliseconds")

    def to_config(self) -> dict[str, Any]:
        """The ``registry`` mapping (the Go field names); lists only when not empty."""
        numbers = {
            "timeoutSeconds": self.timeout_s,
            "deadlineSeconds": self.deadline_s,
            "retries": self.retries,
            "workers": self.workers,
            "queueSize": self.queue_size,
            "maxCachedImages": self.max_cached_images,
            "maxCachedBytes": self.max_cached_bytes,
            "cacheTTLSeconds": self.cache_ttl_s,
            "failureTTLSeconds": self.failure_ttl_s,
            "resolveWaitMilliseconds": self.resolve_wait_ms,
        }
        for name, value in numbers.items():
            _, least, most = PLUGIN_REGISTRY_BOUNDS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise InputError(
                    f"{LAYER_LOCALITY_PLUGIN} args: registry.{name} {value!r} must be a whole "
                    f"number from {least} to {most}"
                )
        if self.enabled and not self.allow_registries:
            raise InputError(
                f"{LAYER_LOCALITY_PLUGIN} args: registry resolution is enabled with no "
                "registry allowed: name the registries pods' images come from "
                "(--allow-registry), or disable it"
            )
        config: dict[str, Any] = {
            "enabled": self.enabled,
            "allowRegistries": list(self.allow_registries),
        }
        for name, values in (
            ("insecureRegistries", self.insecure_registries),
            ("tokenHosts", self.token_hosts),
            ("authFiles", self.auth_files),
        ):
            if values:
                config[name] = list(values)
        return {**config, "platform": self.platform, **numbers}


def in_flight_config(args: InFlightArgs) -> dict[str, Any]:
    """The plugin's ``inFlight`` args (``InFlightArgs`` in Go) of the core's, validated."""
    args.validate()
    return {
        "pullMode": args.pull_mode,
        "newBytesWeight": args.new_bytes_weight,
        "overheadSeconds": args.overhead_s,
        "defaultBandwidthBitsPerS": args.default_bandwidth_bits_per_s,
        "maxPendingAgeSeconds": args.max_pending_age_s,
    }


@dataclass(frozen=True, slots=True)
class PluginArgs:
    """The LayerLocality plugin's ``pluginConfig`` args (``layerlocality.Args`` in Go, which
    decodes them strictly and validates them again at start-up)."""

    #: Scale each present layer by (nodes holding it / all nodes), against node heating
    #: and an agent claiming layers copied from other nodes (on by default, as the Go
    #: side's ``DefaultSpread``: issue 30).
    spread: bool = True
    #: The in-flight strategy's args (``strategy: in-flight`` with ``inFlight``,
    #: docs/in-flight.md; spread does not apply); None: layer-locality.
    in_flight: InFlightArgs | None = None
    #: How old a node's NodeLayerInventory may be and still count (0: no bound).
    inventory_max_age_s: int = DEFAULT_INVENTORY_MAX_AGE_S
    #: How long start-up waits for the first list of NodeLayerInventory objects.
    inventory_sync_timeout_s: int = DEFAULT_INVENTORY_SYNC_TIMEOUT_S
    #: Distinct nodes that must publish the same (manifest digest, layers) under a pod
    #: image's name for the plugin to use them (docs/inventory.md, "Trust model").
    image_quorum: int = DEFAULT_IMAGE_QUORUM
    #: Credentials to watch NodeLayerInventory with; None: the pod's service account.
    kubeconfig: str | None = None
    #: Resolving pod images no quorum of nodes publishes from their registry (on, with
    #: the public registries allowed); None: omitted, so the plugin makes no registry call.
    registry: PluginRegistryArgs | None = PluginRegistryArgs()

    def to_config(self) -> dict[str, Any]:
        """The ``args`` mapping (the Go field names)."""
        for name, value, most in (
            ("inventoryMaxAgeSeconds", self.inventory_max_age_s, MAX_INVENTORY_MAX_AGE_S),
            (
                "inventorySyncTimeoutSeconds",
                self.inventory_sync_timeout_s,
                MAX_INVENTORY_SYNC_TIMEOUT_S,
            ),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
                raise InputError(
                    f"{LAYER_LOCALITY_PLUGIN} args: {name} {value!r} must be a whole number of "
                    f"seconds from 0 to {most}"
                )
        quorum = self.image_quorum
        if (
            isinstance(quorum, bool)
            or not isinstance(quorum, int)
            or not 1 <= quorum <= MAX_IMAGE_QUORUM
        ):
            raise InputError(
                f"{LAYER_LOCALITY_PLUGIN} args: imageQuorum {quorum!r} must be a whole number "
                f"of nodes from 1 to {MAX_IMAGE_QUORUM} (1 trusts any single node's word "
                "for an image's layers)"
            )
        args: dict[str, Any] = {
            "strategy": PLUGIN_STRATEGY if self.in_flight is None else IN_FLIGHT_STRATEGY,
            "spread": self.spread,
            "inventoryMaxAgeSeconds": self.inventory_max_age_s,
            "inventorySyncTimeoutSeconds": self.inventory_sync_timeout_s,
            "imageQuorum": quorum,
        }
        if self.in_flight is not None:
            args["inFlight"] = in_flight_config(self.in_flight)
        if self.kubeconfig is not None:
            if not self.kubeconfig:
                raise InputError(
                    f"{LAYER_LOCALITY_PLUGIN} args: kubeconfig is empty: give the scheduler's "
                    "kubeconfig path, or None for the pod's service account"
                )
            args["kubeConfigPath"] = self.kubeconfig
        if self.registry is not None:
            args["registry"] = self.registry.to_config()
        return args


def _plugin_builds() -> str:
    since = ".".join(map(str, PLUGIN_FRAMEWORK_SINCE_MINOR))
    return (
        f"kube-scheduler {'.'.join(map(str, PLUGIN_KUBERNETES_MINOR))} (reading "
        f"{KUBE_SCHEDULER_CONFIG_V1BETA1}) and {since} to 1.{NEWEST_MINOR} (reading "
        f"{KUBE_SCHEDULER_CONFIG_V1})"
    )


def _check_plugin_build(api_version: str, kubernetes_version: str | None) -> None:
    """That a layersched kube-scheduler build with the plugin reads ``api_version`` (and is
    ``kubernetes_version``, when given); else an InputError naming the extender."""
    extender = "use the extender (extender_scheduler_config), which serves every version"
    if api_version not in (KUBE_SCHEDULER_CONFIG_V1BETA1, KUBE_SCHEDULER_CONFIG_V1):
        raise InputError(
            f"the {LAYER_LOCALITY_PLUGIN} plugin is built into {_plugin_builds()} only, not "
            f"into a kube-scheduler that reads {api_version}: {extender}"
        )
    if kubernetes_version is None:
        return
    version = kubernetes_minor(kubernetes_version)
    built = version == PLUGIN_KUBERNETES_MINOR or (
        PLUGIN_FRAMEWORK_SINCE_MINOR <= version <= (1, NEWEST_MINOR)
    )
    if not built:
        gap = PLUGIN_KUBERNETES_MINOR < version < PLUGIN_FRAMEWORK_SINCE_MINOR
        raise InputError(
            f"kubernetesVersion {kubernetes_version!r}: the {LAYER_LOCALITY_PLUGIN} plugin is "
            f"built into {_plugin_builds()} only{' (none for 1.21 to 1.34)' if gap else ''}: "
            f"{extender}"
        )
    reads = scheduler_api_version_for(kubernetes_version)
    if api_version != reads:
        raise InputError(
            f"kubernetesVersion {kubernetes_version!r}: kube-scheduler of that version reads "
            f"{reads}, not {api_version}: render the plugin's configuration with {reads}"
        )


def plugin_scheduler_config(
    args: PluginArgs | None = None,
    scheduler_name: str = LAYER_LOCALITY_SCHEDULER,
    weight: int = 1,
    api_version: str = KUBE_SCHEDULER_CONFIG_V1BETA1,
    leader_election: LeaderElectionSpec | None = None,
    kubernetes_version: str | None = None,
    image_locality: bool = PLUGIN_KEEPS_IMAGE_LOCALITY,
) -> dict[str, Any]:
    """The second scheduler as layersched's kube-scheduler builds run it: the default
    plugins plus LayerLocality at preScore and score, with its args; no extender. Without
    ``image_locality``, upstream's ImageLocality is disabled at score (LayerLocality
    counts what it counts: :data:`PLUGIN_KEEPS_IMAGE_LOCALITY`).

    Two builds carry the plugin: v1.20.2, which reads ``v1beta1`` (and enables a plugin per
    extension point), and the 1.35+ one from Go modules, which reads ``v1`` (where enabling
    it at preScore and score still holds, beside the default plugins' ``multiPoint``).
    ``kubernetes_version``, when given, is the build's release: it must be one of theirs
    and read ``api_version``."""
    _check_plugin_build(api_version, kubernetes_version)
    if weight < 1:
        raise InputError(f"plugin weight {weight} must be at least 1")
    config = _base(api_version, scheduler_name, leader_election)
    plugin = {"name": LAYER_LOCALITY_PLUGIN}
    score: dict[str, Any] = {"enabled": [{**plugin, "weight": weight}]}
    if not image_locality:
        score["disabled"] = [{"name": IMAGE_LOCALITY_PLUGIN}]
    config["profiles"][0]["plugins"] = {"preScore": {"enabled": [plugin]}, "score": score}
    config["profiles"][0]["pluginConfig"] = [
        {"name": LAYER_LOCALITY_PLUGIN, "args": (args or PluginArgs()).to_config()}
    ]
    return config
