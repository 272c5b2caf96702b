"""Talking to the Kubernetes API: credentials, a small client, and layersched's CRD.

The one Kubernetes client of layersched: the node agent publishes ``NodeLayerInventory``
objects with it, the extender lists and watches Nodes and those objects, the relay reads
its Node and ConfigMap, ``explain`` and the testbeds' scenario drivers create pods and
read their events and logs, and reach a pod's own port through ``kubectl port-forward``
(:func:`port_forward`). It is
deliberately small (JSON over httpx, no generated client) so the images stay lean. Only
a kubeconfig is read with the official client's loader (``kubernetes.config``, exec
plugins and all, as kubectl reads it), and only by :mod:`layersched.kube._kubeconfig`: an
import-linter contract keeps the rest of the ``kubernetes`` package out.
"""

from layersched.kube._client import DEFAULT_LOG_LIMIT_BYTES, DEFAULT_TIMEOUT_S, KubeClient
from layersched.kube._config import DEFAULT_NAMESPACE, KubeConfig, in_cluster_config
from layersched.kube._crd import CRD_NAME, node_layers_crd
from layersched.kube._failures import HTTP_CONFLICT, HTTP_NOT_FOUND, Gone
from layersched.kube._kubeconfig import (
    kubeconfig_paths,
    load_client_config,
    load_config,
    load_kubeconfig,
)
from layersched.kube._paths import (
    ALL_EVENTS_PATH,
    ALL_PODS_PATH,
    CRD_PATH,
    NAMESPACES_PATH,
    NODE_LAYERS_PATH,
    NODES_PATH,
    VERSION_PATH,
    checked_name,
    deployment_path,
    deployments_path,
    events_path,
    namespace_path,
    node_layers_path,
    node_path,
    pod_log_path,
    pod_path,
    pods_path,
    secret_path,
    selector,
)
from layersched.kube._portforward import FORWARD_TIMEOUT_S, find_kubectl, port_forward
from layersched.kube._rbac import (
    AGENT_ROLE,
    EXTENDER_ROLE,
    agent_rules,
    extender_rules,
    parse_subject,
    pending_pod_rules,
    pull_secret_rbac,
    pull_secret_rules,
    rbac_objects,
)
from layersched.kube._stream import Oversize, WatchEvent

__all__ = [
    "AGENT_ROLE",
    "ALL_EVENTS_PATH",
    "ALL_PODS_PATH",
    "CRD_NAME",
    "CRD_PATH",
    "DEFAULT_LOG_LIMIT_BYTES",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TIMEOUT_S",
    "EXTENDER_ROLE",
    "FORWARD_TIMEOUT_S",
    "HTTP_CONFLICT",
    "HTTP_NOT_FOUND",
    "NAMESPACES_PATH",
    "NODES_PATH",
    "NODE_LAYERS_PATH",
    "VERSION_PATH",
    "Gone",
    "KubeClient",
    "KubeConfig",
    "Oversize",
    "WatchEvent",
    "agent_rules",
    "checked_name",
    "deployment_path",
    "deployments_path",
    "events_path",
    "extender_rules",
    "find_kubectl",
    "in_cluster_config",
    "kubeconfig_paths",
    "load_client_config",
    "load_config",
    "load_kubeconfig",
    "namespace_path",
    "node_layers_crd",
    "node_layers_path",
    "node_path",
    "parse_subject",
    "pending_pod_rules",
    "pod_log_path",
    "pod_path",
    "pods_path",
    "port_forward",
    "pull_secret_rbac",
    "pull_secret_rules",
    "rbac_objects",
    "secret_path",
    "selector",
]
