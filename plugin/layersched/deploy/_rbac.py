"""Least-privilege RBAC for the testbed's in-cluster components.

* The second scheduler binds upstream's own roles for a scheduler
  (``system:kube-scheduler``, ``system:volume-scheduler``) and may read the
  authentication ConfigMap in ``kube-system``, exactly what kubeadm grants the
  default scheduler. Leader election is off, so its lease rules go unused.
* The extender gets nothing: full Node objects arrive in every request.
* The agent gets nothing either: it reads its node's CRI-O socket and reports
  the Node a kubelet would publish in its log (``layersched agent``), without
  writing to the API. (Publishing through the API would need ``nodes: get, patch``.)
"""

from __future__ import annotations

#: Upstream's bootstrap ClusterRoles for a kube-scheduler.
SCHEDULER_CLUSTER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")
#: Role (in kube-system) that lets a component read the client-CA ConfigMap for authn.
AUTH_READER_NAMESPACE = "kube-system"
AUTH_READER_ROLE = "extension-apiserver-authentication-reader"
