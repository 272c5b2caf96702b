"""install/kustomize/: generated from layersched.deploy, least privilege, hardened, HA-ready.

Regenerate after changing the generator: ``.venv/bin/layersched deploy render``.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.builds import CACHE_DIR_ENV, required_version
from layersched.cli.main import EXIT_USAGE, build_parser, main
from layersched.core.errors import InputError
from layersched.deploy import (
    AGENT_NAME,
    AGENT_RULES,
    CONTAINERD_SOCKET,
    K3S_CONTAINERD_SOCKET,
    KUBERNETES_VERSION,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    RUNTIME_CRIO,
    SCHEDULER_RULES,
    SERVICE_ACCOUNT_DIR,
    ImageRef,
    LeaderElectionSpec,
    StackSpec,
    base_tree,
    extender_args,
    issue_webhook_tls,
    scheduler_api_version_for,
    scheduler_config,
    stack_objects,
    stack_spec_for,
    stale_files,
    webhook_dns_names,
)
from layersched.kube import node_layers_crd
from layersched_harness.testbed.local import (
    LocalTestbedTarget,
    local_testbed_overlay,
)
from tests.fixtures.rbac import Grant, grants

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "install" / "kustomize"
#: layersched's Go module: its go.mod pins the Kubernetes release ``make kubernetes`` builds.
GO_MOD = REPO_ROOT / "src" / "kube-scheduler" / "go.mod"
EXTENDER_ACCOUNT = f"{LAYER_LOCALITY_SCHEDULER}-extender"
#: The newest minor whose install holds per-node write authority with the admission
#: webhook (its own account, roles and bindings); from 1.30, install/kustomize/'s included, a
#: policy.
WEBHOOK_VERSION = "1.29"
#: Kinds that grant a role to subjects (a ValidatingAdmissionPolicyBinding binds a policy).
RBAC_BINDINGS = ("RoleBinding", "ClusterRoleBinding")

#: system:kube-scheduler and system:volume-scheduler as a v1.20.2 API server serves
#: them (kubectl get clusterrole -o json on the local testbed, 2026-11-23).
UPSTREAM_1_20_RULES = [
    {
        "apiGroups": ["", "events.k8s.io"],
        "resources": ["events"],
        "verbs": ["create", "patch", "update"],
    },
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resourceNames": ["kube-scheduler"],
        "resources": ["leases"],
        "verbs": ["get", "update"],
    },
    {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resourceNames": ["kube-scheduler"],
        "resources": ["endpoints"],
        "verbs": ["get", "update"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
    {
        "apiGroups": [""],
        "resources": ["replicationcontrollers", "services"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["apps", "extensions"],
        "resources": ["replicasets"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["policy"],
        "resources": ["poddisruptionbudgets"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [""],
        "resources": ["persistentvolumeclaims", "persistentvolumes"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
    {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["persistentvolumes"],
        "verbs": ["get", "list", "patch", "update", "watch"],
    },
    {
        "apiGroups": ["storage.k8s.io"],
        "resources": ["storageclasses"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [""],
        "resources": ["persistentvolumeclaims"],
        "verbs": ["get", "list", "patch", "update", "watch"],
    },
]


def _objects(spec: StackSpec | None = None) -> list[dict[str, Any]]:
    return [obj for group in stack_objects(spec).values() for obj in group]


def _find(kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in _objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _pod_specs() -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in _objects()
        if o["kind"] in ("Deployment", "DaemonSet")
    }


def test_deploy_dir_is_generated() -> None:
    # the files on disk are exactly what the generator writes today
    stale = stale_files(DEPLOY_DIR, base_tree())
    assert not stale, f"install/kustomize/{stale} stale: run .venv/bin/layersched deploy render"
    on_disk = {p.relative_to(DEPLOY_DIR).as_posix() for p in DEPLOY_DIR.rglob("*") if p.is_file()}
    assert on_disk == set(base_tree()), (
        "install/kustomize/ holds files the generator does not write"
    )


def test_kustomization_lists_every_object_file_and_both_images() -> None:
    tree = base_tree()
    root = yaml.safe_load(tree["kustomization.yaml"])
    stack = yaml.safe_load(tree["stack/kustomization.yaml"])
    # the root is the CRD plus stack/ (which a cluster with the CRD can install alone),
    # both under resources: as kustomize takes a directory from kubectl 1.21 on (1.20's
    # bases: is test_deploy_versions.py's)
    assert "bases" not in root and root["resources"] == ["stack", "crd.yaml"]
    listed = {"crd.yaml", *(f"stack/{name}" for name in stack["resources"])}
    assert listed == set(tree) - {"kustomization.yaml", "stack/kustomization.yaml"}
    assert {i["name"] for i in root["images"]} == {"layersched", "kube-scheduler"}
    # every file parses as YAML documents of Kubernetes objects
    for name in listed:
        for doc in yaml.safe_load_all(tree[name]):
            assert {"apiVersion", "kind", "metadata"} <= set(doc), name


def test_deploys_version_is_the_release_the_testbed_builds() -> None:
    # install/kustomize/ is the local testbed's install: the Kubernetes release `make kubernetes`
    # builds from src/kube-scheduler/go.mod, whose kube-scheduler install/kustomize/ runs
    built = required_version(GO_MOD.read_text("utf-8"))
    assert built is not None, f"{GO_MOD} pins no k8s.io/kubernetes"
    assert built == KUBERNETES_VERSION
    root = yaml.safe_load(base_tree()["kustomization.yaml"])
    [scheduler_image] = [i for i in root["images"] if i["name"] == "kube-scheduler"]
    assert scheduler_image["newTag"] == built


def test_the_crd_is_the_kube_modules() -> None:
    assert stack_objects()["crd.yaml"] == [node_layers_crd()]


def test_scheduler_config_leader_election_on_its_own_lease() -> None:
    config = scheduler_config(StackSpec())
    # the newest API install/kustomize/'s kube-scheduler reads (v1 for 1.37)
    assert config["apiVersion"] == scheduler_api_version_for(KUBERNETES_VERSION)
    assert config["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": LAYER_LOCALITY_SCHEDULER,
        "resourceNamespace": NAMESPACE,
        "leaseDuration": "15s",
        "renewDeadline": "10s",
        "retryPeriod": "2s",
    }
    [extender] = config["extenders"]
    # the sidecar, over loopback; ignorable so a restarting extender costs scores only
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert extender["ignorable"] is True
    # node names only: the sidecar scores from its --watch inventory
    assert extender["nodeCacheCapable"] is True
    [sidecar] = [
        c for c in _pod_specs()[LAYER_LOCALITY_SCHEDULER]["containers"] if c["name"] == "extender"
    ]
    assert "--watch" in sidecar["args"]
    # and the ConfigMap carries exactly this config
    configmap = _find("ConfigMap", f"{LAYER_LOCALITY_SCHEDULER}-config")
    assert yaml.safe_load(configmap["data"]["scheduler-config.yaml"]) == config


@pytest.mark.parametrize(
    ("durations", "message"),
    [
        # renewDeadline must be shorter than leaseDuration
        ((15.0, 15.0, 2.0), "renewDeadline"),
        # retryPeriod must be shorter than renewDeadline
        ((15.0, 10.0, 10.0), "retryPeriod"),
    ],
    ids=["renew-not-below-lease", "retry-not-below-renew"],
)
def test_leader_election_timing_is_checked(
    durations: tuple[float, float, float], message: str
) -> None:
    lease, renew, retry = durations
    spec = LeaderElectionSpec(
        "x", "y", lease_duration_s=lease, renew_deadline_s=renew, retry_period_s=retry
    )
    with pytest.raises(InputError, match=message):
        spec.to_config()


def test_scheduler_rbac_mirrors_upstream_without_the_default_schedulers_lease() -> None:
    ours = grants(list(SCHEDULER_RULES))
    upstream = grants(UPSTREAM_1_20_RULES)
    # nothing beyond what upstream gives kube-scheduler
    assert ours <= upstream, sorted(ours - upstream)
    # and everything of it except the default scheduler's lease/endpoints
    missing = upstream - ours
    assert {(g, r) for g, r, _, _ in missing} == {
        ("coordination.k8s.io", "leases"),
        ("", "endpoints"),
    }
    # leases: only in our namespace, and only our own by name (plus create)
    role = _find("Role", f"{LAYER_LOCALITY_SCHEDULER}-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role["rules"]) == {
        ("coordination.k8s.io", "leases", "create", "*"),
        ("coordination.k8s.io", "leases", "get", LAYER_LOCALITY_SCHEDULER),
        ("coordination.k8s.io", "leases", "update", LAYER_LOCALITY_SCHEDULER),
    }


def test_agent_rbac_is_its_node_and_its_objects() -> None:
    assert grants(list(AGENT_RULES)) == {
        ("", "nodes", "get", "*"),
        ("layersched.io", "nodelayerinventories", "get", "*"),
        # its own object watched (a field selector on its name), to repair it
        ("layersched.io", "nodelayerinventories", "list", "*"),
        ("layersched.io", "nodelayerinventories", "watch", "*"),
        ("layersched.io", "nodelayerinventories", "create", "*"),
        ("layersched.io", "nodelayerinventories", "patch", "*"),
    }


def test_extender_rbac_reads_nodes_and_inventories_only() -> None:
    role = _find("ClusterRole", f"layersched:{LAYER_LOCALITY_SCHEDULER}:extender")
    assert grants(role["rules"]) == {
        (group, resource, verb, "*")
        for group, resource in (("", "nodes"), ("layersched.io", "nodelayerinventories"))
        for verb in ("get", "list", "watch")
    }
    # bound to the extender's own service account, not to the scheduler pod's
    binding = _find("ClusterRoleBinding", f"layersched:{LAYER_LOCALITY_SCHEDULER}:extender")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": EXTENDER_ACCOUNT, "namespace": NAMESPACE}
    ]


def _accountgrants(account: str) -> set[tuple[str, str, str, str]]:
    """Everything the install lets ``account`` do: the rules of every role bound to it (the
    one outside role, upstream's authentication reader, reads one ConfigMap)."""
    objects = _objects()
    roles = {
        (o["kind"], o["metadata"]["name"]): o["rules"]
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    found: set[Grant] = set()
    for binding in (o for o in objects if o["kind"] in RBAC_BINDINGS):
        if {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} not in binding[
            "subjects"
        ]:
            continue
        ref = binding["roleRef"]
        if ref["name"] == "extension-apiserver-authentication-reader":
            found.add(("", "configmaps", "get", "extension-apiserver-authentication"))
            continue
        found |= grants(roles[(ref["kind"], ref["name"])])
    return found


#: What lets a credential move, evict or delete pods, or read secrets (and so other
#: credentials): none of it may reach the extender.
POD_POWER = {
    ("", "pods", "delete"),
    ("", "pods", "deletecollection"),
    ("", "pods", "create"),
    ("", "pods", "update"),
    ("", "pods", "patch"),
    ("", "pods/binding", "create"),
    ("", "bindings", "create"),
    ("", "pods/eviction", "create"),
    ("", "pods/status", "update"),
    ("", "pods/status", "patch"),
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "serviceaccounts/token", "create"),
}


def test_the_extenders_credential_cannot_bind_or_delete_pods() -> None:
    extender = _accountgrants(EXTENDER_ACCOUNT)
    # read-only on Nodes and inventories, nothing else
    assert {verb for _, _, verb, _ in extender} == {"get", "list", "watch"}
    assert {(g, r) for g, r, _, _ in extender} == {
        ("", "nodes"),
        ("layersched.io", "nodelayerinventories"),
    }
    assert not {(g, r, v) for g, r, v, _ in extender} & POD_POWER
    # the control: kube-scheduler's own account can bind and delete (so the check bites)
    scheduler = {(g, r, v) for g, r, v, _ in _accountgrants(LAYER_LOCALITY_SCHEDULER)}
    assert {("", "pods/binding", "create"), ("", "pods", "delete")} <= scheduler


def test_each_container_mounts_only_its_own_credential() -> None:
    pod = _pod_specs()[LAYER_LOCALITY_SCHEDULER]
    # no token for the whole pod, and no shared process namespace through which one
    # container could read another's files (/proc/PID/root)
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("shareProcessNamespace")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {
        c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in pod["containers"]
    }
    credentials = {
        name
        for name, v in volumes.items()
        if "secret" in v
        or any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    }
    by_container = {c: set(m) & credentials for c, m in mounts.items()}
    # kube-scheduler: a projected token of the pod's own account (bound to the pod,
    # expiring); the extender: its own account's token Secret; never each other's
    [scheduler_volume] = by_container["kube-scheduler"]
    [extender_volume] = by_container["extender"]
    assert scheduler_volume != extender_volume
    projected = volumes[scheduler_volume]["projected"]["sources"]
    assert any("serviceAccountToken" in s for s in projected)
    assert pod["serviceAccountName"] == LAYER_LOCALITY_SCHEDULER
    secret_name = volumes[extender_volume]["secret"]["secretName"]
    [secret] = [o for o in _objects() if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == secret_name
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": EXTENDER_ACCOUNT
    }
    # both where in-cluster clients look for their credentials
    for container, volume in (("kube-scheduler", scheduler_volume), ("extender", extender_volume)):
        assert mounts[container][volume] == SERVICE_ACCOUNT_DIR
    # the extender's account is never mounted into a pod by itself
    account = _find("ServiceAccount", EXTENDER_ACCOUNT)
    assert account["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    "spec",
    # install/kustomize/'s install, and one with the admission webhook (its account and roles)
    [StackSpec(), stack_spec_for(WEBHOOK_VERSION)],
    ids=["deploy", f"webhook-{WEBHOOK_VERSION}"],
)
def test_every_binding_names_a_role_and_account_of_the_stack(spec: StackSpec) -> None:
    objects = _objects(spec)
    roles = {
        (o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] in ("Role", "ClusterRole")
    }
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    bindings = [o for o in objects if o["kind"] in RBAC_BINDINGS]
    assert bindings
    for binding in bindings:
        ref = binding["roleRef"]
        # the one outside role: upstream's authentication reader in kube-system
        if ref["name"] != "extension-apiserver-authentication-reader":
            assert (ref["kind"], ref["name"]) in roles, binding["metadata"]["name"]
        [subject] = binding["subjects"]
        assert subject["name"] in accounts and subject["namespace"] == NAMESPACE


def test_only_the_agent_mounts_the_host() -> None:
    for name, spec in _pod_specs().items():
        host_paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
        assert host_paths == ([CONTAINERD_SOCKET] if name == AGENT_NAME else []), name
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name


def test_containers_are_hardened() -> None:
    for name, spec in _pod_specs().items():
        for container in spec["containers"]:
            context = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            # the agent alone runs as root: the runtime's socket is root's
            assert context["runAsNonRoot"] is (name != AGENT_NAME), where
            assert "memory" in container["resources"]["limits"], where
            assert set(container["resources"]["requests"]) == {"cpu", "memory"}, where


def test_extender_probes_are_separate() -> None:
    spec = _pod_specs()[LAYER_LOCALITY_SCHEDULER]
    [extender] = [c for c in spec["containers"] if c["name"] == "extender"]
    assert extender["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert extender["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # the startup probe holds the liveness probe off while the extender loads
    startup = extender["startupProbe"]
    assert startup["httpGet"]["path"] == "/readyz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


def _agent_container() -> dict[str, Any]:
    [container] = _pod_specs()[AGENT_NAME]["containers"]
    return container


def test_agent_probes_ask_its_health_endpoint() -> None:
    container = _agent_container()
    [port] = container["ports"]
    # liveness (the loop goes round) and readiness (it publishes) are separate endpoints
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/livez",
        "port": port["name"],
        "scheme": "HTTP",
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["readinessProbe"]["httpGet"]["port"] == port["name"]
    # the agent listens on the pod's IP (where the kubelet probes), on the named port
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env["POD_IP"] == "status.podIP"
    pod_ip = "10.244.1.7"
    argv = [a.replace("$(POD_IP)", pod_ip).replace("$(NODE_NAME)", "n1") for a in container["args"]]
    args = build_parser().parse_args(argv)
    assert (args.health_host, args.health_port) == (pod_ip, port["containerPort"])


def test_two_schedulers_and_a_pdb_keeping_one() -> None:
    deployment = _find("Deployment", LAYER_LOCALITY_SCHEDULER)
    pdb = _find("PodDisruptionBudget", LAYER_LOCALITY_SCHEDULER)
    assert deployment["spec"]["replicas"] == 2
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    # the scheduler itself is scheduled by the default scheduler
    assert deployment["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"


def test_network_policies_select_the_stacks_pods() -> None:
    policies = stack_objects()["network-policy.yaml"]
    selected = {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]: p for p in policies
    }
    assert set(selected) == {LAYER_LOCALITY_SCHEDULER, AGENT_NAME}
    # nothing reaches the agent (its probes come from its node, which a policy cannot
    # refuse); only the scheduler's authenticated metrics port is open
    assert selected[AGENT_NAME]["spec"]["ingress"] == []
    scheduler = selected[LAYER_LOCALITY_SCHEDULER]["spec"]
    assert scheduler["ingress"] == [{"ports": [{"protocol": "TCP", "port": 10259}]}]
    # and the scheduler pods' egress is a policy too
    assert scheduler["policyTypes"] == ["Ingress", "Egress"]


def _target() -> LocalTestbedTarget:
    return LocalTestbedTarget(
        registry="10.250.62.1:5000",
        api_host="10.250.62.1",
        api_port=6443,
        nodes_dir="/tmp/lsdp-state/nodes",
        layersched_image=ImageRef(
            "10.250.62.1:5000/layersched/layersched", digest="sha256:" + "a" * 64
        ),
        kube_scheduler_image=ImageRef(
            "10.250.62.1:5000/layersched/kube-scheduler", tag=KUBERNETES_VERSION
        ),
    )


def test_local_testbed_overlay() -> None:
    # install/kustomize/'s version holds per-node write authority as a policy: no TLS to give
    files = local_testbed_overlay(_target(), "../../install/kustomize")
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    # the stack without the CRD: the testbed applies the CRD itself
    assert kustomization["bases"] == ["../../install/kustomize/stack"]
    # overlay images match the stack's placeholders, and pin the digest when given one
    assert kustomization["images"] == [
        {
            "name": "layersched",
            "newName": "10.250.62.1:5000/layersched/layersched",
            "digest": "sha256:" + "a" * 64,
        },
        {
            "name": "kube-scheduler",
            "newName": "10.250.62.1:5000/layersched/kube-scheduler",
            "newTag": KUBERNETES_VERSION,
        },
    ]
    # nothing of the webhook's: no Secret, no caBundle, no Deployment on the node's network
    assert set(files) == {"kustomization.yaml", "local-testbed.yaml"}
    assert "resources" not in kustomization and "patchesJson6902" not in kustomization
    scheduler, agent = yaml.safe_load_all(files["local-testbed.yaml"])
    [mount] = agent["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    # each agent mounts its own node's socket only
    assert mount == {
        "name": "containerd-socket",
        "mountPath": CONTAINERD_SOCKET,
        "subPathExpr": "$(NODE_NAME)/containerd.sock",
    }
    containers = {c["name"]: c for c in scheduler["spec"]["template"]["spec"]["containers"]}
    args = containers["extender"]["args"]
    assert "--insecure-registry" in args
    # the testbed's images all come from its registry: the only one the extender may contact
    allowed = [args[i + 1] for i, a in enumerate(args) if a == "--allow-registry"]
    assert allowed == ["10.250.62.1:5000"]
    # both of the pod's API clients (kube-scheduler, the --watch extender) reach the API
    for name in ("kube-scheduler", "extender"):
        assert {"name": "KUBERNETES_SERVICE_HOST", "value": "10.250.62.1"} in containers[name][
            "env"
        ]


def test_the_local_testbed_overlay_before_1_30_runs_the_webhook_on_the_nodes_network() -> None:
    # an install rendered for 1.29 (`layersched deploy render --kubernetes-version 1.29`)
    spec = stack_spec_for(WEBHOOK_VERSION)
    tls = issue_webhook_tls(webhook_dns_names(NAMESPACE))
    files = local_testbed_overlay(_target(), "../../install/kustomize", spec, tls)
    kustomization = yaml.safe_load(files["kustomization.yaml"])
    _, _, admission = yaml.safe_load_all(files["local-testbed.yaml"])
    # the admission webhook: its TLS Secret and caBundle, on the node's network
    assert kustomization["resources"] == ["admission-tls.yaml"]
    [ca_patch] = kustomization["patchesJson6902"]
    assert ca_patch["target"]["kind"] == "ValidatingWebhookConfiguration"
    [operation] = yaml.safe_load(files[ca_patch["path"]])
    assert operation["path"] == "/webhooks/0/clientConfig/caBundle"
    assert base64.b64decode(operation["value"]) == tls.ca_bundle_pem
    secret = yaml.safe_load(files["admission-tls.yaml"])
    assert base64.b64decode(secret["data"]["tls.key"]) == tls.key_pem
    assert admission["metadata"]["name"] == "layersched-admission"
    assert admission["spec"]["template"]["spec"]["hostNetwork"] is True
    with pytest.raises(InputError, match="the admission webhook needs its TLS"):
        local_testbed_overlay(_target(), "../../install/kustomize", spec)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (ImageRef("r/x"), "exactly one"),
        (ImageRef("r/x", tag="1", digest="sha256:" + "a" * 64), "exactly one"),
    ],
    ids=["neither", "both"],
)
def test_image_ref_needs_a_tag_or_a_digest(ref: ImageRef, message: str) -> None:
    with pytest.raises(InputError, match=message):
        ref.kustomize("x")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # the default binary is the build cache's: named, with how to build it
        ((), "is not built: .*kube-scheduler.* missing: run `make kubernetes`"),
        (("--kube-scheduler-bin", "/nowhere/kube-scheduler"), "--kube-scheduler-bin"),
    ],
    ids=["default-not-built", "given-missing"],
)
def test_a_missing_kube_scheduler_is_reported_before_any_image_is_built(
    argv: tuple[str, ...],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "empty-cache"))

    def build_and_push(*_: object, **__: object) -> None:
        raise AssertionError("an image was built although the binary is missing")

    monkeypatch.setattr("layersched.cli._push.build_and_push", build_and_push)
    code = main(["deploy", "images", "--registry", "127.0.0.1:1", *argv])
    assert code == EXIT_USAGE
    assert re.search(message, capsys.readouterr().err)


def _agent(spec: StackSpec) -> dict[str, Any]:
    [agent] = stack_objects(spec)["agent.yaml"]
    pod: dict[str, Any] = agent["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize(
    ("spec", "host_path", "args"),
    [
        # containerd's default socket, mounted where the agent reads it
        (StackSpec(), CONTAINERD_SOCKET, ["--containerd", CONTAINERD_SOCKET]),
        # k3s and RKE2 run their own containerd: another host path, the same mount
        (
            StackSpec(containerd_socket=K3S_CONTAINERD_SOCKET),
            K3S_CONTAINERD_SOCKET,
            ["--containerd", CONTAINERD_SOCKET],
        ),
    ],
    ids=["containerd", "k3s"],
)
def test_the_agent_mounts_the_nodes_runtime(
    spec: StackSpec, host_path: str, args: list[str]
) -> None:
    pod = _agent(spec)
    [volume] = [v for v in pod["volumes"] if "hostPath" in v]
    assert volume["hostPath"]["path"] == host_path
    [container] = pod["containers"]
    argv = container["args"]
    flag = args[0]
    assert argv[argv.index(flag) : argv.index(flag) + 2] == args
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == args[1]
    assert mount.get("readOnly", False) is False


@pytest.mark.parametrize(
    ("version", "recursive"),
    [("v1.30.14", False), ("v1.32.13", False), ("v1.33.0", True), ("v1.37.2", True)],
)
def test_the_crio_agent_mounts_only_the_two_directories_it_reads(
    version: str, recursive: bool
) -> None:
    # issue 44: the whole storage was mounted readOnly, and every running container's
    # root filesystem below it (overlay/<id>/merged, submounts) stayed writable to the
    # agent (uid 0). Now only overlay-images and overlay-layers, each read-only, and from
    # 1.33 (recursiveReadOnly GA) read-only all the way down
    spec = stack_spec_for(version, runtime=RUNTIME_CRIO, crio_storage="/data/containers/storage")
    pod = _agent(spec)
    host = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert sorted(path["path"] for path in host.values()) == [
        "/data/containers/storage/overlay-images",
        "/data/containers/storage/overlay-layers",
    ]
    assert {path["type"] for path in host.values()} == {"Directory"}
    [container] = pod["containers"]
    argv = container["args"]
    root = argv[argv.index("--crio-storage") + 1]
    mounts = [m for m in container["volumeMounts"] if m["name"] in host]
    assert sorted(m["mountPath"] for m in mounts) == [
        f"{root}/overlay-images",
        f"{root}/overlay-layers",
    ]
    for mount in mounts:
        assert mount["readOnly"] is True
        assert mount.get("recursiveReadOnly") == ("Enabled" if recursive else None)


def test_weight_and_quorum_reach_the_extender_and_the_plugin() -> None:
    extender = StackSpec(weight=5, image_quorum=3)
    [config] = yaml.safe_load_all(
        stack_objects(extender)["scheduler.yaml"][0]["data"]["scheduler-config.yaml"]
    )
    assert config["extenders"][0]["weight"] == 5
    deployment = stack_objects(extender)["scheduler.yaml"][1]
    [sidecar] = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "extender"]  # fmt: skip
    assert sidecar["args"][sidecar["args"].index("--image-quorum") + 1] == "3"
    plugin = scheduler_config(StackSpec(scheduler="plugin", weight=5, image_quorum=3))
    profile = plugin["profiles"][0]
    assert profile["plugins"]["score"]["enabled"][0]["weight"] == 5
    assert profile["pluginConfig"][0]["args"]["imageQuorum"] == 3


@pytest.mark.parametrize("spread", [True, False], ids=["default-on", "off"])
def test_the_spread_is_on_by_default_in_the_extender_and_the_plugin(spread: bool) -> None:
    # issue 30: the spread bounds what an agent copying other nodes' layers gains; an
    # install has it on unless asked otherwise (before: off)
    # layer-locality's spread (in-flight, the install's default, has none)
    ll = "layer-locality"
    spec = StackSpec(strategy=ll) if spread else StackSpec(strategy=ll, spread=False)
    deployment = stack_objects(spec)["scheduler.yaml"][1]
    [sidecar] = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "extender"]  # fmt: skip
    assert ("--spread" in sidecar["args"]) is spread
    plugin = scheduler_config(replace(spec, scheduler="plugin"))
    assert plugin["profiles"][0]["pluginConfig"][0]["args"]["spread"] is spread


def test_each_strategy_installs_at_its_weight_for_the_extender_and_the_plugin() -> None:
    # issue 42: layer-locality by default, at weight 1; in-flight (the replay's fastest
    # start-up, the drain's slowest plugin) when asked, at weight 3, told the pull mode
    spec = StackSpec()
    assert (spec.strategy, spec.pull_mode, spec.weight, spec.score_weight) == (
        "layer-locality",
        "serial",
        None,
        1,
    )
    assert "--pull-mode" not in extender_args(spec)
    assert scheduler_config(spec)["extenders"][0]["weight"] == 1
    assert StackSpec(weight=4).score_weight == 4
    # the extender: --strategy in-flight --pull-mode serial, weight 3
    spec = StackSpec(strategy="in-flight")
    assert spec.score_weight == 3
    args = extender_args(spec)
    assert args[args.index("--strategy") + 1] == "in-flight"
    assert args[args.index("--pull-mode") + 1] == "serial"
    assert "--spread" not in args and "--no-spread" not in args
    assert scheduler_config(spec)["extenders"][0]["weight"] == 3
    parallel = extender_args(StackSpec(strategy="in-flight", pull_mode="parallel"))
    assert parallel[parallel.index("--pull-mode") + 1] == "parallel"
    # the plugin: strategy in-flight with the kubelets' pull mode, weight 3
    plugin = scheduler_config(
        StackSpec(scheduler="plugin", strategy="in-flight", pull_mode="parallel")
    )
    profile = plugin["profiles"][0]
    args_ = profile["pluginConfig"][0]["args"]
    assert args_["strategy"] == "in-flight"
    assert args_["inFlight"]["pullMode"] == "parallel"
    assert profile["plugins"]["score"]["enabled"][0]["weight"] == 3
    ll = scheduler_config(StackSpec(scheduler="plugin"))
    ll_args = ll["profiles"][0]["pluginConfig"][0]["args"]
    assert ll_args["strategy"] == "layer-locality" and "inFlight" not in ll_args


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pull_mode": "eager"}, "pull mode 'eager': choose serial or parallel"),
        (
            {"scheduler": "plugin", "strategy": "pull-time"},
            "strategy 'pull-time' with scheduler 'plugin': the LayerLocality plugin scores "
            "layer-locality or in-flight",
        ),
        ({"weight": 0}, "weight 0: choose 1 to"),
        ({"image_quorum": 0}, "image quorum 0"),
        ({"runtime": "docker"}, "runtime 'docker': choose containerd or crio"),
        ({"containerd_socket": "run/k3s.sock"}, "absolute path on the node"),
    ],
    ids=["pull-mode", "plugin-strategy", "weight", "quorum", "runtime", "relative-socket"],
)
def test_bad_install_options_are_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        StackSpec(**fields)


def test_pull_secret_roles_grant_get_in_the_namespaces_named_and_nowhere_else() -> None:
    # issue 45: the extender reads pull secrets only where the user opts in, by name
    spec = StackSpec(pull_secret_namespaces=("team", "ci"), pull_secret_names=("regcred",))
    roles = [
        obj
        for obj in stack_objects(spec)["rbac.yaml"]
        if obj["kind"] in ("Role", "RoleBinding")
        and obj["metadata"]["name"].endswith("-pull-secrets")
    ]
    assert [(o["kind"], o["metadata"]["namespace"]) for o in roles] == [
        ("Role", "team"), ("RoleBinding", "team"), ("Role", "ci"), ("RoleBinding", "ci"),
    ]  # fmt: skip
    assert roles[0]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["regcred"],
         "verbs": ["get"]}
    ]  # fmt: skip
    assert roles[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": spec.extender_account, "namespace": spec.namespace}
    ]
    deployment = stack_objects(spec)["scheduler.yaml"][1]
    [sidecar] = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "extender"]  # fmt: skip
    assert "--pull-secrets" in sidecar["args"]
    # by default: no Role anywhere, and the extender reads no secret
    default = stack_objects(StackSpec())
    assert not [o for o in default["rbac.yaml"] if "secrets" in json.dumps(o.get("rules", []))]
    assert "--pull-secrets" not in json.dumps(default["scheduler.yaml"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pull_secret_names": ("regcred",)}, "pull secret names without namespaces"),
        ({"pull_secret_namespaces": ("Team",)}, "pull secret namespace 'Team': not a Kubernetes"),
        (
            {"pull_secret_namespaces": ("team",), "pull_secret_names": ("../x",)},
            "pull secret name '../x'",
        ),
        (
            {"pull_secret_namespaces": ("team",), "scheduler": "plugin"},
            "resolves layers at no registry",
        ),
    ],
    ids=["names-alone", "bad-namespace", "bad-name", "plugin"],
)
def test_bad_pull_secret_settings_are_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        StackSpec(**fields)
