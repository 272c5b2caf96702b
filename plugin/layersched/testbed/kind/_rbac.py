"""Least-privilege RBAC for the testbed's in-cluster components.

* The second scheduler binds upstream's own roles for a scheduler
  (``system:kube-scheduler``, ``system:volume-scheduler``) and may read the
  authentication ConfigMap in ``kube-system``, exactly what kubeadm grants the
  default scheduler. Leader election is off, so its lease rules go unused.
* The extender gets nothing: full Node objects arrive in every request.
* The agent may read and patch Node objects (to publish its node's layers), nothing else.
"""

from __future__ import annotations

from typing import Any

#: Upstream's bootstrap ClusterRoles for a kube-scheduler.
SCHEDULER_CLUSTER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")
#: Role (in kube-system) that lets a component read the client-CA ConfigMap for authn.
AUTH_READER_NAMESPACE = "kube-system"
AUTH_READER_ROLE = "extension-apiserver-authentication-reader"


def agent_rules() -> list[dict[str, Any]]:
    """The agent's ClusterRole rules: get and patch Nodes (no list, watch or delete)."""
    return [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
