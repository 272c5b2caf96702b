"""Layer scores never override kube-scheduler's hard rules, on the local testbed's real
cluster (issue 45, mission row 19): through the extender and through the plugin.

One worker, the *holder* (the last in name order, so that the plugin's ties, which fall in
node order since 1.35, would pick another node), holds every layer of the scenario's Img1;
the others hold none of them. A pod of Img1 with no constraint, the **control**, lands on
the holder, its layer score strictly above every other node's: the pull each case must
resist, measured by the same scheduler a moment before. Then, with

* **a taint** (``NoSchedule``) on the holder, a pod without a toleration lands elsewhere
  (the control carries the toleration);
* **a required node affinity** (``kubernetes.io/hostname NotIn [holder]``), the pod lands
  elsewhere;
* **the holder full** (a pod bound there requests all its free CPU and memory), a pod that
  requests a little lands elsewhere (the control ran before the holder was filled);
* **a topology spread constraint** (``maxSkew: 1`` over hostnames, ``DoNotSchedule``), the
  first of three pods lands on the holder, the next two on the other nodes, one each.

For every constrained pod the scheduler's own scores (the extender's logged answer, the
plugin's ``-v=10`` lines) leave the holder out, as kube-scheduler filters before it
scores, and the extender asked directly about every node still ranks the holder first:
the layers pulled the other way, and lost.

Pods other than the holder's warm-up pull nothing (``imagePullPolicy: Never``): placement
does not read the pull policy, and no other node gains a layer of Img1 between cases.
Needs root on Linux, else it skips with the reason; it shares the e2e's testbed
(``testbed_up(..., shared=True)``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from layersched.core.quantity import parse_quantity
from layersched.kube import ALL_PODS_PATH, KubeClient, load_kubeconfig, node_path
from layersched_harness.testbed.cluster import ClusterDriver
from layersched_harness.testbed.cluster.driver import scenario_pod
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import require_root
from layersched_harness.testbed.local._cluster import LocalBackend
from layersched_harness.testbed.scenario import ScenarioImages
from layersched_harness.testbed.scenario_images import build_and_push_scenario
from layersched_harness.testbed.scheduler_configs import (
    LAYER_LOCALITY_PLUGIN_SCHEDULER as LAYER_LOCALITY_PLUGIN,
)
from tests.e2e._checks import LAYER_LOCALITY
from tests.e2e._live import (
    BIND_TIMEOUT_S,
    SMALL,
    Live,
    Placed,
    assert_phase,
    extender_answer,
    place,
    wait,
    warm,
)
from tests.fixtures import prereq
from tests.fixtures.testbed import testbed_settings, testbed_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAMESPACE = "layersched-coexistence"
#: The two layer-aware schedulers of the testbed: default plugins + extender, + plugin.
SCHEDULERS = (LAYER_LOCALITY, LAYER_LOCALITY_PLUGIN)
CASES = ("taint", "node-affinity", "full-node", "topology-spread")
TAINT = {"key": "layersched.io/coexistence", "value": "e2e", "effect": "NoSchedule"}
HOSTNAME_LABEL = "kubernetes.io/hostname"
SPREAD_LABEL = "layersched.io/coexistence"


@dataclass
class Bed(Live):
    """The testbed as this module uses it: the scenario's images, and every case's
    outcome (written next to the scenario's report at the end)."""

    images: ScenarioImages | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def img1(self) -> str:
        assert self.images is not None
        return self.images.img1


@pytest.fixture(scope="module")
def bed(scenario_report_dir: Path) -> Iterator[Bed]:
    """The shared testbed, the holder warmed with Img1 and nobody else holding a layer
    of it; the results file written on the way out."""
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    with testbed_up(testbed_settings(), refresh=False, shared=True) as inventory:
        missing = [s for s in SCHEDULERS if s not in inventory.cluster.schedulers]
        if missing:
            pytest.fail(f"the testbed runs no {', '.join(missing)} scheduler: bring it up again")
        # a tag of its own: no node has ever listed this name
        tag = time.strftime("coexist-%Y%m%d%H%M%S", time.gmtime())
        images = build_and_push_scenario(inventory.registry.host, tags=[tag])
        images = ScenarioImages(
            images.img1.rsplit(":", 1)[0] + f":{tag}",
            images.img2.rsplit(":", 1)[0] + f":{tag}",
            images.layers,
        )
        backend = LocalBackend(inventory)
        kube = KubeClient(load_kubeconfig(inventory.cluster.kubeconfig))
        driver = ClusterDriver(
            inventory.cluster.kubeconfig,
            backend,
            (images.img1, images.img2),
            namespace=NAMESPACE,
            layer_digests=[digest for digest, _size in images.layers.values()],
        )
        nodes = sorted(driver.worker_names())
        bed = Bed(inventory, driver, backend, kube, NAMESPACE, nodes, nodes[-1], images)
        try:
            assert len(bed.others) >= 2, f"coexistence needs 3 nodes or more: {nodes}"
            driver.reset()  # no node holds a layer of the scenario's images
            warm(bed, bed.img1, driver.scheduler_name(LAYER_LOCALITY))
            yield bed
        finally:
            record = {"holder": bed.holder, "images": bed.img1, "cases": bed.results}
            (scenario_report_dir / "coexistence.json").write_text(
                json.dumps(record, indent=2) + "\n"
            )
            print(json.dumps(record, indent=2))  # shown by pytest -s and on failure
            try:
                driver.reset()  # the other modules find no layer of Img1 anywhere
            finally:
                backend.close()
                kube.close()


# ------------------------------------------------------------------------ one pod
def _pod(bed: Bed, name: str, strategy: str, **spec: Any) -> dict[str, Any]:
    pod = scenario_pod(
        name,
        bed.img1,
        bed.driver.scheduler_name(strategy),
        SMALL,
        NAMESPACE,
        pull_policy="Never",
    )
    labels = spec.pop("labels", {})
    pod["metadata"]["labels"].update(labels)
    pod["spec"].update(spec)
    return pod


def _assert_pulled_to_holder(bed: Bed, control: Placed) -> None:
    """The control landed on the holder, its layer score above every other node's."""
    assert control.node == bed.holder, f"control {control}"
    assert control.scores is not None and bed.holder in control.scores, f"control {control}"
    others = [s for n, s in control.scores.items() if n != bed.holder]
    assert others and control.scores[bed.holder] > max(others), f"control {control}"


def _assert_held_off(bed: Bed, pod: Mapping[str, Any], placed: Placed) -> dict[str, int]:
    """``placed`` is off the holder, the holder was filtered before scoring, and the
    extender asked directly still ranks the holder first: its layers' pull, lost."""
    assert placed.node != bed.holder, f"{placed}"
    if placed.scores is not None:
        assert bed.holder not in placed.scores, f"the holder was scored: {placed}"
    ranks = extender_answer(bed, pod)
    assert ranks[bed.holder] > max(ranks[n] for n in bed.others), f"layers say {ranks}"
    return ranks


@contextlib.contextmanager
def _cleanup(bed: Bed, names: list[str]) -> Iterator[None]:
    try:
        yield
    finally:
        bed.driver.delete_all(names)


# ------------------------------------------------------------------------ the cases
def _taint_case(bed: Bed, strategy: str, tag: str) -> dict[str, Any]:
    node = bed.kube.get(node_path(bed.holder))
    before = list((node.get("spec") or {}).get("taints") or [])
    names = [f"control-{tag}", f"pod-{tag}"]
    with _cleanup(bed, names):
        bed.kube.patch(node_path(bed.holder), {"spec": {"taints": [*before, TAINT]}})
        try:
            toleration = {**TAINT, "operator": "Equal"}
            control = place(bed, _pod(bed, names[0], strategy, tolerations=[toleration]), strategy)
            _assert_pulled_to_holder(bed, control)
            pod = _pod(bed, names[1], strategy)
            placed = place(bed, pod, strategy)
            ranks = _assert_held_off(bed, pod, placed)
        finally:
            bed.kube.patch(node_path(bed.holder), {"spec": {"taints": before or None}})
    return _result(strategy, "taint", control, placed, ranks)


def _affinity_case(bed: Bed, strategy: str, tag: str) -> dict[str, Any]:
    names = [f"control-{tag}", f"pod-{tag}"]
    term = {
        "matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": [bed.holder]}]
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    with _cleanup(bed, names):
        control = place(bed, _pod(bed, names[0], strategy), strategy)
        _assert_pulled_to_holder(bed, control)
        bed.driver.delete_all(names[:1])
        pod = _pod(bed, names[1], strategy, affinity=affinity)
        placed = place(bed, pod, strategy)
        ranks = _assert_held_off(bed, pod, placed)
    return _result(strategy, "node-affinity", control, placed, ranks)


def _free_on(bed: Bed, node_name: str) -> dict[str, str]:
    """The holder's allocatable CPU and memory less every request bound there."""
    node = bed.kube.get(node_path(node_name))
    free = {}
    for resource in ("cpu", "memory"):
        have = parse_quantity(str(node["status"]["allocatable"][resource]), resource)
        used = Decimal(0)
        for pod in bed.kube.list(ALL_PODS_PATH)[0]:
            if (pod.get("spec") or {}).get("nodeName") != node_name:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for container in pod["spec"].get("containers") or []:
                request = ((container.get("resources") or {}).get("requests") or {}).get(resource)
                if request is not None:
                    used += parse_quantity(str(request), resource)
        free[resource] = have - used
    return {"cpu": f"{int(free['cpu'] * 1000)}m", "memory": str(int(free["memory"]))}


def _full_node_case(bed: Bed, strategy: str, tag: str) -> dict[str, Any]:
    names = [f"control-{tag}", f"filler-{tag}", f"pod-{tag}"]
    with _cleanup(bed, names):
        control = place(bed, _pod(bed, names[0], strategy), strategy)
        _assert_pulled_to_holder(bed, control)
        bed.driver.delete_all(names[:1])
        # the filler is bound by name (no scheduler): all the holder has left
        filler = _pod(bed, names[1], strategy, nodeName=bed.holder)
        requests = _free_on(bed, bed.holder)
        filler["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": requests}
        bed.driver.create_pod(filler)
        wait(lambda: assert_phase(bed, names[1], "Running"), BIND_TIMEOUT_S)
        pod = _pod(bed, names[2], strategy)
        placed = place(bed, pod, strategy)
        ranks = _assert_held_off(bed, pod, placed)
    result = _result(strategy, "full-node", control, placed, ranks)
    result["filler_requests"] = requests
    return result


def _spread_case(bed: Bed, strategy: str, tag: str) -> dict[str, Any]:
    names = [f"spread-{tag}-{i}" for i in range(len(bed.nodes))]
    labels = {SPREAD_LABEL: f"spread-{tag}"}
    constraint = {
        "maxSkew": 1,
        "topologyKey": HOSTNAME_LABEL,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
    }
    placed: list[Placed] = []
    ranks: dict[str, int] = {}
    with _cleanup(bed, names):
        for i, name in enumerate(names):
            pod = _pod(bed, name, strategy, labels=labels, topologySpreadConstraints=[constraint])
            # the last pod has one feasible node left: kube-scheduler binds it unscored
            placed.append(place(bed, pod, strategy, scored=i < len(names) - 1))
            if i == 0:
                _assert_pulled_to_holder(bed, placed[0])  # the first is free to follow layers
            elif i == 1:
                ranks = _assert_held_off(bed, pod, placed[1])
    where = [p.node for p in placed]
    assert sorted(where) == bed.nodes, f"one pod per node expected: {where}"
    result = _result(strategy, "topology-spread", placed[0], placed[1], ranks)
    result["placements"] = where
    return result


def _result(
    strategy: str, case: str, control: Placed, placed: Placed, ranks: Mapping[str, int]
) -> dict[str, Any]:
    return {
        "scheduler": strategy,
        "case": case,
        "control": {"node": control.node, "scores": control.scores},
        "constrained": {"node": placed.node, "scores": placed.scores},
        "extender_over_every_node": dict(ranks),
    }


CASE_RUNNERS = {
    "taint": _taint_case,
    "node-affinity": _affinity_case,
    "full-node": _full_node_case,
    "topology-spread": _spread_case,
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("strategy", SCHEDULERS)
def test_layers_never_override_a_hard_rule(bed: Bed, strategy: str, case: str) -> None:
    tag = f"{case}-{'plugin' if strategy == LAYER_LOCALITY_PLUGIN else 'extender'}"
    bed.results.append(CASE_RUNNERS[case](bed, strategy, tag))
