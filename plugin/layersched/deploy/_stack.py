"""The install: every Kubernetes object of ``deploy/``, as plain object bodies, per
Kubernetes version.

One namespace (``layersched``) holds the stack:

* the ``NodeLayerInventory`` CRD (:func:`layersched.kube.node_layers_crd`);
* the second scheduler ``layer-locality``: a Deployment of two kube-scheduler pods with
  leader election on a Lease of its own, its ``KubeSchedulerConfiguration`` in a
  ConfigMap, and the extender as a **sidecar** that kube-scheduler reaches on
  ``127.0.0.1`` (why a sidecar: docs/deploy.md); a PodDisruptionBudget keeps one pod up.
  On Kubernetes 1.35 and newer the spec may ask for the **plugin** instead
  (``StackSpec(scheduler=SCHEDULER_PLUGIN)``): layersched's kube-scheduler build with the
  LayerLocality score plugin in the profile, no sidecar (docs/deploy.md says which to
  choose);
* the agent DaemonSet, the only pod that mounts the runtime's socket, publishing each
  node's ``NodeLayerInventory``;
* least-privilege RBAC, and **two credentials in the scheduler pod**: the pod mounts no
  service-account token of its own (``automountServiceAccountToken: false``);
  kube-scheduler's container mounts a projected, expiring token of the pod's service
  account (``layer-locality``: upstream's kube-scheduler rules for the version,
  :mod:`layersched.deploy._rbac`, and a Role on its own Lease), and the extender's
  container mounts the token of a service account of its own
  (``layer-locality-extender``: read Nodes and ``NodeLayerInventory`` objects, nothing
  else), from a ``kubernetes.io/service-account-token`` Secret. The extender parses
  registry and inventory JSON that others write; it holds nothing that can bind, evict or
  delete a pod (why this design: docs/deploy.md). The agent may read Nodes and write
  ``NodeLayerInventory`` objects, nothing else;
* NetworkPolicies (:mod:`layersched.deploy._network`): nothing may connect to the
  agent; only kube-scheduler's authenticated metrics port is open on the scheduler pods,
  which may connect to DNS, the API server and registries only.

Pure data: tests check it without a cluster, ``deploy/`` is written from it
(:mod:`layersched.deploy._tree`) and held equal to it by a test.
"""

from __future__ import annotations

import hashlib
from typing import Any

from layersched.agent import DEFAULT_CRIO_STORAGE
from layersched.agent import LIVEZ_PATH as AGENT_LIVEZ_PATH
from layersched.agent import READYZ_PATH as AGENT_READYZ_PATH
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY_STRATEGY
from layersched.deploy._admission import admission_objects
from layersched.deploy._network import network_policies
from layersched.deploy._rbac import (
    AUTH_READER_NAMESPACE,
    AUTH_READER_ROLE,
    RBAC_GROUP,
    pull_secret_roles,
    rule,
    scheduler_rules,
)
from layersched.deploy._scheduler_config import (
    ExtenderSpec,
    LeaderElectionSpec,
    PluginArgs,
    PluginRegistryArgs,
    extender_scheduler_config,
    plugin_scheduler_config,
)
from layersched.deploy._spec import (
    CONTAINERD_SOCKET,
    KUBE_SCHEDULER_IMAGE,
    LAYERSCHED_IMAGE,
    RUNTIME_CRIO,
    SCHEDULER_PLUGIN,
    StackSpec,
)
from layersched.deploy._versions import (
    pdb_api_version,
    recursive_read_only,
    scheduler_probe_paths,
)
from layersched.deploy._workloads import (
    AGENT_NAME,
    CREDENTIAL_FILE_MODE,
    EXTENDER_HEALTH_PORT,
    EXTENDER_PORT,
    KUBE_SCHEDULER_SECURE_PORT,
    NONROOT_UID,
    SCHEDULER_CONFIG_DIR,
    SCHEDULER_CONFIG_FILE,
    SERVICE_ACCOUNT_VOLUME,
    bound_token_volume,
    credentials_mount,
    labels,
    one_pod_at_a_time,
    restricted,
    spread_over_nodes,
)
from layersched.deploy._yaml import to_yaml
from layersched.kube import agent_rules, extender_rules, node_layers_crd, pending_pod_rules

#: The extender sidecar: kube-scheduler calls it on loopback.
EXTENDER_URL = f"http://127.0.0.1:{EXTENDER_PORT}"

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
LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
#: The scheduler pod template's hash of its ``KubeSchedulerConfiguration`` (the
#: ConfigMap's text): a changed weight, quorum or plugin arg changes the template, so the
#: Deployment rolls by itself (kube-scheduler reads its config at start only), with
#: ``kubectl apply -k`` and ``helm upgrade`` alike.
CONFIG_CHECKSUM_ANNOTATION = "layersched.io/config-sha256"
#: kube-scheduler's own fault tolerance: a pod killed mid-cycle has its pods retried
#: by the new leader; a PDB keeps one of the two pods through voluntary disruptions.
PDB_MIN_AVAILABLE = 1


def _meta(name: str, component: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(component)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _http_get(path: str, port: int | str, scheme: str = "HTTP") -> dict[str, Any]:
    return {"path": path, "port": port, "scheme": scheme}


#: The agent: its Node (for the object's owner reference) and the objects it applies
#: server-side: the same rules the testbed's agents get (:mod:`layersched.kube`).
AGENT_RULES: tuple[dict[str, Any], ...] = tuple(agent_rules())
#: The extender's ``--watch``: list and watch Nodes and NodeLayerInventory objects (the
#: same rules the testbed's extender gets), under its own service account.
EXTENDER_RULES: tuple[dict[str, Any], ...] = tuple(extender_rules())


#: An extender scoring in flight lists and watches the pods bound to nodes too.
PENDING_POD_RULES: tuple[dict[str, Any], ...] = tuple(pending_pod_rules())


def pending_pods_rbac(spec: StackSpec) -> list[dict[str, Any]]:
    """The ClusterRole and binding that let the extender list and watch pods: only for an
    extender that scores in flight (``spec.watches_pods``), under its own account."""
    if not spec.watches_pods:
        return []
    role = f"layersched:{spec.scheduler_name}:pods"
    account = spec.extender_account
    return [
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": _meta(role, spec.scheduler_name),
            "rules": list(PENDING_POD_RULES),
        },
        _binding("ClusterRoleBinding", role, "ClusterRole", role, account, spec, None),
    ]


def lease_role(spec: StackSpec) -> dict[str, Any]:
    """Create Leases, and read/renew only the scheduler's own."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": _meta(
            f"{spec.scheduler_name}-leader-election", spec.scheduler_name, spec.namespace
        ),
        "rules": [
            rule(["coordination.k8s.io"], ["leases"], ["create"]),
            rule(
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
    (its ``--watch`` inventory has the layers), or the LayerLocality plugin (its watch
    runs as the pod's service account); leader election on."""
    if spec.plugin:
        return plugin_scheduler_config(
            PluginArgs(
                image_quorum=spec.image_quorum,
                spread=spec.spread,
                registry=PluginRegistryArgs(allow_registries=spec.allowed_registries),
            ),
            scheduler_name=spec.scheduler_name,
            weight=spec.weight,
            api_version=spec.scheduler_api_version,
            leader_election=LeaderElectionSpec(spec.scheduler_name, spec.namespace),
        )
    return extender_scheduler_config(
        ExtenderSpec(EXTENDER_URL, weight=spec.weight, node_cache_capable=True),
        scheduler_name=spec.scheduler_name,
        api_version=spec.scheduler_api_version,
        leader_election=LeaderElectionSpec(spec.scheduler_name, spec.namespace),
    )


def scheduler_config_text(spec: StackSpec) -> str:
    """The ConfigMap's ``KubeSchedulerConfiguration``, as the file kube-scheduler reads."""
    return to_yaml(scheduler_config(spec))


def config_checksum(text: str) -> str:
    """:data:`CONFIG_CHECKSUM_ANNOTATION`'s value: the hex sha256 of the config's text (what
    helm's ``sha256sum`` gives of the same text)."""
    return hashlib.sha256(text.encode()).hexdigest()


def plugin_readme_block() -> str:
    """The plugin README's ready-to-use configuration: the plugin install's (in a pod
    of the ``layersched`` namespace, leader election on its own Lease)."""
    config = scheduler_config(StackSpec(scheduler=SCHEDULER_PLUGIN))
    return f"```yaml\n{to_yaml(config)}```"


#: The scheduler pod's two credential volumes.
SCHEDULER_CREDENTIALS_VOLUME = SERVICE_ACCOUNT_VOLUME
EXTENDER_CREDENTIALS_VOLUME = "extender-api-access"


def scheduler_container(spec: StackSpec) -> dict[str, Any]:
    probe_port = KUBE_SCHEDULER_SECURE_PORT
    live, ready = scheduler_probe_paths(spec.kubernetes_version)
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
            "httpGet": _http_get(live, probe_port, "HTTPS"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": _http_get(live, probe_port, "HTTPS"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": _http_get(ready, probe_port, "HTTPS"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": SCHEDULER_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [
            {"name": "config", "mountPath": SCHEDULER_CONFIG_DIR, "readOnly": True},
            # kube-scheduler writes its self-signed serving certificate here.
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 (an emptyDir)
            credentials_mount(SCHEDULER_CREDENTIALS_VOLUME),
        ],
    }


def extender_args(spec: StackSpec) -> list[str]:
    """The extender's arguments: ``--watch`` (node names only), the strategy, the allowed
    registries, then ``spec.extender_args``."""
    argv = ["extender", "--host", "127.0.0.1", "--port", str(EXTENDER_PORT)]
    argv += ["--health-host", "$(POD_IP)", "--health-port", str(EXTENDER_HEALTH_PORT)]
    # info: what changed and what failed, never a line per node per pod (debug)
    argv += ["--watch", "--strategy", spec.strategy, "--log-level", "info"]
    argv += ["--image-quorum", str(spec.image_quorum)]
    if spec.strategy == LAYER_LOCALITY_STRATEGY:
        # said either way, so that the install never rests on the CLI's default
        argv += ["--spread" if spec.spread else "--no-spread"]
    for registry in spec.allowed_registries:
        argv += ["--allow-registry", registry]
    if spec.pull_secret_namespaces:
        argv += ["--pull-secrets"]  # the Roles of pull_secret_roles let it read them
    return [*argv, *spec.extender_args]


def extender_container(spec: StackSpec) -> dict[str, Any]:
    return {
        "name": "extender",
        "image": LAYERSCHED_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": extender_args(spec),
        # the verbs answer on loopback only (kube-scheduler is in the same pod); the
        # kubelet probes the health port on the pod's IP
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "health", "containerPort": EXTENDER_HEALTH_PORT}],
        "startupProbe": {
            "httpGet": _http_get(READYZ_PATH, "health"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": _http_get(LIVEZ_PATH, "health"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": _http_get(READYZ_PATH, "health"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": EXTENDER_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [
            # its own: kube-scheduler's /tmp holds its serving key (issue 30: the two
            # containers shared one writable /tmp)
            {"name": "extender-tmp", "mountPath": "/tmp"},  # noqa: S108 (an emptyDir)
            credentials_mount(EXTENDER_CREDENTIALS_VOLUME),
        ],
    }


def credential_volumes(spec: StackSpec) -> list[dict[str, Any]]:
    """kube-scheduler's token (projected: the pod's account, bound to the pod, expiring)
    and, unless the plugin scores, the extender's (its own account's token Secret), each
    with the CA and namespace, laid out as the service-account directory every in-cluster
    client reads."""
    volumes = [bound_token_volume(SCHEDULER_CREDENTIALS_VOLUME)[0]]
    if spec.plugin:  # no extender: kube-scheduler's plugin reads as the pod's account
        return volumes
    return [
        *volumes,
        {
            "name": EXTENDER_CREDENTIALS_VOLUME,
            "secret": {
                "secretName": spec.extender_token_secret,
                "defaultMode": CREDENTIAL_FILE_MODE,
                # Named keys: the kubelet waits until the token controller has filled
                # them in rather than start the extender without a token.
                "items": [{"key": key, "path": key} for key in ("token", "ca.crt", "namespace")],
            },
        },
    ]


def scheduler_deployment(spec: StackSpec) -> dict[str, Any]:
    """kube-scheduler and its extender sidecar (none with the plugin), ``spec.replicas``
    pods, one leader."""
    containers = [scheduler_container(spec)]
    if not spec.plugin:
        containers.append(extender_container(spec))
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
                "metadata": {
                    "labels": selector,
                    "annotations": {
                        CONFIG_CHECKSUM_ANNOTATION: config_checksum(scheduler_config_text(spec))
                    },
                },
                "spec": {
                    "serviceAccountName": spec.scheduler_name,
                    # No token for the whole pod: each container mounts its own
                    # (credential_volumes), so the extender never sees kube-scheduler's.
                    "automountServiceAccountToken": False,
                    # Scheduling the scheduler must not depend on itself.
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": True, "fsGroup": NONROOT_UID},
                    "affinity": spread_over_nodes(selector),
                    "containers": containers,
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{spec.scheduler_name}-config"}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                        *(
                            [
                                {
                                    "name": "extender-tmp",
                                    "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"},
                                }
                            ]
                            if any(c["name"] == "extender" for c in containers)
                            else []
                        ),
                        *credential_volumes(spec),
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


#: Where the agent sees CRI-O's storage: of it only the two directories it reads are
#: mounted, read-only (``spec.crio_storage``'s, under the same names).
CRIO_STORAGE_MOUNT = DEFAULT_CRIO_STORAGE
#: The two directories of CRI-O's storage the agent reads (``images.json``, ``layers.json``
#: of the overlay driver, CRI-O's default), by volume name. Nothing else of the storage is
#: mounted: its ``overlay/`` holds every running container's root filesystem, and a
#: ``readOnly`` mount of the whole storage left those submounts writable to the agent,
#: which runs as uid 0 (issue 44).
CRIO_STORAGE_DIRS = (("crio-images", "overlay-images"), ("crio-layers", "overlay-layers"))


def _runtime_args(spec: StackSpec) -> list[str]:
    if spec.runtime == RUNTIME_CRIO:
        return ["--crio-storage", CRIO_STORAGE_MOUNT]
    return ["--containerd", CONTAINERD_SOCKET]


def _runtime_volumes(spec: StackSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The agent's one view of the host: containerd's socket (from wherever the
    distribution puts it), or the two directories of CRI-O's storage it reads, read-only
    (recursively where the minor has ``recursiveReadOnly``)."""
    if spec.runtime == RUNTIME_CRIO:
        mounts, volumes = [], []
        recursive = recursive_read_only(spec.kubernetes_version)
        for name, directory in CRIO_STORAGE_DIRS:
            mount: dict[str, Any] = {
                "name": name,
                "mountPath": f"{CRIO_STORAGE_MOUNT}/{directory}",
                "readOnly": True,
            }
            if recursive:
                mount["recursiveReadOnly"] = "Enabled"
            mounts.append(mount)
            path = f"{spec.crio_storage.rstrip('/')}/{directory}"
            volumes.append({"name": name, "hostPath": {"path": path, "type": "Directory"}})
        return mounts, volumes
    mount = {"name": "containerd-socket", "mountPath": CONTAINERD_SOCKET}
    volume = {
        "name": "containerd-socket",
        "hostPath": {"path": spec.containerd_socket, "type": "Socket"},
    }
    return [mount], [volume]


def agent_daemonset(spec: StackSpec) -> dict[str, Any]:
    """The agent on every node: containerd's socket (or the two directories of CRI-O's
    storage it reads), nothing else of the host.

    It runs as root only because the socket is root's; every capability is dropped
    and its root filesystem is read-only. Liveness restarts an agent whose loop is stuck;
    readiness shows (and holds a rolling update on) an agent that cannot publish.
    """
    selector = labels(AGENT_NAME)
    # its token bound to the pod, so that the API server knows the agent's node
    # (per-node write authority: layersched.deploy._admission)
    token_volume, token_mount = bound_token_volume()
    argv = ["agent", "--publish", "--node-name", "$(NODE_NAME)"]
    argv += [*_runtime_args(spec), *AGENT_HEALTH_ARGS]
    runtime_mounts, runtime_volumes = _runtime_volumes(spec)
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
        # as the extender's: a slow start (Python's imports on a busy node; seen on the
        # loaded testbed, where the liveness probe killed agents before their health
        # server listened) gets up to a minute before the liveness probe may restart it
        "startupProbe": {
            "httpGet": _http_get(AGENT_LIVEZ_PATH, "health"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
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
        "volumeMounts": [*runtime_mounts, token_mount],
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
                    "volumes": [*runtime_volumes, token_volume],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }


def _account(name: str, component: str, namespace: str, automount: bool) -> dict[str, Any]:
    account: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, component, namespace),
    }
    if not automount:
        account["automountServiceAccountToken"] = False
    return account


def extender_credentials(spec: StackSpec) -> list[dict[str, Any]]:
    """The extender's service account (never automounted: only its Secret's token is
    used, by the extender's container) and that Secret, which the token controller fills
    in with a token, the cluster's CA and the namespace. It is not listed in the account's
    ``secrets``, so 1.29+'s cleaner of unused legacy tokens leaves it alone (it only
    removes the auto-generated ones, listed there, and none a pod mounts)."""
    account = spec.extender_account
    return [
        _account(account, spec.scheduler_name, spec.namespace, automount=False),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                **_meta(spec.extender_token_secret, spec.scheduler_name, spec.namespace),
                "annotations": {"kubernetes.io/service-account.name": account},
            },
            "type": "kubernetes.io/service-account-token",
        },
    ]


def stack_objects(spec: StackSpec | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every object of the install, grouped by the ``deploy/`` file it goes into."""
    spec = spec or StackSpec()
    name, namespace = spec.scheduler_name, spec.namespace
    cluster_role = f"layersched:{name}"
    # what reads the agents' objects: the extender sidecar (an account of its own), or
    # the plugin (in kube-scheduler, as the pod's account)
    extender_role = f"layersched:{name}:{spec.scheduler}"
    reader_account = name if spec.plugin else spec.extender_account
    agent_role = f"layersched:{AGENT_NAME}"
    groups = {
        "namespace.yaml": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace, "layersched")}
        ],
        "crd.yaml": [node_layers_crd()],
        "rbac.yaml": [
            _account(name, name, namespace, automount=True),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(cluster_role, name),
                "rules": scheduler_rules(spec.kubernetes_version),
            },
            _binding(
                "ClusterRoleBinding", cluster_role, "ClusterRole", cluster_role, name, spec, None
            ),
            *([] if spec.plugin else extender_credentials(spec)),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(extender_role, name),
                "rules": list(EXTENDER_RULES),
            },
            _binding(
                "ClusterRoleBinding",
                extender_role,
                "ClusterRole",
                extender_role,
                reader_account,
                spec,
                None,
            ),
            *pending_pods_rbac(spec),
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
            _account(AGENT_NAME, AGENT_NAME, namespace, automount=True),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": _meta(agent_role, AGENT_NAME),
                "rules": list(AGENT_RULES),
            },
            _binding(
                "ClusterRoleBinding", agent_role, "ClusterRole", agent_role, AGENT_NAME, spec, None
            ),
            *pull_secret_roles(spec),
        ],
        "scheduler.yaml": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(f"{name}-config", name, namespace),
                "data": {SCHEDULER_CONFIG_FILE: scheduler_config_text(spec)},
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
        "network-policy.yaml": network_policies(namespace, name, spec.egress),
    }
    return groups
