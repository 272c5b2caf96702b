"""Least-privilege RBAC for the two layersched components that talk to the API.

* the **node agent** reads its own Node (for the owner reference), creates or
  server-side-applies NodeLayerInventory objects, and lists and watches them (it watches
  its own, by a field selector on its name, to repair it when another writer changes
  it; RBAC cannot confine a field-selected watch to one name without a role per node,
  and what the objects say is already readable in every Node's ``status.images``);
* the **extender** lists and watches Nodes and NodeLayerInventory objects, and with
  ``--strategy in-flight`` (only then) lists and watches Pods: the pods bound to nodes
  whose containers have not started (:func:`pending_pod_rules`; field-selected, but RBAC
  cannot confine a list to a field selector, so the right is granted only to an
  extender that scores in flight).

Neither may read Secrets or anything else, with one opt-in exception: where a user names
a namespace, the extender may ``get`` (never list or watch) its secrets, to read the pull
secrets its pods name (:func:`pull_secret_rbac`; ``--pull-secrets``); the agent never
reads Pods. Kubernetes RBAC cannot confine an agent to its own node's object
(``resourceNames`` would need a role per node): admission does
(:mod:`layersched.admission`, installed by ``install/kustomize/``; docs/inventory.md, trust model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from layersched.core.errors import InputError
from layersched.core.nodelayers import GROUP, PLURAL

AGENT_ROLE = "layersched:agent"
EXTENDER_ROLE = "layersched:extender"
#: What an extender scoring in flight may do besides: list and watch pods.
PENDING_PODS_ROLE = "layersched:extender:pods"
_LABELS = {"app.kubernetes.io/part-of": "layersched"}
SUBJECT_KINDS = ("User", "Group", "ServiceAccount")


def agent_rules() -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [GROUP],
            "resources": [PLURAL],
            "verbs": ["get", "list", "watch", "create", "patch"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    ]


def extender_rules() -> list[dict[str, Any]]:
    return [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    ]


def pending_pod_rules() -> list[dict[str, Any]]:
    """What an extender scoring in flight needs besides :func:`extender_rules`: to list
    and watch pods (never to get one by name, nor to change any)."""
    return [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]


def parse_subject(text: str) -> dict[str, str]:
    """``User:NAME``, ``Group:NAME`` or ``ServiceAccount:NAMESPACE/NAME`` as an RBAC subject."""
    kind, _, name = text.partition(":")
    if kind not in SUBJECT_KINDS or not name:
        raise InputError(
            f"subject {text!r}: write User:NAME, Group:NAME or ServiceAccount:NAMESPACE/NAME"
        )
    if kind == "ServiceAccount":
        namespace, _, account = name.partition("/")
        if not namespace or not account:
            raise InputError(
                f"subject {text!r}: a service account is ServiceAccount:NAMESPACE/NAME"
            )
        return {"kind": kind, "name": account, "namespace": namespace}
    return {"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "rules": rules,
    }


def cluster_role_binding(name: str, subjects: Sequence[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": list(subjects),
    }


def rbac_objects(
    agent_subjects: Sequence[dict[str, str]],
    extender_subjects: Sequence[dict[str, str]],
    *,
    in_flight: bool = False,
) -> list[dict[str, Any]]:
    """The two ClusterRoles and their bindings to the given subjects; with ``in_flight``
    a third, for extenders that score in flight: :func:`pending_pod_rules`."""
    objects = [
        cluster_role(AGENT_ROLE, agent_rules()),
        cluster_role_binding(AGENT_ROLE, agent_subjects),
        cluster_role(EXTENDER_ROLE, extender_rules()),
        cluster_role_binding(EXTENDER_ROLE, extender_subjects),
    ]
    if in_flight:
        objects += [
            cluster_role(PENDING_PODS_ROLE, pending_pod_rules()),
            cluster_role_binding(PENDING_PODS_ROLE, extender_subjects),
        ]
    return objects


def pull_secret_rules(names: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The one rule of a pull-secret Role: ``get`` on secrets (by name when ``names``)."""
    rule: dict[str, Any] = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    if names:
        rule = {"apiGroups": [""], "resources": ["secrets"], "resourceNames": list(names),
                "verbs": ["get"]}  # fmt: skip
    return [rule]


def pull_secret_rbac(
    name: str,
    namespace: str,
    subjects: Sequence[dict[str, str]],
    names: Sequence[str] = (),
    labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A Role ``name`` in ``namespace`` granting ``get`` on its secrets (``names`` only,
    when given) and its RoleBinding to ``subjects``: what lets the extender read the pull
    secrets pods of that namespace name, and nothing else."""
    tags = dict(labels or _LABELS)
    meta = {"name": name, "namespace": namespace, "labels": tags}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": pull_secret_rules(names),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {**meta, "labels": dict(tags)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": list(subjects),
        },
    ]
