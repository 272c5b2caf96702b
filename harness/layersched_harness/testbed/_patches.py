"""Strategic-merge patches of ``install/kustomize/``'s workloads, as the testbeds' overlays write
them."""

from __future__ import annotations

from typing import Any

#: The workloads' API (Deployment, DaemonSet).
APPS_V1 = "apps/v1"


def pod_template_patch(
    kind: str, name: str, namespace: str, pod_spec: dict[str, Any]
) -> dict[str, Any]:
    """A patch of workload ``kind``/``name``'s pod template with ``pod_spec``'s fields."""
    return {
        "apiVersion": APPS_V1,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": pod_spec}},
    }
