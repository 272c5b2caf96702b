"""The install: every Kubernetes object of ``deploy/``, as plain object bodies.

One namespace (``layersched``) holds the stack:

* the ``NodeLayerInventory`` CRD (:func:`layersched.kube.node_layers_crd`);
* the second scheduler ``layer-locality``: a Deployment of two kube-scheduler pods with
  leader election on a Lease of its own, its ``KubeSchedulerConfiguration`` in a
  ConfigMap, and the extender as a **sidecar** that kube-scheduler reaches on
  ``127.0.0.1`` (why a sidecar: docs/deploy.md); a PodDisruptionBudget keeps one pod up;
* the agent DaemonSet, the only pod that mounts the runtime's socket, publishing each
  node's ``NodeLayerInventory``;
* least-privilege RBAC: the scheduler's ClusterRole mirrors upstream's
  ``system:kube-scheduler`` and ``system:volume-scheduler`` (v1.20) except that its
  Lease rights are a Role on its own Lease; the extender sidecar (same service
  account) may also read ``NodeLayerInventory`` objects, which it watches with the
  Nodes (``--watch``, so kube-scheduler sends node names only); the agent may read
  Nodes and write ``NodeLayerInventory`` objects, nothing else;
* NetworkPolicies: nothing may connect to the agent (its kubelet's probes come from the
  node, which NetworkPolicy always allows), and only the scheduler's authenticated
  metrics port is open on the scheduler pods.

Pure data: tests check it without a cluster, ``deploy/`` is written from it
(:mod:`layersched.deploy._tree`) and held equal to it by a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layersched.agent import LIVEZ_PATH as AGENT_LIVEZ_PATH
from layersched.agent import READYZ_PATH as AGENT_READYZ_PATH
from layersched.deploy._rbac import AUTH_READER_NAMESPACE, AUTH_READER_ROLE
from layersched.deploy._scheduler_config import (
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    LAYER_LOCALITY_SCHEDULER,
    ExtenderSpec,
    LeaderElectionSpec,
    extender_scheduler_config,
    kubernetes_minor,
    scheduler_api_version_for,
)
from layersched.deploy._workloads import (
    AGENT_NAME,
    EXTENDER_PORT,
    KUBE_SCHEDULER_SECURE_PORT,
    NAMESPACE,
    NONROOT_UID,
    SCHEDULER_CONFIG_DIR,
    SCHEDULER_CONFIG_FILE,
    bound_token_volume,
    labels,
    one_pod_at_a_time,
    restricted,
    spread_over_nodes,
)
from layersched.deploy._yaml import to_yaml
from layersched.kube import agent_rules, extender_rules, node_layers_crd

#: Image names in the manifests; ``kustomization.yaml``'s ``images:`` maps them to
#: real references (a registry, a tag or digest).
LAYERSCHED_IMAGE = "layersched"
KUBE_SCHEDULER_IMAGE = "kube-scheduler"
#: What the base kustomization points them at (``layersched deploy images`` pushes them).
DEFAULT_LAYERSCHED_IMAGE = "localhost:5000/layersched/layersched"
DEFAULT_KUBE_SCHEDULER_IMAGE = "localhost:5000/layersched/kube-scheduler"
KUBERNETES_VERSION = "v1.20.2"
#: The extender sidecar: kube-scheduler calls it on loopback.
EXTENDER_URL = f"http://127.0.0.1:{EXTENDER_PORT}"
#: containerd's socket on a node (its default ``grpc.address``); the agent reads its
#: content store and image events through it.
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
SCHEDULER_REPLICAS = 2
RBAC_GROUP = "rbac.authorization.k8s.io"

# Resources, from bench/results/extender.json (2 cores): with --watch the extender's
# resident memory is 299 MB (peak 337 MB) holding 5,000 nodes' inventories while 47
# updates/s stream in, and a NodeNames call takes p50 1.9 ms, p99 4.4 ms there; small
# clusters need a fraction of that. kube-scheduler and the agent are not benchmarked:
# kubeadm's kube-scheduler request, and the agent's resident 22-45 MB seen on the
# local testbed, with headroom (docs/deploy.md).
EXTENDER_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
SCHEDULER_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "64Mi"},
    "limits": {"memory": "512Mi"},
}
AGENT_RESOURCES = {
    "requests": {"cpu": "20m", "memory": "64Mi"},
    "limits": {"memory": "192Mi"},
}

# Probes. The extender resolves images as requests arrive and is ready once its
# inventory is loaded (seconds); the startup probe gives it up to a minute before the
# liveness probe may restart it.
PROBE_PERIOD_S = 10
READY_PERIOD_S = 5
STARTUP_PERIOD_S = 2
STARTUP_FAILURES = 30
LIVENESS_FAILURES = 3
#: kube-scheduler 1.20 serves /healthz only (with its leader-election check).
SCHEDULER_HEALTH_PATH = "/healthz"
LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
#: kube-scheduler's own fault tolerance: a pod killed mid-cycle has its pods retried
#: by the new leader; a PDB keeps one of the two pods through voluntary disruptions.
PDB_MIN_AVAILABLE = 1
#: policy/v1 PodDisruptionBudget is served from 1.21; 1.20 has v1beta1 only (removed in 1.25).
PDB_API_VERSION = "policy/v1beta1"
PDB_API_VERSION_V1 = "policy/v1"
PDB_V1_SINCE_MINOR = (1, 21)


@dataclass(frozen=True, slots=True)
class StackSpec:
    """What varies between installs (everything else is fixed by this module)."""

    namespace: str = NAMESPACE
    scheduler_name: str = LAYER_LOCALITY_SCHEDULER
    scheduler_api_version: str = KUBE_SCHEDULER_CONFIG_V1BETA1
    replicas: int = SCHEDULER_REPLICAS
    #: ``--strategy`` of the extender.
    strategy: str = "layer-locality"
    #: Extra extender arguments (e.g. ``--insecure-registry HOST:PORT``).
    extender_args: tuple[str, ...] = ()
    scheduler_verbosity: int = 2
    #: The cluster's Kubernetes version, where objects differ between versions (the
    #: PodDisruptionBudget's API, kube-scheduler's RBAC); ``scheduler_api_version`` and
    #: the kube-scheduler image follow it too (:func:`stack_spec_for`).
    kubernetes_version: str = KUBERNETES_VERSION


def stack_spec_for(kubernetes_version: str, **fields: Any) -> StackSpec:
    """A :class:`StackSpec` for a cluster of ``kubernetes_version``, its scheduler reading
    the newest ``KubeSchedulerConfiguration`` API that kube-scheduler serves."""
    return StackSpec(
        kubernetes_version=kubernetes_version,
        scheduler_api_version=scheduler_api_version_for(kubernetes_version),
        **fields,
    )


def pdb_api_version(kubernetes_version: str) -> str:
    """``policy/v1`` from Kubernetes 1.21 on (the only one from 1.25), else ``policy/v1beta1``."""
    if kubernetes_minor(kubernetes_version) >= PDB_V1_SINCE_MINOR:
        return PDB_API_VERSION_V1
    return PDB_API_VERSION


def _meta(name: str, component: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(component)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _http_get(path: str, port: int | str, scheme: str = "HTTP") -> dict[str, Any]:
    return {"path": path, "port": port, "scheme": scheme}


def _rule(
    groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], **extra: Any
) -> dict[str, Any]:
    return {"apiGroups": list(groups), "resources": list(resources), **extra, "verbs": list(verbs)}


READ = ("get", "list", "watch")

#: ``system:kube-scheduler`` and ``system:volume-scheduler`` as Kubernetes v1.20 define
#: them (``kubectl get clusterrole system:kube-scheduler -o yaml``), without their
#: rights on the ``kube-scheduler`` Lease and Endpoints (the default scheduler's): the
#: second scheduler's own Lease is a Role in its namespace (:func:`lease_role`).
SCHEDULER_RULES: tuple[dict[str, Any], ...] = (
    _rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
    _rule([""], ["nodes"], READ),
    _rule([""], ["pods"], ["delete", *READ]),
    _rule([""], ["bindings", "pods/binding"], ["create"]),
    _rule([""], ["pods/status"], ["patch", "update"]),
    _rule([""], ["replicationcontrollers", "services"], READ),
    _rule(["apps", "extensions"], ["replicasets"], READ),
    _rule(["apps"], ["statefulsets"], READ),
    _rule(["policy"], ["poddisruptionbudgets"], READ),
    _rule([""], ["persistentvolumeclaims", "persistentvolumes"], ["patch", "update", *READ]),
    _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
    _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    _rule(["storage.k8s.io"], ["csinodes", "storageclasses"], READ),
)
#: What upstream's ``system:kube-scheduler`` gained after v1.20, by the minor that needs
#: it: kube-scheduler waits for every informer it starts, so a forbidden list stalls it.
#: Namespaces (pod affinity's ``namespaceSelector``), CSIDrivers and CSIStorageCapacities
#: (volume limits and storage capacity), all watched from 1.22 on.
SCHEDULER_RULES_SINCE: tuple[tuple[tuple[int, int], dict[str, Any]], ...] = (
    ((1, 22), _rule([""], ["namespaces"], READ)),
    ((1, 22), _rule(["storage.k8s.io"], ["csidrivers", "csistoragecapacities"], READ)),
)


def scheduler_rules(kubernetes_version: str = KUBERNETES_VERSION) -> list[dict[str, Any]]:
    """The scheduler ClusterRole's rules for a cluster of ``kubernetes_version``."""
    minor = kubernetes_minor(kubernetes_version)
    return [*SCHEDULER_RULES, *(rule for since, rule in SCHEDULER_RULES_SINCE if minor >= since)]


#: The agent: its Node (for the object's owner reference) and the objects it applies
#: server-side: the same rules the testbed's agents get (:mod:`layersched.kube`).
AGENT_RULES: tuple[dict[str, Any], ...] = tuple(agent_rules())
#: The extender sidecar's ``--watch``: list and watch Nodes and NodeLayerInventory
#: objects (the same rules the testbed's extender gets). It runs under the scheduler's
#: service account; the rules are a ClusterRole of their own so that an audit sees what
#: the extender, not kube-scheduler, needs.
EXTENDER_RULES: tuple[dict[str, Any], ...] = tuple(extender_rules())


def lease_role(spec: StackSpec) -> dict[str, Any]:
    """Create Leases, and read/renew only the scheduler's own."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": _meta(
            f"{spec.scheduler_name}-leader-election", spec.scheduler_name, spec.namespace
        ),
        "rules": [
            _rule(["coordination.k8s.io"], ["leases"], ["create"]),
            _rule(
                ["coordination.k8s.io"],
                ["leases"],
                ["get", "update"],
                resourceNames=[spec.scheduler_name],
            ),
        ],
    }


def _binding(
    kind: str,
    name: str,
    role_kind: str,
    role: str,
    account: str,
    spec: StackSpec,
    namespace: str | None,
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": _meta(name, account, namespace),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": spec.namespace}],
    }


def scheduler_config(spec: StackSpec) -> dict[str, Any]:
    """The ``KubeSchedulerConfiguration``: the extender on loopback, sent node names only
    (its ``--watch`` inventory has the layers), leader election on."""
    return extender_scheduler_config(
        ExtenderSpec(EXTENDER_URL, node_cache_capable=True),
        scheduler_name=spec.scheduler_name,
        api_version=spec.scheduler_api_version,
        leader_election=LeaderElectionSpec(spec.scheduler_name, spec.namespace),
    )


def scheduler_container(spec: StackSpec) -> dict[str, Any]:
    probe_port = KUBE_SCHEDULER_SECURE_PORT
    return {
        "name": "kube-scheduler",
        "image": KUBE_SCHEDULER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "/usr/local/bin/kube-scheduler",
            f"--config={SCHEDULER_CONFIG_DIR}/{SCHEDULER_CONFIG_FILE}",
            f"--v={spec.scheduler_verbosity}",
        ],
        "ports": [{"name": "metrics", "containerPort": KUBE_SCHEDULER_SECURE_PORT}],
        "startupProbe": {
            "httpGet": _http_get(SCHEDULER_HEALTH_PATH, probe_port, "HTTPS"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": _http_get(SCHEDULER_HEALTH_PATH, probe_port, "HTTPS"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": _http_get(SCHEDULER_HEALTH_PATH, probe_port, "HTTPS"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": SCHEDULER_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [
            {"name": "config", "mountPath": SCHEDULER_CONFIG_DIR, "readOnly": True},
            # kube-scheduler writes its self-signed serving certificate here.
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 (an emptyDir)
        ],
    }


def extender_container(spec: StackSpec) -> dict[str, Any]:
    argv = ["extender", "--host", "0.0.0.0", "--port", str(EXTENDER_PORT), "--watch"]
    argv += ["--strategy", spec.strategy, "--log-level", "debug", *spec.extender_args]
    return {
        "name": "extender",
        "image": LAYERSCHED_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": argv,
        "ports": [{"name": "extender", "containerPort": EXTENDER_PORT}],
        "startupProbe": {
            "httpGet": _http_get(READYZ_PATH, "extender"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": _http_get(LIVEZ_PATH, "extender"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": _http_get(READYZ_PATH, "extender"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": EXTENDER_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108 (an emptyDir)
    }


def scheduler_deployment(spec: StackSpec) -> dict[str, Any]:
    """kube-scheduler and its extender sidecar, ``spec.replicas`` pods, one leader."""
    selector = labels(spec.scheduler_name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(spec.scheduler_name, spec.scheduler_name, spec.namespace),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector},
            # Replace one pod at a time: the other keeps (or takes) the lease.
            "strategy": one_pod_at_a_time(),
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": spec.scheduler_name,
                    # Scheduling the scheduler must not depend on itself.
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": True, "fsGroup": NONROOT_UID},
                    "affinity": spread_over_nodes(selector),
                    "containers": [scheduler_container(spec), extender_container(spec)],
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{spec.scheduler_name}-config"}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                    ],
                },
            },
        },
    }


#: The agent's health port (``--health-port``): ``/livez`` (the publish loop goes round)
#: and ``/readyz`` (a publish succeeded within a resync period and a minute). It listens
#: on the pod's IP only, where the kubelet probes.
AGENT_HEALTH_PORT = 8889
#: The agent's health flags (an overlay that replaces its arguments keeps them).
AGENT_HEALTH_ARGS = ("--health-host", "$(POD_IP)", "--health-port", str(AGENT_HEALTH_PORT))


def agent_daemonset(spec: StackSpec) -> dict[str, Any]:
    """The agent on every node: containerd's socket, nothing else of the host.

    It runs as root only because the socket is root's; every capability is dropped
    and its root filesystem is read-only. Liveness restarts an agent whose loop is stuck;
    readiness shows (and holds a rolling update on) an agent that cannot publish.
    """
    selector = labels(AGENT_NAME)
    # its token bound to the pod, so that the API server knows the agent's node
    # (per-node write authority: layersched.deploy._admission)
    token_volume, token_mount = bound_token_volume()
    argv = ["agent", "--publish", "--node-name", "$(NODE_NAME)", "--containerd", CONTAINERD_SOCKET]
    argv += AGENT_HEALTH_ARGS
    container = {
        "name": "agent",
        "image": LAYERSCHED_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": argv,
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "health", "containerPort": AGENT_HEALTH_PORT}],
        "livenessProbe": {
            "httpGet": _http_get(AGENT_LIVEZ_PATH, "health"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": _http_get(AGENT_READYZ_PATH, "health"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": AGENT_RESOURCES,
        "securityContext": restricted(uid=0),
        "volumeMounts": [
            {"name": "containerd-socket", "mountPath": CONTAINERD_SOCKET},
            token_mount,
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(AGENT_NAME, AGENT_NAME, spec.namespace),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": AGENT_NAME,
                    "automountServiceAccountToken": False,
                    "priorityClassName": "system-node-critical",
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "containerd-socket",
                            "hostPath": {"path": CONTAINERD_SOCKET, "type": "Socket"},
                        },
                        token_volume,
                    ],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }


def network_policies(spec: StackSpec) -> list[dict[str, Any]]:
    """Ingress: the scheduler's secure metrics port only; nothing to the agent.

    The agent's health port needs no rule: its only client is the kubelet probing from
    the pod's own node, and traffic from the node a pod runs on is always allowed,
    whatever the policy (Kubernetes' NetworkPolicy documentation). No other pod may
    reach it.

    Egress stays open: kube-scheduler and the agent call the API server, and the
    extender calls the registries the cluster's images come from.
    """

    def policy(name: str, component: str, ingress: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(name, component, spec.namespace),
            "spec": {
                "podSelector": {"matchLabels": labels(component)},
                "policyTypes": ["Ingress"],
                "ingress": ingress,
            },
        }

    metrics = [{"ports": [{"protocol": "TCP", "port": KUBE_SCHEDULER_SECURE_PORT}]}]
    return [
        policy(spec.scheduler_name, spec.scheduler_name, metrics),
        policy(AGENT_NAME, AGENT_NAME, []),
    ]


def stack_objects(spec: StackSpec | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every object of the install, grouped by the ``deploy/`` file it goes into."""
    from layersched.deploy._admission import admission_objects  # it builds on this module

    spec = spec or StackSpec()
    name, namespace = spec.scheduler_name, spec.namespace
    cluster_role = f"layersched:{name}"
    extender_role = f"layersched:{name}:extender"
    agent_role = f"layersched:{AGENT_NAME}"
    return {
        "namespace.yaml": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace, "layersched")}
        ],
        "crd.yaml": [node_layers_crd()],
        "rbac.yaml": [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": _meta(name, name, namespace),
            },
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(cluster_role, name),
                "rules": scheduler_rules(spec.kubernetes_version),
            },
            _binding(
                "ClusterRoleBinding", cluster_role, "ClusterRole", cluster_role, name, spec, None
            ),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(extender_role, name),
                "rules": list(EXTENDER_RULES),
            },
            _binding(
                "ClusterRoleBinding", extender_role, "ClusterRole", extender_role, name, spec, None
            ),
            lease_role(spec),
            _binding(
                "RoleBinding",
                f"{name}-leader-election",
                "Role",
                f"{name}-leader-election",
                name,
                spec,
                namespace,
            ),
            # Delegated authentication of the secure port reads the client CA here.
            _binding(
                "RoleBinding",
                f"{name}-authentication-reader",
                "Role",
                AUTH_READER_ROLE,
                name,
                spec,
                AUTH_READER_NAMESPACE,
            ),
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": _meta(AGENT_NAME, AGENT_NAME, namespace),
            },
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(agent_role, AGENT_NAME),
                "rules": list(AGENT_RULES),
            },
            _binding(
                "ClusterRoleBinding", agent_role, "ClusterRole", agent_role, AGENT_NAME, spec, None
            ),
        ],
        "scheduler.yaml": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(f"{name}-config", name, namespace),
                "data": {SCHEDULER_CONFIG_FILE: to_yaml(scheduler_config(spec))},
            },
            scheduler_deployment(spec),
            {
                "apiVersion": pdb_api_version(spec.kubernetes_version),
                "kind": "PodDisruptionBudget",
                "metadata": _meta(name, name, namespace),
                "spec": {
                    "minAvailable": PDB_MIN_AVAILABLE,
                    "selector": {"matchLabels": labels(name)},
                },
            },
        ],
        "agent.yaml": [agent_daemonset(spec)],
        "admission.yaml": admission_objects(spec),
        "network-policy.yaml": network_policies(spec),
    }
