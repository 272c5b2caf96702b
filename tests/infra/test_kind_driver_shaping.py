"""The kind driver's pod shaping and ImageLocality scores, on recorded objects."""

from __future__ import annotations

from typing import Any

import pytest

from layersched_harness.testbed.errors import TestbedError as BedError  # not a test class
from layersched_harness.testbed.kind.driver import (
    image_locality_scores,
    pod_name,
    scenario_pod,
    whole_node_requests,
)

pytestmark = pytest.mark.infra

MIB = 1024 * 1024
IMG1 = "kind-registry:5000/scenario/img1:v1"


def _node(
    name: str, cpu: str, memory: str, images: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory}, "images": images or []},
    }


def _pod(name: str, node: str, cpu: str, memory: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        # Empty workers: the whole allocatable, 4 CPUs = 4000m and 8 GiB.
        ([], {"cpu": "4000m", "memory": str(8 * 1024**3)}),
        # kindnet on w1 (100m, 50Mi) and the extender on w2 (50m, 64Mi): the least free
        # of each resource, 3900m and 8 GiB - 64 MiB, so the pod fits either node alone.
        (
            [_pod("kindnet", "w1", "100m", "50Mi"), _pod("extender", "w2", "50m", "64Mi")],
            {"cpu": "3900m", "memory": str(8 * 1024**3 - 64 * MIB)},
        ),
        # A finished pod holds nothing.
        (
            [_pod("job", "w1", "2", "4Gi", phase="Succeeded")],
            {"cpu": "4000m", "memory": str(8 * 1024**3)},
        ),
    ],
    ids=["empty", "daemonsets", "finished-pod"],
)
def test_whole_node_requests(pods: list[dict[str, Any]], expected: dict[str, str]) -> None:
    nodes = [_node("w1", "4", "8Gi"), _node("w2", "4", "8388608Ki")]
    assert whole_node_requests(nodes, pods) == expected


def test_whole_node_requests_full_node() -> None:
    with pytest.raises(BedError, match="no free"):
        whole_node_requests([_node("w1", "1", "1Gi")], [_pod("hog", "w1", "1", "1Gi")])


def test_scenario_pod_shape() -> None:
    pod = scenario_pod(
        pod_name("P1-again"), IMG1, "layer-locality", {"cpu": "1", "memory": "1Gi"}, "ns"
    )
    assert pod["metadata"]["name"] == "p1-again"
    assert pod["spec"]["schedulerName"] == "layer-locality"
    [container] = pod["spec"]["containers"]
    # Requests equal limits; every pull really goes to the registry.
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["imagePullPolicy"] == "Always"


def test_image_locality_scores_tie_at_t3() -> None:
    """The seed's step 4 under upstream ImageLocality: N2 holds Img2 (not Img1), N3 holds
    nothing; neither holds Img1 *by name*, so both score 0: the tie the scenario asserts.
    N1 holds Img1 (45 MiB) but is full, so it is no candidate."""
    img2 = "kind-registry:5000/scenario/img2:v1"
    nodes = [
        _node("cp", "4", "8Gi"),
        _node("n1", "4", "8Gi", [{"names": [IMG1], "sizeBytes": 45 * MIB}]),
        _node("n2", "4", "8Gi", [{"names": [img2], "sizeBytes": 45 * MIB}]),
        _node("n3", "4", "8Gi"),
    ]
    pod = scenario_pod("p1-again", IMG1, "default-scheduler", {"cpu": "1"}, "ns")
    assert image_locality_scores(pod, nodes, nodes[2:]) == {"n2": 0, "n3": 0}


def test_image_locality_scores_for_holder() -> None:
    """Img1 (1000 MiB) on n1 and n2 of 4 nodes: the spread factor gives 1000 * 2/4 = 500 MiB;
    100 * (500 - 23) / (1000 - 23) = 48, on the framework's 0..100 scale as the plugin
    scores (the report says which scale each strategy's scores are on)."""
    held = [{"names": [IMG1], "sizeBytes": 1000 * MIB}]
    nodes = [
        _node("cp", "4", "8Gi"),
        _node("n1", "4", "8Gi", held),
        _node("n2", "4", "8Gi", held),
        _node("n3", "4", "8Gi"),
    ]
    pod = scenario_pod("p1", IMG1, "default-scheduler", {"cpu": "1"}, "ns")
    assert image_locality_scores(pod, nodes, nodes[1:]) == {"n1": 48, "n2": 48, "n3": 0}
