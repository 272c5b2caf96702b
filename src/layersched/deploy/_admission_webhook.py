"""Per-node write authority before Kubernetes 1.30: the ``layersched admission`` webhook's
objects (its account and RBAC, Deployment, Service, PodDisruptionBudget, NetworkPolicy
admitting only the API server where the install knows its addresses, and the
ValidatingWebhookConfiguration, without a ``caBundle``: an overlay adds it). The design:
:mod:`layersched.deploy._admission`."""

from __future__ import annotations

from typing import Any

from layersched.admission import (
    AGENT_GROUP,
    CLIENT_COMMON_NAME,
    LIVEZ_PATH,
    READYZ_PATH,
    VALIDATE_PATH,
)
from layersched.deploy._admission_policy import ADMISSION_API, POLICY_NAME, resource_rules
from layersched.deploy._network import HTTPS_PORT
from layersched.deploy._rbac import RBAC_GROUP
from layersched.deploy._spec import LAYERSCHED_IMAGE, StackSpec
from layersched.deploy._versions import pdb_api_version
from layersched.deploy._workloads import (
    AGENT_NAME,
    NONROOT_UID,
    PROBE_PERIOD_S,
    READY_PERIOD_S,
    labels,
    object_meta,
    one_pod_at_a_time,
    restricted,
    spread_over_nodes,
)

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


PDB_MIN_AVAILABLE = 1


def webhook_dns_names(namespace: str) -> list[str]:
    """What the webhook's serving certificate names (the API server verifies the last)."""
    return [WEBHOOK_SERVICE, f"{WEBHOOK_SERVICE}.{namespace}", f"{WEBHOOK_SERVICE}.{namespace}.svc"]


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
                "rules": resource_rules(),
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
