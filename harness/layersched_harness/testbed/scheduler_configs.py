"""The testbeds' and benchmarks' kube-scheduler configurations, from the one generator.

:mod:`layersched.deploy` renders what an install runs (the second scheduler with the
extender or the LayerLocality plugin, upstream's default profile); what only a testbed or
a benchmark runs is built here from those, and never ships: the local testbed's three
scheduler processes (:func:`testbed_scheduler_configs`, written by ``layersched testbed
scheduler-configs`` for the ``k8s_control_plane`` role), each a process outside a pod
(:func:`for_process`), upstream's ImageLocality alone (the baseline), the Ryax-patched
kube-scheduler's in-tree plugin (the kind testbed's third scheduler) and a profile that
1.35+ can batch (:func:`batchable`, the benchmarks' rows too).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from layersched.core.errors import InputError
from layersched.core.inflight import SERIAL, PullMode
from layersched.core.strategies.args import InFlightArgs
from layersched.deploy import (
    DEFAULT_SCHEDULER,
    IMAGE_LOCALITY_PLUGIN,
    IN_FLIGHT_WEIGHT,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    LAYER_LOCALITY_SCHEDULER,
    LAYER_LOCALITY_WEIGHT,
    PLUGIN_KEEPS_IMAGE_LOCALITY,
    ExtenderSpec,
    LeaderElectionSpec,
    PluginArgs,
    PluginRegistryArgs,
    default_scheduler_config,
    extender_scheduler_config,
    plugin_scheduler_config,
    scheduler_api_version_for,
)

#: The testbeds' other scheduler names; pods pick one with ``spec.schedulerName``.
INTREE_SCHEDULER = "layer-locality-intree"
IMAGE_LOCALITY_SCHEDULER = "image-locality"
#: The local testbed's third process: layer-locality through the LayerLocality plugin.
LAYER_LOCALITY_PLUGIN_SCHEDULER = "layer-locality-plugin"
#: The local testbed's fourth process, opt-in (``layersched testbed up --pull-time``):
#: the default plugins and an extender serving the pull-time strategy.
PULL_TIME_SCHEDULER = "pull-time"
#: The replay's plugin arms (``layersched testbed up --replay-arms``), profiles of the
#: plugin process beside ``layer-locality-plugin``: upstream's default profile plus
#: LayerLocality as ``layersched.deploy`` renders it for an install (PodTopologySpread's
#: system defaults on, unlike the batchable ``layer-locality-plugin``), with ImageLocality
#: and without it.
REPLAY_PLUGIN_SCHEDULER = "layer-locality-plugin-replay"
REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER = "layer-locality-plugin-no-imagelocality"
#: The same as the install renders it, but with ``spread: false`` (issue 42: whether spread
#: blunts layer-locality on a small cluster, where a layer one node holds counts 1/n).
REPLAY_PLUGIN_NO_SPREAD_SCHEDULER = "layer-locality-plugin-no-spread"
#: The replay's in-flight plugin arm: the same install profile with LayerLocality under
#: ``strategy: in-flight`` at its recommended weight, told the kubelets' pull mode.
REPLAY_PLUGIN_INFLIGHT_SCHEDULER = "layer-locality-plugin-inflight"
#: The replay's in-flight extender arm: the default plugins and an extender serving
#: in-flight (told the kubelets' pull mode), a process of its own.
INFLIGHT_SCHEDULER = "layer-locality-inflight"
#: The Ryax fork registers its plugin under this name (``names.ImageLayersLocality``).
RYAX_PLUGIN_NAME = "ImageLayersLocality"


def image_locality_scheduler_config(
    scheduler_name: str = IMAGE_LOCALITY_SCHEDULER,
    api_version: str = KUBE_SCHEDULER_CONFIG_V1BETA1,
) -> dict[str, Any]:
    """The baseline process: upstream's plugins only, two profiles. ``default-scheduler``
    schedules everything that names no scheduler; ``scheduler_name`` keeps every filter but
    scores with ImageLocality alone (seed 000's configuration), so its decisions are
    upstream's image locality and nothing else."""
    config = default_scheduler_config(DEFAULT_SCHEDULER, api_version)
    config["profiles"].append(
        {
            "schedulerName": scheduler_name,
            "plugins": {
                "score": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": IMAGE_LOCALITY_PLUGIN, "weight": 1}],
                }
            },
        }
    )
    return config


#: Where 1.20 serves plain-HTTP health and metrics once a config file is given (the
#: fields exist up to v1beta2; v1beta3 dropped them with the insecure port).
_INSECURE_BIND_API_VERSIONS = (KUBE_SCHEDULER_CONFIG_V1BETA1, KUBE_SCHEDULER_CONFIG_V1BETA2)


def for_process(
    config: dict[str, Any],
    kubeconfig: str,
    insecure_bind: str | None = None,
    client_qps: int | None = None,
) -> dict[str, Any]:
    """``config`` for a scheduler process outside a pod (the local testbed's): its
    kubeconfig and, up to ``v1beta2``, its plain-HTTP health and metrics address
    (``HOST:PORT``: 1.20 always serves them once a config file is given, and its default
    ``0.0.0.0:10251`` would clash with the next scheduler's; port 0 is refused). From
    ``v1beta3`` on, health and metrics are on the secure port only: no address.
    ``client_qps``: the API client's rate and burst, when the default (50 qps) would cap
    binding (a benchmark's drain; upstream's scheduler_perf raises it the same way)."""
    insecure = config["apiVersion"] in _INSECURE_BIND_API_VERSIONS
    if insecure and insecure_bind is None:
        raise InputError(
            f"{config['apiVersion']}: give the process's plain-HTTP health and metrics "
            "address (HOST:PORT); kube-scheduler 1.20 serves them on 0.0.0.0:10251 otherwise"
        )
    if not insecure and insecure_bind is not None:
        raise InputError(
            f"{config['apiVersion']} has no healthzBindAddress: a process of kube-scheduler "
            f"1.22 or newer serves health on its secure port only"
        )
    head = {
        "apiVersion": config["apiVersion"],
        "kind": config["kind"],
        "clientConnection": {"kubeconfig": kubeconfig}
        | ({"qps": client_qps, "burst": client_qps} if client_qps is not None else {}),
        "leaderElection": config["leaderElection"],
    }
    if insecure_bind is not None:
        host, _, port = insecure_bind.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(
                f"bind address {insecure_bind!r}: write HOST:PORT, e.g. 10.250.50.1:10251"
            )
        head |= {"healthzBindAddress": insecure_bind, "metricsBindAddress": insecure_bind}
    rest = {k: v for k, v in config.items() if k not in ("apiVersion", "kind", "leaderElection")}
    return head | rest


@dataclass(frozen=True, slots=True)
class TestbedSchedulers:
    """The local testbed's three kube-scheduler processes (four with the pull-time
    extender's URL): the Kubernetes release they are (which sets the configuration's API),
    where each serves plain-HTTP health (``HOST:PORT``, up to 1.21 only) and its (first
    non-default) profile's name."""

    __test__ = False  # not a pytest test class, whatever its name says

    #: The scheduler's kubeconfig (the plugin watches NodeLayerInventory with it too).
    kubeconfig: str
    #: The extender kube-scheduler calls, and how long it waits (it is ignorable).
    extender_url: str
    extender_timeout_s: float
    #: The testbed's Kubernetes release (``v1.37.2``).
    kubernetes_version: str
    image_locality_bind: str | None = None
    layer_locality_bind: str | None = None
    plugin_bind: str | None = None
    #: The second extender, serving pull-time (it reads each Node's
    #: ``layersched.io/bandwidth-bits-per-s`` label); None: no fourth process.
    pull_time_extender_url: str | None = None
    pull_time_bind: str | None = None
    image_locality: str = IMAGE_LOCALITY_SCHEDULER
    layer_locality: str = LAYER_LOCALITY_SCHEDULER
    plugin: str = LAYER_LOCALITY_PLUGIN_SCHEDULER
    pull_time: str = PULL_TIME_SCHEDULER
    #: Also the replay's plugin arms (:data:`REPLAY_PLUGIN_SCHEDULER` and
    #: :data:`REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER`) in the plugin process.
    replay_arms: bool = False
    #: How the kubelets pull (``serial``, their default, or ``parallel``): the replay's
    #: in-flight plugin arm is told it, as the in-flight extender is (``--pull-mode``).
    pull_mode: PullMode = SERIAL
    #: The in-flight extender; None: no in-flight process.
    inflight_extender_url: str | None = None
    inflight_bind: str | None = None
    inflight: str = INFLIGHT_SCHEDULER
    #: The plugin's imageQuorum on the testbed: 1, not install/kustomize/'s 2. The seed scenario's
    #: Img1 is held by one node only (P1's) when P1-again is scheduled, and the plugin has
    #: no registry to fall back on as the extender has, so at 2 P1-again would score 0
    #: everywhere and the plugin's column would measure nothing. The testbed's agents are
    #: its own host processes, each held to its node by per-node write authority
    #: (:mod:`layersched.deploy._admission`).
    plugin_image_quorum: int = 1
    #: The testbed's registry (``HOST:PORT``, plain HTTP on the bridge address), which the
    #: plugin resolves pod images no quorum of nodes publishes from, as the testbed's
    #: extender does (``--insecure-registry``): the only registry it may contact, over
    #: plain HTTP. None: the plugin makes no registry call (a registry on a private
    #: address needs nothing more: the address guard refuses a registry on a cloud
    #: metadata address only, docs/registry.md).
    plugin_registry: str | None = None


def testbed_scheduler_configs(spec: TestbedSchedulers) -> dict[str, dict[str, Any]]:
    """The local testbed's scheduler configurations, by process: ``image-locality``
    (upstream's ImageLocality baseline and the default scheduler), ``layer-locality`` (the
    default plugins and the extender, in NodeNames mode: extenders are global to a
    kube-scheduler process, hence a process of its own) and ``layer-locality-plugin`` (the
    default plugins and LayerLocality, reading the agents' NodeLayerInventory objects
    itself), and with ``spec.pull_time_extender_url`` ``pull-time`` (the default plugins
    and the second extender, serving pull-time, as ``layer-locality`` is built). In the
    seed scenario the default plugins tie at t3 (both candidate nodes are
    empty, identical and hold no image of the pod by name), so the layer score is what
    separates them. With ``spec.replay_arms`` the plugin process also runs the replay's
    plugin profiles (:func:`replay_plugin_profiles`)."""
    api = scheduler_api_version_for(spec.kubernetes_version)
    extender = ExtenderSpec(
        spec.extender_url, http_timeout_s=spec.extender_timeout_s, node_cache_capable=True
    )
    plugin_process = batchable(
        plugin_scheduler_config(
            _testbed_plugin_args(spec),
            spec.plugin,
            api_version=api,
            kubernetes_version=spec.kubernetes_version,
        )
    )
    if spec.replay_arms:
        plugin_process["profiles"] += replay_plugin_profiles(spec, api)
    configs = {
        IMAGE_LOCALITY_SCHEDULER: for_process(
            image_locality_scheduler_config(spec.image_locality, api),
            spec.kubeconfig,
            spec.image_locality_bind,
        ),
        LAYER_LOCALITY_SCHEDULER: for_process(
            extender_scheduler_config(extender, spec.layer_locality, api),
            spec.kubeconfig,
            spec.layer_locality_bind,
        ),
        LAYER_LOCALITY_PLUGIN_SCHEDULER: for_process(
            plugin_process, spec.kubeconfig, spec.plugin_bind
        ),
    }
    for key, url, name, bind, weight in (
        (
            PULL_TIME_SCHEDULER,
            spec.pull_time_extender_url,
            spec.pull_time,
            spec.pull_time_bind,
            LAYER_LOCALITY_WEIGHT,
        ),
        # in-flight at its recommended weight (docs/in-flight.md, "How it combines")
        (
            INFLIGHT_SCHEDULER,
            spec.inflight_extender_url,
            spec.inflight,
            spec.inflight_bind,
            IN_FLIGHT_WEIGHT,
        ),
    ):
        if url is None:
            continue
        extender_of_process = ExtenderSpec(
            url, weight=weight, http_timeout_s=spec.extender_timeout_s, node_cache_capable=True
        )
        configs[key] = for_process(
            extender_scheduler_config(extender_of_process, name, api), spec.kubeconfig, bind
        )
    return configs


def _testbed_plugin_args(spec: TestbedSchedulers) -> PluginArgs:
    """The LayerLocality args of every testbed profile: spread on, as installed and as the
    testbed's extender runs (issue 45); the testbed's quorum; the scheduler's kubeconfig;
    the testbed's registry, when it runs one (:func:`_plugin_registry`)."""
    return PluginArgs(
        kubeconfig=spec.kubeconfig,
        image_quorum=spec.plugin_image_quorum,
        registry=_plugin_registry(spec.plugin_registry),
    )


def replay_plugin_profiles(spec: TestbedSchedulers, api_version: str) -> list[dict[str, Any]]:
    """The replay's plugin arms, as profiles of the plugin process: upstream's default
    profile plus LayerLocality with ImageLocality kept (PodTopologySpread's system defaults
    on, so that a Deployment's replicas spread as the default profile spreads them; the
    install's profile until issue 43 replaced ImageLocality), under
    :data:`REPLAY_PLUGIN_SCHEDULER`; the same with ImageLocality disabled, as an install
    renders it now, under :data:`REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER`; and with
    ``strategy: in-flight`` (``spec.pull_mode``) at :data:`IN_FLIGHT_WEIGHT`, ImageLocality
    as the install has it (:data:`PLUGIN_KEEPS_IMAGE_LOCALITY`), under
    :data:`REPLAY_PLUGIN_INFLIGHT_SCHEDULER`, as the in-flight extender arm is built; and
    the install's profile with ``spread: false`` under
    :data:`REPLAY_PLUGIN_NO_SPREAD_SCHEDULER`."""
    layer_locality = _testbed_plugin_args(spec)
    in_flight = replace(layer_locality, in_flight=InFlightArgs(pull_mode=spec.pull_mode))
    no_spread = replace(layer_locality, spread=False)
    profiles = []
    installed = PLUGIN_KEEPS_IMAGE_LOCALITY
    for name, args, weight, image_locality in (
        (REPLAY_PLUGIN_SCHEDULER, layer_locality, LAYER_LOCALITY_WEIGHT, True),
        (REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER, layer_locality, LAYER_LOCALITY_WEIGHT, False),
        (REPLAY_PLUGIN_INFLIGHT_SCHEDULER, in_flight, IN_FLIGHT_WEIGHT, installed),
        (REPLAY_PLUGIN_NO_SPREAD_SCHEDULER, no_spread, LAYER_LOCALITY_WEIGHT, installed),
    ):
        (profile,) = plugin_scheduler_config(
            args,
            name,
            weight=weight,
            api_version=api_version,
            kubernetes_version=spec.kubernetes_version,
            image_locality=image_locality,
        )["profiles"]
        profiles.append(profile)
    return profiles


def _plugin_registry(registry: str | None) -> PluginRegistryArgs | None:
    """The plugin's registry args on the testbed: its one plain-HTTP registry allowed."""
    if registry is None:
        return None
    return PluginRegistryArgs(allow_registries=(registry,), insecure_registries=(registry,))


#: The upstream plugin whose system default constraints make every pod unsignable.
POD_TOPOLOGY_SPREAD_PLUGIN = "PodTopologySpread"


def batchable(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with PodTopologySpread's system default constraints off, from ``v1``
    (kube-scheduler 1.35+): with them, that plugin refuses to sign any pod without
    constraints of its own ("pods with default topology constraints are not signable"),
    so opportunistic batching (KEP-5598) never runs and the testbed could not show that
    LayerLocality keeps it on. The defaults only spread pods of one Service or controller
    across zones and hosts; the scenario's pods have none."""
    if config["apiVersion"] != KUBE_SCHEDULER_CONFIG_V1:
        return config
    for profile in config["profiles"]:
        profile.setdefault("pluginConfig", []).append(
            {
                "name": POD_TOPOLOGY_SPREAD_PLUGIN,
                "args": {"defaultingType": "List", "defaultConstraints": []},
            }
        )
    return config


def intree_scheduler_config(
    scheduler_name: str = INTREE_SCHEDULER,
    plugin_name: str = RYAX_PLUGIN_NAME,
    weight: int = 1,
    api_version: str = KUBE_SCHEDULER_CONFIG_V1BETA2,
    leader_election: LeaderElectionSpec | None = None,
) -> dict[str, Any]:
    """The third scheduler: the patched kube-scheduler's in-tree layer plugin, ImageLocality off."""
    return score_plugin_scheduler_config(
        plugin_name, scheduler_name, weight, api_version, leader_election,
        disabled=(IMAGE_LOCALITY_PLUGIN,),
    )  # fmt: skip


def score_plugin_scheduler_config(
    plugin_name: str,
    scheduler_name: str = DEFAULT_SCHEDULER,
    weight: int = 1,
    api_version: str = KUBE_SCHEDULER_CONFIG_V1,
    leader_election: LeaderElectionSpec | None = None,
    disabled: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Upstream's default profile under ``scheduler_name`` plus one more Score plugin,
    ``plugin_name`` at ``weight``, the ``disabled`` ones off: a kube-scheduler build's
    own plugin that layersched renders no args for (the Ryax fork's in-tree one, or a
    benchmark's stand-in for LayerLocality)."""
    if weight < 1:
        raise InputError(f"plugin weight {weight} must be at least 1")
    config = default_scheduler_config(scheduler_name, api_version)
    if leader_election is not None:
        config["leaderElection"] = leader_election.to_config()
    score: dict[str, Any] = {"enabled": [{"name": plugin_name, "weight": weight}]}
    if disabled:
        score["disabled"] = [{"name": name} for name in disabled]
    config["profiles"][0]["plugins"] = {"score": score}
    return config
