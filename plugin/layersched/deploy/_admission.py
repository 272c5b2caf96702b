"""Per-node write authority on ``NodeLayerInventory``, as each Kubernetes version can hold it.

An agent may create or update only its own node's object, for a Node that exists, owned
by that Node (the rule: :mod:`layersched.admission`). How the API server learns an
agent's node decides the design:

* **1.30 and later: a ValidatingAdmissionPolicy** (admissionregistration.k8s.io/v1, GA
  in 1.30) and its binding. From 1.30 a bound service-account token carries its pod's
  node in ``userInfo.extra['authentication.kubernetes.io/node-name']`` (and the Node's
  uid in ``…/node-uid``: ServiceAccountTokenPodNodeInfo, beta and on in 1.30, GA in
  1.32), so CEL compares it with the object's name in the API server itself: nothing to
  run, no TLS, no network hop. CEL cannot read another object, so *that the Node exists*
  is held differently: the token authenticates only while its pod exists (the API server
  checks the pod and its uid on every request), a pod goes with its Node (pod garbage
  collection of orphaned pods), and the policy requires the object's one ownerReference
  to be that Node, with the token's node uid, so the garbage collector deletes an object
  whose Node is gone (or never was).
* **before 1.30: a validating admission webhook** (``layersched admission``): a
  Deployment of two replicas behind a Service, called by a ValidatingWebhookConfiguration.
  1.20's tokens carry the pod's name and uid only, so the webhook reads the pod (its
  ``spec.nodeName``) and the Node (that it exists, and its uid for the ownerReference).
  It may get pods in the agents' namespace and Nodes, nothing else. Its TLS (a CA and a
  serving certificate) is issued when an overlay is written (:mod:`._tls`): ``deploy/``
  carries the configuration without a ``caBundle`` and the Deployment without its Secret,
  so the base alone is not an install (as its image names are not).

  The webhook answers **only the API server** (issue 30: any pod could starve it): the
  overlay issues the API server a client certificate from the webhook's CA and writes
  the ``AdmissionConfiguration`` and kubeconfig that make the API server present it
  (:func:`apiserver_admission_files`, for the control plane's disk and its
  ``--admission-control-config-file``); the webhook refuses any other caller, and its
  NetworkPolicy admits only the API server's addresses when the install knows them
  (``--api-server``, or ``--kubernetes-version auto``).

Both: ``failurePolicy: Fail``. Ignoring a failed check would let anyone who can make
the webhook unavailable (evict its pods, flood it) write any node's object; failing
holds only NodeLayerInventory creates and updates (agents retry with back-off and the
extender keeps the last object), DELETE is not intercepted (the garbage collector never
waits on it), and nothing the cluster needs to run depends on those writes.

The agents' identities: the service account ``layersched-agent`` of the install's
namespace, whose token must carry a node (the DaemonSet's, bound to its pod:
``agent_daemonset`` mounts a projected token, as 1.20 does not by default; or, from 1.33,
a token bound to the Node object itself, as the local testbed's host-side agents use:
docs/testbed-local.md), and users named ``layersched:agent:<node>`` in group
``layersched:agents`` (client certificates, as the cloud testbed's remote agents use),
held to the node their name gives.

The policy is named after the install's namespace (:func:`policy_name`), so that two
installs in two namespaces (``deploy/`` beside the local testbed's own agents) each hold
their own agents and neither removes the other's.
"""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import yaml

from layersched.admission import (
    AGENT_GROUP,
    AGENT_USER_PREFIX,
    CHECKED_OPERATIONS,
    CLIENT_COMMON_NAME,
    LIVEZ_PATH,
    NODE_NAME_KEY,
    NODE_UID_KEY,
    READYZ_PATH,
    SERVICE_ACCOUNT_PREFIX,
    VALIDATE_PATH,
)
from layersched.core.errors import InputError
from layersched.core.nodelayers import GROUP, KIND, PLURAL
from layersched.deploy._network import HTTPS_PORT
from layersched.deploy._scheduler_config import kubernetes_minor
from layersched.deploy._spec import LAYERSCHED_IMAGE, StackSpec
from layersched.deploy._tls import WebhookTls, issue_webhook_tls, still_usable
from layersched.deploy._versions import pdb_api_version
from layersched.deploy._workloads import (
    AGENT_NAME,
    NAMESPACE,
    NONROOT_UID,
    labels,
    object_meta,
    one_pod_at_a_time,
    restricted,
    spread_over_nodes,
)

#: ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) is GA, on by default, and
#: tokens carry their node from this minor on.
POLICY_SINCE_MINOR = (1, 30)
ADMISSION_API = "admissionregistration.k8s.io/v1"


def policy_name(namespace: str) -> str:
    """The ValidatingAdmissionPolicy (and binding) of the install in ``namespace``."""
    return f"{namespace}-agent-node"


#: The policy and its binding of ``deploy/`` (namespace ``layersched``), and the webhook
#: configuration (cluster-scoped).
POLICY_NAME = policy_name(NAMESPACE)
#: A webhook's name must be a fully qualified domain name.
WEBHOOK_NAME = "agent-node.layersched.io"
#: The webhook's Deployment, Service, ServiceAccount and Secret.
WEBHOOK_SERVICE = "layersched-admission"
TLS_SECRET = "layersched-admission-tls"  # noqa: S105 (a Secret's name)
TLS_DIR = "/etc/layersched/admission-tls"
WEBHOOK_PORT = 8443
SERVICE_PORT = 443
WEBHOOK_REPLICAS = 2
#: The API server gives the webhook this long (the server answers within 3 s).
WEBHOOK_TIMEOUT_S = 5
#: Not benchmarked: an idle server is ~40 MB resident; each review in flight holds at
#: most its body (8 MiB) and 8 are worked on at once.
WEBHOOK_RESOURCES = {
    "requests": {"cpu": "20m", "memory": "48Mi"},
    "limits": {"memory": "192Mi"},
}
PROBE_PERIOD_S = 10
READY_PERIOD_S = 5
PDB_MIN_AVAILABLE = 1
RBAC_GROUP = "rbac.authorization.k8s.io"


def uses_policy(kubernetes_version: str) -> bool:
    """True where a ValidatingAdmissionPolicy holds the rule (1.30+), False where the
    webhook does."""
    return kubernetes_minor(kubernetes_version) >= POLICY_SINCE_MINOR


def webhook_dns_names(namespace: str) -> list[str]:
    """What the webhook's serving certificate names (the API server verifies the last)."""
    return [WEBHOOK_SERVICE, f"{WEBHOOK_SERVICE}.{namespace}", f"{WEBHOOK_SERVICE}.{namespace}.svc"]


def _agent_account(spec: StackSpec) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{spec.namespace}:{AGENT_NAME}"


def _resource_rules() -> list[dict[str, Any]]:
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


# --------------------------------------------------------------------------- 1.30+: CEL
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
                "matchConstraints": {"resourceRules": _resource_rules()},
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


# --------------------------------------------------------------------------- before 1.30
def webhook_configuration(spec: StackSpec, ca_bundle: str | None = None) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration (``ca_bundle``: base64 PEM, from the overlay)."""
    client: dict[str, Any] = {
        "service": {
            "name": WEBHOOK_SERVICE,
            "namespace": spec.namespace,
            "path": VALIDATE_PATH,
            "port": SERVICE_PORT,
        }
    }
    if ca_bundle is not None:
        client["caBundle"] = ca_bundle
    return {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": object_meta(POLICY_NAME, WEBHOOK_SERVICE),
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": client,
                "rules": _resource_rules(),
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": WEBHOOK_TIMEOUT_S,
            }
        ],
    }


def webhook_args(spec: StackSpec) -> list[str]:
    """``layersched admission``'s arguments in the Deployment."""
    return [
        "admission",
        "--port",
        str(WEBHOOK_PORT),
        "--tls-cert-file",
        f"{TLS_DIR}/tls.crt",
        "--tls-key-file",
        f"{TLS_DIR}/tls.key",
        "--agent-service-account",
        f"{spec.namespace}/{AGENT_NAME}",
        "--agent-group",
        AGENT_GROUP,
        # only the API server, with the client certificate the overlay issued it
        "--client-ca-file",
        f"{TLS_DIR}/ca.crt",
        "--client-name",
        CLIENT_COMMON_NAME,
    ]


def webhook_deployment(spec: StackSpec, image: str) -> dict[str, Any]:
    """Two replicas on different nodes where possible; the serving Secret mounted."""
    selector = labels(WEBHOOK_SERVICE)

    def probe(path: str, period_s: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": "https", "scheme": "HTTPS"},
            "periodSeconds": period_s,
        }

    container = {
        "name": "admission",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": webhook_args(spec),
        "ports": [{"name": "https", "containerPort": WEBHOOK_PORT}],
        "livenessProbe": {**probe(LIVEZ_PATH, PROBE_PERIOD_S), "failureThreshold": 3},
        "readinessProbe": probe(READYZ_PATH, READY_PERIOD_S),
        "resources": WEBHOOK_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
        "spec": {
            "replicas": WEBHOOK_REPLICAS,
            "selector": {"matchLabels": selector},
            "strategy": one_pod_at_a_time(),
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": WEBHOOK_SERVICE,
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": True, "fsGroup": NONROOT_UID},
                    "affinity": spread_over_nodes(selector),
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "tls",
                            "secret": {"secretName": TLS_SECRET, "defaultMode": 0o440},
                        }
                    ],
                },
            },
        },
    }


def webhook_ingress(spec: StackSpec) -> dict[str, Any]:
    """Who may reach the webhook's port: the API server's addresses (the control plane's,
    behind ``default/kubernetes``) when the install knows them; else any address, and
    the webhook's client authentication alone keeps other callers out. (The cluster IP
    of ``kubernetes`` is left out: the API server calls from its own address.)"""
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": WEBHOOK_PORT}]}
    blocks = sorted(
        {peer.cidr for peer in spec.egress.api_server if peer.port != HTTPS_PORT}
        or {peer.cidr for peer in spec.egress.api_server}
    )
    if blocks:
        rule["from"] = [{"ipBlock": {"cidr": cidr}} for cidr in blocks]
    return rule


def webhook_objects(spec: StackSpec) -> list[dict[str, Any]]:
    """The webhook: its account and RBAC, Deployment, Service, PDB, NetworkPolicy and
    configuration (without a caBundle: the overlay adds it)."""
    selector = labels(WEBHOOK_SERVICE)
    role = f"layersched:{WEBHOOK_SERVICE}"
    subject = [{"kind": "ServiceAccount", "name": WEBHOOK_SERVICE, "namespace": spec.namespace}]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
        },
        # Nodes: that the object's Node exists, and its uid.
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": object_meta(role, WEBHOOK_SERVICE),
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": object_meta(role, WEBHOOK_SERVICE),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": subject,
        },
        # Pods, in the agents' namespace only: the node an agent pod runs on.
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "Role",
            "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "RoleBinding",
            "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": WEBHOOK_SERVICE},
            "subjects": subject,
        },
        webhook_deployment(spec, LAYERSCHED_IMAGE),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
            "spec": {
                "selector": selector,
                "ports": [
                    {
                        "name": "https",
                        "port": SERVICE_PORT,
                        "targetPort": "https",
                        "protocol": "TCP",
                    }
                ],
            },
        },
        {
            "apiVersion": pdb_api_version(spec.kubernetes_version),
            "kind": "PodDisruptionBudget",
            "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
            "spec": {"minAvailable": PDB_MIN_AVAILABLE, "selector": {"matchLabels": selector}},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": object_meta(WEBHOOK_SERVICE, WEBHOOK_SERVICE, spec.namespace),
            "spec": {
                "podSelector": {"matchLabels": selector},
                "policyTypes": ["Ingress"],
                "ingress": [webhook_ingress(spec)],
            },
        },
        webhook_configuration(spec),
    ]


def admission_objects(spec: StackSpec) -> list[dict[str, Any]]:
    """Per-node write authority for ``spec.kubernetes_version``: the policy from 1.30,
    the webhook before (``deploy/``'s ``admission.yaml``)."""
    if uses_policy(spec.kubernetes_version):
        return policy_objects(spec)
    return webhook_objects(spec)


# --------------------------------------------------------------------------- overlays
#: The overlay's files holding the webhook's TLS (the Secret is written mode 0600).
TLS_FILE = "admission-tls.yaml"
CA_BUNDLE_PATCH_FILE = "admission-ca-bundle.yaml"
#: The API server's side, for the control plane's disk (not kustomize resources): its
#: admission configuration (``--admission-control-config-file``) and the kubeconfig it
#: names, holding the client certificate and key (written mode 0600).
APISERVER_CONFIG_FILE = "apiserver-admission-config.yaml"
APISERVER_KUBECONFIG_FILE = "apiserver-admission-kubeconfig.yaml"
#: Where the admission configuration expects the kubeconfig on the control plane.
APISERVER_CONFIG_DIR = "/etc/kubernetes/layersched"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def tls_secret(spec: StackSpec, tls: WebhookTls) -> dict[str, Any]:
    """The Secret the webhook serves from (``kubernetes.io/tls``, plus the CA bundle)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(TLS_SECRET, WEBHOOK_SERVICE, spec.namespace),
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": _b64(tls.cert_pem),
            "tls.key": _b64(tls.key_pem),
            "ca.crt": _b64(tls.ca_bundle_pem),
        },
    }


def apiserver_admission_files(spec: StackSpec, tls: WebhookTls) -> dict[str, dict[str, Any]]:
    """The API server's admission configuration and the kubeconfig it names: the
    client certificate to present to the webhook's Service (the user's name is the
    Service's DNS name and port, as the API server looks it up)."""
    user = f"{webhook_dns_names(spec.namespace)[-1]}:{SERVICE_PORT}"
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(tls.client_cert_pem),
                    "client-key-data": _b64(tls.client_key_pem),
                },
            }
        ],
    }
    config = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": "ValidatingAdmissionWebhook",
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": f"{APISERVER_CONFIG_DIR}/{APISERVER_KUBECONFIG_FILE}",
                },
            }
        ],
    }
    return {APISERVER_CONFIG_FILE: config, APISERVER_KUBECONFIG_FILE: kubeconfig}


def ca_bundle_patch(tls: WebhookTls) -> list[dict[str, Any]]:
    """A JSON 6902 patch setting the webhook configuration's caBundle."""
    return [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": _b64(tls.ca_bundle_pem)}
    ]


def read_overlay_tls(directory: Path, spec: StackSpec) -> WebhookTls | None:
    """The TLS an overlay in ``directory`` already holds (None: none, or unreadable)."""
    path = directory / TLS_FILE
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        data = document["data"]
        if document["metadata"]["name"] != TLS_SECRET:
            return None
        kubeconfig = yaml.safe_load(
            (directory / APISERVER_KUBECONFIG_FILE).read_text(encoding="utf-8")
        )
        client = kubeconfig["users"][0]["user"]
        return WebhookTls(
            ca_bundle_pem=base64.b64decode(data["ca.crt"], validate=True),
            cert_pem=base64.b64decode(data["tls.crt"], validate=True),
            key_pem=base64.b64decode(data["tls.key"], validate=True),
            client_cert_pem=base64.b64decode(client["client-certificate-data"], validate=True),
            client_key_pem=base64.b64decode(client["client-key-data"], validate=True),
        )
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError, ValueError):
        return None


def overlay_tls(
    directory: Path, spec: StackSpec, *, now: datetime.datetime | None = None
) -> WebhookTls | None:
    """The webhook TLS for an overlay written to ``directory``: what it holds while that
    is still good for :data:`layersched.deploy._tls.RENEW_BEFORE`, else a new CA and
    certificate (the old CA kept in the bundle). None where the policy needs no TLS."""
    if uses_policy(spec.kubernetes_version):
        return None
    names = webhook_dns_names(spec.namespace)
    held = read_overlay_tls(directory, spec)
    if held is not None and still_usable(held, names, now=now):
        return held
    return issue_webhook_tls(
        names, now=now, previous_ca_pem=held.ca_bundle_pem if held is not None else None
    )


def admission_overlay(
    spec: StackSpec, tls: WebhookTls | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What an overlay adds for the rule: its files (as documents, by file name) and its
    kustomization's fields (``resources``, ``patchesJson6902``). Nothing from 1.30 (the
    policy needs no TLS); before, the webhook's Secret and the caBundle patch (``tls`` is
    required)."""
    if uses_policy(spec.kubernetes_version):
        return {}, {}
    if tls is None:
        raise InputError(
            f"Kubernetes {spec.kubernetes_version}: the admission webhook needs its TLS "
            "(layersched.deploy.overlay_tls) to write an overlay"
        )
    files: dict[str, Any] = {
        TLS_FILE: tls_secret(spec, tls),
        CA_BUNDLE_PATCH_FILE: ca_bundle_patch(tls),
        **apiserver_admission_files(spec, tls),
    }
    group, version = ADMISSION_API.split("/")
    fields = {
        "resources": [TLS_FILE],
        "patchesJson6902": [
            {
                "target": {
                    "group": group,
                    "version": version,
                    "kind": "ValidatingWebhookConfiguration",
                    "name": POLICY_NAME,
                },
                "path": CA_BUNDLE_PATCH_FILE,
            }
        ],
    }
    return files, fields
