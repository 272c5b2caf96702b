"""The kind driver's ``layer-locality`` scores: the decision the deployed extender sidecar
logged, read from the scheduler pods' ``extender`` container (the API is a stand-in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures import prereq

try:
    import kubernetes  # noqa: F401
except ImportError as err:  # pragma: no cover - make venv installs the infra extra
    prereq.missing(f"the kind driver needs the infra extra's client ({err}): make venv")

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.testbed.cluster.driver import NotYet, PodRun
from layersched.testbed.kind.driver import KindBackend, KindTestbed

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: kind, user: {token: not-used}}]
contexts: [{name: kind, context: {cluster: kind, user: kind}}]
current-context: kind
"""
#: What the extender logs at debug level for one decision (layersched.extender._prioritize).
DECISION = """\
2026-11-23 04:50:01 DEBUG layersched.extender._prioritize: pod scenario/p1-again-0 (layer-locality):
  w1: present 5000 / total 10000 bytes -> 50/100 -> 5/10
  w2: present 0 / total 10000 bytes -> 0/100 -> 0/10
2026-11-23 04:50:01 INFO aiohttp.access: 127.0.0.1 "POST /prioritize HTTP/1.1" 200
"""
NEUTRAL = (
    "2026-11-23 04:50:01 INFO layersched.extender._prioritize: pod scenario/p1-again-0: "
    "neutral scores for 2 nodes (warming)\n"
)


@dataclass
class _Pod:
    name: str
    phase: str
    log: str | ApiException

    def v1(self) -> Any:
        return SimpleNamespace(
            metadata=SimpleNamespace(name=self.name), status=SimpleNamespace(phase=self.phase)
        )


@dataclass
class _CoreV1:
    pods: list[_Pod]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        self.calls.append(("list", {"namespace": namespace, **kwargs}))
        return SimpleNamespace(items=[p.v1() for p in self.pods])

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.calls.append(("log", {"name": name, "namespace": namespace, **kwargs}))
        log = next(p.log for p in self.pods if p.name == name)
        if isinstance(log, ApiException):
            raise log
        return log


def _backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pods: list[_Pod]) -> _CoreV1:
    core = _CoreV1(pods)
    monkeypatch.setattr(client, "CoreV1Api", lambda _api: core)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    backend = KindBackend(
        KindTestbed(kubeconfig, "kind-registry", Path("/usr/bin/docker"), ("img1", "img2"))
    )
    core.backend = backend  # type: ignore[attr-defined]
    return core


def _run(mark: datetime) -> PodRun:
    return PodRun("scenario/p1-again-0", "uid", LAYER_LOCALITY, {}, [], [], mark)


@pytest.mark.parametrize(
    ("pods", "scores"),
    [
        # The leader's sidecar scored the pod; the standby's logged nothing of it.
        ([_Pod("a", "Running", ""), _Pod("b", "Running", DECISION)], {"w1": 5, "w2": 0}),
        # A pod still starting is not asked; one whose sidecar restarts (400) is skipped.
        (
            [
                _Pod("a", "Pending", DECISION),
                _Pod("b", "Running", ApiException(status=400, reason="ContainerCreating")),
                _Pod("c", "Running", DECISION),
            ],
            {"w1": 5, "w2": 0},
        ),
        # A neutral answer: every node got 0, which ones is not logged.
        ([_Pod("a", "Running", NEUTRAL)], {}),
    ],
    ids=["leader", "skips-unready", "neutral"],
)
def test_scores_come_from_the_sidecar_log(
    pods: list[_Pod], scores: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = _backend(tmp_path, monkeypatch, pods)
    mark = datetime.now(UTC) - timedelta(seconds=5)
    assert core.backend.scores(_run(mark)) == scores  # type: ignore[attr-defined]
    [(_, listed)] = [c for c in core.calls if c[0] == "list"]
    assert listed["namespace"] == "layersched"
    assert listed["label_selector"] == (
        "app.kubernetes.io/name=layer-locality,app.kubernetes.io/part-of=layersched"
    )
    logs = [c[1] for c in core.calls if c[0] == "log"]
    assert {log["container"] for log in logs} == {"extender"}
    # From the mark on (5 s ago, plus a second of slack), never the whole log.
    assert all(6 <= log["since_seconds"] <= 8 for log in logs)
    # Every running pod's sidecar may be the leader's; a pod not running is not asked.
    assert {log["name"] for log in logs} == {p.name for p in pods if p.phase == "Running"}


def test_no_decision_yet_is_not_yet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    core = _backend(
        tmp_path,
        monkeypatch,
        [
            _Pod("a", "Running", "2026-11-23 INFO other pod scenario/p2-0 (layer-locality):\n"),
            _Pod("b", "Running", ApiException(status=400, reason="ContainerCreating")),
        ],
    )
    with pytest.raises(
        NotYet, match=r"\(2 pods\) logged a decision .* \(b: 400 ContainerCreating\)"
    ):
        core.backend.scores(_run(datetime.now(UTC)))  # type: ignore[attr-defined]
