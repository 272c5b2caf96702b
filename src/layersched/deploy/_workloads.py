"""The names, ports and paths of the install, its containers' resources and probe timings,
object metadata, the restricted ``securityContext``, and the patched in-tree scheduler's
Deployment (the kind stack's optional third scheduler, no part of ``install/kustomize/``), as plain
Kubernetes object bodies.

The install itself (the second scheduler with its extender sidecar, the agent) is
:mod:`layersched.deploy._stack`'s; the kind stack installs it through ``install/kustomize/``.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "layersched"
AGENT_NAME = "layersched-agent"
#: The extender's HTTP port (unprivileged, so the container runs as non-root).
EXTENDER_PORT = 8888
#: The extender's probes and metrics (``--health-port``) on the pod's IP, apart from its
#: verbs, which stay on loopback.
EXTENDER_HEALTH_PORT = 8890
HEALTHZ_PATH = "/healthz"
#: kube-scheduler serves /healthz on its secure port; /healthz is always allowed unauthenticated.
KUBE_SCHEDULER_SECURE_PORT = 10259
#: Where the scheduler's ConfigMap is mounted, and the file inside it.
SCHEDULER_CONFIG_DIR = "/etc/kubernetes/layersched"
SCHEDULER_CONFIG_FILE = "scheduler-config.yaml"
#: CRI-O's socket on every node, for the agent.
CRIO_SOCKET_PATH = "/var/run/crio/crio.sock"
#: Unprivileged UID/GID for the extender (distroless' "nonroot").
NONROOT_UID = 65532
#: Probe periods of the in-tree scheduler.
READINESS_PERIOD_S = 5
LIVENESS_PERIOD_S = 10
#: kube-scheduler needs a while to sync informers before /healthz is meaningful.
SCHEDULER_LIVENESS_DELAY_S = 15
#: Modest requests: the scenario pods claim (almost) all of a worker's allocatable,
#: and the testbed's own pods must not be what decides where they fit.
SMALL_CPU = "50m"
SMALL_MEMORY = "64Mi"
# Resources, from harness/results/extender.json (2 cores): with --watch the extender's
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


def labels(name: str) -> dict[str, str]:
    """The selector labels of one testbed component."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "layersched"}


def spread_over_nodes(selector: dict[str, str]) -> dict[str, Any]:
    """A pod's affinity: replicas of ``selector`` on different nodes where possible (a node
    lost takes one replica, not all)."""
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    }


def one_pod_at_a_time() -> dict[str, Any]:
    """A Deployment's strategy replacing one pod at a time, never above its replicas: the
    others keep serving (and a leader's lease)."""
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}


def object_meta(name: str, component: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(component)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def http_get(path: str, port: int | str, scheme: str = "HTTP") -> dict[str, Any]:
    return {"path": path, "port": port, "scheme": scheme}


def _http_probe(path: str, port: int | str, period_s: int, scheme: str = "HTTP") -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port, "scheme": scheme}, "periodSeconds": period_s}


def _resources() -> dict[str, Any]:
    return {"requests": {"cpu": SMALL_CPU, "memory": SMALL_MEMORY}}


def restricted(uid: int = NONROOT_UID) -> dict[str, Any]:
    """A container's securityContext: ``uid``, read-only root, no capabilities, no escalation."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": uid != 0,
        "runAsUser": uid,
        "runAsGroup": uid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def scheduler_deployment_spec(
    name: str, image: str, configmap: str, service_account: str, verbosity: int = 2
) -> dict[str, Any]:
    """A kube-scheduler Deployment reading its config from ``configmap``."""
    container = {
        "name": "kube-scheduler",
        "image": image,
        "command": [
            "kube-scheduler",
            f"--config={SCHEDULER_CONFIG_DIR}/{SCHEDULER_CONFIG_FILE}",
            f"--v={verbosity}",
        ],
        "readinessProbe": _http_probe(
            HEALTHZ_PATH, KUBE_SCHEDULER_SECURE_PORT, READINESS_PERIOD_S, "HTTPS"
        ),
        "livenessProbe": {
            **_http_probe(HEALTHZ_PATH, KUBE_SCHEDULER_SECURE_PORT, LIVENESS_PERIOD_S, "HTTPS"),
            "initialDelaySeconds": SCHEDULER_LIVENESS_DELAY_S,
        },
        "resources": _resources(),
        "securityContext": restricted(),
        "volumeMounts": [{"name": "config", "mountPath": SCHEDULER_CONFIG_DIR, "readOnly": True}],
    }
    return {
        "replicas": 1,
        "selector": {"matchLabels": labels(name)},
        "template": {
            "metadata": {"labels": labels(name)},
            "spec": {
                "serviceAccountName": service_account,
                # Scheduling the scheduler itself must not depend on a second scheduler.
                "schedulerName": "default-scheduler",
                "priorityClassName": "system-cluster-critical",
                "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": configmap}}],
            },
        },
    }


#: Where a container reads its service-account credentials (client-go's in-cluster
#: config, layersched.kube's): ``token``, ``ca.crt``, ``namespace``.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The kubelet's own name for the projected token volume it mounts by default (1.21+).
SERVICE_ACCOUNT_VOLUME = "kube-api-access"
#: The kubelet's own lifetime for that token: an hour and 7 s; the kubelet renews it at
#: 80 %, layersched.kube re-reads the file on every request and kube-scheduler's client
#: every minute.
TOKEN_EXPIRATION_S = 3607
#: What every container may read of its credential files: owner and the pod's fsGroup.
CREDENTIAL_FILE_MODE = 0o440
#: Published by kube-controller-manager in every namespace (RootCAConfigMap: beta and on
#: by default in 1.20, GA in 1.21): the cluster's CA for the projected token's volume.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"


def credentials_mount(volume: str) -> dict[str, Any]:
    """Mount ``volume`` read-only where in-cluster clients look for their credentials."""
    return {"name": volume, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}


def bound_token_volume(
    name: str = SERVICE_ACCOUNT_VOLUME,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A projected service-account token bound to the pod, with the cluster's CA and the
    namespace, as the volume ``name`` and its mount (at :data:`SERVICE_ACCOUNT_DIR`).

    Kubernetes 1.21+ mounts exactly this by default; 1.20 mounts the service account's
    legacy Secret token instead, which is bound to no pod and never expires, so the API
    server cannot say which pod (and so which node) sent a request. A pod that needs its
    node known (the agent: ``layersched.admission``), or a short-lived credential (the
    scheduler), sets ``automountServiceAccountToken: false`` and mounts this.
    """
    namespace_file = {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
    volume = {
        "name": name,
        "projected": {
            "defaultMode": CREDENTIAL_FILE_MODE,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_S}},
                {
                    "configMap": {
                        "name": ROOT_CA_CONFIGMAP,
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {"downwardAPI": {"items": [namespace_file]}},
            ],
        },
    }
    return volume, credentials_mount(name)
