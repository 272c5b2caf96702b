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
  serving certificate) is issued when an overlay is written (:mod:`._tls`): ``install/kustomize/``
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

The policy is named after the install's namespace
(:func:`layersched.deploy.policy_name`), so that two installs in two namespaces
(``install/kustomize/`` beside the local testbed's own agents) each hold their own agents and
neither
removes the other's.

This module gives the objects of a version (:func:`admission_objects`) and what an overlay
adds (the webhook's TLS: :func:`overlay_tls`, :func:`admission_overlay`); the policy is
:mod:`._admission_policy`'s, the webhook's objects :mod:`._admission_webhook`'s.
"""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import InputError
from layersched.deploy._admission_policy import (
    ADMISSION_API,
    POLICY_NAME,
    policy_objects,
    uses_policy,
)
from layersched.deploy._admission_webhook import (
    SERVICE_PORT,
    TLS_SECRET,
    WEBHOOK_SERVICE,
    webhook_dns_names,
    webhook_objects,
)
from layersched.deploy._spec import StackSpec
from layersched.deploy._tls import WebhookTls, issue_webhook_tls, still_usable
from layersched.deploy._workloads import object_meta


def admission_objects(spec: StackSpec) -> list[dict[str, Any]]:
    """Per-node write authority for ``spec.kubernetes_version``: the policy from 1.30,
    the webhook before (``install/kustomize/``'s ``admission.yaml``)."""
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
