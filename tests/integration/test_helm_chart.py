"""install/charts/layersched with a real helm (built from its Go module by ``make tools``): it
lints,
and ``helm template`` gives, object for object, what ``kubectl kustomize`` gives of
``layersched deploy render``'s tree for the same settings, on several minors, both
scheduler kinds and both runtimes. Bad values are refused with the field named.

The live install, upgrade, rollback and uninstall: tests/e2e/test_helm_install.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.core.errors import InputError
from layersched.deploy import (
    CHART_DIR,
    CONFIG_CHECKSUM_ANNOTATION,
    K3S_CONTAINERD_SOCKET,
    PUBLISHED_KUBE_SCHEDULER,
    RUNTIME_CRIO,
    SCHEDULER_PLUGIN,
    EgressPeer,
    EgressSpec,
    ImageRef,
    StackSpec,
    base_tree,
    chart_values,
    default_published,
    parse_kubernetes_version,
    upstream_kube_scheduler,
    write_tree,
)
from layersched_harness.testbed.builds import kubernetes_build
from tests.fixtures import prereq
from tests.fixtures.go_tools import tool

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / CHART_DIR
RUN_TIMEOUT_S = 120
IMAGE = ImageRef("registry.example/layersched/layersched", tag="9.9.9")
DIGEST = "sha256:" + "c" * 64


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, check=False
    )


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """helm with its config, data and cache under a directory of the test's own."""
    binary = tool("helm")
    home = tmp_path_factory.mktemp("helm-home")
    return [
        "env",
        f"HELM_CONFIG_HOME={home}/config",
        f"HELM_DATA_HOME={home}/data",
        f"HELM_CACHE_HOME={home}/cache",
        str(binary),
    ]


@pytest.fixture(scope="module")
def kubectl() -> Path:
    try:
        return kubernetes_build().require("kubectl") / "kubectl"
    except InputError as err:
        prereq.missing(str(err))


def _objects(stream: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(stream) if doc]


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def _by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    keyed = {_key(obj): obj for obj in objects}
    assert len(keyed) == len(objects), "two objects of one kind and name"
    return keyed


@dataclass(frozen=True)
class Case:
    spec: StackSpec
    image: ImageRef = IMAGE
    #: helm's --kube-version (the cluster's, for kubernetesVersion "")
    kube_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the plugin's images by minor, as a release's record writes them into the values
    plugin_digests: dict[int, str] = field(default_factory=dict)

    def kube_scheduler(self) -> ImageRef:
        """What the chart picks: upstream's for the extender; for the plugin, the minor's
        published build, by digest when the values carry one."""
        version = parse_kubernetes_version(self.spec.kubernetes_version)
        if self.spec.scheduler != SCHEDULER_PLUGIN:
            return upstream_kube_scheduler(version)
        digest = self.plugin_digests.get(version.minor)
        if digest is not None:
            return ImageRef(PUBLISHED_KUBE_SCHEDULER, digest=digest)
        return default_published().plugin_image(version.minor).ref


CASES = {
    # the install deploy render --kubernetes-version 1.37.2 writes
    "1.37-defaults": Case(StackSpec().for_version("v1.37.2")),
    # every substituted setting moved, on the oldest minor the chart renders
    "1.30-crio-everything": Case(
        StackSpec(
            namespace="ls-system",
            strategy="pull-time",
            extender_args=("--insecure-registry", "r.example:5000"),
            allowed_registries=("r.example:5000", "docker.io"),
            weight=5,
            image_quorum=3,
            runtime=RUNTIME_CRIO,
            crio_storage="/data/containers/storage",
        ).for_version("1.30"),
        image=ImageRef("r.example:5000/ls", digest=DIGEST),
    ),
    # the plugin, on k3s's containerd
    "1.36-plugin-k3s": Case(
        StackSpec(scheduler=SCHEDULER_PLUGIN, containerd_socket=K3S_CONTAINERD_SOCKET).for_version(
            "1.36.1"
        )
    ),
    # in-flight: the extender may list and watch pods (its own ClusterRole)
    "1.35-in-flight": Case(StackSpec(strategy="in-flight", weight=2).for_version("1.35")),
    # layer-locality, at its own weight (1: the weight value left null), parallel pulls
    # told to nothing (--pull-mode is in-flight's)
    "1.37-layer-locality": Case(
        StackSpec(strategy="layer-locality", pull_mode="parallel").for_version("1.37")
    ),
    # the plugin: layer-locality, then in-flight with parallel pulls
    "1.37-plugin-layer-locality": Case(
        StackSpec(scheduler=SCHEDULER_PLUGIN, strategy="layer-locality").for_version("1.37")
    ),
    "1.35-plugin-parallel": Case(
        StackSpec(scheduler=SCHEDULER_PLUGIN, pull_mode="parallel", weight=4).for_version("1.35")
    ),
    # no kubernetesVersion: the cluster's (helm's --kube-version stands for it)
    "cluster-version": Case(StackSpec().for_version("v1.33.5"), kube_version="v1.33.5"),
    # the API server's addresses and an internal registry narrow the scheduler's egress
    "1.37-egress": Case(
        StackSpec(
            egress=EgressSpec(
                (EgressPeer("10.0.0.5/32", 6443), EgressPeer("10.96.0.1/32", 443)),
                (EgressPeer("10.1.0.0/24", 5000), EgressPeer("fd00::7/128", 5000)),
            )
        ).for_version("1.37")
    ),
    # the extender may read the pull secrets of two namespaces, regcred only (issue 45)
    "1.37-pull-secrets": Case(
        StackSpec(
            pull_secret_namespaces=("team", "ci"), pull_secret_names=("regcred",)
        ).for_version("1.37")
    ),
    # any secret of one namespace (no resourceNames)
    "1.33-pull-secrets-any": Case(StackSpec(pull_secret_namespaces=("team",)).for_version("1.33")),
    # the plugin on the cluster's minor, by the digest a release's record wrote
    "plugin-by-digest-cluster-version": Case(
        StackSpec(scheduler=SCHEDULER_PLUGIN).for_version("v1.35.2"),
        kube_version="v1.35.2",
        plugin_digests={35: "sha256:" + "5" * 64, 37: "sha256:" + "7" * 64},
    ),
}


def _values(case: Case) -> dict[str, Any]:
    image = {"repository": case.image.name, "tag": case.image.tag or "",
             "digest": case.image.digest or ""}  # fmt: skip
    values = chart_values(case.spec, image=image)
    if case.kube_version is not None:
        values["kubernetesVersion"] = ""
    for minor, digest in case.plugin_digests.items():
        values["kubeScheduler"]["plugin"]["images"][f"1.{minor}"]["digest"] = digest
    return values


@pytest.mark.parametrize("name", list(CASES))
def test_helm_template_is_the_rendered_tree(
    name: str, helm: list[str], kubectl: Path, tmp_path: Path
) -> None:
    case = CASES[name]
    write_tree(tmp_path / "tree", base_tree(case.spec, case.image, case.kube_scheduler()))
    built = _run([str(kubectl), "kustomize", str(tmp_path / "tree")])
    assert built.returncode == 0, built.stderr
    tree = _by_key(_objects(built.stdout))

    values = tmp_path / "values.json"
    values.write_text(json.dumps(_values(case)))
    argv = [*helm, "template", "layersched", str(CHART), "-f", str(values)]
    if case.kube_version is not None:
        argv += ["--kube-version", case.kube_version]
    rendered = _run(argv)
    assert rendered.returncode == 0, rendered.stderr
    chart = _by_key(_objects(rendered.stdout))

    assert sorted(chart) == sorted(tree)
    for key, obj in tree.items():
        assert chart[key] == obj, key


def test_helm_lint(helm: list[str]) -> None:
    done = _run([*helm, "lint", "--strict", str(CHART)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    for values in (["--set", "scheduler=plugin"], ["--set", "runtime.kind=crio"]):
        done = _run([*helm, "lint", "--strict", str(CHART), *values])
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # the schema names the field
        (["--set", "weight=0"], "/weight"),
        (["--set", "runtime.kind=docker"], "/runtime/kind"),
        (["--set", "strategy=random"], "/strategy"),
        (["--set", "pullMode=eager"], "/pullMode"),
        # the helpers name the version and what to do instead
        (["--set", "kubernetesVersion=1.29"], "the chart installs on 1.30 to 1.37"),
        (
            ["--set", "scheduler=plugin", "--set", "kubernetesVersion=1.34"],
            "the LayerLocality plugin is built for kube-scheduler 1.35 and newer",
        ),
        # a minor without a published build (values whose list drops 1.36: helm deletes a
        # key set to null): named, with what to do instead
        (
            ["--set", "scheduler=plugin", "--set", "kubernetesVersion=1.36",
             "--set-json", 'kubeScheduler.plugin.images={"1.36":null}'],
            "layersched publishes its kube-scheduler (with the LayerLocality plugin) for 1.35, "
            "1.37 only (kubeScheduler.plugin.images); set kubeScheduler.image to a build of "
            "your own for 1.36, or use scheduler: extender",
        ),
        # the plugin scores two strategies: the others are the extender's
        (
            ["--set", "scheduler=plugin", "--set", "strategy=pull-time"],
            "strategy: pull-time with scheduler: plugin: the LayerLocality plugin scores "
            "layer-locality or in-flight; use scheduler: extender for the others",
        ),
        # NetworkPolicy's ipBlock needs a prefix: the schema says so before the API does
        (["--set-json", 'egress.apiServer=[{"cidr":"10.0.0.5","port":6443}]'],
         "/egress/apiServer/0/cidr"),
    ],
    ids=["weight", "runtime", "strategy", "pull-mode", "old-minor", "plugin-before-1.35",
         "plugin-minor-unpublished", "plugin-strategy", "cidr-without-prefix"],
)  # fmt: skip
def test_bad_values_are_refused_by_name(helm: list[str], values: list[str], message: str) -> None:
    done = _run([*helm, "template", "layersched", str(CHART), "--kube-version", "1.37.2",
                 *values])  # fmt: skip
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def _rendered(helm: list[str], *values: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    done = _run([*helm, "template", "layersched", str(CHART), "--kube-version", "1.37.2",
                 *values])  # fmt: skip
    assert done.returncode == 0, done.stderr
    return _by_key(_objects(done.stdout))


def test_a_weight_change_changes_the_pod_template(helm: list[str]) -> None:
    # the annotation hashes the ConfigMap's text as helm rendered it: an upgrade that
    # changes the weight (or the quorum) rolls the scheduler by itself
    key = ("Deployment", "layersched", "layer-locality")
    config_key = ("ConfigMap", "layersched", "layer-locality-config")
    for scheduler in ("extender", "plugin"):
        before = _rendered(helm, "--set", f"scheduler={scheduler}")
        after = _rendered(helm, "--set", f"scheduler={scheduler}", "--set", "weight=5")
        checksums = []
        for objects in (before, after):
            template = objects[key]["spec"]["template"]["metadata"]
            text = objects[config_key]["data"]["scheduler-config.yaml"]
            checksum = template["annotations"][CONFIG_CHECKSUM_ANNOTATION]
            assert checksum == hashlib.sha256(text.encode()).hexdigest()
            checksums.append(checksum)
        assert checksums[0] != checksums[1], scheduler
        # a value the config does not hold leaves the template alone
        cpu = _rendered(helm, "--set", f"scheduler={scheduler}",
                        "--set", "resources.agent.requests.cpu=30m")  # fmt: skip
        template = cpu[key]["spec"]["template"]["metadata"]["annotations"]
        assert template[CONFIG_CHECKSUM_ANNOTATION] == checksums[0]
