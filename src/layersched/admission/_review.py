"""The per-node rule, decided for one ``AdmissionReview``: who is asking, for which node.

An **agent** may create or update only its own node's ``NodeLayerInventory`` (the object
named after the node), only while that Node exists, and the object must be owned by that
Node (exactly one ownerReference: v1 Node, the same name, the Node's uid), so that the
garbage collector removes it with the Node. Every other identity is left to RBAC.

An agent is recognised two ways (:class:`AgentIdentities`):

* **a service account** of the agent DaemonSet. Its token must be *bound* to a pod: the
  API server then adds the pod's name and uid to ``userInfo.extra`` (keys
  :data:`POD_NAME_KEY`, :data:`POD_UID_KEY`, set since 1.12's TokenRequest; from 1.30 also
  :data:`NODE_NAME_KEY`). Its node is the pod's ``spec.nodeName``, read from the API. A
  token without the pod keys (a legacy Secret token, which any holder of the Secret can
  use from anywhere) is refused;
* **a node-named user** (``layersched:agent:<node>`` in group ``layersched:agents``, the
  client certificates the local testbed's host-side agents use): the node is in the name.

Wire types mirror ``k8s.io/api/admission/v1`` (``AdmissionReview``, ``AdmissionRequest``,
``AdmissionResponse``) and decode only the fields the rule reads: the object's spec, up to
megabytes, is skipped without being built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import msgspec

from layersched.core.errors import LayerschedError
from layersched.core.nodelayers import GROUP, KIND, PLURAL, shown
from layersched.core.objects import OwnedMeta

#: The AdmissionReview version served (admission.k8s.io/v1: Kubernetes 1.16 and later).
ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
#: ``userInfo.extra`` keys of a bound service-account token (k8s.io/apiserver
#: pkg/authentication/serviceaccount/util.go: PodNameKey, PodUIDKey since 1.12;
#: NodeNameKey, NodeUIDKey from 1.29 behind ServiceAccountTokenPodNodeInfo, on by
#: default from 1.30, GA in 1.32).
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
NODE_UID_KEY = "authentication.kubernetes.io/node-uid"
#: How the API server names a service account (k8s.io/apiserver serviceaccount.MakeUsername).
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
#: The local testbed's agents: client certificates ``CN=layersched:agent:<node>``,
#: ``O=layersched:agents`` (harness/playbooks/roles/k8s_control_plane).
AGENT_GROUP = "layersched:agents"
AGENT_USER_PREFIX = "layersched:agent:"
#: The operations the rule covers. An agent may not delete (RBAC), so DELETE is not sent
#: to the webhook at all: the garbage collector's deletions never wait on it.
CHECKED_OPERATIONS = ("CREATE", "UPDATE")
#: The owner every object must name (the agent's Node).
OWNER_API_VERSION = "v1"
OWNER_KIND = "Node"
#: Status codes of a refusal: the rule said no (403), the request was not a review (400),
#: the rule could not be checked (500: the API server then fails the write, as
#: ``failurePolicy: Fail`` does for an unreachable webhook).
HTTP_FORBIDDEN = 403
HTTP_BAD_REQUEST = 400
HTTP_SERVER_ERROR = 500
#: metav1.StatusReason of each code (k8s.io/apimachinery pkg/apis/meta/v1/types.go).
_STATUS_REASONS = {
    HTTP_FORBIDDEN: "Forbidden",
    HTTP_BAD_REQUEST: "BadRequest",
    HTTP_SERVER_ERROR: "InternalError",
}


# --------------------------------------------------------------------------- wire types
class UserInfo(msgspec.Struct, frozen=True):
    """``authentication.k8s.io/v1`` UserInfo: who sent the write."""

    username: str = ""
    uid: str = ""
    groups: list[str] = msgspec.field(default_factory=list)
    extra: dict[str, list[str]] = msgspec.field(default_factory=dict)


class ObjectHead(msgspec.Struct, frozen=True):
    """What the rule reads of the object: its kind and metadata (the rest is skipped)."""

    apiVersion: str = ""
    kind: str = ""
    metadata: OwnedMeta = msgspec.field(default_factory=OwnedMeta)


class GroupVersionResource(msgspec.Struct, frozen=True):
    group: str = ""
    version: str = ""
    resource: str = ""


class AdmissionRequest(msgspec.Struct, frozen=True):
    uid: str
    operation: str
    userInfo: UserInfo = msgspec.field(default_factory=UserInfo)
    resource: GroupVersionResource = msgspec.field(default_factory=GroupVersionResource)
    subResource: str = ""
    name: str = ""
    object: ObjectHead | None = None
    dryRun: bool = False


class AdmissionReview(msgspec.Struct, frozen=True):
    apiVersion: str = ""
    kind: str = ""
    request: AdmissionRequest | None = None


# --------------------------------------------------------------------------- the rule
class LookupFailed(LayerschedError):
    """The cluster could not be asked (the API refused or did not answer)."""


class Missing(LayerschedError):
    """The pod or Node looked up does not exist (or has another uid)."""


class ClusterLookup(Protocol):
    """What the rule needs of the cluster (:class:`layersched.admission.ApiLookup`)."""

    def pod_node(self, namespace: str, name: str, uid: str) -> str:
        """The node pod ``namespace/name`` (of ``uid``) runs on; :class:`Missing` when
        there is no such pod, it has another uid, or it is not bound to a node."""
        ...

    def node_uid(self, name: str) -> str:
        """Node ``name``'s uid; :class:`Missing` when there is no such Node."""
        ...


@dataclass(frozen=True, slots=True)
class AgentIdentities:
    """Which identities are agents (``layersched admission --agent-…``)."""

    #: ``(namespace, name)`` of the agents' service accounts.
    service_accounts: frozenset[tuple[str, str]] = frozenset()
    #: Members of this group are node-named agents (None: no such agents).
    group: str | None = AGENT_GROUP
    user_prefix: str = AGENT_USER_PREFIX

    def service_account(self, username: str) -> tuple[str, str] | None:
        """``(namespace, name)`` when ``username`` is one of the agents' service accounts."""
        if not username.startswith(SERVICE_ACCOUNT_PREFIX):
            return None
        namespace, sep, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        account = (namespace, name)
        return account if sep and account in self.service_accounts else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one review: allowed, or refused with a status code and a message."""

    allowed: bool
    #: Why, in one word, for the metrics (``agent-own-node``, ``other-node``, …).
    reason: str
    code: int = 200
    message: str = ""
    #: The agent's node, when the request came from an agent.
    agent_node: str | None = None

    @property
    def result(self) -> str:
        """``allowed``, ``refused`` (the rule said no) or ``error`` (it could not tell)."""
        if self.allowed:
            return "allowed"
        return "error" if self.code >= HTTP_SERVER_ERROR else "refused"


def allow(reason: str, agent_node: str | None = None) -> Verdict:
    return Verdict(True, reason, agent_node=agent_node)


def refuse(
    reason: str, message: str, code: int = HTTP_FORBIDDEN, node: str | None = None
) -> Verdict:
    return Verdict(False, reason, code, message, agent_node=node)


def _one(extra: Mapping[str, list[str]], key: str) -> str | None:
    values = extra.get(key)
    return values[0] if values is not None and len(values) == 1 and values[0] else None


def _agent_node(
    request: AdmissionRequest, agents: AgentIdentities, lookup: ClusterLookup
) -> tuple[str | None, Verdict | None]:
    """The requester's node if it is an agent (None: not an agent), or a refusal."""
    user = request.userInfo
    account = agents.service_account(user.username)
    if account is not None:
        who = f"service account {account[0]}/{account[1]}"
        pod_name, pod_uid = _one(user.extra, POD_NAME_KEY), _one(user.extra, POD_UID_KEY)
        if pod_name is None or pod_uid is None:
            return None, refuse(
                "unbound-token",
                f"{who} is a layersched agent, but its token is not bound to a pod (no "
                f"{POD_NAME_KEY} and {POD_UID_KEY} in its user info): mount the token as a "
                "projected serviceAccountToken volume (install/kustomize/'s agent DaemonSet does), "
                "not a legacy token Secret",
            )
        try:
            node = lookup.pod_node(account[0], pod_name, pod_uid)
        except Missing as err:
            return None, refuse("pod-missing", f"{who}: {err}")
        token_node = _one(user.extra, NODE_NAME_KEY)
        if token_node is not None and token_node != node:
            return None, refuse(
                "token-node-mismatch",
                f"{who}: its token names node {shown(token_node)!r} but pod "
                f"{account[0]}/{pod_name} runs on {node!r}",
            )
        return node, None
    if agents.group is not None and agents.group in user.groups:
        node = user.username.removeprefix(agents.user_prefix)
        if node == user.username or not node:
            return None, refuse(
                "unnamed-agent",
                f"user {shown(user.username)!r} is in group {agents.group!r} (layersched "
                f"agents) but is not named {agents.user_prefix}<node>: issue its client "
                f"certificate with CN={agents.user_prefix}<node name>",
            )
        return node, None
    return None, None


def _owner_problem(head: ObjectHead, node: str, node_uid: str) -> str | None:
    """What is wrong with the object's owner references (None: exactly its Node)."""
    want = f"{OWNER_API_VERSION} {OWNER_KIND} {node!r} (uid {node_uid})"
    owners = head.metadata.ownerReferences or ()
    if len(owners) != 1:
        return f"it has {len(owners)} ownerReferences; it must have exactly one, its Node: {want}"
    owner = owners[0]
    if (owner.apiVersion, owner.kind, owner.name, owner.uid) != (
        OWNER_API_VERSION,
        OWNER_KIND,
        node,
        node_uid,
    ):
        return (
            f"its ownerReference is {shown(owner.apiVersion)} {shown(owner.kind)} "
            f"{shown(owner.name)!r} (uid {shown(owner.uid)}); it must be its Node: {want}"
        )
    return None


def decide(request: AdmissionRequest, agents: AgentIdentities, lookup: ClusterLookup) -> Verdict:
    """The verdict on one admission request (see the module docstring for the rule).

    Lookups that fail (the API refused or did not answer) give an ``error`` verdict: the
    write is refused, with a message saying it could not be checked.
    """
    resource = request.resource
    if (resource.group, resource.resource) != (GROUP, PLURAL):
        # the webhook is registered for NodeLayerInventory objects only (any subresource
        # one may gain is held to the same rule)
        return allow("not-inventory")
    if request.operation not in CHECKED_OPERATIONS:
        return allow("not-checked-operation")
    try:
        node, refusal = _agent_node(request, agents, lookup)
        if refusal is not None:
            return refusal
        if node is None:
            return allow("not-an-agent")
        head = request.object
        if head is None or not head.metadata.name:
            return refuse(
                "malformed",
                f"the agent on node {node!r} sent no object name: name the object after its node",
                HTTP_BAD_REQUEST,
                node,
            )
        name = head.metadata.name
        if head.kind and head.kind != KIND:
            return refuse(
                "malformed",
                f"object kind {shown(head.kind)!r} is not {KIND}",
                HTTP_BAD_REQUEST,
                node,
            )
        if name != node or (request.name and request.name != name):
            return refuse(
                "other-node",
                f"the layersched agent on node {node!r} may write only its own node's "
                f"{KIND} ({node!r}), not {shown(name)!r}",
                node=node,
            )
        try:
            node_uid = lookup.node_uid(node)
        except Missing as err:
            return refuse(
                "node-missing",
                f"{KIND} {node!r}: {err}: an agent may publish only for a registered Node",
                node=node,
            )
        problem = _owner_problem(head, node, node_uid)
        if problem is not None:
            return refuse("owner", f"{KIND} {node!r}: {problem}", node=node)
    except LookupFailed as err:
        return refuse(
            "lookup-failed",
            f"could not check the layersched agent's node: {err}",
            HTTP_SERVER_ERROR,
        )
    return allow("agent-own-node", node)


def response(review: AdmissionReview, verdict: Verdict) -> dict[str, object]:
    """The ``AdmissionReview`` answering ``review`` (same apiVersion, same request uid)."""
    uid = review.request.uid if review.request is not None else ""
    answer: dict[str, object] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {
            "status": "Failure",
            "code": verdict.code,
            "reason": _STATUS_REASONS.get(verdict.code, "BadRequest"),
            "message": verdict.message,
        }
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": answer}
