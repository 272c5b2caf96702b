"""layersched installed from ``install/kustomize/``: the kind overlay, applied by
``kustomize.Directory``.

The overlay (:func:`layersched_harness.testbed.kind.kind_overlay`) is written under the
stack's state directory on every run (preview included: it is a pure function of the stack config)
and names ``install/kustomize/`` by a relative path, so the objects Pulumi creates are the ones
``kubectl apply -k`` of the same overlay would, and ``pulumi destroy`` removes them.

The layersched image is built and pushed by ``harness/playbooks/deploy.yml`` after ``pulumi up``:
the workloads running it are created without waiting for readiness (``skipAwait``);
deploy.yml waits for their rollout instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from layersched.deploy import (
    ADMISSION_PRIVATE_FILES,
    AGENT_NAME,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    overlay_tls,
    stack_spec_for,
    write_tree,
)
from layersched_harness.testbed.kind import KindTarget, kind_overlay

TYPE = "layersched:kind:Install"
#: pulumi-kubernetes: create the object, do not wait for readiness (deploy.yml does).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
#: The workloads whose pods run the layersched image (extender sidecar, agent).
LAYERSCHED_WORKLOADS = (
    ("Deployment", LAYER_LOCALITY_SCHEDULER),
    ("DaemonSet", AGENT_NAME),
)


def skip_await_for_layersched(obj: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
    """``kustomize.Directory`` transformation: the workloads whose image arrives after
    ``pulumi up`` are created without waiting for them to become ready."""
    meta = obj.get("metadata") or {}
    if (obj.get("kind"), meta.get("name")) in LAYERSCHED_WORKLOADS:
        meta["annotations"] = {**(meta.get("annotations") or {}), **SKIP_AWAIT}
        obj["metadata"] = meta


class LayerschedInstall(pulumi.ComponentResource):
    """``install/kustomize/`` with the kind overlay: the CRD, the ``layer-locality`` scheduler with
    its extender sidecar, the agent, RBAC, PDB and NetworkPolicies, in ``layersched``."""

    overlay_dir: Path
    namespace: str
    scheduler_name: str

    def __init__(
        self,
        name: str,
        *,
        target: KindTarget,
        deploy_dir: Path,
        overlay_dir: Path,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        self.overlay_dir = overlay_dir
        self.namespace = NAMESPACE
        self.scheduler_name = LAYER_LOCALITY_SCHEDULER
        # Relative, as `kubectl apply -k` users write it; kustomize resolves it from the overlay.
        # Before Kubernetes 1.30 the admission webhook's TLS, issued once per overlay dir.
        tls = overlay_tls(overlay_dir, stack_spec_for(target.kubernetes_version))
        files = kind_overlay(target, os.path.relpath(deploy_dir, overlay_dir), tls=tls)
        write_tree(overlay_dir, files, private=ADMISSION_PRIVATE_FILES)
        directory = k8s.kustomize.Directory(
            f"{name}-kustomize",
            directory=str(overlay_dir),
            transformations=[skip_await_for_layersched],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.resources = directory.resources
        self.register_outputs(
            {
                "overlay_dir": str(overlay_dir),
                "kubernetes_version": target.kubernetes_version,
                "scheduler_name": self.scheduler_name,
                "files": sorted(files),
            }
        )
