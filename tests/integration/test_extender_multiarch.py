"""A mixed-architecture cluster: each node is scored in its own platform's layer space.

Two multi-platform OCI indexes are built by the test and pushed to a REAL
docker-registry, then a real extender process resolves them:

* ``base:1``: amd64 = [A1], arm64 = [R1]
* ``app:1``:  amd64 = [A2, A3] (not built on base), arm64 = [R1, R2] (built on base)

A node holding ``base:1`` therefore shares the pod's arm64 layers only. Scored in
amd64 space for every node (the old behaviour) an arm64 node holding ``base:1``
would hold A1, which ``app:1``'s amd64 manifest does not use: 0.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity

from layersched.core.manifest import Platform
from layersched.images.oci import (
    BuiltIndex,
    build_image,
    build_index,
    layer_bytes,
    push_image,
)
from layersched.registry import RegistryClient
from tests.fixtures.extender import running_extender
from tests.fixtures.registry import RegistryProcess

pytestmark = pytest.mark.integration

HTTP_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
#: Sizes chosen so the scores differ: R1 is the bigger part of app:1 on arm64.
BASE_BYTES = 64 * 1024
APP_BYTES = 32 * 1024
ARM64 = Platform.parse("linux/arm64")

A1, A2, A3 = (
    layer_bytes(seed, size) for seed, size in ((11, BASE_BYTES), (12, APP_BYTES), (13, APP_BYTES))
)
R1, R2 = (layer_bytes(seed, size) for seed, size in ((21, BASE_BYTES), (22, APP_BYTES)))
BASE_AMD, BASE_ARM = build_image([A1]), build_image([R1], platform=ARM64)
APP_AMD, APP_ARM = build_image([A2, A3]), build_image([R1, R2], platform=ARM64)
BASE: BuiltIndex = build_index([BASE_AMD, BASE_ARM])
APP: BuiltIndex = build_index([APP_AMD, APP_ARM])


def _arm_score() -> int:
    """An arm64 node holding base:1 holds R1 of app:1's arm64 R1+R2 (compressed sizes)."""
    r1, r2 = APP_ARM.layers
    return (100 * r1.size_bytes // (r1.size_bytes + r2.size_bytes)) // 10


@pytest.fixture
def pushed(registry: RegistryProcess) -> Iterator[str]:
    """The registry's host, with base:1 and app:1 (both indexes) pushed."""
    with RegistryClient(auth_files=()) as client:
        assert push_image(client, f"{registry.host}/base:1", BASE) == BASE.digest
        assert push_image(client, f"{registry.host}/app:1", APP) == APP.digest
    yield registry.host


def _nodes(host: str) -> dict[str, Any]:
    def node(name: str, images: list[str], **extra: Any) -> dict[str, Any]:
        status: dict[str, Any] = {
            "images": [{"names": [f"{host}/{i}"], "sizeBytes": BASE_BYTES} for i in images]
        }
        status |= extra.get("status", {})
        return {"metadata": {"name": name} | extra.get("metadata", {}), "status": status}

    arm_labels = {"labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}}
    amd_labels = {"labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}
    arm_info = {"nodeInfo": {"operatingSystem": "linux", "architecture": "arm64"}}
    return {
        "kind": "NodeList",
        "items": [
            node("amd", ["base:1"], metadata=amd_labels),
            node("arm", ["base:1"], metadata=arm_labels),
            # no labels: the platform comes from status.nodeInfo
            node("arm-info", ["base:1"], status=arm_info),
            # holds the whole app in its own platform
            node("arm-app", ["app:1"], metadata=arm_labels),
            node("amd-app", ["app:1"], metadata=amd_labels),
            node("arm-empty", [], metadata=arm_labels),
        ],
    }


def _pod(host: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": f"{host}/app:1"}]},
    }


def _expected() -> dict[str, int]:
    # amd: holds A1, app:1 on amd64 is A2+A3: 0. arm and arm-info: R1 of R1+R2 (about
    # 66/100 -> 6; computed from the compressed sizes). arm-app, amd-app: the whole app
    # in their own platform: 10. arm-empty: 0.
    arm = _arm_score()
    return {"amd": 0, "arm": arm, "arm-info": arm, "arm-app": 10, "amd-app": 10, "arm-empty": 0}


@pytest.mark.parametrize("mode", ["Nodes", "NodeNames"], ids=["full-nodes", "node-names"])
def test_nodes_are_scored_in_their_own_platform(pushed: str, tmp_path: Path, mode: str) -> None:
    assert _arm_score() > 0  # the case is meaningful: amd64 space would say 0
    nodes = _nodes(pushed)
    nodes_path = tmp_path / "nodes.json"
    nodes_path.write_text(json.dumps(nodes))
    names = [item["metadata"]["name"] for item in nodes["items"]]
    body: dict[str, Any] = {"Pod": _pod(pushed)}
    body |= {"Nodes": nodes} if mode == "Nodes" else {"NodeNames": names}
    # unscaled scores (floor(100 * present / total)): spread off, said here (issue 45)
    extra = ("--nodes", str(nodes_path), "--resolve-timeout-s", "5", "--no-spread")
    with running_extender(tmp_path / "extender.log", *extra, global_args=("-v",)) as (url, proc):
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
            answer = _settled(client, body, _expected())
        assert answer == _expected()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0


def _settled(
    client: httpx.Client, body: dict[str, Any], expected: dict[str, int]
) -> dict[str, int]:
    """The scores once node images are warmed (full Nodes resolves them in the background:
    the first answers count them as unknown)."""

    @tenacity.retry(
        stop=tenacity.stop_after_delay(HTTP_TIMEOUT_S), wait=tenacity.wait_fixed(0.1), reraise=True
    )
    def scores() -> dict[str, int]:
        response = client.post("/prioritize", json=body)
        assert response.status_code == 200, response.text
        got = {e["Host"]: e["Score"] for e in response.json()}
        assert got == expected
        return got

    return scores()
