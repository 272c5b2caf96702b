"""The kind testbed's generated config files, checked against upstream's known fields.

Nothing here needs a cluster: these are the files kind, kube-scheduler and
CRI-O would read, parsed back and compared with what those programs accept.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import yaml

from layersched.core.errors import InputError
from layersched_harness.testbed.kind import (
    CRIO_SOCKET,
    KIND_API_VERSION,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    KUBE_SCHEDULER_CONFIG_V1BETA3,
    REGISTRIES_DROPIN_NODE_PATH,
    RYAX_PLUGIN_NAME,
    ClusterSpec,
    ExtenderSpec,
    check_kind_version,
    extender_scheduler_config,
    go_duration,
    intree_scheduler_config,
    kind_cluster_config,
    node_names,
    registries_dropin,
    scheduler_api_version_for,
    tbf_command,
    to_yaml,
)
from layersched_harness.testbed.kind._shaping import MIN_BURST_BYTES, tbf_burst_bytes
from tests.infra._kind_schemas import (
    KIND_CLUSTER,
    KIND_MOUNT,
    KIND_NODE,
    KIND_ROLES,
    KUBEADM_CLUSTER_CONFIGURATION,
    KUBEADM_KINDS,
    KUBEADM_NODE_REGISTRATION,
    LEADER_ELECTION,
    PLUGIN_EXTENSION_POINTS,
    REGISTRIES_REGISTRY,
    REGISTRIES_TOP,
    SCHEDULER_CONFIG,
    SCHEDULER_EXTENDER,
    SCHEDULER_PROFILE,
    unknown,
)

pytestmark = pytest.mark.infra

DROPIN = "/srv/layersched/registries.conf.d/50-layersched-registry.conf"
#: An extender behind a Service, as a scheduler outside the extender's pod would call it.
EXTENDER_URL = "http://layersched-extender.layersched.svc.cluster.local:8888"


def _round_trip(document: dict[str, Any]) -> dict[str, Any]:
    """What kind reads: our YAML text parsed back."""
    parsed: dict[str, Any] = yaml.safe_load(to_yaml(document))
    assert parsed == document
    return parsed


def _patches(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    parsed = [yaml.safe_load(p) for p in node["kubeadmConfigPatches"]]
    return {p["kind"]: p for p in parsed}


@pytest.mark.parametrize(
    ("spec", "roles", "cluster_patch"),
    [
        # The scenario's shape: 1 control plane + 3 workers; no ClusterConfiguration patch
        # because the stock control-plane images are used.
        (
            ClusterSpec("layersched", "kindnode/crio:v1.30", DROPIN),
            ["control-plane", "worker", "worker", "worker"],
            None,
        ),
        # Seed 001's control plane: patched images from our registry at 1.22.6, one worker.
        (
            ClusterSpec(
                "crio",
                "quay.io/aojea/kindnode:crio1639620432",
                DROPIN,
                workers=1,
                kubernetes_version="1.22.6",
                image_repository="kind-registry:5000/patched",
            ),
            ["control-plane", "worker"],
            {"kubernetesVersion": "1.22.6", "imageRepository": "kind-registry:5000/patched"},
        ),
    ],
    ids=["scenario-1cp-3w", "seed-001-patched-control-plane"],
)
def test_kind_config_uses_crio_and_trusts_registry(
    spec: ClusterSpec, roles: list[str], cluster_patch: dict[str, str] | None
) -> None:
    config = _round_trip(kind_cluster_config(spec))
    assert config["apiVersion"] == KIND_API_VERSION
    assert not unknown(config, KIND_CLUSTER)
    assert [n["role"] for n in config["nodes"]] == roles
    for node in config["nodes"]:
        assert not unknown(node, KIND_NODE)
        assert node["role"] in KIND_ROLES
        assert node["image"] == spec.node_image
        # Every node, control plane included, mounts the registry drop-in read-only.
        assert node["extraMounts"] == [
            {"hostPath": DROPIN, "containerPath": REGISTRIES_DROPIN_NODE_PATH, "readOnly": True}
        ]
        assert all(not unknown(m, KIND_MOUNT) for m in node["extraMounts"])
        patches = _patches(node)
        assert set(patches) <= KUBEADM_KINDS
        # kubeadm must find CRI-O, not containerd, on every node it joins or inits.
        expected = {"InitConfiguration", "JoinConfiguration"}
        if node["role"] == "worker":
            expected = {"JoinConfiguration"}
        for kind in expected:
            assert patches[kind]["nodeRegistration"] == {"criSocket": CRIO_SOCKET}
            assert not unknown(patches[kind]["nodeRegistration"], KUBEADM_NODE_REGISTRATION)
    control = _patches(config["nodes"][0])
    if cluster_patch is None:
        assert "ClusterConfiguration" not in control
    else:
        assert not unknown(control["ClusterConfiguration"], KUBEADM_CLUSTER_CONFIGURATION)
        assert {k: v for k, v in control["ClusterConfiguration"].items() if k != "kind"} == (
            cluster_patch
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # Uppercase is not a DNS-1123 label: kind would refuse the node names.
        ({"name": "Layersched"}, "cluster name"),
        # Zero workers leaves the scenario nowhere to put three pods.
        ({"workers": 0}, "workers=0"),
        # kind resolves extraMounts on the Docker host: a relative path means nothing there.
        ({"registries_dropin_host_path": "registries.conf"}, "must be absolute"),
    ],
    ids=["uppercase-name", "no-workers", "relative-dropin"],
)
def test_kind_config_rejects(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {
        "name": "layersched",
        "node_image": "n",
        "registries_dropin_host_path": DROPIN,
    }
    with pytest.raises(InputError, match=message):
        kind_cluster_config(ClusterSpec(**(base | kwargs)))


@pytest.mark.parametrize(
    ("workers", "names"),
    [
        # kind names the first worker without a number, then worker2, worker3…
        (3, ("lb-control-plane", "lb-worker", "lb-worker2", "lb-worker3")),
        (1, ("lb-control-plane", "lb-worker")),
    ],
    ids=["three-workers", "one-worker"],
)
def test_node_names_follow_kind(workers: int, names: tuple[str, ...]) -> None:
    assert node_names("lb", workers) == names


@pytest.mark.parametrize(
    ("weight", "timeout_s", "http_timeout"),
    [
        # The default: weight 1, a 1 s timeout rather than upstream's blocking 30 s.
        (1, 1.0, "1s"),
        # A heavier extender and a sub-second timeout, rendered as a Go duration.
        (5, 0.25, "250ms"),
    ],
    ids=["default-weight-1s", "weight-5-250ms"],
)
def test_extender_scheduler_config(weight: int, timeout_s: float, http_timeout: str) -> None:
    url = EXTENDER_URL
    config = _round_trip(extender_scheduler_config(ExtenderSpec(url, weight, timeout_s)))
    assert config["apiVersion"] == KUBE_SCHEDULER_CONFIG_V1
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert not unknown(config, SCHEDULER_CONFIG)
    assert not unknown(config["leaderElection"], LEADER_ELECTION)
    assert config["profiles"] == [{"schedulerName": "layer-locality"}]
    assert all(not unknown(p, SCHEDULER_PROFILE) for p in config["profiles"])
    [extender] = config["extenders"]
    assert not unknown(extender, SCHEDULER_EXTENDER)
    assert extender == {
        "urlPrefix": "http://layersched-extender.layersched.svc.cluster.local:8888",
        "prioritizeVerb": "prioritize",
        "weight": weight,
        "enableHTTPS": False,
        "httpTimeout": http_timeout,
        "nodeCacheCapable": False,
        "ignorable": True,
    }
    # Only scoring: no filter or bind verb, so the extender can never veto or bind a pod.
    assert "filterVerb" not in extender and "bindVerb" not in extender


@pytest.mark.parametrize(
    ("extender", "message"),
    [
        # Upstream rejects a non-positive extender weight.
        (ExtenderSpec("http://x:1", weight=0), "weight 0"),
        # A URL without a scheme is not a urlPrefix kube-scheduler can call.
        (ExtenderSpec("x:1"), "must start with http"),
        # A zero timeout would make every call fail instantly.
        (ExtenderSpec("http://x:1", http_timeout_s=0), "positive"),
    ],
    ids=["zero-weight", "no-scheme", "zero-timeout"],
)
def test_extender_scheduler_config_rejects(extender: ExtenderSpec, message: str) -> None:
    with pytest.raises(InputError, match=message):
        extender_scheduler_config(extender)


def test_intree_scheduler_config_swaps_image_locality_for_ryax_plugin() -> None:
    config = _round_trip(intree_scheduler_config(weight=3))
    # Kubernetes 1.22 (the Ryax fork) decodes only the beta API.
    assert config["apiVersion"] == KUBE_SCHEDULER_CONFIG_V1BETA2
    assert not unknown(config, SCHEDULER_CONFIG)
    [profile] = config["profiles"]
    assert profile["schedulerName"] == "layer-locality-intree"
    assert set(profile["plugins"]) <= PLUGIN_EXTENSION_POINTS
    assert profile["plugins"]["score"] == {
        "enabled": [{"name": RYAX_PLUGIN_NAME, "weight": 3}],
        "disabled": [{"name": "ImageLocality"}],
    }
    assert "extenders" not in config


@pytest.mark.parametrize(
    ("kubernetes_version", "api_version"),
    [
        # Seed 001's 1.22.6: v1beta2 is the newest API 1.22 serves (v1beta3 came in 1.23).
        ("v1.22.6", KUBE_SCHEDULER_CONFIG_V1BETA2),
        # 1.23 and 1.24 serve v1beta3; v1 only went GA in 1.25.
        ("v1.23.17", KUBE_SCHEDULER_CONFIG_V1BETA3),
        ("1.24", KUBE_SCHEDULER_CONFIG_V1BETA3),
        # From 1.25 on: v1 (and 1.28+/1.29+ no longer decode v1beta2/v1beta3 at all).
        ("v1.25.0", KUBE_SCHEDULER_CONFIG_V1),
        ("v1.30.0", KUBE_SCHEDULER_CONFIG_V1),
        # A pre-release of a later minor is still that minor.
        ("v1.31.0-rc.1", KUBE_SCHEDULER_CONFIG_V1),
        # The local testbed's 1.20 (and 1.19 to 1.21) read only v1beta1.
        ("v1.20.2", KUBE_SCHEDULER_CONFIG_V1BETA1),
        ("v1.21.14", KUBE_SCHEDULER_CONFIG_V1BETA1),
    ],
    ids=[
        "1.22-v1beta2",
        "1.23-v1beta3",
        "1.24-no-patch",
        "1.25-v1",
        "1.30-v1",
        "1.31-rc",
        "1.20-v1beta1",
        "1.21-v1beta1",
    ],
)
def test_scheduler_api_version_for(kubernetes_version: str, api_version: str) -> None:
    assert scheduler_api_version_for(kubernetes_version) == api_version
    # The config it picks is one this module can render.
    config = extender_scheduler_config(ExtenderSpec(EXTENDER_URL), api_version=api_version)
    assert config["apiVersion"] == api_version


@pytest.mark.parametrize(
    ("kubernetes_version", "message"),
    [
        # 1.18 reads only v1alpha2, which nothing here renders.
        ("v1.18.20", "use Kubernetes 1.19 or newer"),
        # Not a version at all (a tag name, say).
        ("latest", "not a Kubernetes version"),
    ],
    ids=["too-old", "not-a-version"],
)
def test_scheduler_api_version_for_rejects(kubernetes_version: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        scheduler_api_version_for(kubernetes_version)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        # As `kind version` prints it.
        ("v0.23.0", "v0.23.0"),
        # Without the v (as the release notes' titles spell it), and seed 001's release.
        ("0.11.1", "v0.11.1"),
    ],
    ids=["with-v", "without-v"],
)
def test_check_kind_version(text: str, version: str) -> None:
    assert check_kind_version(text) == version


@pytest.mark.parametrize(
    "text",
    # A channel name, a release without its patch number, a pre-release.
    ["latest", "v0.23", "0.23.0-alpha"],
    ids=["word", "no-patch", "pre-release"],
)
def test_check_kind_version_rejects(text: str) -> None:
    with pytest.raises(InputError, match=r"kindVersion .* like v0\.23\.0"):
        check_kind_version(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1.0, "1s"), (30, "30s"), (0.5, "500ms"), (1.5, "1500ms")],
    # 1.5 s is not whole seconds, so it goes out as 1500 ms (Go parses both).
    ids=["one-second", "thirty-seconds", "half-second", "one-and-a-half"],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


@pytest.mark.parametrize(
    "hosts",
    [("kind-registry:5000",), ("kind-registry:5000", "localhost:5001")],
    ids=["in-cluster-name", "with-host-alias"],
)
def test_registries_dropin_is_v2_toml(hosts: tuple[str, ...]) -> None:
    document = tomllib.loads(registries_dropin(*hosts))
    assert not unknown(document, REGISTRIES_TOP)
    assert [r["location"] for r in document["registry"]] == list(hosts)
    for registry in document["registry"]:
        assert not unknown(registry, REGISTRIES_REGISTRY)
        # Plain HTTP: CRI-O must not insist on TLS for the testbed registry.
        assert registry["insecure"] is True


@pytest.mark.parametrize(
    "host",
    ["http://kind-registry:5000", 'evil"]\n[[registry]]', "kind-registry:5000/path", ""],
    ids=["scheme", "toml-injection", "path", "empty"],
)
def test_registries_dropin_rejects(host: str) -> None:
    with pytest.raises(InputError, match="registry address"):
        registries_dropin(host)


@pytest.mark.parametrize(
    ("rate_bits_per_s", "burst_bytes"),
    [
        # 20 Mbit/s = 2.5 MB/s; 1/250 s of it is 10 000 B, below the 32 KiB floor.
        (20_000_000, MIN_BURST_BYTES),
        # 1 Gbit/s = 125 MB/s; 1/250 s of it is 500 000 B.
        (1_000_000_000, 500_000),
    ],
    ids=["20mbit-floor", "1gbit-hz"],
)
def test_tbf_command(rate_bits_per_s: int, burst_bytes: int) -> None:
    assert tbf_burst_bytes(rate_bits_per_s) == burst_bytes
    argv = tbf_command(rate_bits_per_s)
    assert argv[:7] == ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf"]
    assert argv[argv.index("rate") + 1] == f"{rate_bits_per_s}bit"
    assert argv[argv.index("burst") + 1] == f"{burst_bytes}b"
