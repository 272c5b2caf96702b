"""Every KubeSchedulerConfiguration layersched writes comes from one generator
(``layersched.deploy``): the install's, the LayerLocality plugin's (its README, the
install's plugin mode) and the local testbed's three processes (built on it by
``layersched_harness.testbed.scheduler_configs``), which the ``k8s_control_plane`` role writes from
``layersched testbed scheduler-configs`` (no Jinja template of its own).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched import __version__, generated
from layersched.cli.deploy import PLUGIN_README_BLOCK, plugin_readme
from layersched.cli.main import EXIT_USAGE, main
from layersched.core.errors import InputError
from layersched.core.strategies.args import InFlightArgs
from layersched.core.votes import DEFAULT_IMAGE_QUORUM
from layersched.deploy import (
    DEFAULT_ALLOWED_REGISTRIES,
    IMAGE_LOCALITY_PLUGIN,
    IN_FLIGHT_WEIGHT,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    KUBE_SCHEDULER_CONFIG_V1BETA3,
    KUBERNETES_VERSION,
    LAYER_LOCALITY_PLUGIN,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    PLUGIN_KEEPS_IMAGE_LOCALITY,
    PUBLISHED_KUBE_SCHEDULER,
    SCHEDULER_PLUGIN,
    LeaderElectionSpec,
    PluginArgs,
    PluginRegistryArgs,
    StackSpec,
    base_tree,
    issue_webhook_tls,
    plugin_image_tag,
    plugin_readme_block,
    plugin_scheduler_config,
    scheduler_config,
    stack_objects,
    webhook_dns_names,
)
from layersched.deploy._plugin_config import PLUGIN_REGISTRY_BOUNDS
from layersched.extender import DEFAULT_RESOLVE_TIMEOUT_S
from layersched.extender._resolver import DEFAULT_WORKERS, MAX_PENDING
from layersched.registry import (
    DEFAULT_DEADLINE_S,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MAX_CACHED_BYTES,
    MAX_CACHED_IMAGES,
    NEGATIVE_TTL_S,
    POSITIVE_TTL_S,
)
from layersched_harness.testbed.local import local_testbed_overlay
from layersched_harness.testbed.scheduler_configs import (
    IMAGE_LOCALITY_SCHEDULER,
    INFLIGHT_SCHEDULER,
    LAYER_LOCALITY_PLUGIN_SCHEDULER,
    PULL_TIME_SCHEDULER,
    REPLAY_PLUGIN_INFLIGHT_SCHEDULER,
    REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER,
    REPLAY_PLUGIN_NO_SPREAD_SCHEDULER,
    REPLAY_PLUGIN_SCHEDULER,
    TestbedSchedulers,
    for_process,
    image_locality_scheduler_config,
)
from layersched_harness.testbed.scheduler_configs import (
    testbed_scheduler_configs as generate_testbed_configs,
)
from tests.fixtures.kube_scheduler_fields import config_problems
from tests.unit.test_deploy import _target
from tests.unit.test_deploy_versions import built_release

ROLE = Path(__file__).resolve().parents[2] / "harness" / "playbooks" / "roles" / "k8s_control_plane"
KUBECONFIG = "/state/control-plane/kube-scheduler.kubeconfig"
#: The testbed's processes as the build runs them (its release: v1 configurations, no
#: plain-HTTP port) and, for the generator's older branch, as 1.20 ran them.
SPEC = TestbedSchedulers(
    kubeconfig=KUBECONFIG,
    extender_url="http://10.250.71.1:8888",
    extender_timeout_s=5.0,
    kubernetes_version=built_release(),
)
SPEC_1_20 = replace(
    SPEC,
    kubernetes_version="v1.20.2",
    image_locality_bind="10.250.71.1:10251",
    layer_locality_bind="10.250.71.1:10252",
    plugin_bind="10.250.71.1:10253",
)


def _profile(config: dict[str, Any], name: str) -> dict[str, Any]:
    [profile] = [p for p in config["profiles"] if p["schedulerName"] == name]
    return profile


def test_the_plugin_profile_enables_layer_locality_at_prescore_and_score() -> None:
    config = plugin_scheduler_config(PluginArgs(spread=True, kubeconfig=KUBECONFIG))
    profile = _profile(config, LAYER_LOCALITY_SCHEDULER)
    # kube-scheduler 1.20 enables a plugin per extension point; the default plugins stay,
    # but ImageLocality, which LayerLocality replaces (issue 43)
    assert profile["plugins"] == {
        "preScore": {"enabled": [{"name": LAYER_LOCALITY_PLUGIN}]},
        "score": {
            "enabled": [{"name": LAYER_LOCALITY_PLUGIN, "weight": 1}],
            "disabled": [{"name": IMAGE_LOCALITY_PLUGIN}],
        },
    }
    # the Go field names (src/kube-scheduler/pkg/layerlocality/args.go), every field
    assert profile["pluginConfig"] == [
        {
            "name": LAYER_LOCALITY_PLUGIN,
            "args": {
                "strategy": "layer-locality",
                "spread": True,
                "inventoryMaxAgeSeconds": 1800,
                "inventorySyncTimeoutSeconds": 30,
                "imageQuorum": 2,
                "kubeConfigPath": KUBECONFIG,
                # resolving unpublished pod images from their registry, as the extender
                # does: on, the public registries allowed, the extender's bounds
                "registry": {
                    "enabled": True,
                    "allowRegistries": ["docker.io", "registry.k8s.io", "ghcr.io", "quay.io"],
                    "platform": "linux/amd64",
                    "timeoutSeconds": 10,
                    "deadlineSeconds": 30,
                    "retries": 3,
                    "workers": 4,
                    "queueSize": 256,
                    "maxCachedImages": 65_536,
                    "maxCachedBytes": 64 * 1024 * 1024,
                    "cacheTTLSeconds": 300,
                    "failureTTLSeconds": 10,
                    # the first pod of an unresolved image waits as the extender does
                    "resolveWaitMilliseconds": 200,
                },
            },
        }
    ]
    assert "extenders" not in config
    # in a pod: no kubeConfigPath, the plugin uses the service account
    assert "kubeConfigPath" not in PluginArgs().to_config()


def test_the_plugins_registry_bounds_are_the_extenders() -> None:
    # one registry policy, two schedulers: each default the plugin's args render is the
    # Python extender's own (held here: rendering does not import the registry client)
    defaults = {name: bounds[0] for name, bounds in PLUGIN_REGISTRY_BOUNDS.items()}
    assert defaults == {
        "timeoutSeconds": DEFAULT_TIMEOUT_S,
        "deadlineSeconds": DEFAULT_DEADLINE_S,
        "retries": DEFAULT_RETRIES,
        "workers": DEFAULT_WORKERS,
        "queueSize": MAX_PENDING,
        "maxCachedImages": MAX_CACHED_IMAGES,
        "maxCachedBytes": MAX_CACHED_BYTES,
        "cacheTTLSeconds": POSITIVE_TTL_S,
        "failureTTLSeconds": NEGATIVE_TTL_S,
        "resolveWaitMilliseconds": round(DEFAULT_RESOLVE_TIMEOUT_S * 1000),
    }
    assert PluginRegistryArgs().allow_registries == DEFAULT_ALLOWED_REGISTRIES
    # omitted, the Go side makes no registry call (the testbed without a registry)
    assert "registry" not in PluginArgs(registry=None).to_config()


def test_the_plugins_in_flight_args_are_the_cores() -> None:
    # strategy: in-flight with the core's arguments under their Go names (InFlightArgs);
    # spread stays in the args (the Go side ignores it for in-flight)
    args = PluginArgs(in_flight=InFlightArgs(pull_mode="parallel", overhead_s=2.5)).to_config()
    assert args["strategy"] == "in-flight"
    assert args["inFlight"] == {
        "pullMode": "parallel",
        "newBytesWeight": InFlightArgs().new_bytes_weight,
        "overheadSeconds": 2.5,
        "defaultBandwidthBitsPerS": InFlightArgs().default_bandwidth_bits_per_s,
        "maxPendingAgeSeconds": InFlightArgs().max_pending_age_s,
    }
    # layer-locality renders no inFlight at all (the Go side refuses it with another
    # strategy)
    plain = PluginArgs().to_config()
    assert plain["strategy"] == "layer-locality"
    assert "inFlight" not in plain
    # the core's own validation, before anything is rendered
    with pytest.raises(InputError, match="pull_mode='eager'"):
        PluginArgs(in_flight=InFlightArgs(pull_mode="eager")).to_config()  # type: ignore[arg-type]


def test_the_install_and_the_testbed_allow_their_own_registries() -> None:
    # install/kustomize/'s plugin mode allows what the extender would (--allow-registry)
    spec = StackSpec(scheduler=SCHEDULER_PLUGIN, allowed_registries=("reg.corp:5000",))
    args = scheduler_config(spec)["profiles"][0]["pluginConfig"][0]["args"]
    assert args["registry"]["allowRegistries"] == ["reg.corp:5000"]
    assert args["registry"]["enabled"] is True
    # the testbed's plugin: its one plain-HTTP registry, as its extender's --insecure-registry
    configs = generate_testbed_configs(replace(SPEC, plugin_registry="10.250.61.1:5000"))
    profile = _profile(configs["layer-locality-plugin"], "layer-locality-plugin")
    registry = profile["pluginConfig"][0]["args"]["registry"]
    assert registry["allowRegistries"] == registry["insecureRegistries"] == ["10.250.61.1:5000"]
    plain = generate_testbed_configs(SPEC)["layer-locality-plugin"]
    assert "registry" not in _profile(plain, "layer-locality-plugin")["pluginConfig"][0]["args"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PluginRegistryArgs(timeout_s=0).to_config(), "registry.timeoutSeconds 0 .* 1 to"),
        (lambda: PluginRegistryArgs(workers=65).to_config(), "registry.workers 65"),
        (lambda: PluginRegistryArgs(retries=True).to_config(), "registry.retries True"),
        (lambda: PluginRegistryArgs(allow_registries=()).to_config(), "no registry allowed"),
    ],
    ids=["timeout 0", "65 workers", "a bool for a number", "nothing allowed"],
)
def test_bad_registry_args_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        make()


def test_the_plugins_image_quorum_defaults_to_the_extenders() -> None:
    # one trust rule, two schedulers: the rendered plugin args resolve a pod image with the
    # extender's quorum (core/votes.py), and a chosen quorum is rendered as given
    assert PluginArgs().to_config()["imageQuorum"] == DEFAULT_IMAGE_QUORUM == 2
    assert PluginArgs(image_quorum=3).to_config()["imageQuorum"] == 3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PluginArgs(inventory_max_age_s=-1).to_config(), "inventoryMaxAgeSeconds -1"),
        (
            lambda: PluginArgs(inventory_max_age_s=7 * 24 * 3600 + 1).to_config(),
            "from 0 to 604800",
        ),
        (lambda: PluginArgs(inventory_sync_timeout_s=601).to_config(), "SyncTimeoutSeconds 601"),
        (lambda: PluginArgs(kubeconfig="").to_config(), "kubeconfig is empty"),
        # a quorum of 0 would let no node at all speak for an image: refused, as in Go
        (lambda: PluginArgs(image_quorum=0).to_config(), "imageQuorum 0 must be .* from 1"),
        # v1beta3 is 1.23-1.28's: no build of the plugin reads it
        (
            lambda: plugin_scheduler_config(api_version=KUBE_SCHEDULER_CONFIG_V1BETA3),
            r"built into kube-scheduler 1.20 \(reading .*v1beta1\) and 1.35 to 1.37 \(reading "
            r".*/v1\) only.*use the extender",
        ),
        # 1.30 reads v1 too, but its framework is not the one the 1.35+ adapter is for
        (
            lambda: plugin_scheduler_config(
                api_version=KUBE_SCHEDULER_CONFIG_V1, kubernetes_version="v1.30.0"
            ),
            r"'v1.30.0'.*none for 1.21 to 1.34.*use the extender",
        ),
        # past the newest minor the generator knows: no build, nothing checked
        (
            lambda: plugin_scheduler_config(
                api_version=KUBE_SCHEDULER_CONFIG_V1, kubernetes_version="1.38"
            ),
            r"'1.38': the LayerLocality plugin is built into .* to 1.37 .* only: use the extender",
        ),
        # the 1.37 build reads v1 only
        (
            lambda: plugin_scheduler_config(kubernetes_version="v1.37.2"),
            "reads kubescheduler.config.k8s.io/v1, not kubescheduler.config.k8s.io/v1beta1",
        ),
        (lambda: plugin_scheduler_config(weight=0), "weight 0 must be at least 1"),
        (
            lambda: StackSpec(scheduler=SCHEDULER_PLUGIN, kubernetes_version="v1.30.0"),
            "built for kube-scheduler 1.35 and newer only; use 'extender'",
        ),
        (lambda: StackSpec(scheduler="sidecar"), "choose extender or plugin"),
    ],
    ids=[
        "negative-age",
        "age-past-a-week",
        "sync-past-10-min",
        "empty-kubeconfig",
        "zero-quorum",
        "plugin-on-v1beta3",
        "plugin-for-1.30",
        "plugin-for-1.38",
        "plugin-1.37-on-v1beta1",
        "zero-weight",
        "plugin-install-on-1.30",
        "unknown-scheduler-kind",
    ],
)
def test_the_plugin_is_refused_where_it_cannot_run(make: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        make()


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_the_plugin_profile_for_the_1_35_framework_reads_v1(minor: str) -> None:
    # kube-scheduler 1.35+ reads v1 only; naming the plugin at preScore and score beside
    # the default plugins' multiPoint is still how v1 enables a plugin at chosen points
    config = plugin_scheduler_config(
        api_version=KUBE_SCHEDULER_CONFIG_V1,
        kubernetes_version=minor,
        leader_election=LeaderElectionSpec(LAYER_LOCALITY_SCHEDULER, NAMESPACE),
    )
    assert config["apiVersion"] == KUBE_SCHEDULER_CONFIG_V1
    profile = _profile(config, LAYER_LOCALITY_SCHEDULER)
    assert profile["plugins"] == {
        "preScore": {"enabled": [{"name": LAYER_LOCALITY_PLUGIN}]},
        "score": {
            "enabled": [{"name": LAYER_LOCALITY_PLUGIN, "weight": 1}],
            "disabled": [{"name": IMAGE_LOCALITY_PLUGIN}],
        },
    }
    # every field is one kube-scheduler of that minor declares (its config/v1/types.go)
    assert config_problems(config, minor) == []


@pytest.mark.parametrize("minor", ["1.35", "1.37"])
def test_the_plugin_profile_can_replace_image_locality(minor: str) -> None:
    # issue 43: without ImageLocality the profile disables it at score (the one point it
    # has), beside LayerLocality; a field every such kube-scheduler declares
    config = plugin_scheduler_config(
        api_version=KUBE_SCHEDULER_CONFIG_V1,
        kubernetes_version=minor,
        leader_election=LeaderElectionSpec(LAYER_LOCALITY_SCHEDULER, NAMESPACE),
        image_locality=False,
    )
    score = _profile(config, LAYER_LOCALITY_SCHEDULER)["plugins"]["score"]
    assert score == {
        "enabled": [{"name": LAYER_LOCALITY_PLUGIN, "weight": 1}],
        "disabled": [{"name": IMAGE_LOCALITY_PLUGIN}],
    }
    assert config_problems(config, minor) == []
    # the installed profile is the generator's default, whichever way it is decided
    default = plugin_scheduler_config(api_version=KUBE_SCHEDULER_CONFIG_V1)
    keeps = "disabled" not in _profile(default, LAYER_LOCALITY_SCHEDULER)["plugins"]["score"]
    assert keeps is PLUGIN_KEEPS_IMAGE_LOCALITY


def test_the_module_builds_release_is_one_the_plugin_config_is_rendered_for() -> None:
    # src/kube-scheduler/go.mod pins the release `make kubernetes-modules` builds the
    # plugin into (v1.37.2); the generator renders its configuration, and without a
    # version v1 stands for that build
    built = built_release()
    lease = LeaderElectionSpec(LAYER_LOCALITY_SCHEDULER, NAMESPACE)
    config = plugin_scheduler_config(
        api_version=KUBE_SCHEDULER_CONFIG_V1,
        leader_election=lease,
        kubernetes_version=built,
    )
    assert config == plugin_scheduler_config(
        api_version=KUBE_SCHEDULER_CONFIG_V1, leader_election=lease
    )
    minor = ".".join(built.lstrip("v").split(".")[:2])
    assert config_problems(config, minor) == []


@pytest.mark.parametrize("spec", [SPEC, SPEC_1_20], ids=["built-release", "1.20"])
def test_the_testbeds_three_processes(spec: TestbedSchedulers) -> None:
    configs = generate_testbed_configs(spec)
    assert list(configs) == [
        IMAGE_LOCALITY_SCHEDULER,
        LAYER_LOCALITY_SCHEDULER,
        LAYER_LOCALITY_PLUGIN_SCHEDULER,
    ]
    api = KUBE_SCHEDULER_CONFIG_V1BETA1 if spec is SPEC_1_20 else KUBE_SCHEDULER_CONFIG_V1
    for name, config in configs.items():
        # each process outside a pod: its kubeconfig, no lease; 1.20's own plain-HTTP
        # port, a current release's health on its secure port only
        assert config["apiVersion"] == api, name
        assert config["clientConnection"] == {"kubeconfig": KUBECONFIG}, name
        assert config["leaderElection"] == {"leaderElect": False}, name
        assert config.get("healthzBindAddress") == config.get("metricsBindAddress"), name
    image, extender, plugin = configs.values()
    # the baseline: the default scheduler and ImageLocality alone
    assert [p["schedulerName"] for p in image["profiles"]] == [
        "default-scheduler",
        "image-locality",
    ]
    assert _profile(image, "image-locality")["plugins"]["score"] == {
        "disabled": [{"name": "*"}],
        "enabled": [{"name": "ImageLocality", "weight": 1}],
    }
    # the extender in NodeNames mode, ignorable, 5 s
    [entry] = extender["extenders"]
    assert entry["urlPrefix"] == "http://10.250.71.1:8888"
    assert (entry["nodeCacheCapable"], entry["ignorable"], entry["httpTimeout"]) == (
        True,
        True,
        "5s",
    )
    # the plugin watches with the scheduler's own kubeconfig
    args = _profile(plugin, LAYER_LOCALITY_PLUGIN_SCHEDULER)["pluginConfig"][0]["args"]
    assert args["kubeConfigPath"] == KUBECONFIG
    # quorum 1 on the testbed only: the seed scenario's Img1 is on one node when P1-again
    # is scheduled, and the plugin has no registry to fall back on (install/kustomize/ keeps 2)
    assert args["imageQuorum"] == 1 != PluginArgs().image_quorum
    binds = [c.get("healthzBindAddress") for c in configs.values()]
    if spec is SPEC_1_20:
        assert binds == ["10.250.71.1:10251", "10.250.71.1:10252", "10.250.71.1:10253"]
    else:
        assert binds == [None, None, None]
        # no field the release's kube-scheduler does not know, none of a wrong type (the
        # fixture calls the defaulted connection and lease fields "missing": left out)
        minor = ".".join(spec.kubernetes_version.lstrip("v").split(".")[:2])
        for config in configs.values():
            assert [p for p in config_problems(config, minor) if "but missing" not in p] == []


def test_a_process_config_needs_an_api_with_the_insecure_port_and_a_port() -> None:
    with pytest.raises(InputError, match="has no healthzBindAddress"):
        for_process(
            image_locality_scheduler_config(api_version=KUBE_SCHEDULER_CONFIG_V1), "k", "h:1"
        )
    with pytest.raises(InputError, match="write HOST:PORT"):
        for_process(image_locality_scheduler_config(), "k", "10.250.71.1")
    # 1.20 without an address would serve on 0.0.0.0:10251, clashing with the next process
    with pytest.raises(InputError, match="give the process's plain-HTTP health"):
        for_process(image_locality_scheduler_config(), "k")


def test_the_cli_prints_the_generators_configs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "testbed",
        "scheduler-configs",
        f"--kubeconfig={KUBECONFIG}",
        "--extender-url=http://10.250.71.1:8888",
        "--extender-timeout-s=5",
        "--plugin-name=my-plugin",
    ]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = generate_testbed_configs(replace(SPEC, plugin="my-plugin"))
    # one YAML file per process, under a header saying it is generated, exactly the generator's
    assert {name: yaml.safe_load(text) for name, text in printed.items()} == expected
    assert all(
        text.startswith("# Generated by layersched_harness.testbed") for text in printed.values()
    )


def test_the_role_writes_the_generators_files_and_has_no_template_of_its_own() -> None:
    assert not list(ROLE.rglob("scheduler-*.j2")), "scheduler templates are back in the role"
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    [render] = [t for t in tasks if t["name"] == "Render the scheduler configurations"]
    argv = render["vars"]["k8s_control_plane_render_argv"]
    assert argv[1:5] == ["-m", "layersched.cli.main", "testbed", "scheduler-configs"]
    # the replay's arms (testbed up --replay-arms) add the plugin process's replay profiles
    assert "k8s_control_plane_render_argv" in render["ansible.builtin.command"]["argv"]
    assert (
        "k8s_control_plane_replay_argv if testbed_replay_arms"
        in (render["ansible.builtin.command"]["argv"])
    )
    assert "--replay-arms" in render["vars"]["k8s_control_plane_replay_argv"]
    [write] = [t for t in tasks if t["name"] == "Write the scheduler configurations"]
    assert "k8s_control_plane_scheduler_configs.stdout" in write["ansible.builtin.copy"]["content"]
    # the processes it loops over are the generator's (the fourth, pull-time, when the
    # testbed asks for it: the render always passes its extender), and each one is started
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["k8s_control_plane_default_schedulers"] == list(generate_testbed_configs(SPEC))
    opt_in = defaults["k8s_control_plane_schedulers"]
    assert "['pull-time'] if k8s_control_plane_pull_time" in opt_in
    assert any(a.startswith("--pull-time-extender-url=") for a in argv)
    pull_time = replace(SPEC, pull_time_extender_url="http://10.250.71.1:8889")
    assert list(generate_testbed_configs(pull_time)) == [
        *defaults["k8s_control_plane_default_schedulers"],
        PULL_TIME_SCHEDULER,
    ]
    assert "regex_replace', '^', 'scheduler-'" in defaults["k8s_control_plane_components"]
    [describe] = [t for t in tasks if t["name"] == "Describe the control plane daemons"]
    daemons = {d["name"] for d in describe["ansible.builtin.set_fact"]["k8s_control_plane_daemons"]}
    assert {f"scheduler-{name}" for name in generate_testbed_configs(pull_time)} <= daemons


def test_the_pull_time_process_is_the_extenders_with_its_own_url() -> None:
    configs = generate_testbed_configs(
        replace(SPEC, pull_time_extender_url="http://10.250.71.1:8889", pull_time="pt")
    )
    layer, pull_time = configs[LAYER_LOCALITY_SCHEDULER], configs[PULL_TIME_SCHEDULER]
    # the same process as layer-locality's but for its profile's name and extender URL
    assert [p["schedulerName"] for p in pull_time["profiles"]] == ["pt"]
    [entry] = pull_time["extenders"]
    assert entry["urlPrefix"] == "http://10.250.71.1:8889"
    assert entry == dict(layer["extenders"][0], urlPrefix="http://10.250.71.1:8889")
    assert pull_time["clientConnection"] == layer["clientConnection"]


def test_the_install_renders_the_plugin_on_deploys_version() -> None:
    spec = StackSpec(scheduler=SCHEDULER_PLUGIN)
    objects = stack_objects(spec)
    [deployment] = [o for o in objects["scheduler.yaml"] if o["kind"] == "Deployment"]
    # kube-scheduler alone: no extender sidecar
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["kube-scheduler"]
    [configmap] = [o for o in objects["scheduler.yaml"] if o["kind"] == "ConfigMap"]
    config = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    assert config == scheduler_config(spec)
    # what the 1.35+ build of install/kustomize/'s release reads: v1, every field one it declares
    assert config["apiVersion"] == KUBE_SCHEDULER_CONFIG_V1
    minor = ".".join(KUBERNETES_VERSION.lstrip("v").split(".")[:2])
    assert config_problems(config, minor) == []
    assert _profile(config, LAYER_LOCALITY_SCHEDULER)["pluginConfig"][0]["name"] == "LayerLocality"
    assert config["leaderElection"]["leaderElect"] is True
    # the rights to read the inventories are named for what reads them
    roles = [o for o in objects["rbac.yaml"] if o["kind"] == "ClusterRole"]
    assert "layersched:layer-locality:plugin" in {r["metadata"]["name"] for r in roles}
    assert "layersched:layer-locality:extender" not in {r["metadata"]["name"] for r in roles}
    # ... and bound to the pod's own account: no extender account, token Secret or volume
    [binding] = [
        o
        for o in objects["rbac.yaml"]
        if o["kind"] == "ClusterRoleBinding"
        and o["roleRef"]["name"] == "layersched:layer-locality:plugin"
    ]
    assert [s["name"] for s in binding["subjects"]] == [spec.scheduler_name]
    names = {o["metadata"]["name"] for o in objects["rbac.yaml"]}
    assert spec.extender_account not in names and spec.extender_token_secret not in names
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert not any("secret" in v for v in volumes), volumes
    # the default install is unchanged: the extender
    assert "extenders" in scheduler_config(StackSpec())
    assert base_tree() != base_tree(spec)


def test_the_local_testbed_overlay_of_the_plugin_install_patches_no_sidecar() -> None:
    tls = issue_webhook_tls(webhook_dns_names(NAMESPACE))
    spec = StackSpec(scheduler=SCHEDULER_PLUGIN)
    files = local_testbed_overlay(_target(), "../../install/kustomize", spec, tls)
    [scheduler] = [
        d for d in yaml.safe_load_all(files["local-testbed.yaml"]) if d["kind"] == "Deployment"
        and d["metadata"]["name"] == spec.scheduler_name
    ]  # fmt: skip
    containers = scheduler["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["kube-scheduler"]


def test_the_plugin_readme_holds_the_generators_configuration() -> None:
    block = generated.read_block(plugin_readme(), PLUGIN_README_BLOCK)
    assert block == plugin_readme_block(), "run .venv/bin/layersched deploy render"
    config = yaml.safe_load(block.removeprefix("```yaml\n").removesuffix("```"))
    assert config == scheduler_config(StackSpec(scheduler=SCHEDULER_PLUGIN))
    # ready to use: no placeholder
    assert not any(word in block for word in ("REPLACE", "TODO", "<", "CHANGEME"))


def test_render_refuses_to_write_the_plugin_install_over_deploy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["deploy", "render", "--scheduler", "plugin"]) == EXIT_USAGE
    assert "give a --dir of its own" in capsys.readouterr().err


def test_render_refuses_the_plugin_before_its_framework(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the plugin is built for 1.35+ (upstream's image before that has no plugin)
    argv = ["deploy", "render", "--scheduler", "plugin", "--dir", str(tmp_path)]
    assert main([*argv, "--kubernetes-version", "1.34"]) == EXIT_USAGE
    assert "built for kube-scheduler 1.35 and newer only" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_render_installs_the_published_plugin_image_of_the_minor(tmp_path: Path) -> None:
    argv = ["deploy", "render", "--scheduler", "plugin", "--dir", str(tmp_path)]
    assert main([*argv, "--kubernetes-version", "1.36"]) == 0
    kustomization = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    [scheduler] = [i for i in kustomization["images"] if i["name"] == "kube-scheduler"]
    assert scheduler == {
        "name": "kube-scheduler",
        "newName": PUBLISHED_KUBE_SCHEDULER,
        "newTag": plugin_image_tag(36, __version__),
    }
    written = yaml.safe_load_all((tmp_path / "stack" / "scheduler.yaml").read_text())
    [deployment] = [o for o in written if o and o["kind"] == "Deployment"]
    assert [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]] == [
        "kube-scheduler"
    ]


def test_render_writes_the_plugin_install_elsewhere(tmp_path: Path) -> None:
    assert main(["deploy", "render", "--scheduler", "plugin", "--dir", str(tmp_path)]) == 0
    written = yaml.safe_load_all((tmp_path / "stack" / "scheduler.yaml").read_text())
    [deployment] = [o for o in written if o and o["kind"] == "Deployment"]
    assert len(deployment["spec"]["template"]["spec"]["containers"]) == 1


def test_the_testbeds_plugin_process_lets_pods_be_batched() -> None:
    # 1.37's PodTopologySpread signs no pod under its system default constraints, so
    # batching (KEP-5598) would never run: the testbed's plugin process turns them off
    plugin = generate_testbed_configs(SPEC)[LAYER_LOCALITY_PLUGIN_SCHEDULER]
    [spread] = [
        c for c in plugin["profiles"][0]["pluginConfig"] if c["name"] == "PodTopologySpread"
    ]
    assert spread["args"] == {"defaultingType": "List", "defaultConstraints": []}
    # 1.20's v1beta1 had no batching: nothing added there
    old = generate_testbed_configs(SPEC_1_20)[LAYER_LOCALITY_PLUGIN_SCHEDULER]
    assert [c["name"] for c in old["profiles"][0]["pluginConfig"]] == [LAYER_LOCALITY_PLUGIN]


def test_the_replay_arms_are_install_profiles_in_the_plugin_process() -> None:
    # --replay-arms: two more profiles in the plugin process, each upstream's default
    # profile plus LayerLocality as an install renders it (PodTopologySpread's system
    # defaults kept, unlike the batchable first profile: a Deployment's replicas spread
    # as under the default profile), one with ImageLocality disabled at score
    plain = generate_testbed_configs(SPEC)[LAYER_LOCALITY_PLUGIN_SCHEDULER]
    armed = generate_testbed_configs(replace(SPEC, replay_arms=True))
    process = armed[LAYER_LOCALITY_PLUGIN_SCHEDULER]
    assert process["profiles"][0] == plain["profiles"][0]
    names = [p["schedulerName"] for p in process["profiles"]]
    assert names == [
        LAYER_LOCALITY_PLUGIN_SCHEDULER,
        REPLAY_PLUGIN_SCHEDULER,
        REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER,
        REPLAY_PLUGIN_INFLIGHT_SCHEDULER,
        REPLAY_PLUGIN_NO_SPREAD_SCHEDULER,
    ]
    with_il, without_il, in_flight, no_spread = process["profiles"][1:]
    for profile in (with_il, without_il):
        assert [c["name"] for c in profile["pluginConfig"]] == [LAYER_LOCALITY_PLUGIN]
        assert profile["plugins"]["score"]["enabled"] == [
            {"name": LAYER_LOCALITY_PLUGIN, "weight": 1}
        ]
    assert "disabled" not in with_il["plugins"]["score"]
    assert without_il["plugins"]["score"]["disabled"] == [{"name": "ImageLocality"}]
    # the in-flight arm: strategy in-flight at its weight, told the kubelets' pull mode,
    # ImageLocality as the install has it (issue 43 replaced it)
    assert in_flight["plugins"]["score"]["enabled"] == [
        {"name": LAYER_LOCALITY_PLUGIN, "weight": IN_FLIGHT_WEIGHT}
    ]
    assert ("disabled" not in in_flight["plugins"]["score"]) is PLUGIN_KEEPS_IMAGE_LOCALITY
    (args,) = [c["args"] for c in in_flight["pluginConfig"]]
    assert args["strategy"] == "in-flight"
    assert args["inFlight"]["pullMode"] == "serial"
    # the spread-off arm (issue 42): the installed profile but for spread, which it turns off
    (spread_args,) = [c["args"] for c in no_spread["pluginConfig"]]
    (installed_args,) = [c["args"] for c in without_il["pluginConfig"]]
    assert spread_args == {**installed_args, "spread": False}
    assert installed_args["spread"] is True
    assert (
        no_spread["plugins"]
        == (without_il if not PLUGIN_KEEPS_IMAGE_LOCALITY else with_il)["plugins"]
    )
    # under parallel pulls it is told so; it resolves from the testbed's registry as the
    # other plugin profiles do (the burst's image is on no node)
    parallel = generate_testbed_configs(
        replace(SPEC, replay_arms=True, pull_mode="parallel", plugin_registry="10.0.0.1:5000")
    )
    profiles = parallel[LAYER_LOCALITY_PLUGIN_SCHEDULER]["profiles"]
    parallel_args = profiles[3]["pluginConfig"][0]["args"]
    assert parallel_args["inFlight"]["pullMode"] == "parallel"
    assert parallel_args["registry"]["allowRegistries"] == ["10.0.0.1:5000"]
    assert parallel_args["registry"] == profiles[1]["pluginConfig"][0]["args"]["registry"]
    # the other processes are unchanged; the playbook names the profiles the generator does
    assert {k: v for k, v in armed.items() if k != LAYER_LOCALITY_PLUGIN_SCHEDULER} == {
        k: v
        for k, v in generate_testbed_configs(SPEC).items()
        if k != LAYER_LOCALITY_PLUGIN_SCHEDULER
    }
    shared = yaml.safe_load((ROLE.parents[1] / "vars" / "testbed-local.yml").read_text())
    assert shared["testbed_scheduler_replay_plugin"] == REPLAY_PLUGIN_SCHEDULER
    assert (
        shared["testbed_scheduler_replay_plugin_no_image_locality"]
        == REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER
    )
    assert shared["testbed_scheduler_replay_plugin_inflight"] == REPLAY_PLUGIN_INFLIGHT_SCHEDULER
    assert shared["testbed_scheduler_replay_plugin_no_spread"] == REPLAY_PLUGIN_NO_SPREAD_SCHEDULER
    minor = ".".join(SPEC.kubernetes_version.lstrip("v").split(".")[:2])
    assert [p for p in config_problems(process, minor) if "but missing" not in p] == []


def test_the_inflight_arm_is_a_process_of_its_own_with_its_extender() -> None:
    # the replay's in-flight extender arm: the default plugins and an extender serving
    # in-flight, a process of its own (extenders are global to a process), started with
    # the replay's arms only
    url = "http://10.250.71.1:8890"
    configs = generate_testbed_configs(replace(SPEC, replay_arms=True, inflight_extender_url=url))
    process = configs[INFLIGHT_SCHEDULER]
    assert [p["schedulerName"] for p in process["profiles"]] == [INFLIGHT_SCHEDULER]
    [extender] = process["extenders"]
    assert extender["urlPrefix"] == url and extender["nodeCacheCapable"] is True
    # at in-flight's recommended weight (docs/in-flight.md), the pull-time arm at 1
    assert extender["weight"] == IN_FLIGHT_WEIGHT == 3
    assert INFLIGHT_SCHEDULER not in generate_testbed_configs(SPEC)
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert (
        "['layer-locality-inflight'] if testbed_replay_arms"
        in defaults["k8s_control_plane_schedulers"]
    )
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    [render] = [t for t in tasks if t["name"] == "Render the scheduler configurations"]
    replay_argv = render["vars"]["k8s_control_plane_replay_argv"]
    assert any(a.startswith("--inflight-extender-url=") for a in replay_argv)
    [describe] = [t for t in tasks if t["name"] == "Describe the control plane daemons"]
    daemons = {d["name"] for d in describe["ansible.builtin.set_fact"]["k8s_control_plane_daemons"]}
    assert f"scheduler-{INFLIGHT_SCHEDULER}" in daemons
    shared = yaml.safe_load((ROLE.parents[1] / "vars" / "testbed-local.yml").read_text())
    assert shared["testbed_scheduler_inflight"] == INFLIGHT_SCHEDULER
