"""RBAC of the install: its service accounts (the extender's with a token Secret of its
own), roles and bindings; kube-scheduler's rules per Kubernetes minor, and the kind
stack's optional patched in-tree scheduler's.

**The agent's and the extender's rules** (:data:`AGENT_RULES`, :data:`EXTENDER_RULES`,
and the pods an extender scoring in flight watches: :func:`pending_pods_rbac`) are
:mod:`layersched.kube`'s, the same the testbeds grant; the scheduler elects its leader on
a Lease its own Role covers (:func:`lease_role`).

**The second scheduler's ClusterRole** (:func:`scheduler_rules`) is what upstream's
bootstrap policy grants a kube-scheduler of that minor, with its default feature gates:
the ClusterRoles ``system:kube-scheduler`` and ``system:volume-scheduler`` that
``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`` defines, **minus** the
default scheduler's own leader election (the Lease and the Endpoints named
``kube-scheduler`` in ``kube-system``, and from 1.31 ``leasecandidates``, which only
coordinated leader election uses, a gate off by default): the second scheduler elects its
leader on a Lease of its own, which a Role in its namespace covers. kube-scheduler waits
for every informer it starts, so a forbidden list stalls it: the rules follow what each
minor watches. Where each minor's rules were read (upstream's 1.20 tree; for 1.23 to 1.36
the forks that vendor kubernetes; 1.37 upstream's v1.37.2 module, the release layersched
builds; 1.21 and 1.22 inferred) is written per minor in
tests/fixtures/kube_scheduler_rbac.json, and tests/unit/test_deploy_versions.py holds
:func:`scheduler_rules` to it for every minor from 1.20 to 1.37.

**The extender's pull-secret Roles** (:func:`pull_secret_roles`): where the user opts in
(``StackSpec.pull_secret_namespaces``), a Role in that namespace granting ``get`` on
secrets (by name when ``pull_secret_names`` lists them; never ``list`` or ``watch``),
bound to the extender's own service account: the extender reads the pull secrets a pod
names, one by one, and nothing in a namespace nobody named. A ServiceAccount token
projected for that purpose would not do less: the registry must accept it (a cloud's
workload identity federated with the cluster's issuer), and the extender would need to
mint tokens for each pod's account (``create`` on ``serviceaccounts/token``, every
account of the namespace), more than reading the secrets the kubelet itself reads
(docs/extender.md, "Pull secrets").

The kind stack's in-tree scheduler (no part of ``install/kustomize/``) binds upstream's own roles
(:data:`SCHEDULER_CLUSTER_ROLES`) and may read the authentication ConfigMap in
``kube-system``, exactly what kubeadm grants the default scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from layersched.deploy._spec import StackSpec
from layersched.deploy._versions import parse_kubernetes_version
from layersched.deploy._workloads import labels, object_meta
from layersched.kube import agent_rules, extender_rules, pending_pod_rules, pull_secret_rbac

#: Upstream's bootstrap ClusterRoles for a kube-scheduler.
SCHEDULER_CLUSTER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")
#: Role (in kube-system) that lets a component read the client-CA ConfigMap for authn.
AUTH_READER_NAMESPACE = "kube-system"
AUTH_READER_ROLE = "extension-apiserver-authentication-reader"
RBAC_GROUP = "rbac.authorization.k8s.io"

READ = ("get", "list", "watch")
#: upstream's ``ReadUpdate``.
READ_UPDATE = (*READ, "update", "patch")


def rule(
    groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], **extra: Any
) -> dict[str, Any]:
    """One RBAC PolicyRule (``extra``: ``resourceNames``)."""
    return {"apiGroups": list(groups), "resources": list(resources), **extra, "verbs": list(verbs)}


#: 1.20's ``system:kube-scheduler`` and ``system:volume-scheduler`` without the default
#: scheduler's Lease and Endpoints: what every minor from 1.20 on grants.
SCHEDULER_RULES: tuple[dict[str, Any], ...] = (
    rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
    rule([""], ["nodes"], READ),
    rule([""], ["pods"], ["delete", *READ]),
    rule([""], ["bindings", "pods/binding"], ["create"]),
    rule([""], ["pods/status"], ["patch", "update"]),
    rule([""], ["replicationcontrollers", "services"], READ),
    rule(["apps", "extensions"], ["replicasets"], READ),
    rule(["apps"], ["statefulsets"], READ),
    rule(["policy"], ["poddisruptionbudgets"], READ),
    rule([""], ["persistentvolumeclaims", "persistentvolumes"], ["patch", "update", *READ]),
    rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
    rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    rule(["storage.k8s.io"], ["csinodes", "storageclasses"], READ),
)
#: What upstream's roles gained after 1.20, by the first minor that grants it (with that
#: minor's default feature gates):
#:
#: * 1.21: CSIDrivers and CSIStorageCapacities (volume binding with storage capacity;
#:   the CSIStorageCapacity gate is on by default from 1.21, unconditional from 1.24);
#: * 1.22: Namespaces (pod affinity's ``namespaceSelector``, the gate on from 1.22);
#: * 1.32: VolumeAttachments (CSI volume limits count attached volumes);
#: * 1.34: dynamic resource allocation, GA and on by default: DeviceClasses and
#:   ResourceSlices to read, ResourceClaims and their status to allocate, Pods'
#:   finalizers to update;
#: * 1.36: ResourceClaims to create and delete (DRAExtendedResource, beta and on), their
#:   ``binding`` subresource (DRAResourceClaimGranularStatusAuthorization, beta and on);
#: * 1.37: DeviceTaintRules to read (DRADeviceTaintRules goes GA and on: the scheduler's
#:   DRA plugin then watches them, to keep pods off devices a rule taints). Workload
#:   scheduling's PodGroups (GenericWorkload, beta) and CompositePodGroups (alpha) stay
#:   behind gates that are off.
SCHEDULER_RULES_SINCE: tuple[tuple[int, dict[str, Any]], ...] = (
    (21, rule(["storage.k8s.io"], ["csidrivers", "csistoragecapacities"], READ)),
    (22, rule([""], ["namespaces"], READ)),
    (32, rule(["storage.k8s.io"], ["volumeattachments"], READ)),
    (34, rule(["resource.k8s.io"], ["deviceclasses", "resourceslices"], READ)),
    (34, rule(["resource.k8s.io"], ["resourceclaims", "resourceclaims/status"], READ_UPDATE)),
    (34, rule([""], ["pods/finalizers"], ["update"])),
    (36, rule(["resource.k8s.io"], ["resourceclaims"], ["create", "delete"])),
    (36, rule(["resource.k8s.io"], ["resourceclaims/binding"], ["update", "patch"])),
    (37, rule(["resource.k8s.io"], ["devicetaintrules"], READ)),
)


def scheduler_rules(kubernetes_version: str) -> list[dict[str, Any]]:
    """The second scheduler's ClusterRole rules for a cluster of ``kubernetes_version``."""
    minor = parse_kubernetes_version(kubernetes_version, "kubernetesVersion").minor
    return [*SCHEDULER_RULES, *(r for since, r in SCHEDULER_RULES_SINCE if minor >= since)]


def pull_secret_role_name(spec: StackSpec) -> str:
    """The Role (and its binding) in each namespace whose pull secrets the extender reads."""
    return f"{spec.scheduler_name}-pull-secrets"


def pull_secret_roles(spec: StackSpec) -> list[dict[str, Any]]:
    """For each of ``spec.pull_secret_namespaces``: a Role granting ``get`` on its secrets
    (``spec.pull_secret_names`` only, when given) and its binding to the extender's service
    account; none without the extender."""
    if spec.plugin:
        return []
    account = {"kind": "ServiceAccount", "name": spec.extender_account, "namespace": spec.namespace}
    return [
        obj
        for namespace in spec.pull_secret_namespaces
        for obj in pull_secret_rbac(
            pull_secret_role_name(spec),
            namespace,
            [account],
            spec.pull_secret_names,
            labels(spec.scheduler_name),
        )
    ]


#: The agent: its Node (for the object's owner reference) and the objects it applies
#: server-side: the same rules the testbed's agents get (:mod:`layersched.kube`).
AGENT_RULES: tuple[dict[str, Any], ...] = tuple(agent_rules())
#: The extender's ``--watch``: list and watch Nodes and NodeLayerInventory objects (the
#: same rules the testbed's extender gets), under its own service account.
EXTENDER_RULES: tuple[dict[str, Any], ...] = tuple(extender_rules())


#: An extender scoring in flight lists and watches the pods bound to nodes too.
PENDING_POD_RULES: tuple[dict[str, Any], ...] = tuple(pending_pod_rules())


def pending_pods_rbac(spec: StackSpec) -> list[dict[str, Any]]:
    """The ClusterRole and binding that let the extender list and watch pods: only for an
    extender that scores in flight (``spec.watches_pods``), under its own account."""
    if not spec.watches_pods:
        return []
    role = f"layersched:{spec.scheduler_name}:pods"
    account = spec.extender_account
    return [
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": object_meta(role, spec.scheduler_name),
            "rules": list(PENDING_POD_RULES),
        },
        binding("ClusterRoleBinding", role, "ClusterRole", role, account, spec, None),
    ]


def lease_role(spec: StackSpec) -> dict[str, Any]:
    """Create Leases, and read/renew only the scheduler's own."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": object_meta(
            f"{spec.scheduler_name}-leader-election", spec.scheduler_name, spec.namespace
        ),
        "rules": [
            rule(["coordination.k8s.io"], ["leases"], ["create"]),
            rule(
                ["coordination.k8s.io"],
                ["leases"],
                ["get", "update"],
                resourceNames=[spec.scheduler_name],
            ),
        ],
    }


def binding(
    kind: str,
    name: str,
    role_kind: str,
    role: str,
    account: str,
    spec: StackSpec,
    namespace: str | None,
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": object_meta(name, account, namespace),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": spec.namespace}],
    }


def service_account(name: str, component: str, namespace: str, automount: bool) -> dict[str, Any]:
    account: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(name, component, namespace),
    }
    if not automount:
        account["automountServiceAccountToken"] = False
    return account


def extender_credentials(spec: StackSpec) -> list[dict[str, Any]]:
    """The extender's service account (never automounted: only its Secret's token is
    used, by the extender's container) and that Secret, which the token controller fills
    in with a token, the cluster's CA and the namespace. It is not listed in the account's
    ``secrets``, so 1.29+'s cleaner of unused legacy tokens leaves it alone (it only
    removes the auto-generated ones, listed there, and none a pod mounts)."""
    account = spec.extender_account
    return [
        service_account(account, spec.scheduler_name, spec.namespace, automount=False),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                **object_meta(spec.extender_token_secret, spec.scheduler_name, spec.namespace),
                "annotations": {"kubernetes.io/service-account.name": account},
            },
            "type": "kubernetes.io/service-account-token",
        },
    ]
