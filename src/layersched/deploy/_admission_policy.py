"""Per-node write authority from Kubernetes 1.30: a ValidatingAdmissionPolicy and its
binding, whose CEL holds an agent to its own node's ``NodeLayerInventory`` (the node its
bound token carries, the Node as the object's one owner), and which versions it holds on
(:func:`uses_policy`); what it and the webhook match (:func:`resource_rules`). The design:
:mod:`layersched.deploy._admission`."""

from __future__ import annotations

from typing import Any

from layersched.admission import (
    AGENT_GROUP,
    AGENT_USER_PREFIX,
    CHECKED_OPERATIONS,
    NODE_NAME_KEY,
    NODE_UID_KEY,
    SERVICE_ACCOUNT_PREFIX,
)
from layersched.core.nodelayers import GROUP, KIND, PLURAL
from layersched.deploy._scheduler_config import kubernetes_minor
from layersched.deploy._spec import StackSpec
from layersched.deploy._workloads import AGENT_NAME, NAMESPACE, object_meta

#: ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) is GA, on by default, and
#: tokens carry their node from this minor on.
POLICY_SINCE_MINOR = (1, 30)
ADMISSION_API = "admissionregistration.k8s.io/v1"


def policy_name(namespace: str) -> str:
    """The ValidatingAdmissionPolicy (and binding) of the install in ``namespace``."""
    return f"{namespace}-agent-node"


#: The policy and its binding of ``install/kustomize/`` (namespace ``layersched``), and the webhook
#: configuration (cluster-scoped).
POLICY_NAME = policy_name(NAMESPACE)


def uses_policy(kubernetes_version: str) -> bool:
    """True where a ValidatingAdmissionPolicy holds the rule (1.30+), False where the
    webhook does."""
    return kubernetes_minor(kubernetes_version) >= POLICY_SINCE_MINOR


def _agent_account(spec: StackSpec) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{spec.namespace}:{AGENT_NAME}"


def resource_rules() -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [GROUP],
            "apiVersions": ["*"],
            "operations": list(CHECKED_OPERATIONS),
            # and any subresource the CRD may gain (a status one would be a way around)
            "resources": [PLURAL, f"{PLURAL}/*"],
            "scope": "Cluster",
        }
    ]


def _extra(key: str) -> str:
    """CEL: the one value of ``userInfo.extra[key]``, or '' (absent, or not exactly one)."""
    value = f"request.userInfo.extra['{key}']"
    return (
        f"has(request.userInfo.extra) && '{key}' in request.userInfo.extra && "
        f"size({value}) == 1 ? {value}[0] : ''"
    )


def policy_expressions(spec: StackSpec) -> dict[str, Any]:
    """The policy's CEL: its match condition, variables and validations (each with its
    message), as the policy object carries them; tests evaluate these very strings."""
    account = _agent_account(spec)
    owner = "object.metadata.ownerReferences[0]"
    return {
        "matchConditions": [
            {
                "name": "from-a-layersched-agent",
                "expression": f"request.userInfo.username == '{account}' || "
                f"(has(request.userInfo.groups) && '{AGENT_GROUP}' in request.userInfo.groups)",
            }
        ],
        "variables": [
            {"name": "serviceAccount", "expression": f"request.userInfo.username == '{account}'"},
            {"name": "tokenNode", "expression": _extra(NODE_NAME_KEY)},
            {"name": "tokenNodeUid", "expression": _extra(NODE_UID_KEY)},
        ],
        "validations": [
            {
                "expression": "!variables.serviceAccount || variables.tokenNode != ''",
                "reason": "Forbidden",
                "message": f"the layersched agent's service-account token names no node "
                f"(userInfo.extra {NODE_NAME_KEY}): mount a bound token (a projected "
                "serviceAccountToken volume) on Kubernetes 1.30+ with the "
                "ServiceAccountTokenPodNodeInfo feature on (the default)",
            },
            {
                "expression": "variables.serviceAccount || "
                f"request.userInfo.username.startsWith('{AGENT_USER_PREFIX}')",
                "reason": "Forbidden",
                "message": f"a member of group {AGENT_GROUP} must be named "
                f"{AGENT_USER_PREFIX}<node>: issue its client certificate with that CN",
            },
            {
                "expression": "variables.serviceAccount ? "
                "object.metadata.name == variables.tokenNode : "
                f"request.userInfo.username == '{AGENT_USER_PREFIX}' + object.metadata.name",
                "reason": "Forbidden",
                "messageExpression": f"'the layersched agent ' + request.userInfo.username + "
                "(variables.serviceAccount ? ' on node ' + variables.tokenNode : '') + "
                f"' may write only its own node\\'s {KIND}, not ' + object.metadata.name",
            },
            {
                "expression": "has(object.metadata.ownerReferences) && "
                "size(object.metadata.ownerReferences) == 1 && "
                f"{owner}.apiVersion == 'v1' && {owner}.kind == 'Node' && "
                f"{owner}.name == object.metadata.name && "
                f"(!variables.serviceAccount || variables.tokenNodeUid == '' || "
                f"{owner}.uid == variables.tokenNodeUid)",
                "reason": "Forbidden",
                "messageExpression": f"'{KIND} ' + object.metadata.name + ' must have exactly "
                "one ownerReference, its Node (apiVersion v1, kind Node, name ' + "
                "object.metadata.name + (variables.tokenNodeUid != '' ? ', uid ' + "
                "variables.tokenNodeUid : '') + '), so that it is deleted with the Node'",
            },
        ],
    }


def policy_objects(spec: StackSpec) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Kubernetes 1.30+)."""
    cel = policy_expressions(spec)
    name = policy_name(spec.namespace)
    return [
        {
            "apiVersion": ADMISSION_API,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": object_meta(name, AGENT_NAME),
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": resource_rules()},
                **cel,
            },
        },
        {
            "apiVersion": ADMISSION_API,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": object_meta(name, AGENT_NAME),
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]
