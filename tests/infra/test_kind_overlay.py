"""The kind overlay of ``install/kustomize/``, rendered by the real ``kubectl kustomize`` (v1.20's).

What it must render: the generator's install for the kind cluster's Kubernetes version
(``stack_objects(stack_spec_for(version))``), object for object, except for the kind
testbed's own patches (images, the extender's registry trust, the agent on CRI-O).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from layersched.deploy import (
    ImageRef,
    overlay_tls,
    stack_objects,
    stack_spec_for,
    uses_policy,
    write_tree,
)
from layersched_harness.testbed.kind import (
    KindTarget,
    kind_overlay,
)
from tests.fixtures import prereq
from tests.infra import _kustomize

pytestmark = pytest.mark.infra

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "install" / "kustomize"
TARGET = KindTarget("kind-registry:5000", ImageRef("kind-registry:5000/layersched", tag="dev"))
#: Objects the kind testbed patches beyond the version (checked on their own below).
KIND_PATCHED = {("Deployment", "layer-locality"), ("DaemonSet", "layersched-agent")}


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    prereq.require(_kustomize.skip_reason())


def _render(tmp_path: Path, target: KindTarget) -> dict[tuple[str, str], dict[str, Any]]:
    overlay = tmp_path / "overlay"
    tls = overlay_tls(overlay, stack_spec_for(target.kubernetes_version))
    write_tree(overlay, kind_overlay(target, os.path.relpath(DEPLOY_DIR, overlay), tls=tls))
    return {(o["kind"], o["metadata"]["name"]): o for o in _kustomize.kustomize(overlay)}


@pytest.mark.parametrize("version", ["v1.36.3", "v1.34.0", "v1.30.0", "v1.24.17", "v1.22.6"])
def test_overlay_renders_the_generators_install_for_the_version(
    version: str, tmp_path: Path
) -> None:
    target = KindTarget(TARGET.registry, TARGET.layersched_image, kubernetes_version=version)
    rendered = _render(tmp_path, target)
    expected = {
        (o["kind"], o["metadata"]["name"]): o
        for group in stack_objects(stack_spec_for(version)).values()
        for o in group
    }
    webhook = not uses_policy(version)
    if webhook:
        # before 1.30 the webhook: the overlay adds its TLS Secret and caBundle, and the
        # layersched image is the kind registry's
        secret = rendered.pop(("Secret", "layersched-admission-tls"))
        assert secret["type"] == "kubernetes.io/tls"
        config = rendered[("ValidatingWebhookConfiguration", "layersched-agent-node")]
        [hook] = config["webhooks"]
        assert hook["clientConfig"].pop("caBundle") == secret["data"]["ca.crt"]
        [admission] = rendered[("Deployment", "layersched-admission")]["spec"]["template"]["spec"][
            "containers"
        ]
        assert admission["image"] == "kind-registry:5000/layersched:dev"
        admission["image"] = "layersched"
    assert rendered.keys() == expected.keys()
    for key, obj in expected.items():
        if key not in KIND_PATCHED:
            assert rendered[key] == obj, key
    # The patched workloads: only images, pull policy, args and the agent's mounts differ.
    for key in KIND_PATCHED:
        spec = {k: v for k, v in rendered[key]["spec"].items() if k != "template"}
        assert spec == {k: v for k, v in expected[key]["spec"].items() if k != "template"}
        assert rendered[key]["metadata"] == expected[key]["metadata"]
    pod = rendered[("Deployment", "layer-locality")]["spec"]["template"]["spec"]
    images = {c["name"]: c["image"] for c in pod["containers"]}
    assert images == {
        "kube-scheduler": f"registry.k8s.io/kube-scheduler:{version}",
        "extender": "kind-registry:5000/layersched:dev",
    }


def test_agent_mounts_crio_not_containerd(tmp_path: Path) -> None:
    agent = _render(tmp_path, TARGET)[("DaemonSet", "layersched-agent")]
    pod = agent["spec"]["template"]["spec"]
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    # the runtime's socket, the two storage directories the agent reads (issue 44: never
    # the whole storage, whose containers' rootfs it must not reach), and the agent's
    # pod-bound token: nothing else
    assert mounts == {
        "/var/run/crio/crio.sock": False,
        "/var/lib/containers/storage/overlay-images": True,
        "/var/lib/containers/storage/overlay-layers": True,
        "/var/run/secrets/kubernetes.io/serviceaccount": True,
    }  # fmt: skip
    paths = sorted(v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v)
    assert paths == [
        "/var/lib/containers/storage/overlay-images",
        "/var/lib/containers/storage/overlay-layers",
        "/var/run/crio/crio.sock",
    ]
    # Still the hardened container install/kustomize/ defines: no capabilities, read-only root.
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
