"""Pods' pull secrets against real auth-protected registries (issue 45): a real extender
process with ``--pull-secrets``, and ``layersched estimate`` with the user's credentials,
each reading Secrets from a stand-in API server (tests/fixtures/kube_api.py).

The registry is docker-registry behind htpasswd (basic) or behind a real token service
(Bearer); its image ``team/app:1`` only the secret ``team/regcred`` can pull. A pod
naming that secret is scored with the image's layers; the same pod without it, with a
secret holding another password, or in a namespace where the secret may not be read,
scores neutrally: answers are never shared between credentials. Nothing of a credential
shows in the extender's log, its ``/metrics`` or its ``/debug/decisions``.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity

from layersched.cli.main import main
from layersched.images.oci import push_image
from tests.fixtures.extender import HTTP_TIMEOUT_S, running_extender
from tests.fixtures.kube_api import StandInApi, items, ok, stand_in_api, status
from tests.fixtures.registry import RegistryProcess
from tests.integration.test_registry import AMD, pusher

pytestmark = pytest.mark.integration

#: Resolution goes on in the background after a neutral answer; wait this long for it.
RESOLVED_TIMEOUT_S = 30.0
NAMESPACE = "team"
WRONG_PASSWORD = "not-the-password-0123"


@pytest.fixture(params=["auth_registry", "private_token_registry"], ids=["htpasswd", "token"])
def private(request: pytest.FixtureRequest) -> RegistryProcess:
    """An auth-protected registry holding ``team/app:1`` (AMD: two 16 KiB layers)."""
    registry: RegistryProcess = request.getfixturevalue(request.param)
    with pusher(registry) as client:
        push_image(client, f"{registry.host}/team/app:1", AMD)
    return registry


def _secret(registry: RegistryProcess, password: str | None = None) -> dict[str, Any]:
    assert registry.username is not None and registry.password is not None
    auth = f"{registry.username}:{password or registry.password}"
    config = {"auths": {registry.host: {"auth": base64.b64encode(auth.encode()).decode()}}}
    return {
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


@pytest.fixture
def api(tmp_path: Path, private: RegistryProcess) -> Iterator[StandInApi]:
    """team/regcred (the password), team/stolen (another), locked/regcred (403)."""
    with stand_in_api(tmp_path / "api") as stand_in:
        base = f"/api/v1/namespaces/{NAMESPACE}/secrets"
        stand_in.route("GET", f"{base}/regcred", ok(_secret(private)))
        stand_in.route("GET", f"{base}/stolen", ok(_secret(private, WRONG_PASSWORD)))
        stand_in.route(
            "GET",
            "/api/v1/namespaces/locked/secrets/regcred",
            status(403, "Forbidden", 'secrets "regcred" is forbidden: User cannot get'),
        )
        yield stand_in


def _leaks(registry: RegistryProcess, text: str) -> list[str]:
    assert registry.username is not None and registry.password is not None
    basic = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    return [part for part in (registry.password, WRONG_PASSWORD, basic) if part in text]


def _pod(image: str, *secrets: str, namespace: str = NAMESPACE, name: str = "p") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": image}],
            "imagePullSecrets": [{"name": s} for s in secrets],
        },
    }


@tenacity.retry(
    stop=tenacity.stop_after_delay(RESOLVED_TIMEOUT_S), wait=tenacity.wait_fixed(0.3), reraise=True
)
def assert_scores(url: str, pod: dict[str, Any], expected: dict[str, int]) -> None:
    answer = httpx.post(
        f"{url}/prioritize",
        json={"Pod": pod, "NodeNames": list(expected)},
        timeout=HTTP_TIMEOUT_S,
    )
    assert {e["Host"]: e["Score"] for e in answer.json()} == expected


def test_the_extender_scores_a_private_image_with_the_pods_secret_only(
    private: RegistryProcess, api: StandInApi, tmp_path: Path
) -> None:
    image = f"{private.host}/team/app:1"
    first = AMD.layers[0]
    # N1 holds the image's first layer (half its bytes), as a patched kubelet lists it
    nodes = {
        "kind": "NodeList",
        "items": [
            {
                "metadata": {"name": "N1"},
                "status": {"images": [{"names": ["elsewhere/base:1"], "sizeBytes": 1,
                                       "layers": {first.digest: first.size_bytes}}]},
            },
            {"metadata": {"name": "N2"}, "status": {"images": []}},
        ],
    }  # fmt: skip
    nodes_path = tmp_path / "nodes.json"
    nodes_path.write_text(json.dumps(nodes))
    extra = (
        "--nodes", str(nodes_path), "--pull-secrets", "--kubeconfig", str(api.kubeconfig),
        "--insecure-registry", private.host, "--no-spread", "--resolve-timeout-s", "5",
        "--registry-config", str(_empty_config(tmp_path)),
    )  # fmt: skip
    log_path = tmp_path / "extender.log"
    # spread off: N1 holds the first of two gzipped 16 KiB layers, about half the bytes:
    # floor(100 * first / total) // 10 (4 with this image's sizes)
    total = sum(layer.size_bytes for layer in AMD.layers)
    held = {"N1": 100 * first.size_bytes // total // 10, "N2": 0}
    assert held["N1"] > 0
    with running_extender(log_path, *extra, global_args=("-vv",)) as (url, _proc):
        assert_scores(url, _pod(image, "regcred"), held)
        # the extender's own credentials (none): the registry refuses it, neutral
        assert_scores(url, _pod(image), {"N1": 0, "N2": 0})
        # another credential for the same image: its own answer (a 401), never regcred's
        assert_scores(url, _pod(image, "stolen"), {"N1": 0, "N2": 0})
        # a namespace the extender may not read secrets in: scored without it
        assert_scores(url, _pod(image, "regcred", namespace="locked"), {"N1": 0, "N2": 0})
        # regcred's answer is still there, and read once
        assert_scores(url, _pod(image, "regcred", name="q"), held)
        gets = [r.path for r in api.sent("GET")]
        assert gets.count(f"/api/v1/namespaces/{NAMESPACE}/secrets/regcred") == 1
        metrics = httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text
        decisions = httpx.get(f"{url}/debug/decisions", timeout=HTTP_TIMEOUT_S).text
    log = log_path.read_text()
    for text in (log, metrics, decisions):
        assert _leaks(private, text) == []
    assert 'layersched_extender_pull_secret_reads_total{outcome="found"} 2.0' in metrics
    assert 'layersched_extender_pull_secret_reads_total{outcome="forbidden"} 1.0' in metrics
    assert "pull secret locked/regcred: forbidden" in log


def _empty_config(tmp_path: Path) -> Path:
    """A docker config with no credentials (the machine's own never count here)."""
    path = tmp_path / "empty-config.json"
    path.write_text('{"auths": {}}')
    return path


def test_estimate_resolves_a_private_image_with_the_users_view_of_its_secret(
    private: RegistryProcess,
    api: StandInApi,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    image = f"{private.host}/team/app:1"
    pods = [
        _ran(_pod(image, "regcred", name="private"), "n2"),
        _ran(_pod(image, "regcred", namespace="locked", name="locked"), "n2"),
    ]
    api.route("GET", "/api/v1/nodes", items([_node("n1"), _node("n2")]))
    api.route("GET", "/api/v1/pods", items(pods))
    api.route("GET", "/api/v1/events", items([]))
    argv = [
        "estimate", "--kubeconfig", str(api.kubeconfig), "--insecure-registry", private.host,
        "--registry-config", str(_empty_config(tmp_path)), "-o", "json", "--partial",
    ]  # fmt: skip
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    weighed = [pod["pod"] for pod in document["pods"]]
    skipped = {entry["pod"]: entry["reason"] for entry in document["skipped"]}
    # the pod whose secret the user may read is weighed with its image's layers; the other,
    # whose secret is forbidden to the user, is skipped: its layers are unknown
    assert any("private" in name for name in weighed), document
    assert any("locked" in pod and "layers are unknown" in why for pod, why in skipped.items())
    notes = " ".join(document["approximations"])
    assert "1 pull secret(s) forbidden (locked/regcred)" in notes
    assert _leaks(private, out + err) == []


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}, "images": []},
    }


def _ran(pod: dict[str, Any], node: str) -> dict[str, Any]:
    pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
    pod["spec"]["nodeName"] = node
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod["status"] = {"phase": "Running", "startTime": _recently()}
    return pod


def _recently() -> str:
    stamp = datetime.datetime.fromtimestamp(time.time() - 60, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
