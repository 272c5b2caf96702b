"""The kind driver's ``layer-locality`` scores: the decision the deployed extender sidecar
logged, read from the scheduler pods' ``extender`` container (the API is a stand-in)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from layersched.core.errors import KubeError
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.kube import pod_log_path, pods_path
from layersched_harness.testbed.cluster.driver import NotYet, PodRun
from layersched_harness.testbed.kind.driver import KindBackend, KindTestbed
from tests.fixtures.kube_api import HANG_UP, Answer, StandInApi, items, status

#: Where install/kustomize/'s scheduler pods run.
NAMESPACE = "layersched"
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
#: What the API answers for the log of a container that is not running yet.
STARTING = status(
    400,
    "BadRequest",
    'container "extender" in pod "b" is waiting to start: ContainerCreating',
)


@dataclass
class _Pod:
    name: str
    phase: str
    log: str | Answer


def _backend(api: StandInApi, pods: list[_Pod]) -> KindBackend:
    """A kind backend whose API holds ``pods`` in install/kustomize/'s namespace."""
    listed = [{"metadata": {"name": p.name}, "status": {"phase": p.phase}} for p in pods]
    api.route("GET", pods_path(NAMESPACE), items(listed))
    for pod in pods:
        log = pod.log
        answer = log if isinstance(log, Answer) else Answer(200, log.encode(), "text/plain")
        api.route("GET", pod_log_path(NAMESPACE, pod.name), answer)
    return KindBackend(
        KindTestbed(api.kubeconfig, "kind-registry", Path("/usr/bin/docker"), ("img1", "img2"))
    )


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
                _Pod("b", "Running", STARTING),
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
    pods: list[_Pod], scores: dict[str, int], kube_api: StandInApi
) -> None:
    backend = _backend(kube_api, pods)
    mark = datetime.now(UTC) - timedelta(seconds=5)
    assert backend.scores(_run(mark)) == scores
    [listed] = kube_api.sent("GET", pods_path(NAMESPACE))
    assert listed.query["labelSelector"] == (
        "app.kubernetes.io/name=layer-locality,app.kubernetes.io/part-of=layersched"
    )
    logs = [r for r in kube_api.sent("GET") if r.path.endswith("/log")]
    assert {log.query["container"] for log in logs} == {"extender"}
    # From the mark on (5 s ago, plus a second of slack), never the whole log.
    assert all(6 <= int(log.query["sinceSeconds"]) <= 8 for log in logs)
    # Every running pod's sidecar may be the leader's; a pod not running is not asked.
    asked = {log.path.split("/")[-2] for log in logs}
    assert asked == {p.name for p in pods if p.phase == "Running"}


def test_no_decision_yet_is_not_yet(kube_api: StandInApi) -> None:
    backend = _backend(
        kube_api,
        [
            _Pod("a", "Running", "2026-11-23 INFO other pod scenario/p2-0 (layer-locality):\n"),
            _Pod("b", "Running", STARTING),
        ],
    )
    with pytest.raises(
        NotYet,
        match=r"\(2 pods\) logged a decision .* \(b: reading the log of .*/pods/b container "
        r"extender: 400 container \"extender\" in pod \"b\" is waiting to start",
    ):
        backend.scores(_run(datetime.now(UTC)))


def test_a_log_read_without_an_answer_is_an_error_not_a_wait(kube_api: StandInApi) -> None:
    # A refusal (400) means "a sidecar is starting": wait. No answer at all means the
    # API server is broken: fail at once rather than wait out the scores timeout.
    backend = _backend(kube_api, [_Pod("a", "Running", HANG_UP), _Pod("b", "Running", DECISION)])
    with pytest.raises(KubeError, match=r"reading the log of .*/pods/a .* did not answer"):
        backend.scores(_run(datetime.now(UTC)))
