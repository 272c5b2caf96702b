"""The agent's DaemonSet: one pod on every node, its one view of the host (containerd's
socket, or the two directories of CRI-O's storage it reads, read-only), its health port
and probes, and its token bound to the pod (per-node write authority)."""

from __future__ import annotations

from typing import Any

from layersched.agent import DEFAULT_CRIO_STORAGE
from layersched.agent import LIVEZ_PATH as AGENT_LIVEZ_PATH
from layersched.agent import READYZ_PATH as AGENT_READYZ_PATH
from layersched.deploy._spec import (
    CONTAINERD_SOCKET,
    LAYERSCHED_IMAGE,
    RUNTIME_CRIO,
    StackSpec,
)
from layersched.deploy._versions import recursive_read_only
from layersched.deploy._workloads import (
    AGENT_NAME,
    AGENT_RESOURCES,
    LIVENESS_FAILURES,
    PROBE_PERIOD_S,
    READY_PERIOD_S,
    STARTUP_FAILURES,
    STARTUP_PERIOD_S,
    bound_token_volume,
    http_get,
    labels,
    object_meta,
    restricted,
)

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
            "httpGet": http_get(AGENT_LIVEZ_PATH, "health"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": http_get(AGENT_LIVEZ_PATH, "health"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": http_get(AGENT_READYZ_PATH, "health"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": AGENT_RESOURCES,
        "securityContext": restricted(uid=0),
        "volumeMounts": [*runtime_mounts, token_mount],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": object_meta(AGENT_NAME, AGENT_NAME, spec.namespace),
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
