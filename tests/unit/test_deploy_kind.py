"""The install across Kubernetes versions, and the kind overlay of ``install/kustomize/`` (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from layersched.core.errors import InputError
from layersched.deploy import (
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    KUBERNETES_VERSION,
    LAYERSCHED_IMAGE,
    NAMESPACE,
    SCHEDULER_RULES,
    ImageRef,
    StackSpec,
    admission_objects,
    issue_webhook_tls,
    pdb_api_version,
    scheduler_api_version_for,
    scheduler_rules,
    stack_objects,
    stack_spec_for,
    webhook_dns_names,
)
from layersched_harness.testbed.kind import (
    KindTarget,
    kind_overlay,
    version_patches,
)

TARGET = KindTarget("kind-registry:5000", ImageRef("kind-registry:5000/layersched", tag="dev"))


def _objects(spec: StackSpec) -> dict[str, dict[str, Any]]:
    return {
        f"{obj['kind']}/{obj['metadata']['name']}": obj
        for group in stack_objects(spec).values()
        for obj in group
    }


@pytest.mark.parametrize(
    ("version", "pdb"),
    [
        # policy/v1 is not served before 1.21.
        ("v1.20.2", "policy/v1beta1"),
        # policy/v1 arrives in 1.21; v1beta1 goes in 1.25.
        ("v1.21.0", "policy/v1"),
        ("v1.30.0", "policy/v1"),
    ],
    ids=["1.20", "1.21", "1.30"],
)
def test_pdb_api_follows_the_version(version: str, pdb: str) -> None:
    assert pdb_api_version(version) == pdb
    objects = _objects(stack_spec_for(version))
    assert objects["PodDisruptionBudget/layer-locality"]["apiVersion"] == pdb


@pytest.mark.parametrize(
    ("version", "added"),
    [
        # v1.20's system:kube-scheduler is SCHEDULER_RULES, what every minor grants.
        ("v1.20.2", set()),
        # From 1.21 kube-scheduler also watches CSIDrivers and CSIStorageCapacities
        # (tests/fixtures/kube_scheduler_rbac.json has every minor), from 1.22 Namespaces.
        ("v1.21.14", {"csidrivers", "csistoragecapacities"}),
        ("v1.22.6", {"namespaces", "csidrivers", "csistoragecapacities"}),
        ("v1.30.0", {"namespaces", "csidrivers", "csistoragecapacities"}),
    ],
    ids=["1.20", "1.21", "1.22", "1.30"],
)
def test_scheduler_rules_follow_the_version(version: str, added: set[str]) -> None:
    rules = scheduler_rules(version)
    assert rules[: len(SCHEDULER_RULES)] == list(SCHEDULER_RULES)
    assert {r for rule in rules[len(SCHEDULER_RULES) :] for r in rule["resources"]} == added
    role = _objects(stack_spec_for(version))["ClusterRole/layersched:layer-locality"]
    assert role["rules"] == rules


def test_the_default_spec_is_deploys_version() -> None:
    # install/kustomize/ is the KUBERNETES_VERSION render: stack_spec_for of that version changes
    # nothing
    assert StackSpec().kubernetes_version == KUBERNETES_VERSION
    assert stack_spec_for(KUBERNETES_VERSION) == StackSpec()
    assert StackSpec().scheduler_api_version == scheduler_api_version_for(KUBERNETES_VERSION)


def test_no_patches_for_deploys_own_version() -> None:
    assert version_patches(StackSpec(), KUBERNETES_VERSION) == ([], [])


def test_version_patches_for_1_30() -> None:
    # kind's default: 1.30 reads v1 and policy/v1 as install/kustomize/'s 1.37 does, but its
    # kube-scheduler watches less and serves /healthz only
    merges, json_patches = version_patches(StackSpec(), "v1.30.0")
    # Named by the base's apiVersion, as a strategic-merge patch must match its target.
    [role] = merges
    assert (role["apiVersion"], role["kind"], role["metadata"]["name"]) == (
        "rbac.authorization.k8s.io/v1", "ClusterRole", "layersched:layer-locality",
    )  # fmt: skip
    assert role["rules"] == scheduler_rules("v1.30.0")
    # Only the changed field travels: the ClusterRole's rules, not its metadata's labels.
    assert set(role) == {"apiVersion", "kind", "metadata", "rules"}
    # the probes: a workload's difference (test_a_workloads_version_difference_...)
    assert [p["target"]["kind"] for p in json_patches] == ["Deployment"]


def test_version_patches_for_1_20() -> None:
    # the oldest minor: another KubeSchedulerConfiguration API and PodDisruptionBudget API
    merges, json_patches = version_patches(StackSpec(), "v1.20.15")
    targets = {(m["apiVersion"], m["kind"], m["metadata"]["name"]) for m in merges}
    assert targets == {
        ("v1", "ConfigMap", "layer-locality-config"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "layersched:layer-locality"),
    }
    configmap = next(m for m in merges if m["kind"] == "ConfigMap")
    config = yaml.safe_load(configmap["data"]["scheduler-config.yaml"])
    assert config["apiVersion"] == KUBE_SCHEDULER_CONFIG_V1BETA1
    # Only the changed field travels: the ConfigMap's data, not its metadata's labels.
    assert set(configmap) == {"apiVersion", "kind", "metadata", "data"}
    # A changed apiVersion is a JSON patch, named by the base's (install/kustomize/'s policy/v1).
    [pdb] = [p for p in json_patches if p["target"]["kind"] == "PodDisruptionBudget"]
    assert pdb["target"] == {
        "group": "policy", "version": "v1", "kind": "PodDisruptionBudget",
        "name": "layer-locality", "namespace": "layersched",
    }  # fmt: skip
    assert pdb["operations"] == [
        {"op": "replace", "path": "/apiVersion", "value": "policy/v1beta1"}
    ]


def test_version_patches_reject_a_bad_version() -> None:
    with pytest.raises(InputError, match="kubernetesVersion 'latest' is not a Kubernetes version"):
        version_patches(StackSpec(), "latest")


def test_kind_overlay_files() -> None:
    files = kind_overlay(TARGET, "../../install/kustomize")
    assert set(files) == {
        "kustomization.yaml", "kind.yaml", "kubernetes-version.yaml", "json-patch-0.yaml",
    }  # fmt: skip
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    # kind's 1.30 holds per-node write authority as a policy, as install/kustomize/'s 1.37 does:
    # nothing added, nothing deleted
    assert "resources" not in kustomization
    [role] = yaml.safe_load_all(files["kubernetes-version.yaml"])
    assert role["kind"] == "ClusterRole" and "$patch" not in role
    # The whole of install/kustomize/ (the CRD too: nothing else installs it on kind).
    assert kustomization["bases"] == ["../../install/kustomize"]
    assert kustomization["images"] == [
        {"name": "localhost:5000/layersched/layersched",
         "newName": "kind-registry:5000/layersched", "newTag": "dev"},
        {"name": "localhost:5000/layersched/kube-scheduler",
         "newName": "registry.k8s.io/kube-scheduler", "newTag": "v1.30.0"},
    ]  # fmt: skip
    assert kustomization["patchesStrategicMerge"] == ["kind.yaml", "kubernetes-version.yaml"]
    [entry] = kustomization["patchesJson6902"]
    assert entry["path"] == "json-patch-0.yaml"
    assert entry["target"]["kind"] == "Deployment"
    # The JSON patch file is the operations (JSON, which is YAML under the header comment).
    [deployment] = version_patches(StackSpec(), TARGET.kubernetes_version)[1]
    assert yaml.safe_load(files["json-patch-0.yaml"]) == deployment["operations"]
    json.loads("".join(ln for ln in files["json-patch-0.yaml"].splitlines() if ln[:1] != "#"))


def test_kind_overlay_for_deploys_version_has_no_version_patches() -> None:
    target = KindTarget(
        TARGET.registry, TARGET.layersched_image, kubernetes_version=KUBERNETES_VERSION
    )
    # the policy, as in install/kustomize/: no TLS to give
    files = kind_overlay(target, "../deploy")
    assert set(files) == {"kustomization.yaml", "kind.yaml"}
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    assert kustomization["patchesStrategicMerge"] == ["kind.yaml"]
    assert "patchesJson6902" not in kustomization and "resources" not in kustomization
    assert kustomization["images"][1]["newTag"] == KUBERNETES_VERSION


def test_a_kind_cluster_before_1_30_runs_the_webhook_instead_of_the_policy() -> None:
    target = KindTarget(TARGET.registry, TARGET.layersched_image, kubernetes_version="v1.29.0")
    # 1.29 runs the admission webhook: without its TLS there is no overlay to write
    with pytest.raises(InputError, match="the admission webhook needs its TLS"):
        kind_overlay(target, "../deploy")
    files = kind_overlay(target, "../deploy", tls=issue_webhook_tls(webhook_dns_names(NAMESPACE)))
    assert set(files) == {
        "kustomization.yaml", "kind.yaml", "kubernetes-version.yaml", "json-patch-0.yaml",
        "admission.yaml", "admission-tls.yaml", "admission-ca-bundle.yaml",
        # the API server's side: its admission configuration and client certificate
        "apiserver-admission-config.yaml", "apiserver-admission-kubeconfig.yaml",
    }  # fmt: skip
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    # the webhook's objects are added, with its TLS Secret and caBundle ...
    assert kustomization["resources"] == ["admission.yaml", "admission-tls.yaml"]
    added = list(yaml.safe_load_all(files["admission.yaml"]))
    assert added == admission_objects(stack_spec_for("v1.29.0"))
    assert kustomization["patchesJson6902"][-1]["target"]["kind"] == (
        "ValidatingWebhookConfiguration"
    )
    # ... and install/kustomize/'s policy and its binding deleted
    deleted = [
        p["kind"] for p in yaml.safe_load_all(files["kubernetes-version.yaml"])
        if p.get("$patch") == "delete"
    ]  # fmt: skip
    assert deleted == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    # the webhook's image placeholder, which install/kustomize/ resolves for its own objects only,
    # is the testbed's layersched image too
    [webhook] = [o for o in added if o["kind"] == "Deployment"]
    assert webhook["spec"]["template"]["spec"]["containers"][0]["image"] == LAYERSCHED_IMAGE
    assert {"name": LAYERSCHED_IMAGE, "newName": "kind-registry:5000/layersched",
            "newTag": "dev"} in kustomization["images"]  # fmt: skip


def test_kind_patches_agent_reads_crio_only() -> None:
    _, agent = yaml.safe_load_all(kind_overlay(TARGET, "../deploy")["kind.yaml"])
    pod = agent["spec"]["template"]["spec"]
    [container] = pod["containers"]
    # the patch replaces the arguments: the health flags the probes need stay
    health = container["args"][container["args"].index("--health-host") :]
    assert health == ["--health-host", "$(POD_IP)", "--health-port", "8889"]
    deleted = [m for m in container["volumeMounts"] if m.get("$patch") == "delete"]
    assert deleted == [{"mountPath": "/run/containerd/containerd.sock", "$patch": "delete"}]
    # of CRI-O's storage, only the two directories the agent reads, read-only (kind's
    # Kubernetes, 1.30, has no recursiveReadOnly yet) (issue 44)
    storage = [m for m in container["volumeMounts"] if m.get("name", "").startswith("crio-")]
    assert [(m["mountPath"], m.get("readOnly"), m.get("recursiveReadOnly")) for m in storage] == [
        ("/var/run/crio/crio.sock", None, None),
        ("/var/lib/containers/storage/overlay-images", True, None),
        ("/var/lib/containers/storage/overlay-layers", True, None),
    ]
    assert [v for v in pod["volumes"] if v.get("$patch")] == [
        {"name": "containerd-socket", "$patch": "delete"}
    ]


def test_a_workloads_version_difference_is_a_json_patch_field_by_field() -> None:
    # before 1.31 kube-scheduler's probes ask /healthz, install/kustomize/'s 1.37 /livez and
    # /readyz:
    # the Deployment's patch names those fields only, so kind's own strategic-merge patch
    # of the same Deployment (the extender's args) does not conflict with it in kustomize
    merges, json_patches = version_patches(StackSpec(), "v1.30.0")
    assert "Deployment" not in {m["kind"] for m in merges}
    [deployment] = [p for p in json_patches if p["target"]["kind"] == "Deployment"]
    container = "/spec/template/spec/containers/0"
    # the container is named by its index: a test of its name comes first, so kustomize
    # refuses the patch rather than change another container's probes
    assert deployment["operations"][0] == {
        "op": "test", "path": f"{container}/name", "value": "kube-scheduler",
    }  # fmt: skip
    ops = {(op["op"], op["path"], op["value"]) for op in deployment["operations"][1:]}
    assert ops == {
        ("replace", f"{container}/startupProbe/httpGet/path", "/healthz"),
        ("replace", f"{container}/livenessProbe/httpGet/path", "/healthz"),
        ("replace", f"{container}/readinessProbe/httpGet/path", "/healthz"),
    }


def test_kinds_scheduler_patch_keeps_the_containers_order() -> None:
    # kustomize's strategic merge puts a patch's list items first: kind's patch lists the
    # base's containers in their order (kube-scheduler by name alone), so the version's
    # JSON patches, applied after it, find kube-scheduler at its index
    scheduler, _ = yaml.safe_load_all(kind_overlay(TARGET, "../deploy")["kind.yaml"])
    patched = scheduler["spec"]["template"]["spec"]["containers"]
    base = _objects(StackSpec())["Deployment/layer-locality"]["spec"]["template"]["spec"]
    assert [c["name"] for c in patched] == [c["name"] for c in base["containers"]]
    assert patched[0] == {"name": "kube-scheduler"}
