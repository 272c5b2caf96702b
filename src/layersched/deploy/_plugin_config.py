"""``KubeSchedulerConfiguration`` for layersched's kube-scheduler builds with the
LayerLocality score plugin (1.20, and 1.35 and later; ``src/kube-scheduler``): the
plugin in the profile (upstream's ImageLocality off at score), and its args (inventory
age and quorum, the in-flight strategy, registry resolution), bounded as the Go side
bounds them; which builds carry it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layersched.core.errors import InputError
from layersched.core.strategies.args import InFlightArgs
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.deploy._scheduler_config import (
    DEFAULT_ALLOWED_REGISTRIES,
    DEFAULT_IMAGE_QUORUM,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    LAYER_LOCALITY_SCHEDULER,
    MAX_IMAGE_QUORUM,
    LeaderElectionSpec,
    base_config,
    kubernetes_minor,
    scheduler_api_version_for,
)
from layersched.deploy._versions import NEWEST_MINOR

#: layersched's score plugin (src/kube-scheduler/pkg/layerlocality: ``Name``).
LAYER_LOCALITY_PLUGIN = "LayerLocality"
#: The kube-scheduler minor of the plugin's first build, v1.20.2, which reads ``v1beta1``
#: (its adapter and ``k8s120`` build tag went with the local testbed's 1.20 build);
#: :func:`plugin_scheduler_config` still renders for it. The install's plugin mode
#: (``StackSpec(scheduler="plugin")``) renders for the 1.35+ build only
#: (:data:`PLUGIN_FRAMEWORK_SINCE_MINOR`).
PLUGIN_KUBERNETES_MINOR = (1, 20)
#: The first minor whose scheduler framework (``k8s.io/kube-scheduler/framework``, Score
#: with a NodeInfo, SignPod) the plugin's other adapter is written for. layersched builds
#: it into kube-scheduler from Go modules at the release src/kube-scheduler/go.mod pins
#: (``layersched.builds.scheduler_build()``, v1.37.2; another 1.35+ release is a re-pin
#: with hack/pin_kubernetes.py), which reads ``v1``. 1.21 to 1.34 have no build of the
#: plugin: the extender serves them.
PLUGIN_FRAMEWORK_SINCE_MINOR = (1, 35)
#: The plugin's args, as src/kube-scheduler/pkg/layerlocality/args.go bounds them.
PLUGIN_STRATEGY = "layer-locality"
DEFAULT_INVENTORY_MAX_AGE_S = 1800
MAX_INVENTORY_MAX_AGE_S = 7 * 24 * 3600
DEFAULT_INVENTORY_SYNC_TIMEOUT_S = 30
MAX_INVENTORY_SYNC_TIMEOUT_S = 600


#: Upstream's score plugin for images already on a node, by name.
IMAGE_LOCALITY_PLUGIN = "ImageLocality"
#: Whether the plugin's profile keeps upstream's ImageLocality beside LayerLocality
#: (issue 43): it does not. LayerLocality counts the bytes of a pod's layers a node holds,
#: whatever the image's name, and with ``spread`` scales them as ImageLocality scales
#: images: what ImageLocality rewards (the whole image present) it rewards too, and a node
#: holding part of the image as well. ImageLocality only added its own weight to the same
#: signal, at 10-13% of kube-scheduler's CPU. The replay (harness/results/replay.json, a7dc206,
#: 2 quiet rounds) placed better without it: 0.97x the default profile's mean start-up
#: against 0.87x with it, p95 1.00x against 0.72x; the seed scenario cannot differ
#: (ImageLocality scores 0 on every node there). docs/kube-scheduler-plugin.md says so.
PLUGIN_KEEPS_IMAGE_LOCALITY = False


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
    config = base_config(api_version, scheduler_name, leader_election)
    plugin = {"name": LAYER_LOCALITY_PLUGIN}
    score: dict[str, Any] = {"enabled": [{**plugin, "weight": weight}]}
    if not image_locality:
        score["disabled"] = [{"name": IMAGE_LOCALITY_PLUGIN}]
    config["profiles"][0]["plugins"] = {"preScore": {"enabled": [plugin]}, "score": score}
    config["profiles"][0]["pluginConfig"] = [
        {"name": LAYER_LOCALITY_PLUGIN, "args": (args or PluginArgs()).to_config()}
    ]
    return config
