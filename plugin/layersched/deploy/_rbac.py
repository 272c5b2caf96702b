"""RBAC of the kind stack's optional patched in-tree scheduler (no part of ``deploy/``).

It binds upstream's own roles for a scheduler (``system:kube-scheduler``,
``system:volume-scheduler``) and may read the authentication ConfigMap in
``kube-system``, exactly what kubeadm grants the default scheduler; its leader election
is off, so their lease rules go unused. The install's own RBAC (the second scheduler's
ClusterRole and Lease Role, the agent's) is :mod:`layersched.deploy._stack`'s.
"""

from __future__ import annotations

#: Upstream's bootstrap ClusterRoles for a kube-scheduler.
SCHEDULER_CLUSTER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")
#: Role (in kube-system) that lets a component read the client-CA ConfigMap for authn.
AUTH_READER_NAMESPACE = "kube-system"
AUTH_READER_ROLE = "extension-apiserver-authentication-reader"
