"""The scheduler pods' egress policy, and ``layersched deploy render|overlay`` for a version
(``auto`` reads a stand-in API server through its kubeconfig)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.cli.main import EXIT_FAILURE, EXIT_USAGE, main
from layersched.core.errors import InputError
from layersched.deploy import (
    DEFAULT_ALLOWED_REGISTRIES,
    INTERNAL_IPV4,
    INTERNAL_IPV6,
    EgressPeer,
    EgressSpec,
    ImageRef,
    StackSpec,
    stack_objects,
)
from layersched.images.push import PushedImage
from layersched.registry._addresses import METADATA_ADDRESSES
from tests.fixtures.kube_api import StandInApi, ok, status

ENDPOINTS_PATH = "/api/v1/namespaces/default/endpoints/kubernetes"
SERVICE_PATH = "/api/v1/namespaces/default/services/kubernetes"


def _egress(spec: StackSpec) -> list[dict[str, Any]]:
    [policy] = [
        p
        for p in stack_objects(spec)["network-policy.yaml"]
        if p["metadata"]["name"] == spec.scheduler_name
    ]
    return list(policy["spec"]["egress"])


def _blocks(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [peer["ipBlock"] for peer in rule.get("to", [])]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an address is a /32 (or /128) block
        ("10.0.0.5:6443", EgressPeer("10.0.0.5/32", 6443)),
        ("10.1.0.0/16:5000", EgressPeer("10.1.0.0/16", 5000)),
        # IPv6 in brackets, else its colons and the port's cannot be told apart
        ("[fd00::5]:6443", EgressPeer("fd00::5/128", 6443)),
        ("[fd00::/64]:443", EgressPeer("fd00::/64", 443)),
    ],
    ids=["ipv4", "ipv4-block", "ipv6", "ipv6-block"],
)
def test_egress_peers_parse(text: str, expected: EgressPeer) -> None:
    assert EgressPeer.parse(text, "--api-server") == expected


@pytest.mark.parametrize(
    "text",
    ["10.0.0.5", "registry.example.com:443", "fd00::5:6443", "10.0.0.5:0", "10.0.0.5:70000"],
    ids=["no-port", "host-name", "ipv6-unbracketed", "port-0", "port-too-big"],
)
def test_egress_peers_that_are_not_addresses_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="expected ADDRESS"):
        EgressPeer.parse(text, "--api-server")


def test_without_the_clusters_addresses_the_api_rule_is_ports_only() -> None:
    dns, api, public = _egress(StackSpec())
    # DNS anywhere; the API server's usual ports anywhere; public addresses on 443
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert api == {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    assert [b["cidr"] for b in _blocks(public)] == ["0.0.0.0/0", "::/0"]
    assert public["ports"] == [{"protocol": "TCP", "port": 443}]


def test_with_the_clusters_addresses_each_is_a_rule() -> None:
    api = (EgressPeer("192.0.2.10/32", 6443), EgressPeer("10.96.0.1/32", 443))
    registry = EgressPeer("10.20.0.0/24", 5000)
    rules = _egress(StackSpec(egress=EgressSpec(api, (registry,))))
    # port 6443 is open to the API server's address only now
    named = [
        (b["cidr"], r["ports"][0]["port"]) for r in rules for b in _blocks(r) if "except" not in b
    ]
    assert named == [("192.0.2.10/32", 6443), ("10.96.0.1/32", 443), ("10.20.0.0/24", 5000)]
    assert not any("to" not in r and r["ports"][0]["port"] != 53 for r in rules)


def test_internal_ranges_cover_the_registry_clients_metadata_table() -> None:
    # every cloud metadata address the registry client refuses is excepted from the public
    # rule, directly and in its NAT64 form
    v4 = [ipaddress.ip_network(b) for b in INTERNAL_IPV4]
    v6 = [ipaddress.ip_network(b) for b in INTERNAL_IPV6]
    nat64 = ipaddress.IPv6Network("64:ff9b::/96")
    for address in METADATA_ADDRESSES:
        if address.version == 4:
            assert any(address in net for net in v4), address
            mapped = ipaddress.IPv6Address(int(nat64.network_address) + int(address))
            assert any(mapped in net for net in v6), mapped
        else:
            assert any(address in net for net in v6), address


def _stand_in(kube_api: StandInApi, version: str) -> None:
    kube_api.route("GET", "/version", ok({"gitVersion": version}))
    kube_api.route(
        "GET",
        ENDPOINTS_PATH,
        ok(
            {
                "subsets": [
                    {
                        "addresses": [{"ip": "192.0.2.10"}, {"ip": "192.0.2.11"}],
                        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
                    }
                ]
            }
        ),
    )
    kube_api.route("GET", SERVICE_PATH, ok({"spec": {"clusterIP": "10.96.0.1"}}))


def test_render_auto_reads_the_clusters_version_and_addresses(
    kube_api: StandInApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a managed cluster's version string: the suffix goes, the patch stays
    _stand_in(kube_api, "v1.31.5-eks-a737599")
    out = tmp_path / "install"
    argv = ["deploy", "render", "--kubernetes-version", "auto", "--dir", str(out)]
    code = main([*argv, "--kubeconfig", str(kube_api.kubeconfig), "--allow-registry", "ghcr.io"])
    assert code == 0, capsys.readouterr().err
    root = yaml.safe_load((out / "kustomization.yaml").read_text())
    scheduler_image = next(i for i in root["images"] if i["name"] == "kube-scheduler")
    assert (scheduler_image["newName"], scheduler_image["newTag"]) == (
        "registry.k8s.io/kube-scheduler",
        "v1.31.5",
    )
    docs = list(yaml.safe_load_all((out / "stack" / "network-policy.yaml").read_text()))
    egress = docs[0]["spec"]["egress"]
    named = {
        (b["cidr"], r["ports"][0]["port"]) for r in egress for b in _blocks(r) if "except" not in b
    }
    # the endpoints on their https port, and the Service's cluster IP on 443
    assert named == {("192.0.2.10/32", 6443), ("192.0.2.11/32", 6443), ("10.96.0.1/32", 443)}
    deployment = next(
        d
        for d in yaml.safe_load_all((out / "stack" / "scheduler.yaml").read_text())
        if d["kind"] == "Deployment"
    )
    [extender] = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    args = extender["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--allow-registry"] == ["ghcr.io"]
    # 1.31: kube-scheduler's /livez and /readyz, and the v1 config
    [scheduler] = [
        c
        for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["name"] == "kube-scheduler"
    ]
    assert scheduler["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert [r.path for r in kube_api.sent("GET")] == ["/version", ENDPOINTS_PATH, SERVICE_PATH]


def test_render_auto_says_what_failed_when_the_cluster_refuses(
    kube_api: StandInApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube_api.route("GET", "/version", ok({"gitVersion": "v1.30.2"}))
    kube_api.route("GET", ENDPOINTS_PATH, status(403, "Forbidden", "endpoints is forbidden"))
    argv = ["deploy", "render", "--kubernetes-version", "auto", "--dir", str(tmp_path / "d")]
    code = main([*argv, "--kubeconfig", str(kube_api.kubeconfig)])
    assert code == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "endpoints/kubernetes: 403" in err and "Traceback" not in err


def test_render_auto_refuses_an_unsupported_cluster(
    kube_api: StandInApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stand_in(kube_api, "v1.19.16")
    argv = ["deploy", "render", "--kubernetes-version", "auto", "--dir", str(tmp_path / "d")]
    code = main([*argv, "--kubeconfig", str(kube_api.kubeconfig)])
    assert code == EXIT_USAGE
    assert "rendered for Kubernetes 1.20 to 1.37" in capsys.readouterr().err


def test_render_auto_names_the_fix_for_a_patch_newer_than_known(
    kube_api: StandInApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a cluster already on a patch this table does not know yet: no guess at an image tag,
    # the minor alone renders the newest release known (older by a patch: within skew)
    _stand_in(kube_api, "v1.36.4")
    argv = ["deploy", "render", "--kubernetes-version", "auto", "--dir", str(tmp_path / "d")]
    code = main([*argv, "--kubeconfig", str(kube_api.kubeconfig)])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "'v1.36.4': 1.36.4 is not a Kubernetes release" in err
    assert "pass --kubernetes-version 1.36 for it" in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        # the newest minor, without a patch: the release layersched builds
        ("1.37", "v1.37.2"),
        # and its newest patch, given
        ("v1.37.2", "v1.37.2"),
    ],
    ids=["1.37", "v1.37.2"],
)
def test_render_writes_the_1_37_install(
    version: str, tag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "install"
    argv = ["deploy", "render", "--kubernetes-version", version, "--dir", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert f"Kubernetes {tag}: kubescheduler.config.k8s.io/v1," in printed
    root = yaml.safe_load((out / "kustomization.yaml").read_text())
    [scheduler_image] = [i for i in root["images"] if i["name"] == "kube-scheduler"]
    assert scheduler_image["newTag"] == tag
    roles = [
        d
        for d in yaml.safe_load_all((out / "stack" / "rbac.yaml").read_text())
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "layersched:layer-locality"
    ]
    # 1.37's kube-scheduler watches DeviceTaintRules (DRADeviceTaintRules, GA and on)
    assert any("devicetaintrules" in r["resources"] for r in roles[0]["rules"])


def test_render_takes_the_namespace_and_the_weight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -n puts every namespaced object of the install in that namespace (kubectl's -n);
    # --weight is the extender's weight in the scheduler's configuration
    out = tmp_path / "install"
    argv = ["deploy", "render", "--kubernetes-version", "1.37", "--dir", str(out)]
    assert main([*argv, "-n", "team-sched", "--weight", "5"]) == 0, capsys.readouterr().err
    documents = [
        d for f in sorted(out.rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d
    ]
    namespaces = {
        d["metadata"]["namespace"] for d in documents if "namespace" in d.get("metadata", {})
    }
    # (kube-system: the binding that lets the scheduler read its authentication config)
    assert namespaces == {"team-sched", "kube-system"}
    assert [d["metadata"]["name"] for d in documents if d.get("kind") == "Namespace"] == [
        "team-sched"
    ]
    assert "weight: 5" in "".join(f.read_text() for f in out.rglob("*.yaml"))
    # without a version, install/kustomize/ is rendered as it is: the flags are refused
    assert main(["deploy", "render", "-n", "x"]) == EXIT_USAGE
    assert "--namespace shape an install" in capsys.readouterr().err


def _rendered_scheduler(out: Path) -> tuple[list[str], dict[str, Any]]:
    """The extender's arguments and the scheduler's configuration of a rendered install."""
    documents = [d for d in yaml.safe_load_all((out / "stack" / "scheduler.yaml").read_text()) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    args = next((c["args"] for c in containers if c["name"] == "extender"), [])
    config_map = next(d for d in documents if d["kind"] == "ConfigMap")
    return args, yaml.safe_load(next(iter(config_map["data"].values())))


def test_render_takes_the_strategy_and_the_pull_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 42: layer-locality at weight 1 unless told otherwise; --strategy in-flight
    # comes with its own weight, 3, and --pull-mode tells it how the kubelets pull
    argv = ["deploy", "render", "--kubernetes-version", "1.37"]
    assert main([*argv, "--dir", str(tmp_path / "a")]) == 0, capsys.readouterr().err
    args, config = _rendered_scheduler(tmp_path / "a")
    assert args[args.index("--strategy") + 1] == "layer-locality" and "--pull-mode" not in args
    assert config["extenders"][0]["weight"] == 1
    b = ["--dir", str(tmp_path / "b"), "--strategy", "in-flight"]
    assert main([*argv, *b]) == 0, capsys.readouterr().err
    args, config = _rendered_scheduler(tmp_path / "b")
    assert args[args.index("--strategy") + 1] == "in-flight"
    assert args[args.index("--pull-mode") + 1] == "serial"
    assert config["extenders"][0]["weight"] == 3
    c = ["--dir", str(tmp_path / "c"), "--scheduler", "plugin", "--strategy", "in-flight"]
    c += ["--pull-mode", "parallel"]
    assert main([*argv, *c]) == 0, capsys.readouterr().err
    _, config = _rendered_scheduler(tmp_path / "c")
    (plugin,) = config["profiles"][0]["pluginConfig"]
    assert plugin["args"]["strategy"] == "in-flight"
    assert plugin["args"]["inFlight"]["pullMode"] == "parallel"
    # the plugin scores two strategies: another is refused by name, nothing written
    d = ["--dir", str(tmp_path / "d"), "--scheduler", "plugin", "--strategy", "pull-time"]
    assert main([*argv, *d]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "strategy 'pull-time' with scheduler 'plugin'" in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("version", "message"),
    [
        # no v1.36.99 exists: there would be no kube-scheduler image of that tag
        ("1.36.99", "the newest 1.36 release we know is v1.36.3"),
        ("1.37.3", "the newest 1.37 release we know is v1.37.2"),
    ],
    ids=["1.36.99", "1.37.3"],
)
def test_render_refuses_a_patch_that_is_no_release(
    version: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["deploy", "render", "--kubernetes-version", version, "--dir", str(tmp_path / "d")]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--kubernetes-version '{version}'" in err and message in err
    assert "Traceback" not in err and not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # install options shape a version's install, never install/kustomize/
        (("--allow-registry", "ghcr.io"), "--allow-registry shape an install"),
        # a version's install goes where the user says, never over install/kustomize/
        (("--kubernetes-version", "1.30"), "give its directory with --dir"),
        (("--kubernetes-version", "1.30", "--dir", "x", "--api-server", "nope"), "--api-server"),
    ],
    ids=["options-without-version", "version-without-dir", "bad-address"],
)
def test_render_refuses_unclear_requests(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy", "render", *argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_the_default_allowed_registries_are_deploys() -> None:
    args = stack_objects()["scheduler.yaml"][1]["spec"]["template"]["spec"]["containers"][1]["args"]
    assert tuple(args[i + 1] for i, a in enumerate(args) if a == "--allow-registry") == (
        DEFAULT_ALLOWED_REGISTRIES
    )


def test_overlay_for_a_version_pins_the_pushed_image_and_upstreams_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # building the image is the image builder's (tests/integration/test_stack_images.py);
    # here: what the command writes around the digest it gets back
    digest = "sha256:" + "b" * 64
    built: list[tuple[str, object]] = []

    def push(registry: str, **options: object) -> PushedImage:
        built.append((registry, options["insecure"]))
        return PushedImage(
            ImageRef(f"{registry}/layersched/layersched", digest=digest), 1, (1,), 0.1
        )

    monkeypatch.setattr("layersched.cli.deploy.push_layersched_image", push)
    out = tmp_path / "install"
    argv = ["deploy", "overlay", "--registry", "reg.example:5000", "--out", str(out)]
    argv += ["--kubernetes-version", "1.34.2", "--kube-scheduler-image", "mirror.example/ks"]
    assert main(argv) == 0, capsys.readouterr().err
    # over TLS: a cluster's registry is secure unless --insecure-registry says otherwise
    assert built == [("reg.example:5000", False)]
    root = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert root["images"] == [
        {
            "name": "layersched",
            "newName": "reg.example:5000/layersched/layersched",
            "digest": digest,
        },
        {"name": "kube-scheduler", "newName": "mirror.example/ks", "newTag": "v1.34.2"},
    ]
    # a self-contained install: the whole tree, nothing outside it referenced
    assert root["resources"] == ["stack", "crd.yaml"]
    assert "install: kubectl apply -k" in capsys.readouterr().out


def test_overlay_for_a_version_refuses_the_testbeds_binary_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def push(*_: object, **__: object) -> None:
        raise AssertionError("an image was built although the request is refused")

    monkeypatch.setattr("layersched.cli.deploy.push_layersched_image", push)
    argv = ["deploy", "overlay", "--registry", "r:5000", "--out", str(tmp_path / "o")]
    argv += ["--kubernetes-version", "1.30", "--kube-scheduler-bin", "/bin/true"]
    assert main(argv) == EXIT_USAGE
    assert "upstream's image" in capsys.readouterr().err
