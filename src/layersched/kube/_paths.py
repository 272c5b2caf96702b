"""The API paths layersched calls, built from checked names, and selectors.

A name goes into a URL path only if it is a Kubernetes object name (a DNS-1123
subdomain: lowercase letters, digits, ``-`` and ``.``, at most 253 characters), so a
hostile or mistyped name (``../secrets``, ``a?b``) can never address another object:
the call fails before anything is sent, naming the name and what a valid one is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from layersched.core.errors import KubeError
from layersched.core.nodelayers import API_VERSION, PLURAL

#: Collections (cluster-wide).
NODES_PATH = "/api/v1/nodes"
NAMESPACES_PATH = "/api/v1/namespaces"
#: Every pod of every namespace (list/watch only).
ALL_PODS_PATH = "/api/v1/pods"
#: Every core/v1 Event of every namespace (list/watch only).
ALL_EVENTS_PATH = "/api/v1/events"
NODE_LAYERS_PATH = f"/apis/{API_VERSION}/{PLURAL}"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: The API server's build (``gitVersion``, e.g. ``v1.20.2``).
VERSION_PATH = "/version"

#: k8s.io/apimachinery validation: IsDNS1123Subdomain (object names of pods, nodes,
#: namespaces, events all pass it).
_MAX_NAME_CHARS = 253
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: Characters a selector value must escape (k8s.io/apimachinery fields.EscapeValue).
_SELECTOR_ESCAPES = str.maketrans({"\\": "\\\\", ",": "\\,", "=": "\\="})


def checked_name(name: str, what: str) -> str:
    """``name`` when it is a Kubernetes object name; KubeError otherwise."""
    if len(name) > _MAX_NAME_CHARS or not _NAME.fullmatch(name):
        raise KubeError(
            f"{what} name {name[:80]!r} is not a Kubernetes object name: use lowercase "
            f"letters, digits, '-' and '.' (at most {_MAX_NAME_CHARS} characters)"
        )
    return name


def node_path(name: str) -> str:
    """One Node."""
    return f"{NODES_PATH}/{checked_name(name, 'node')}"


def namespace_path(namespace: str) -> str:
    """One Namespace (the prefix of its namespaced collections)."""
    return f"{NAMESPACES_PATH}/{checked_name(namespace, 'namespace')}"


def pods_path(namespace: str) -> str:
    """The pods of ``namespace`` (:data:`ALL_PODS_PATH` for every namespace's)."""
    return f"{namespace_path(namespace)}/pods"


def pod_path(namespace: str, name: str) -> str:
    """One pod."""
    return f"{pods_path(namespace)}/{checked_name(name, 'pod')}"


def secret_path(namespace: str, name: str) -> str:
    """One Secret (a pod's pull secret, read by name: never listed)."""
    return f"{namespace_path(namespace)}/secrets/{checked_name(name, 'secret')}"


def pod_log_path(namespace: str, name: str) -> str:
    """One pod's log (read it with :meth:`KubeClient.read_log`)."""
    return f"{pod_path(namespace, name)}/log"


def events_path(namespace: str) -> str:
    """The core/v1 Events of ``namespace``."""
    return f"{namespace_path(namespace)}/events"


def deployments_path(namespace: str) -> str:
    """The apps/v1 Deployments of ``namespace``."""
    return f"/apis/apps/v1/namespaces/{checked_name(namespace, 'namespace')}/deployments"


def deployment_path(namespace: str, name: str) -> str:
    """One Deployment."""
    return f"{deployments_path(namespace)}/{checked_name(name, 'deployment')}"


def node_layers_path(node: str) -> str:
    """The URL of ``node``'s NodeLayerInventory."""
    return f"{NODE_LAYERS_PATH}/{checked_name(node, 'node')}"


def selector(terms: Mapping[str, str]) -> str:
    """A label or field selector requiring each ``key=value`` (values escaped as the API
    parses them: ``\\``, ``,`` and ``=``)."""
    return ",".join(f"{key}={value.translate(_SELECTOR_ESCAPES)}" for key, value in terms.items())
