"""The patched in-tree kube-scheduler (a third scheduler) as an in-cluster Deployment.

The second scheduler, ``layer-locality``, is ``install/kustomize/``'s (:mod:`kindbed.install`);
this one is no part of the install: it runs only with the patched kube-scheduler
(``patchedScheduler``), with leader election off.

It runs beside the untouched default scheduler and only takes pods whose
``spec.schedulerName`` names its profile; its score plugin is in-tree, so it calls
no extender.

The patched (in-tree) scheduler's image is pushed by ``sideload.yml``, which
runs after ``pulumi up``: its Deployment is created with ``skip_await``, or
``pulumi up`` would wait for pods that cannot start yet and time out.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from kindbed.install import SKIP_AWAIT
from layersched.deploy import (
    AUTH_READER_NAMESPACE,
    AUTH_READER_ROLE,
    SCHEDULER_CLUSTER_ROLES,
    SCHEDULER_CONFIG_FILE,
    labels,
    scheduler_deployment_spec,
    to_yaml,
)

TYPE = "layersched:kind:SecondScheduler"


class SecondScheduler(pulumi.ComponentResource):
    """ServiceAccount, upstream scheduler roles, config ConfigMap and Deployment."""

    scheduler_name: str

    def __init__(
        self,
        name: str,
        *,
        namespace: pulumi.Input[str],
        image: str,
        config: dict[str, Any],
        skip_await: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.scheduler_name = str(config["profiles"][0]["schedulerName"])

        def meta(**extra: Any) -> dict[str, Any]:
            return {"name": name, "namespace": namespace, "labels": labels(name), **extra}

        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=meta(), opts=child)
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        for role in SCHEDULER_CLUSTER_ROLES:
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-{role.rsplit(':', 1)[-1]}",
                metadata={"name": f"{name}-{role.replace(':', '-')}", "labels": labels(name)},
                role_ref={
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                subjects=subject,
                opts=child,
            )
        k8s.rbac.v1.RoleBinding(
            f"{name}-authn-reader",
            metadata={"name": f"{name}-authn-reader", "namespace": AUTH_READER_NAMESPACE},
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": AUTH_READER_ROLE,
            },
            subjects=subject,
            opts=child,
        )
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=meta(),
            data={SCHEDULER_CONFIG_FILE: to_yaml(config)},
            opts=child,
        )
        # skip_await: create the Deployment without waiting for ready pods (the
        # image arrives later); deploy.yml and the scenario wait for it instead.
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=meta(annotations=SKIP_AWAIT) if skip_await else meta(),
            spec=scheduler_deployment_spec(name, image, name, name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[account, config_map]),
        )
        self.register_outputs(
            {"scheduler_name": self.scheduler_name, "deployment": deployment.metadata["name"]}
        )
