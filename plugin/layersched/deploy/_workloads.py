"""In-cluster objects of the kind testbed, as plain Kubernetes object bodies, and the
names, ports and paths ``deploy/`` shares with it.

The Pulumi program wraps these in pulumi-kubernetes resources; keeping them
pure lets tests check them without a cluster.

How the second scheduler reaches the extender: the scheduler runs as an
ordinary Deployment (not hostNetwork, not a static pod), so it resolves the
extender's ClusterIP Service through cluster DNS:
``http://layersched-extender.layersched.svc.cluster.local:8888``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NAMESPACE = "layersched"
EXTENDER_NAME = "layersched-extender"
AGENT_NAME = "layersched-agent"
#: The extender's HTTP port (unprivileged, so the container runs as non-root).
EXTENDER_PORT = 8888
HEALTHZ_PATH = "/healthz"
#: kube-scheduler serves /healthz on its secure port; /healthz is always allowed unauthenticated.
KUBE_SCHEDULER_SECURE_PORT = 10259
#: Where the scheduler's ConfigMap is mounted, and the file inside it.
SCHEDULER_CONFIG_DIR = "/etc/kubernetes/layersched"
SCHEDULER_CONFIG_FILE = "scheduler-config.yaml"
#: The environment variable holding the pod's IP (downward API), for ``--host $(POD_IP)``.
POD_IP_ENV = "POD_IP"
#: Where an offline layers file (``--layers``) is mounted in the extender.
LAYERS_DIR = "/etc/layersched"
LAYERS_FILE = "layers.json"
#: CRI-O's socket on every node, for the agent.
CRIO_SOCKET_PATH = "/var/run/crio/crio.sock"
#: Unprivileged UID/GID for the extender (distroless' "nonroot").
NONROOT_UID = 65532
#: Probes: the extender answers /healthz only once its inventory is loaded.
READINESS_PERIOD_S = 5
LIVENESS_PERIOD_S = 10
#: kube-scheduler needs a while to sync informers before /healthz is meaningful.
SCHEDULER_LIVENESS_DELAY_S = 15
#: Modest requests: the scenario pods claim (almost) all of a worker's allocatable,
#: and the testbed's own pods must not be what decides where they fit.
SMALL_CPU = "50m"
SMALL_MEMORY = "64Mi"


def labels(name: str) -> dict[str, str]:
    """The selector labels of one testbed component."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "layersched"}


def extender_url(namespace: str = NAMESPACE, port: int = EXTENDER_PORT) -> str:
    """The extender Service as the in-cluster scheduler reaches it (cluster DNS)."""
    return f"http://{EXTENDER_NAME}.{namespace}.svc.cluster.local:{port}"


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


def extender_deployment_spec(
    image: str, args: Sequence[str], layers_configmap: str | None = None
) -> dict[str, Any]:
    """The extender Deployment's spec. It needs no API access (full Nodes arrive in
    each request), so no token is mounted; ``/tmp`` is the only writable path."""
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]  # noqa: S108 (emptyDir)
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    argv = list(args)
    if layers_configmap:
        mounts.append({"name": "layers", "mountPath": LAYERS_DIR, "readOnly": True})
        volumes.append({"name": "layers", "configMap": {"name": layers_configmap}})
        argv += ["--layers", f"{LAYERS_DIR}/{LAYERS_FILE}"]
    container = {
        "name": "extender",
        "image": image,
        # The testbed re-pushes the same tag on every deploy.
        "imagePullPolicy": "Always",
        "args": argv,
        # the extender listens on loopback unless told otherwise: args bind it explicitly
        # to the pod IP ("--host $(POD_IP)"), where the Service and the probes reach it
        "env": [{"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": EXTENDER_PORT}],
        "readinessProbe": _http_probe(HEALTHZ_PATH, "http", READINESS_PERIOD_S),
        "livenessProbe": _http_probe(HEALTHZ_PATH, "http", LIVENESS_PERIOD_S),
        "resources": _resources(),
        "securityContext": restricted(),
        "volumeMounts": mounts,
    }
    return {
        "replicas": 1,
        "selector": {"matchLabels": labels(EXTENDER_NAME)},
        "template": {
            "metadata": {"labels": labels(EXTENDER_NAME)},
            "spec": {
                "serviceAccountName": EXTENDER_NAME,
                "automountServiceAccountToken": False,
                "containers": [container],
                "volumes": volumes,
            },
        },
    }


def extender_service_spec() -> dict[str, Any]:
    """A ClusterIP Service in front of the extender."""
    return {
        "selector": labels(EXTENDER_NAME),
        "ports": [{"name": "http", "port": EXTENDER_PORT, "targetPort": "http"}],
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


def agent_daemonset_spec(image: str, args: Sequence[str]) -> dict[str, Any]:
    """The node agent: reads the node's CRI-O socket (root-owned, hence UID 0, but
    no capabilities and a read-only root) and reports the Node a kubelet would
    publish. It needs no API access, so no token is mounted. ``$(NODE_NAME)`` in
    ``args`` expands to the node's name."""
    container = {
        "name": "agent",
        "image": image,
        "imagePullPolicy": "Always",
        "args": list(args),
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": _resources(),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "crio-sock", "mountPath": CRIO_SOCKET_PATH}],
    }
    return {
        "selector": {"matchLabels": labels(AGENT_NAME)},
        "template": {
            "metadata": {"labels": labels(AGENT_NAME)},
            "spec": {
                "serviceAccountName": AGENT_NAME,
                "automountServiceAccountToken": False,
                "containers": [container],
                "volumes": [
                    {"name": "crio-sock", "hostPath": {"path": CRIO_SOCKET_PATH, "type": "Socket"}}
                ],
                "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    }
