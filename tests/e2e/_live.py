"""What the e2e modules that place their own pods on the shared local testbed share
(test_coexistence.py, test_pull_secrets.py): the testbed's handles, a holder node warmed
with an image, a pod placed and the scores its scheduler logged for it, and the
extender's answer asked directly."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import tenacity

from layersched.core.errors import KubeError
from layersched.kube import KubeClient, pod_path
from layersched_harness.testbed.cluster import ClusterDriver
from layersched_harness.testbed.cluster.driver import PodRun, scenario_pod
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import TestbedState
from layersched_harness.testbed.local._cluster import LocalBackend

#: What an ordinary test pod asks: a little, so that it fits anywhere but a full node.
SMALL = {"cpu": "10m", "memory": "16Mi"}
#: A pod is bound within seconds on an idle testbed; a loaded machine takes longer.
BIND_TIMEOUT_S = 120.0
#: A pull of a scenario image (about 44 MiB) over a node's 20 Mbit/s link, then its
#: agent's publishing.
PULL_TIMEOUT_S = 600.0
#: Scores are logged when the pod is scored, just before it is bound.
SCORES_TIMEOUT_S = 60.0
HTTP_TIMEOUT_S = 10.0
POLL_S = 0.5

T = TypeVar("T")


@dataclass
class Live:
    """The testbed as a module placing its own pods uses it, in its own namespace."""

    inventory: TestbedState
    driver: ClusterDriver
    backend: LocalBackend
    kube: KubeClient
    namespace: str
    nodes: list[str]
    #: The node a module warms with an image: the last in name order (the plugin's ties,
    #: since 1.35, fall in node order: they would pick another node).
    holder: str

    @property
    def others(self) -> list[str]:
        return [n for n in self.nodes if n != self.holder]


@dataclass(frozen=True)
class Placed:
    """A pod the scheduler placed, and the scores it gave the nodes it scored."""

    name: str
    node: str
    #: The scheduler's own scores (extender 0-10, plugin 0-100; the extender's neutral
    #: answer: {}); None: not scored (one feasible node: bound without scoring).
    scores: dict[str, int] | None


def wait(check: Callable[[], T], timeout_s: float) -> T:
    """``check()`` once it stops raising (AssertionError, TestbedError, KubeError)."""
    retrying = tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(POLL_S),
        retry=tenacity.retry_if_exception_type((AssertionError, TestbedError, KubeError)),
        reraise=True,
    )
    return retrying(check)()


def assert_phase(live: Live, name: str, phase: str) -> None:
    status = live.kube.get(pod_path(live.namespace, name)).get("status") or {}
    assert status.get("phase") == phase, f"pod {name}: {status.get('phase')}"


def bound_node(live: Live, name: str) -> str:
    spec = live.kube.get(pod_path(live.namespace, name)).get("spec") or {}
    assert spec.get("nodeName"), f"pod {name} is not bound yet"
    return str(spec["nodeName"])


def warm(live: Live, image: str, scheduler: str) -> None:
    """The holder pulls ``image`` (a pod pinned there, deleted again: the image stays)
    and its agent publishes it: the extender's inventory lists it on the holder."""
    name = "warm"
    pod = scenario_pod(name, image, scheduler, SMALL, live.namespace, node=live.holder)
    live.driver.create_pod(pod)
    wait(lambda: assert_phase(live, name, "Running"), PULL_TIMEOUT_S)

    def listed() -> None:
        assert live.backend.inventory_holds(live.holder, image), (
            f"the extender's inventory does not list {image} on {live.holder} yet"
        )

    wait(listed, PULL_TIMEOUT_S)
    live.driver.delete_all([name])


def place(live: Live, pod: Mapping[str, Any], strategy: str, *, scored: bool = True) -> Placed:
    """Create ``pod``, wait until it is bound, and read the scores its scheduler gave
    (``strategy``: which scheduler's log)."""
    name = pod["metadata"]["name"]
    mark = live.backend.mark()
    created = live.driver.create_pod(pod)
    node = wait(lambda: bound_node(live, name), BIND_TIMEOUT_S)
    if not scored:
        return Placed(name, node, None)
    run = PodRun(
        key=f"{live.namespace}/{name}",
        uid=created["metadata"]["uid"],
        strategy=strategy,
        document=pod,
        nodes=(),
        candidates=(),
        mark=mark,
    )
    return Placed(name, node, wait(lambda: live.backend.scores(run), SCORES_TIMEOUT_S))


def extender_answer(live: Live, pod: Mapping[str, Any]) -> dict[str, int]:
    """The testbed extender's answer for ``pod`` over every node (constraints unknown to
    it: what the layers alone say, 0-10)."""
    response = httpx.post(
        f"{live.backend.extender_url}/prioritize",
        json={"Pod": pod, "NodeNames": live.nodes},
        timeout=HTTP_TIMEOUT_S,
    )
    response.raise_for_status()
    return {entry["Host"]: entry["Score"] for entry in response.json()}
