"""``layersched estimate``'s what-if (core.estimate), on clusters written out by hand.

The cluster of most cases is the seed scenario (CONTEXT §1) as the testbed leaves it
after an image-locality trial: Img1 = L1+L2+L3, Img2 = L1+L2+L4; P1 fills n1 and pulled
Img1 there; P2 pulled Img2 on n2 and was deleted; P1-again then started and image-locality
put it on n3, which pulled all of Img1. Layer-aware placement would have put it on n2,
which held L1+L2: L1+L2 were avoidable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import pytest

from layersched.core.estimate import SKIP_NODE_GONE, SKIP_PINNED, estimate
from layersched.core.events import PullEvent
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.placedobjects import PlacedPod
from layersched.core.placementfacts import (
    MAX_MILLI_UNITS,
    NodeFacts,
    PodFacts,
    PullFacts,
    effective_requests,
    milli_units,
    node_admits,
    pod_facts,
    pull_facts,
    ran_image,
    ran_images,
)
from layersched.core.strategies import InFlightArgs

MB = 1024 * 1024
REG = "10.250.50.1:5000/scenario"
IMG1, IMG2 = f"{REG}/img1:v1", f"{REG}/img2:v1"


def _layer(label: str, size: int) -> Layer:
    return Layer("sha256:" + label.encode().hex().ljust(64, "0"), size)


L1, L2, L3, L4 = (
    _layer("L1", 24 * MB),
    _layer("L2", 16 * MB),
    _layer("L3", 4 * MB),
    _layer("L4", 4 * MB),
)
LAYERS = {IMG1: (L1, L2, L3), IMG2: (L1, L2, L4)}
WHOLE_NODE = {"cpu": "2", "memory": "4Gi", "pods": "110"}
T0 = 1_800_000_000.0  # the trial's first second


def _node(
    name: str, *images: str, allocatable: Mapping[str, str] | None = None, **kw: Any
) -> NodeFacts:
    held = tuple(
        NodeImage((f"{image.rsplit(':', 1)[0]}@sha256:{'a' * 64}", image), 0, LAYERS[image])
        for image in images
    )
    info = NodeInfo(
        name,
        images=held,
        labels=kw.pop("labels", {}),
        allocatable=WHOLE_NODE if allocatable is None else allocatable,
    )
    return NodeFacts(info, **kw)


def _pod(
    name: str, node: str, started_s: float, *images: str, whole: bool = True, **kw: Any
) -> PodFacts:
    requests = (
        {"cpu": 2000, "memory": 4 * 1024**3 * 1000, "pods": 1000} if whole else {"pods": 1000}
    )
    return PodFacts(
        key=f"ns/{name}",
        uid=f"uid-{name}",
        node=node,
        scheduler=kw.pop("scheduler", "image-locality"),
        images=images,
        started_s=started_s,
        finished_s=kw.pop("finished_s", None),
        requests=kw.pop("requests", requests),
        image_layers=kw.pop("image_layers", None) or {i: LAYERS[i] for i in images},
        **kw,
    )


def _pull(
    node: str, pod: str, at_s: float, image: str, seconds: float = 20.0, pulled: bool = True
) -> PullFacts:
    return PullFacts(node, f"uid-{pod}", at_s, PullEvent(image, seconds if pulled else 0.0, pulled))


def _seed(p1_again_node: str = "n3") -> tuple[list[NodeFacts], list[PodFacts], list[PullFacts]]:
    """The image-locality trial: P1 on n1 at T0, P2 on n2 (deleted), P1-again at T0+60."""
    holding = {"n1": [IMG1], "n2": [IMG2], "n3": []}
    holding[p1_again_node] = [*holding[p1_again_node], IMG1]
    nodes = [_node(n, *images) for n, images in holding.items()]
    pods = [_pod("p1", "n1", T0, IMG1), _pod("p1-again", p1_again_node, T0 + 60, IMG1)]
    pulls = [
        _pull("n1", "p1", T0 + 20, IMG1),
        _pull("n2", "p2", T0 + 40, IMG2),  # a deleted pod's event: only its node and time
        _pull(p1_again_node, "p1-again", T0 + 80, IMG1, 2.0 if p1_again_node == "n2" else 20.0),
    ]
    return nodes, pods, pulls


def _run(
    nodes: Sequence[NodeFacts], pods: Sequence[PodFacts], pulls: Sequence[PullFacts] = (), **kw: Any
):  # type: ignore[no-untyped-def]
    return estimate(
        nodes, pods, pulls, since_s=T0 - 1, until_s=T0 + 3600, default_bits_per_s=8e6, **kw
    )


def test_image_locality_on_the_empty_node_could_have_saved_l1_l2() -> None:
    result = _run(*_seed("n3"))
    again = next(p for p in result.pods if p.pod == "ns/p1-again")
    # n1 is full (P1's whole-node requests), n2 and n3 fit: n2 held L1+L2 of Img1
    assert (again.feasible_nodes, again.best_node) == (2, "n2")
    assert again.pulled_bytes == L1.size_bytes + L2.size_bytes + L3.size_bytes
    assert again.best_pulled_bytes == L3.size_bytes
    assert again.avoidable_bytes == L1.size_bytes + L2.size_bytes
    # 20 s observed for 44 MiB; on n2 4 MiB at the rate observed over the cluster (44 MiB
    # in 20 s on n1 and n3 alike: 2.2 MiB/s) takes 1.82 s
    assert again.pull_s_source == "observed"
    assert again.avoidable_s == pytest.approx(20.0 - 4 / 2.2)
    totals = result.totals
    assert (totals.pods, totals.pods_affected) == (2, 1)
    assert totals.avoidable_bytes == again.avoidable_bytes
    assert totals.affected_share == 0.5
    assert result.rates["n2"].source == "cluster"


def test_the_best_node_is_the_one_layer_locality_as_installed_picks() -> None:
    # issue 45: the estimate predicts the installed scheduler, whose spread is on. Layer X
    # (10 MiB) is on a alone, Y (8 MiB) on b, c and d; the pod needs both and ran on e.
    # By bytes a is best (8 missing), but with spread a scores floor(100 * 10 * 1/5 / 18)
    # = 11 and b, c, d floor(100 * 8 * 3/5 / 18) = 26: b (the first of the three) is the
    # pick, missing X; avoidable: the 18 MiB pulled on e less X's 10 = Y's 8
    x, y = _layer("X", 10 * MB), _layer("Y", 8 * MB)

    def node(name: str, *layers: Layer) -> NodeFacts:
        held = (NodeImage((f"{REG}/{name}:1",), 0, layers),) if layers else ()
        return NodeFacts(NodeInfo(name, images=held, allocatable=WHOLE_NODE))

    nodes = [node("a", x), node("b", y), node("c", y), node("d", y), node("e")]
    pod = _pod("p", "e", T0, f"{REG}/app:1", whole=False,
               image_layers={f"{REG}/app:1": (x, y)})  # fmt: skip
    (weighed,) = _run(nodes, [pod]).pods
    assert (weighed.best_node, weighed.best_pulled_bytes) == ("b", x.size_bytes)
    assert weighed.avoidable_bytes == y.size_bytes


def test_layer_locality_on_p2s_node_saved_it_already() -> None:
    result = _run(*_seed("n2"))
    again = next(p for p in result.pods if p.pod == "ns/p1-again")
    # it pulled L3 only, on the best node: nothing avoidable
    assert (again.pulled_bytes, again.best_node, again.avoidable_bytes) == (L3.size_bytes, "n2", 0)
    assert result.totals.pods_affected == 0


def test_an_image_already_present_pulled_nothing() -> None:
    nodes = [_node("n1", IMG1), _node("n2")]
    pods = [_pod("web", "n1", T0, IMG1, whole=False)]
    pulls = [_pull("n1", "web", T0 + 1, IMG1, pulled=False)]
    (web,) = _run(nodes, pods, pulls).pods
    assert (web.pulled_bytes, web.avoidable_bytes, web.best_node) == (0, 0, "n1")


def test_a_running_pod_keeps_its_image_whatever_a_later_repull_says() -> None:
    # imagePullPolicy: Always: both replicas "pulled" Img1 on n1, the second while the
    # first ran: the first's image was held, so the second moved nothing (the history
    # alone, last pull at T0+41, would say n1 held nothing before then)
    nodes = [_node("n1", IMG1), _node("n2")]
    pods = [
        _pod("a", "n1", T0, IMG1, whole=False),
        _pod("b", "n1", T0 + 40, IMG1, whole=False),
    ]
    pulls = [_pull("n1", "a", T0 + 20, IMG1), _pull("n1", "b", T0 + 41, IMG1, 0.5)]
    result = _run(nodes, pods, pulls)
    by_pod = {p.pod: p for p in result.pods}
    assert by_pod["ns/a"].pulled_bytes == L1.size_bytes + L2.size_bytes + L3.size_bytes
    assert by_pod["ns/b"].pulled_bytes == 0


def test_a_pull_far_quicker_than_its_bytes_moved_nothing() -> None:
    # imagePullPolicy: Always after the pod that pulled Img1 on n1 was deleted: the new
    # one "pulled" in 0.1 s what took 20 s before (44 MiB at 2.2 MiB/s, the rate seen on
    # the other pulls): a manifest check; Img1 was there, nothing was avoidable
    nodes = [_node("n1", IMG1), _node("n2", IMG2), _node("n3")]
    pods = [_pod("p2", "n2", T0, IMG2, whole=False), _pod("new", "n1", T0 + 100, IMG1, whole=False)]
    pulls = [
        _pull("n2", "p2", T0 + 20, IMG2),
        _pull("n1", "old", T0 + 60, IMG1),  # the deleted pod's real pull
        _pull("n1", "new", T0 + 101, IMG1, 0.1),
    ]
    result = _run(nodes, pods, pulls)
    new = next(p for p in result.pods if p.pod == "ns/new")
    assert (new.pulled_bytes, new.best_node, new.avoidable_bytes) == (0, "n1", 0)
    assert any("counted as moving nothing" in note for note in result.approximations)
    # the same pull taking 20 s moved the image: then n2's L1+L2 were avoidable
    slow = [*pulls[:2], _pull("n1", "new", T0 + 120, IMG1)]
    new = next(p for p in _run(nodes, pods, slow).pods if p.pod == "ns/new")
    assert (new.best_node, new.avoidable_bytes) == ("n2", L1.size_bytes + L2.size_bytes)


def test_pods_without_requests_fit_anywhere_and_nodes_without_images_hold_nothing() -> None:
    nodes = [_node("bare"), _node("n2", IMG2)]
    pods = [_pod("job", "bare", T0, IMG1, whole=False, requests={})]
    (job,) = _run(nodes, pods).pods
    assert (job.feasible_nodes, job.best_node) == (2, "n2")
    assert job.pulled_bytes == L1.size_bytes + L2.size_bytes + L3.size_bytes
    assert job.avoidable_bytes == L1.size_bytes + L2.size_bytes
    # no pull observed anywhere: bytes over the default 8 Mbit/s = 1 MB/s
    assert job.pull_s_source == "estimated"
    assert job.pull_s == pytest.approx(job.pulled_bytes / 1e6)


def test_a_node_reporting_no_allocatable_is_not_limited() -> None:
    nodes = [_node("n1", allocatable={}), _node("n2", IMG2, allocatable={})]
    pods = [_pod("p1", "n2", T0, IMG2), _pod("p2", "n1", T0 + 10, IMG1)]
    p2 = next(p for p in _run(nodes, pods).pods if p.pod == "ns/p2")
    assert (p2.feasible_nodes, p2.best_node) == (2, "n2")


def test_a_finished_pod_frees_its_node() -> None:
    nodes, pods, pulls = _seed("n3")
    pods[0] = dataclasses.replace(pods[0], finished_s=T0 + 30)  # P1 ended before P1-again
    again = next(p for p in _run(nodes, pods, pulls).pods if p.pod == "ns/p1-again")
    # n1 held all of Img1 and was free again: the best node
    assert (again.feasible_nodes, again.best_node, again.best_pulled_bytes) == (3, "n1", 0)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"pinned": "DaemonSet"}, SKIP_PINNED),
        (
            {"image_layers": None, "unresolved": "manifest unknown"},
            "its layers are unknown: manifest unknown",
        ),
        ({"node": "gone"}, SKIP_NODE_GONE),
    ],
    ids=["daemonset", "unresolved", "node-gone"],
)
def test_pods_not_weighed_are_listed_with_the_reason(change: dict[str, Any], reason: str) -> None:
    nodes, pods, pulls = _seed("n3")
    pods[1] = dataclasses.replace(pods[1], **change)
    result = _run(nodes, pods, pulls)
    assert [p.pod for p in result.pods] == ["ns/p1"]
    assert result.skipped == [("ns/p1-again", reason)]


def test_namespaces_limit_what_is_weighed_not_what_takes_resources() -> None:
    nodes, pods, pulls = _seed("n3")
    pods[0] = dataclasses.replace(pods[0], key="other/p1")
    result = _run(nodes, pods, pulls, namespaces={"ns"})
    (again,) = result.pods
    assert again.feasible_nodes == 2  # other/p1 still fills n1


def test_rates_come_from_label_then_cluster_then_default() -> None:
    labelled = {"layersched.io/bandwidth-bits-per-s": "16000000"}
    nodes = [_node("n1", IMG1), _node("n2", labels=labelled), _node("n3")]
    pods = [_pod("p1", "n1", T0, IMG1)]
    rates = _run(nodes, pods, [_pull("n1", "p1", T0 + 20, IMG1)]).rates
    assert rates["n1"].source == "observed"
    assert rates["n1"].bytes_per_s == pytest.approx(44 * MB / 20)
    assert (rates["n2"].source, rates["n2"].bytes_per_s) == ("label", 2e6)
    assert rates["n3"].source == "cluster"
    assert _run(nodes, pods).rates["n3"].source == "default"


# ------------------------------------------------------------------ feasibility


def _facts(**spec: Any) -> PodFacts:
    document = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": IMG1}], **spec},
        "status": {"startTime": "2026-11-24T01:00:00Z"},
    }
    facts = pod_facts(msgspec.convert(document, PlacedPod))
    assert facts is not None
    return facts


GPU = {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize(
    ("spec", "node", "admits"),
    [
        # nodeSelector: every pair must match
        ({"nodeSelector": {"zone": "a"}}, {"labels": {"zone": "a"}}, True),
        ({"nodeSelector": {"zone": "a"}}, {"labels": {"zone": "b"}}, False),
        # a NoSchedule taint keeps an intolerant pod off; PreferNoSchedule does not
        ({}, {"taints": (("dedicated", "gpu", "NoSchedule"),)}, False),
        ({}, {"taints": (("dedicated", "gpu", "PreferNoSchedule"),)}, True),
        (
            {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]},
            {"taints": (("dedicated", "gpu", "NoSchedule"),)},
            True,
        ),
        # operator Exists with no key tolerates everything
        ({"tolerations": [{"operator": "Exists"}]}, {"taints": (("x", "", "NoExecute"),)}, True),
        # a cordoned node, unless the pod tolerates node.kubernetes.io/unschedulable
        ({}, {"unschedulable": True}, False),
        (
            {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
            {"unschedulable": True},
            True,
        ),
        # required node affinity: terms ORed, expressions ANDed, fields on the name
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["b"]}
                                    ]
                                },
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            {"labels": {"zone": "a"}},
            True,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "cores", "operator": "Gt", "values": ["8"]},
                                        {"key": "spot", "operator": "DoesNotExist"},
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            {"labels": {"cores": "16", "spot": "true"}},
            False,
        ),
        # an empty term matches nothing (upstream), an unknown operator neither
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {},
                                {"matchExpressions": [{"key": "a", "operator": "Near"}]},
                            ]
                        }
                    }
                }
            },
            {"labels": {"a": "1"}},
            False,
        ),
    ],
    ids=[
        "selector-match",
        "selector-miss",
        "taint",
        "prefer-no-schedule",
        "tolerated",
        "exists-all",
        "cordoned",
        "cordon-tolerated",
        "affinity-or",
        "affinity-and",
        "affinity-empty",
    ],
)
def test_node_admits(spec: dict[str, Any], node: dict[str, Any], admits: bool) -> None:
    labels = node.pop("labels", {})
    facts = NodeFacts(NodeInfo("n1", labels=labels), **node)
    assert node_admits(_facts(**spec), facts) is admits


@pytest.mark.parametrize(
    ("containers", "init", "overhead", "expected"),
    [
        # containers add up; the largest init container wins when it is larger
        ([{"cpu": "500m"}, {"cpu": "1"}], [{"cpu": "2"}], None, {"cpu": 2000, "pods": 1000}),
        ([{"cpu": "500m"}, {"cpu": "1"}], [{"cpu": "1"}], None, {"cpu": 1500, "pods": 1000}),
        # the pod overhead adds to the whole
        ([{"memory": "1Gi"}], [], {"memory": "64Mi"}, {"memory": 1088 * MB * 1000, "pods": 1000}),
        # no requests at all: one pod slot
        ([{}], [], None, {"pods": 1000}),
        # hostile quantities: capped, not a giant int; past Decimal's range, malformed
        ([{"cpu": "1e30"}], [], None, {"cpu": MAX_MILLI_UNITS, "pods": 1000}),
        ([{"cpu": "1e999999999"}], [], None, {"pods": 1000}),
        # an extended resource counts as any other
        ([GPU], [], None, {"nvidia.com/gpu": 1000, "pods": 1000}),
    ],
    ids=["init-larger", "containers-larger", "overhead", "none", "huge", "overflow", "extended"],
)
def test_effective_requests(
    containers: list[dict[str, str]],
    init: list[dict[str, str]],
    overhead: dict[str, str] | None,
    expected: dict[str, int],
) -> None:
    assert effective_requests(containers, init, overhead) == expected


def test_a_malformed_quantity_counts_zero_and_is_named() -> None:
    problems: list[str] = []
    requests = effective_requests([{"cpu": "lots"}], where="pod ns/p", problems=problems)
    assert requests == {"pods": 1000}
    assert problems == [
        "pod ns/p: containers[0] cpu: 'lots' is not a Kubernetes quantity (e.g. '500m', '2', '4Gi')"
    ]
    assert milli_units("0.5", "x") == 500 and milli_units("-1", "x") == 0


def test_a_gpu_pod_fits_only_nodes_with_gpus() -> None:
    gpu_node = {**WHOLE_NODE, "nvidia.com/gpu": "1"}
    nodes = [_node("cpu-only", IMG1), _node("gpu", allocatable=gpu_node)]
    requests = effective_requests([GPU])
    (pod,) = _run(nodes, [_pod("train", "gpu", T0, IMG1, requests=requests)]).pods
    # cpu-only holds all of Img1 but has no GPU: no better node was feasible
    assert (pod.feasible_nodes, pod.best_node, pod.avoidable_bytes) == (1, "gpu", 0)


def test_a_resource_no_node_offers_fits_only_where_it_ran() -> None:
    # a pod asking for a resource named by no node's allocatable (a hostile pod could name
    # thousands): the resource list stays the nodes' own, and the pod fits only its node
    nodes = [_node("n1", IMG1), _node("n2")]
    requests = {"pods": 1000, "example.com/unobtainium": 1000, "example.com/none": 0}
    (pod,) = _run(nodes, [_pod("odd", "n2", T0, IMG1, requests=requests)]).pods
    assert (pod.feasible_nodes, pod.best_node) == (1, "n2")


# ------------------------------------------------------------------ reading objects


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ({"metadata": {"name": "p"}}, "no spec"),
        ({"spec": {"containers": [{"name": "c", "image": IMG1}]}, "status": {}}, "not bound"),
        (
            {
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": IMG1}]},
                "status": {},
            },
            "not started",
        ),
        (
            {
                "spec": {"nodeName": "n1", "containers": []},
                "status": {"startTime": "2026-11-24T01:00:00Z"},
            },
            "no containers",
        ),
    ],
    ids=["no-spec", "unbound", "unstarted", "no-containers"],
)
def test_pods_that_placed_nothing_are_none(document: dict[str, Any], why: str) -> None:
    assert pod_facts(msgspec.convert(document, PlacedPod), []) is None, why


def test_pod_facts_read_owner_phase_and_what_ran() -> None:
    document = {
        "metadata": {
            "name": "agent-x",
            "namespace": "kube-system",
            "uid": "u1",
            "ownerReferences": [{"kind": "DaemonSet", "name": "agent"}],
        },
        "spec": {
            "nodeName": "n1",
            "schedulerName": "default-scheduler",
            "containers": [{"name": "c", "image": "nginx:1.25"}],
        },
        "status": {
            "phase": "Succeeded",
            "startTime": "2026-11-24T01:00:00Z",
            "containerStatuses": [
                {
                    "name": "c",
                    "imageID": "docker-pullable://nginx@sha256:" + "b" * 64,
                    "state": {"terminated": {"finishedAt": "2026-11-24T01:05:00Z"}},
                }
            ],
        },
    }
    pod = msgspec.convert(document, PlacedPod)
    facts = pod_facts(pod)
    assert facts is not None
    assert facts.pinned == "DaemonSet" and facts.finished_s == facts.started_s + 300
    assert ran_images(pod) == {"nginx:1.25": "nginx@sha256:" + "b" * 64}
    assert ran_image("sha256:" + "c" * 64) is None  # an image id names no repository


def test_pull_facts_take_the_pods_node_when_the_event_names_none() -> None:
    event = {
        "reason": "Pulled",
        "involvedObject": {"uid": "u1"},
        "message": f'Successfully pulled image "{IMG1}" in 2s',
        "lastTimestamp": "2026-11-24T01:00:00Z",
    }
    facts = pull_facts(event, {"u1": "n2"})
    assert facts is not None and (facts.node, facts.at_s) == ("n2", 1795482000.0)
    assert pull_facts(event, {}) is None  # no node known
    assert pull_facts({**event, "message": 42}, {"u1": "n2"}) is None
    assert pull_facts({**event, "reason": "Pulling"}, {"u1": "n2"}) is None


def test_a_large_cluster_is_weighed() -> None:
    # 1,000 nodes, the odd ones holding Img2; 3,000 small pods of Img1 over an hour on the
    # even ones, none ending: the first pod on each even node pulls Img1 and keeps it in
    # use, the later ones there pull nothing
    nodes = [_node(f"n{i}", *([IMG2] if i % 2 else [])) for i in range(1_000)]
    pods = [_pod(f"p{k}", f"n{2 * (k % 500)}", T0 + k, IMG1, whole=False) for k in range(3_000)]
    result = _run(nodes, pods)
    assert result.totals.pods == 3_000
    pulled = {p.pod: p for p in result.pods if p.pulled_bytes}
    assert len(pulled) == 500
    # the very first could have found L1+L2 on an odd node; every later first-on-its-node
    # pod could have gone where Img1 was in use already, pulling nothing
    img1 = L1.size_bytes + L2.size_bytes + L3.size_bytes
    assert pulled["ns/p0"].avoidable_bytes == L1.size_bytes + L2.size_bytes
    assert all(p.avoidable_bytes == img1 for name, p in pulled.items() if name != "ns/p0")
    assert result.totals.avoidable_bytes == L1.size_bytes + L2.size_bytes + 499 * img1


# --------------------------------------------------------------------------- in flight
def test_waits_in_flight_where_it_ran_and_on_each_scorings_pick() -> None:
    # Three nodes pulling 10 MiB/s (n1, n2 observed, n3 its label); Img1 is 44 MiB: 4.4 s.
    # p1 starts on n1 at T0 and pulls Img1 until T0+4.4. p2 (Img1 too) starts on n2 at
    # T0+1, where nothing was in flight: it waits 4.4 s. Layer-locality's pick is n2 too
    # (no node held a byte of Img1: a tie, where it ran). In-flight's pick is n1: p1's
    # pull of Img1 is a second along, 3.4 s to go, and p2 pulls nothing more there
    # (cost 1 + 3.4 against 1 + 4.4 + 0.25 x 4.4 = 6.5 on n2 and n3).
    label = {"layersched.io/bandwidth-bits-per-s": str(44 * MB * 8 / 4.4)}
    nodes = [_node("n1", IMG1), _node("n2", IMG1), _node("n3", labels=label)]
    pods = [
        _pod("p1", "n1", T0, IMG1, whole=False),
        _pod("p2", "n2", T0 + 1, IMG1, whole=False),
    ]
    pulls = [
        _pull("n1", "p1", T0 + 4.4, IMG1, 4.4),
        _pull("n2", "p2", T0 + 5.4, IMG1, 4.4),
    ]
    result = _run(nodes, pods, pulls)
    by_pod = {p.pod: p for p in result.pods}
    p1, p2 = by_pod["ns/p1"], by_pod["ns/p2"]
    assert (p1.in_flight_node, p1.wait_s, p1.in_flight_wait_s) == (
        "n1",
        pytest.approx(4.4),
        pytest.approx(4.4),
    )
    assert p2.wait_s == pytest.approx(4.4)
    assert p2.layer_locality_wait_s == pytest.approx(4.4)
    assert (p2.in_flight_node, p2.in_flight_wait_s) == ("n1", pytest.approx(3.4))
    totals = result.totals
    assert totals.wait_s == pytest.approx(8.8)
    assert totals.in_flight_wait_s == pytest.approx(7.8)
    assert totals.pods_in_flight_moved == 1
    assert any("in-flight rule" in note for note in result.approximations)
    # the same with parallel pulls: p1's pull is the only one in flight, the same waits
    parallel = _run(nodes, pods, pulls, in_flight=InFlightArgs(pull_mode="parallel"))
    assert parallel.totals.in_flight_wait_s == pytest.approx(7.8)


def test_a_pull_that_ended_is_no_longer_in_flight() -> None:
    # p2 starts after p1's pull ended (T0+10 > T0+4.4): n1 holds Img1 by then, and
    # layer-locality and in-flight both pick n1 with nothing to wait for
    label = {"layersched.io/bandwidth-bits-per-s": str(44 * MB * 8 / 4.4)}
    nodes = [_node("n1", IMG1), _node("n2", IMG1), _node("n3", labels=label)]
    pods = [_pod("p1", "n1", T0, IMG1, whole=False), _pod("p2", "n2", T0 + 10, IMG1, whole=False)]
    pulls = [_pull("n1", "p1", T0 + 4.4, IMG1, 4.4), _pull("n2", "p2", T0 + 14.4, IMG1, 4.4)]
    p2 = next(p for p in _run(nodes, pods, pulls).pods if p.pod == "ns/p2")
    assert p2.best_node == "n1" and p2.layer_locality_wait_s == pytest.approx(0.0)
    assert (p2.in_flight_node, p2.in_flight_wait_s) == ("n1", pytest.approx(0.0))
