"""The Pulumi program of the kind testbed, run against Pulumi's mocks.

No CLI, no engine, no Docker: ``pulumi.runtime.set_mocks`` answers every
resource registration, and the tests read back the resource graph the real
``pulumi up`` would create: types, parents (URNs), inputs, registered outputs.
The ``kustomize.Directory`` invoke is answered by rendering the overlay the program
wrote with the real ``kubectl kustomize`` (v1.20's), so the installed objects checked
here are what ``install/kustomize/`` and the kind overlay really produce.
"""

from __future__ import annotations

import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from layersched.deploy import (
    AGENT_RULES,
    SCHEDULER_RULES,
    stack_objects,
    stack_spec_for,
)
from layersched_harness.testbed.kind import (
    CRIO_SOCKET,
    KIND_KUBERNETES_VERSION,
    REGISTRIES_DROPIN_NODE_PATH,
)
from tests.fixtures import prereq
from tests.infra import _kustomize
from tests.infra._pulumi_mocks import Graph, program_on_path
from tests.infra._pulumi_mocks import run_program as _run

pytestmark = pytest.mark.infra

PROGRAM_DIR = Path(__file__).resolve().parents[2] / "harness" / "infra" / "kind"
PROJECT = "layersched-kind"
STACK = "test"


#: What ``docker run --detach`` prints for the registry container: its id.
REGISTRY_CONTAINER_ID = "3f9c2a7d1e4b"


#: Pulumi's invoke that renders a kustomization (pulumi_kubernetes.kustomize.Directory).
KUSTOMIZE_INVOKE = "kubernetes:kustomize:directory"
DIRECTORY = "kubernetes:kustomize:Directory"


class _Answer(pulumi.runtime.Mocks):
    """Every resource gets its inputs back as state; commands print nothing, except
    the registry's ``docker run``, which prints a container id as Docker does. The
    kustomize invoke renders the directory for real."""

    def __init__(self) -> None:
        #: The directories the program asked kustomize to render.
        self.kustomized: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "command:local:Command":
            printed = f"{REGISTRY_CONTAINER_ID}\n" if args.name == "registry-container" else ""
            state.setdefault("stdout", printed)
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        if args.token == KUSTOMIZE_INVOKE:
            directory = str(args.args["directory"])
            self.kustomized.append(directory)
            return {"result": _kustomize.kustomize(directory)}, []
        return {}, []


def run_program(config: dict[str, str], tmp_path: Path) -> Graph:
    """``harness/infra/kind/__main__.py`` under mocks with this stack config."""
    return _run(PROGRAM_DIR, PROJECT, STACK, _Answer(), {"stateDir": str(tmp_path)} | config)


@pytest.fixture(autouse=True)
def _program_on_path() -> Iterator[None]:
    reason = _kustomize.skip_reason()
    if reason is not None:
        prereq.missing(
            "the kind program renders install/kustomize/'s overlay with kubectl kustomize: "
            f"{reason}"
        )
    with program_on_path(PROGRAM_DIR, "kindbed"):
        yield


def _installed(graph: Graph, typ: str, name: str) -> dict[str, Any]:
    """One object the kustomize.Directory created (``NAMESPACE/NAME`` when namespaced)."""
    return graph.of_type(typ)[name]


def _scheduler_config(graph: Graph) -> dict[str, Any]:
    configmap = _installed(
        graph, "kubernetes:core/v1:ConfigMap", "layersched/layer-locality-config"
    )
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    return config


def _containers(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in workload["spec"]["template"]["spec"]["containers"]}


@pytest.fixture
def graph(tmp_path: Path) -> Graph:
    return run_program({}, tmp_path)


def _command(graph: Graph, name: str) -> dict[str, Any]:
    return graph.of_type("command:local:Command")[name]


def test_every_child_is_parented_to_its_component(graph: Graph) -> None:
    components = {
        urn.split("::")[2].split("$")[-1]
        for urn in graph.resources
        if urn.split("::")[2].split("$")[-1].startswith("layersched:kind:")
    }
    # Default stack: no patched scheduler; layersched is one Install of install/kustomize/.
    assert components == {
        "layersched:kind:CrioNodeImage",
        "layersched:kind:RegistryTrust",
        "layersched:kind:Cluster",
        "layersched:kind:TestbedRegistry",
        "layersched:kind:RegistryLinkRate",
        "layersched:kind:Install",
    }
    for urn in graph.resources:
        qualified = urn.split("::")[2]
        if not qualified.split("$")[-1].startswith("layersched:kind:"):
            # A plain resource's URN type starts with its parent component's type: one of
            # ours, or the kustomize.Directory that is the Install's own child.
            parent = qualified.split("$")[0]
            assert parent.startswith("layersched:kind:") or parent == DIRECTORY, urn
    [directory] = [u for u in graph.resources if u.split("::")[2].endswith(f"${DIRECTORY}")]
    assert directory.split("::")[2] == f"layersched:kind:Install${DIRECTORY}"
    # Each component registered non-empty outputs.
    registered = {
        urn.split("::")[2].split("$")[-1]: outputs
        for urn, outputs in graph.component_outputs.items()
        if urn.split("::")[2].split("$")[-1].startswith("layersched:kind:")
    }
    assert set(registered) == components
    assert all(registered.values())


def test_workers_use_crio_socket_and_mount_trust(graph: Graph, tmp_path: Path) -> None:
    kind = _command(graph, "cluster-kind")
    assert "--config /dev/stdin" in kind["create"]
    config = yaml.safe_load(kind["stdin"])
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker", "worker"]
    dropin = str(tmp_path / "registries.conf.d" / "50-layersched-registry.conf")
    for node in config["nodes"]:
        patches = [yaml.safe_load(p) for p in node["kubeadmConfigPatches"]]
        joins = [p for p in patches if p["kind"] == "JoinConfiguration"]
        assert joins and all(p["nodeRegistration"]["criSocket"] == CRIO_SOCKET for p in joins)
        assert node["extraMounts"][0]["hostPath"] == dropin
        assert node["extraMounts"][0]["containerPath"] == REGISTRIES_DROPIN_NODE_PATH
        # The node image is the CRI-O one this stack builds.
        assert node["image"].startswith("layersched/kind-crio:")
    # Destroy exports logs before deleting the cluster.
    delete = kind["delete"]
    assert delete.index("export logs") < delete.index("delete cluster")


def test_registry_attached_trusted_and_rate_limited(graph: Graph) -> None:
    run = _command(graph, "registry-container")
    assert "--network kind" in run["create"]
    assert "--publish 127.0.0.1:5001:5000" in run["create"]
    trust = _command(graph, "registry-trust-dropin")
    registries = tomllib.loads(trust["stdin"])["registry"]
    assert registries == [{"location": "kind-registry:5000", "insecure": True}]
    tbf = _command(graph, "registry-link-tbf")
    assert "--network container:kind-registry" in tbf["create"]
    assert "tbf rate 20000000bit" in tbf["create"]


def test_link_rate_zero_leaves_link_unshaped(tmp_path: Path) -> None:
    graph = run_program({"linkRateBitsPerS": "0"}, tmp_path)
    assert "registry-link-tbf" not in graph.of_type("command:local:Command")


def test_install_is_deploy_with_the_kind_overlay(tmp_path: Path) -> None:
    """The program installs exactly what the overlay it wrote renders: every object of
    install/kustomize/ (same kinds and names as the generator's), nothing of a parallel
    definition."""
    answer = _Answer()
    graph = _run(PROGRAM_DIR, PROJECT, STACK, answer, {"stateDir": str(tmp_path)})
    overlay = tmp_path / "deploy-overlay"
    assert answer.kustomized == [str(overlay)]
    # The overlay names install/kustomize/ relatively, as `kubectl apply -k` users write it.
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    [base] = kustomization["bases"]
    assert (overlay / base).resolve() == PROGRAM_DIR.parents[2] / "install" / "kustomize"
    installed = {
        (urn.split("::")[2].split("$")[-1].rsplit(":", 1)[-1], urn.split("::")[3])
        for urn in graph.resources
        if urn.split("::")[2].startswith(f"{DIRECTORY}$")
    }
    expected = {
        (
            obj["kind"],
            "/".join(filter(None, [obj["metadata"].get("namespace"), obj["metadata"]["name"]])),
        )
        for group in stack_objects(stack_spec_for(KIND_KUBERNETES_VERSION)).values()
        for obj in group
    }
    assert installed == expected
    # The stack's own extender Deployment/Service and agent are gone.
    assert "layersched/layersched-extender" not in graph.of_type("kubernetes:apps/v1:Deployment")
    assert not graph.of_type("kubernetes:core/v1:Service")
    outputs = graph.outputs_of("layersched")
    assert outputs["overlay_dir"] == str(overlay)
    assert outputs["scheduler_name"] == "layer-locality"
    assert graph.exports["deploy_overlay"] == str(overlay)
    assert graph.exports["scheduler_names"] == ["default-scheduler", "layer-locality"]


def test_scheduler_config_is_deploys_on_kubernetes_1_30(graph: Graph) -> None:
    config = _scheduler_config(graph)
    # kube-scheduler 1.30 reads the GA API (install/kustomize/ itself holds v1beta1, for 1.20).
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": "layer-locality"}]
    # Leader election stays on, on the scheduler's own Lease.
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert (election["resourceName"], election["resourceNamespace"]) == (
        "layer-locality", "layersched"
    )  # fmt: skip
    # The extender is the sidecar on loopback, ignorable.
    [extender] = config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert extender["ignorable"] is True


def test_workloads_run_kind_images_and_crio(graph: Graph) -> None:
    deployment = _installed(graph, "kubernetes:apps/v1:Deployment", "layersched/layer-locality")
    assert deployment["spec"]["replicas"] == 2
    containers = _containers(deployment)
    assert containers["kube-scheduler"]["image"] == "registry.k8s.io/kube-scheduler:v1.30.0"
    extender = containers["extender"]
    assert extender["image"] == "kind-registry:5000/layersched:dev"
    # deploy.yml re-pushes the same tag: a restarted pod must pull it again.
    assert extender["imagePullPolicy"] == "Always"
    args = extender["args"]
    assert args[0] == "extender"
    assert args[args.index("--insecure-registry") + 1] == "kind-registry:5000"
    # Created now, image pushed later by deploy.yml: Pulumi must not wait for readiness.
    assert deployment["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    agent = _installed(graph, "kubernetes:apps/v1:DaemonSet", "layersched/layersched-agent")
    assert agent["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    [container] = _containers(agent).values()
    assert container["image"] == "kind-registry:5000/layersched:dev"
    args = container["args"]
    assert args[:2] == ["agent", "--publish"]
    assert args[args.index("--crio-storage") + 1] == "/var/lib/containers/storage"
    assert args[args.index("--cri") + 1] == "unix:///var/run/crio/crio.sock"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    # CRI-O's socket and the two storage directories the agent reads (read-only; never the
    # whole storage: issue 44), never containerd's; the pod-bound token.
    read = (
        "/var/lib/containers/storage/overlay-images",
        "/var/lib/containers/storage/overlay-layers",
    )
    assert set(mounts) == {
        "/var/run/crio/crio.sock", *read,
        "/var/run/secrets/kubernetes.io/serviceaccount",
    }  # fmt: skip
    assert all(mounts[path]["readOnly"] is True for path in read)
    volumes = {
        v["name"]: v["hostPath"]
        for v in agent["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    }
    assert sorted(p["path"] for p in volumes.values()) == [*read, "/var/run/crio/crio.sock"]


def test_rbac_and_pdb_follow_kubernetes_1_30(graph: Graph) -> None:
    roles = graph.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    scheduler = roles["layersched:layer-locality"]["rules"]
    # install/kustomize/'s v1.20 rules, plus what kube-scheduler 1.30 watches besides.
    assert scheduler[: len(SCHEDULER_RULES)] == list(SCHEDULER_RULES)
    added = {r for rule in scheduler[len(SCHEDULER_RULES) :] for r in rule["resources"]}
    assert added == {"namespaces", "csidrivers", "csistoragecapacities"}
    assert all(
        rule["verbs"] == ["get", "list", "watch"] for rule in scheduler[len(SCHEDULER_RULES) :]
    )
    assert roles["layersched:layersched-agent"]["rules"] == list(AGENT_RULES)
    # policy/v1beta1 is gone in 1.25: the PDB is policy/v1.
    assert not graph.of_type("kubernetes:policy/v1beta1:PodDisruptionBudget")
    pdb = _installed(graph, "kubernetes:policy/v1:PodDisruptionBudget", "layersched/layer-locality")
    assert pdb["spec"]["minAvailable"] == 1


def test_patched_scheduler_is_a_third_profile(tmp_path: Path) -> None:
    graph = run_program({"patchedScheduler": "true"}, tmp_path)
    configs = graph.of_type("kubernetes:core/v1:ConfigMap")
    intree = yaml.safe_load(
        configs["layer-locality-intree-config"]["data"]["scheduler-config.yaml"]
    )
    assert intree["profiles"][0]["schedulerName"] == "layer-locality-intree"
    assert intree["profiles"][0]["plugins"]["score"]["enabled"][0]["name"] == "ImageLayersLocality"
    deployments = graph.of_type("kubernetes:apps/v1:Deployment")
    deployment = deployments["layer-locality-intree-deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "kind-registry:5000/patched/kube-scheduler:latest"
    # That image is pushed by sideload.yml after `pulumi up`: waiting for it would time out.
    assert deployment["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    # It lives in install/kustomize/'s namespace, so it is created after the install.
    assert deployment["metadata"]["namespace"] == "layersched"
    assert graph.exports["scheduler_names"] == [
        "default-scheduler", "layer-locality", "layer-locality-intree"
    ]  # fmt: skip


def test_prebuilt_node_image_is_pulled_not_built(tmp_path: Path) -> None:
    graph = run_program({"usePrebuiltNodeImage": "true"}, tmp_path)
    commands = graph.of_type("command:local:Command")
    assert "node-image-build" not in commands
    assert (
        commands["node-image-pull"]["create"] == "docker pull quay.io/aojea/kindnode:crio1639620432"
    )
    config = yaml.safe_load(commands["cluster-kind"]["stdin"])
    assert {n["image"] for n in config["nodes"]} == {"quay.io/aojea/kindnode:crio1639620432"}


@pytest.mark.parametrize(
    ("command", "delete_first"),
    [
        # kind cluster names are unique: a changed config must delete the old cluster first.
        ("cluster-kind", True),
        # The container name and 127.0.0.1:5001 are fixed: two registries cannot coexist.
        ("registry-container", True),
        # The drop-in path is fixed: deleting the old file after writing the new one
        # would delete the new one.
        ("registry-trust-dropin", True),
        # The node image's tag changes with its triggers: old and new may coexist.
        ("node-image-build", False),
    ],
    ids=["cluster", "registry-container", "trust-dropin", "node-image"],
)
def test_fixed_name_commands_replace_delete_first(
    graph: Graph, command: str, delete_first: bool
) -> None:
    assert graph.delete_before_replace[graph.urn(command)] is delete_first


def test_link_rate_is_reapplied_to_a_new_registry_container(graph: Graph) -> None:
    """The tbf lives in the registry's network namespace: a recreated container (new id)
    must trigger the tbf step again, so the id is one of its triggers."""
    tbf = _command(graph, "registry-link-tbf")
    assert REGISTRY_CONTAINER_ID in tbf["triggers"]
    [registry] = [
        outputs for urn, outputs in graph.component_outputs.items()
        if urn.endswith("::registry")
    ]  # fmt: skip
    assert registry["container_id"] == REGISTRY_CONTAINER_ID


#: Pinned by tag and digest, as docs/kind.md recommends (the digest here is made up).
NODE_1_24 = "kindest/node:v1.24.17@sha256:" + "e4" * 32
ON_1_24 = {"kubernetesVersion": "v1.24.17", "kindNodeImage": NODE_1_24}


@pytest.mark.parametrize(
    ("config", "api_version", "image"),
    [
        # Default Kubernetes 1.30: the GA config API.
        ({}, "kubescheduler.config.k8s.io/v1", "registry.k8s.io/kube-scheduler:v1.30.0"),
        # Seed 001's prebuilt 1.22.6 node: kube-scheduler 1.22 has no v1 (GA in 1.25) and
        # would crash-loop on it.
        (
            {"kubernetesVersion": "v1.22.6", "usePrebuiltNodeImage": "true"},
            "kubescheduler.config.k8s.io/v1beta2",
            "registry.k8s.io/kube-scheduler:v1.22.6",
        ),
        # A built 1.24 node image: kube-scheduler 1.24 reads v1beta3 (new in 1.23).
        (
            ON_1_24,
            "kubescheduler.config.k8s.io/v1beta3",
            "registry.k8s.io/kube-scheduler:v1.24.17",
        ),
    ],
    ids=["1.30-v1", "1.22-v1beta2", "1.24-v1beta3"],
)  # fmt: skip
def test_second_scheduler_api_follows_kubernetes_version(
    config: dict[str, str], api_version: str, image: str, tmp_path: Path
) -> None:
    graph = run_program(config, tmp_path)
    assert _scheduler_config(graph)["apiVersion"] == api_version
    deployment = _installed(graph, "kubernetes:apps/v1:Deployment", "layersched/layer-locality")
    assert _containers(deployment)["kube-scheduler"]["image"] == image
    # policy/v1 from 1.21: every kind node image this stack supports has it.
    assert graph.of_type("kubernetes:policy/v1:PodDisruptionBudget")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # A channel name is no release `kind version` could print.
        ({"kindVersion": "latest"}, "kindVersion 'latest' is not a kind release"),
        # kube-scheduler 1.18 reads none of the config APIs this stack renders.
        (
            {"kubernetesVersion": "v1.18.20", "usePrebuiltNodeImage": "true"},
            "use Kubernetes 1.19 or newer",
        ),
        # The built node image is 1.30 but the stack says 1.22: the second scheduler's
        # image and config would not match the cluster.
        (
            {"kubernetesVersion": "v1.22.6"},
            "kindNodeImage 'kindest/node:v1.30.0' is Kubernetes v1.30.0 but kubernetesVersion "
            "is 'v1.22.6': set both to the same minor",
        ),
        # A name kind would refuse.
        ({"clusterName": "Layer_Sched"}, "cluster name 'Layer_Sched' is invalid"),
        # A key of the stack's former parallel extender: set, it must not be ignored.
        (
            {"extenderWeight": "7"},
            "extenderWeight is no longer read: the stack installs install/kustomize/ .*"
            "pulumi config rm extenderWeight",
        ),
        ({"agent": "true"}, "agent is no longer read: the stack installs install/kustomize/"),
    ],
    ids=[
        "kind-version",
        "kubernetes-too-old",
        "node-image-mismatch",
        "cluster-name",
        "removed-extender-key",
        "removed-agent-key",
    ],
)
def test_bad_config_is_one_clear_error(
    config: dict[str, str], message: str, tmp_path: Path
) -> None:
    # RunError: Pulumi prints the message alone, without a Python traceback.
    with pytest.raises(pulumi.RunError, match=f"^stack config: .*{message}"):
        run_program(config, tmp_path)


FAKE_KIND = """\
#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls.log"
[ "$1" = version ] && echo "{printed}"
exit 0
"""


@pytest.mark.parametrize(
    ("printed", "kind_version", "created"),
    [
        # The pinned release (kind prints release, Go version, platform): create runs.
        ("kind v0.23.0 go1.21.10 linux/amd64", None, True),
        # Seed 001's kind 0.11.1 against the default pin: refused before anything is made.
        ("kind v0.11.1 go1.16.4 linux/amd64", None, False),
        # ... unless the stack pins that release (written without the v).
        ("kind v0.11.1 go1.16.4 linux/amd64", "0.11.1", True),
        # v0.23.0 must not accept v0.23.01 or v0.23.0-alpha: the release ends at a space.
        ("kind v0.23.0-alpha+1a2b go1.22.2 linux/amd64", None, False),
    ],
    ids=["pinned", "older-kind", "stack-pins-older", "pre-release"],
)
def test_cluster_creation_checks_kind_version(
    printed: str, kind_version: str | None, created: bool, tmp_path: Path
) -> None:
    """The real ``create`` command, run by ``/bin/sh`` with a stand-in ``kind``."""
    kind = tmp_path / "bin" / "kind"
    kind.parent.mkdir()
    kind.write_text(FAKE_KIND.format(printed=printed))
    kind.chmod(0o755)
    config = {"kindBin": str(kind)} | ({"kindVersion": kind_version} if kind_version else {})
    create = _command(run_program(config, tmp_path), "cluster-kind")["create"]
    done = subprocess.run(
        ["/bin/sh", "-c", create], capture_output=True, text=True, timeout=30, check=False
    )
    calls = (tmp_path / "bin" / "calls.log").read_text().splitlines()
    if created:
        assert done.returncode == 0, done.stderr
        assert calls[0] == "version" and calls[1].startswith("create cluster --name layersched")
    else:
        assert done.returncode == 1
        assert calls == ["version"]  # nothing created
        [line] = done.stderr.splitlines()
        assert "needs kind v0.23.0 (config kindVersion)" in line
        assert "kind.sigs.k8s.io" in line and line.endswith(printed)


def test_cluster_creation_without_kind_says_how_to_fix(tmp_path: Path) -> None:
    create = _command(run_program({"kindBin": str(tmp_path / "nope")}, tmp_path), "cluster-kind")
    done = subprocess.run(
        ["/bin/sh", "-c", create["create"]], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 1
    assert "needs kind v0.23.0" in done.stderr and "not found" in done.stderr


def test_built_node_image_pinned_by_digest_keeps_its_version_tag(tmp_path: Path) -> None:
    graph = run_program(ON_1_24, tmp_path)
    build = _command(graph, "node-image-build")["create"]
    assert f"KIND_NODE_IMAGE={NODE_1_24}" in build
    # The local tag names the Kubernetes version, not the digest's hex.
    assert "--tag layersched/kind-crio:v1.24.17-crio-v1.30" in build


@pytest.mark.parametrize(
    ("command", "update", "never"),
    [
        # An update of the cluster step (kindBin or kindVersion changed) re-checks the
        # kind release; a second `kind create cluster` would fail on the existing cluster.
        ("cluster-kind", "version", "create cluster"),
        # An update of the registry step prints the running container's id (the tbf's
        # trigger) rather than `docker run`-ning a second container of the same name.
        ("registry-container", "inspect --format '{{.Id}}' kind-registry", "docker run"),
    ],
    ids=["cluster", "registry"],
)
def test_updates_do_not_create_twice(graph: Graph, command: str, update: str, never: str) -> None:
    step = _command(graph, command)
    assert update in step["update"]
    assert never not in step["update"]
    assert never in step["create"]
