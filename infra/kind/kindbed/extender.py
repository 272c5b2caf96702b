"""The layersched extender (Deployment + Service) and, optionally, the node agent DaemonSet.

Their image is built and pushed by ``playbooks/deploy.yml`` after the cluster
exists, so Pulumi does not wait for them to become ready (``skipAwait``);
deploy.yml waits for the rollout instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from layersched.deploy import (
    AGENT_NAME,
    EXTENDER_NAME,
    agent_daemonset_spec,
    extender_deployment_spec,
    extender_service_spec,
    extender_url,
    labels,
)

EXTENDER_TYPE = "layersched:kind:Extender"
AGENT_TYPE = "layersched:kind:Agent"
#: pulumi-kubernetes: create the object, do not wait for readiness (deploy.yml does).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


class LayerschedExtender(pulumi.ComponentResource):
    """The extender the second scheduler calls, behind a ClusterIP Service."""

    url: str

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        image: str,
        args: Sequence[str],
        layers_json: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(EXTENDER_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        def meta(**extra: Any) -> dict[str, Any]:
            return {
                "name": EXTENDER_NAME,
                "namespace": namespace,
                "labels": labels(EXTENDER_NAME),
                **extra,
            }

        k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=meta(), automount_service_account_token=False, opts=child
        )
        layers_configmap = None
        if layers_json is not None:
            layers_configmap = f"{EXTENDER_NAME}-layers"
            k8s.core.v1.ConfigMap(
                f"{name}-layers",
                metadata={**meta(), "name": layers_configmap},
                data={"layers.json": layers_json},
                opts=child,
            )
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=meta(annotations=SKIP_AWAIT),
            spec=extender_deployment_spec(image, args, layers_configmap),
            opts=child,
        )
        k8s.core.v1.Service(
            f"{name}-service", metadata=meta(), spec=extender_service_spec(), opts=child
        )
        self.url = extender_url(namespace)
        self.register_outputs({"url": self.url})


class LayerschedAgent(pulumi.ComponentResource):
    """The node agent on every node, reading CRI-O's socket; no API access (no RBAC)."""

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        image: str,
        args: Sequence[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(AGENT_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        meta = {"name": AGENT_NAME, "namespace": namespace, "labels": labels(AGENT_NAME)}
        k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=meta, automount_service_account_token=False, opts=child
        )
        daemonset = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={**meta, "annotations": SKIP_AWAIT},
            spec=agent_daemonset_spec(image, args),
            opts=child,
        )
        self.register_outputs({"daemonset": daemonset.metadata["name"]})
