"""The install: every Kubernetes object of ``install/kustomize/``, as plain object bodies, per
Kubernetes version.

One namespace (``layersched``) holds the stack:

* the ``NodeLayerInventory`` CRD (:func:`layersched.kube.node_layers_crd`);
* the second scheduler ``layer-locality``: a Deployment of two kube-scheduler pods with
  leader election on a Lease of its own, its ``KubeSchedulerConfiguration`` in a
  ConfigMap, and the extender as a **sidecar** that kube-scheduler reaches on
  ``127.0.0.1`` (why a sidecar: docs/deploy.md); a PodDisruptionBudget keeps one pod up.
  On Kubernetes 1.35 and newer the spec may ask for the **plugin** instead
  (``StackSpec(scheduler=SCHEDULER_PLUGIN)``): layersched's kube-scheduler build with the
  LayerLocality score plugin in the profile, no sidecar (docs/deploy.md says which to
  choose);
* the agent DaemonSet, the only pod that mounts the runtime's socket, publishing each
  node's ``NodeLayerInventory``;
* least-privilege RBAC, and **two credentials in the scheduler pod**: the pod mounts no
  service-account token of its own (``automountServiceAccountToken: false``);
  kube-scheduler's container mounts a projected, expiring token of the pod's service
  account (``layer-locality``: upstream's kube-scheduler rules for the version,
  :mod:`layersched.deploy._rbac`, and a Role on its own Lease), and the extender's
  container mounts the token of a service account of its own
  (``layer-locality-extender``: read Nodes and ``NodeLayerInventory`` objects, nothing
  else), from a ``kubernetes.io/service-account-token`` Secret. The extender parses
  registry and inventory JSON that others write; it holds nothing that can bind, evict or
  delete a pod (why this design: docs/deploy.md). The agent may read Nodes and write
  ``NodeLayerInventory`` objects, nothing else;
* NetworkPolicies (:mod:`layersched.deploy._network`): nothing may connect to the
  agent; only kube-scheduler's authenticated metrics port is open on the scheduler pods,
  which may connect to DNS, the API server and registries only.

This module gathers them into ``install/kustomize/``'s files; each kind of object is built where it
is owned: the scheduler's Deployment (:mod:`._scheduler_deployment`), the agent's
DaemonSet (:mod:`._agent_daemonset`), accounts and RBAC (:mod:`._rbac`), per-node write
authority (:mod:`._admission`), NetworkPolicies (:mod:`._network`).

Pure data: tests check it without a cluster, ``install/kustomize/`` is written from it
(:mod:`layersched.deploy._tree`) and held equal to it by a test.
"""

from __future__ import annotations

from typing import Any

from layersched.deploy._admission import admission_objects
from layersched.deploy._agent_daemonset import agent_daemonset
from layersched.deploy._network import network_policies
from layersched.deploy._rbac import (
    AGENT_RULES,
    AUTH_READER_NAMESPACE,
    AUTH_READER_ROLE,
    EXTENDER_RULES,
    RBAC_GROUP,
    binding,
    extender_credentials,
    lease_role,
    pending_pods_rbac,
    pull_secret_roles,
    scheduler_rules,
    service_account,
)
from layersched.deploy._scheduler_deployment import scheduler_config_text, scheduler_deployment
from layersched.deploy._spec import StackSpec
from layersched.deploy._versions import pdb_api_version
from layersched.deploy._workloads import (
    AGENT_NAME,
    SCHEDULER_CONFIG_FILE,
    labels,
    object_meta,
)
from layersched.kube import node_layers_crd

#: kube-scheduler's own fault tolerance: a pod killed mid-cycle has its pods retried
#: by the new leader; a PDB keeps one of the two pods through voluntary disruptions.
PDB_MIN_AVAILABLE = 1


def stack_objects(spec: StackSpec | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every object of the install, grouped by the ``install/kustomize/`` file it goes into."""
    spec = spec or StackSpec()
    name, namespace = spec.scheduler_name, spec.namespace
    cluster_role = f"layersched:{name}"
    # what reads the agents' objects: the extender sidecar (an account of its own), or
    # the plugin (in kube-scheduler, as the pod's account)
    extender_role = f"layersched:{name}:{spec.scheduler}"
    reader_account = name if spec.plugin else spec.extender_account
    agent_role = f"layersched:{AGENT_NAME}"
    groups = {
        "namespace.yaml": [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": object_meta(namespace, "layersched"),
            }
        ],
        "crd.yaml": [node_layers_crd()],
        "rbac.yaml": [
            service_account(name, name, namespace, automount=True),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": object_meta(cluster_role, name),
                "rules": scheduler_rules(spec.kubernetes_version),
            },
            binding(
                "ClusterRoleBinding", cluster_role, "ClusterRole", cluster_role, name, spec, None
            ),
            *([] if spec.plugin else extender_credentials(spec)),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": object_meta(extender_role, name),
                "rules": list(EXTENDER_RULES),
            },
            binding(
                "ClusterRoleBinding",
                extender_role,
                "ClusterRole",
                extender_role,
                reader_account,
                spec,
                None,
            ),
            *pending_pods_rbac(spec),
            lease_role(spec),
            binding(
                "RoleBinding",
                f"{name}-leader-election",
                "Role",
                f"{name}-leader-election",
                name,
                spec,
                namespace,
            ),
            # Delegated authentication of the secure port reads the client CA here.
            binding(
                "RoleBinding",
                f"{name}-authentication-reader",
                "Role",
                AUTH_READER_ROLE,
                name,
                spec,
                AUTH_READER_NAMESPACE,
            ),
            service_account(AGENT_NAME, AGENT_NAME, namespace, automount=True),
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "ClusterRole",
                "metadata": object_meta(agent_role, AGENT_NAME),
                "rules": list(AGENT_RULES),
            },
            binding(
                "ClusterRoleBinding", agent_role, "ClusterRole", agent_role, AGENT_NAME, spec, None
            ),
            *pull_secret_roles(spec),
        ],
        "scheduler.yaml": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": object_meta(f"{name}-config", name, namespace),
                "data": {SCHEDULER_CONFIG_FILE: scheduler_config_text(spec)},
            },
            scheduler_deployment(spec),
            {
                "apiVersion": pdb_api_version(spec.kubernetes_version),
                "kind": "PodDisruptionBudget",
                "metadata": object_meta(name, name, namespace),
                "spec": {
                    "minAvailable": PDB_MIN_AVAILABLE,
                    "selector": {"matchLabels": labels(name)},
                },
            },
        ],
        "agent.yaml": [agent_daemonset(spec)],
        "admission.yaml": admission_objects(spec),
        "network-policy.yaml": network_policies(namespace, name, spec.egress),
    }
    return groups
