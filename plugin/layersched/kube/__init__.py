"""Talking to the Kubernetes API: credentials, a small client, and layersched's CRD.

The node agent publishes ``NodeLayerInventory`` objects with it and the extender lists
and watches Nodes and those objects. It is deliberately small (JSON over httpx, no
generated client) so the extender's image stays lean.
"""

from layersched.core.nodelayers import API_VERSION, PLURAL
from layersched.kube._client import (
    DEFAULT_TIMEOUT_S,
    HTTP_CONFLICT,
    HTTP_NOT_FOUND,
    Gone,
    KubeClient,
    WatchEvent,
)
from layersched.kube._config import KubeConfig, in_cluster_config, load_config, load_kubeconfig
from layersched.kube._crd import CRD_NAME, node_layers_crd
from layersched.kube._rbac import (
    AGENT_ROLE,
    EXTENDER_ROLE,
    agent_rules,
    extender_rules,
    parse_subject,
    rbac_objects,
)

#: The collection of NodeLayerInventory objects, and one object's URL.
NODE_LAYERS_PATH = f"/apis/{API_VERSION}/{PLURAL}"
NODES_PATH = "/api/v1/nodes"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def node_layers_path(node: str) -> str:
    """The URL of ``node``'s NodeLayerInventory."""
    return f"{NODE_LAYERS_PATH}/{node}"


__all__ = [
    "AGENT_ROLE",
    "CRD_NAME",
    "CRD_PATH",
    "DEFAULT_TIMEOUT_S",
    "EXTENDER_ROLE",
    "HTTP_CONFLICT",
    "HTTP_NOT_FOUND",
    "NODES_PATH",
    "NODE_LAYERS_PATH",
    "Gone",
    "KubeClient",
    "KubeConfig",
    "WatchEvent",
    "agent_rules",
    "extender_rules",
    "in_cluster_config",
    "load_config",
    "load_kubeconfig",
    "node_layers_crd",
    "node_layers_path",
    "parse_subject",
    "rbac_objects",
]
