"""The extender's in-flight scoring: which pods are pulls in flight, its pod watch, and
what it answers (docs/in-flight.md).

The API is the in-process fake of tests/fixtures/fake_kube.py, which evaluates the pod
watch's field selector as the API server does (a pod that leaves Pending comes as
DELETED). Every node has an 80 Mbit/s link (10 MB/s) and its agent's empty inventory;
the image ``reg/x:1`` is 80 MB (two layers of 40 MB): 8 s on an idle node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
import tenacity

from layersched.core.boundpod import bound_at_s, decode_bound_pod, pending_images
from layersched.core.errors import KubeError
from layersched.core.inflight import PendingPulls
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.reference import ImageName
from layersched.core.strategies import get_strategy
from layersched.core.strategies.in_flight import InFlight
from layersched.extender import StaticLayerIndexProvider, make_extender
from layersched.extender.watch._pending import PendingPods, PodParser
from layersched.kube import ALL_PODS_PATH, NODE_LAYERS_PATH, NODES_PATH
from tests.fixtures.fake_kube import (
    FakeApi,
    RunningLoop,
    digest,
    event,
    layers,
    pod,
    prioritize,
    started,
)

CONVERGE_TIMEOUT_S = 5.0
POLL_S = 0.02
MB = 1_000_000
IMAGE = "reg/x:1"
L1, L2 = Layer(digest(1), 40 * MB), Layer(digest(2), 40 * MB)
OTHER = Layer(digest(3), 80 * MB)
SOURCE = {IMAGE: (L1, L2), "reg/y:1": (OTHER,)}
BOUND_AT = "2027-01-15T08:00:00Z"
BOUND_S = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {"layersched.io/bandwidth-bits-per-s": "80000000"},
        },
        "status": {},
    }


# ----------------------------------------------------------- which pods are in flight


def _container(name: str, image_id: str = "", **state: object) -> dict[str, Any]:
    return {"name": name, "imageID": image_id, "state": state}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # bound, Pending, nothing reported yet: every image, init containers first, and
        # the image volume
        ({}, ("reg/init:1", "reg/a:1", "reg/b:1", "reg/vol:1")),
        # not bound: no node pulls it
        ({"nodeName": ""}, ()),
        # Running: its images are in
        ({"phase": "Running"}, ()),
        # the init container ran (terminated): the other two still come, not the volume
        (
            {"init": [_container("init", "sha256:i", terminated={"finishedAt": "x"})]},
            ("reg/a:1", "reg/b:1"),
        ),
        # a container created (its image ID known): the other still comes
        (
            {"main": [_container("a", "sha256:a", waiting={"reason": "CreateContainerError"})]},
            ("reg/init:1", "reg/b:1"),
        ),
        # waiting for its first start (ContainerCreating): still pulling
        (
            {"main": [_container("a", waiting={"reason": "ContainerCreating"})]},
            ("reg/init:1", "reg/a:1", "reg/b:1", "reg/vol:1"),
        ),
        # a failed pull: the kubelet backs off, nothing of it is arriving
        ({"main": [_container("b", waiting={"reason": "ImagePullBackOff"})]}, ()),
        ({"init": [_container("init", waiting={"reason": "ErrImagePull"})]}, ()),
    ],
    ids=[
        "nothing-started",
        "not-bound",
        "running",
        "init-done",
        "one-created",
        "container-creating",
        "image-pull-backoff",
        "err-image-pull",
    ],
)
def test_the_images_a_bound_pod_still_waits_for(
    overrides: dict[str, Any], expected: tuple[str, ...]
) -> None:
    document = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "nodeName": overrides.get("nodeName", "n1"),
            "initContainers": [{"name": "init", "image": "reg/init:1"}],
            "containers": [
                {"name": "a", "image": "reg/a:1"},
                {"name": "b", "image": "reg/b:1"},
                {"name": "again", "image": "reg/a:1"},  # a repeat counts once
            ],
            "volumes": [{"name": "v", "image": {"reference": "reg/vol:1"}}, {"name": "e"}],
        },
        "status": {
            "phase": overrides.get("phase", "Pending"),
            "initContainerStatuses": overrides.get("init", []),
            "containerStatuses": overrides.get("main", []),
        },
    }
    assert pending_images(decode_bound_pod(document, "pod")) == expected


def test_when_a_pod_was_bound() -> None:
    bound = decode_bound_pod(pod("p", "n1", IMAGE, bound_at=BOUND_AT), "pod")
    assert bound_at_s(bound) == BOUND_S
    assert bound_at_s(decode_bound_pod(pod("p", "n1", IMAGE), "pod")) is None


def test_a_malformed_pod_is_ignored_not_raised() -> None:
    parser = PodParser()
    got = parser.parse("pods", {"metadata": {"name": "p"}, "spec": {"containers": 7}}, 10)
    assert getattr(got, "reason", None) == "malformed"
    key, listed = parser.parse_raw("pods", msgspec.Raw(b"[1]"))
    assert (key, getattr(listed, "reason", None)) == ("", "malformed")


# ------------------------------------------------------------------- the live extender


@pytest.fixture
def loop() -> Iterator[RunningLoop]:
    running = RunningLoop()
    yield running
    running.close()


def _extender(loop: RunningLoop, api: FakeApi, now_s: float) -> Any:
    api.items[NODES_PATH] = [_node("n1"), _node("n2"), _node("n3")]
    api.items[NODE_LAYERS_PATH] = [layers("n1"), layers("n2"), layers("n3")]
    provider = started(api, loop.loop)
    strategy = get_strategy("in-flight")
    assert isinstance(strategy, InFlight)
    strategy.clock = lambda: now_s
    return make_extender(strategy, StaticLayerSource(SOURCE), provider)


def _prioritize(loop: RunningLoop, extender: Any, image: str = IMAGE) -> dict[str, int]:
    return prioritize(loop, extender, image, ["n1", "n2", "n3"])


@tenacity.retry(
    stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
    wait=tenacity.wait_fixed(POLL_S),
    reraise=True,
)
def _assert_scores(loop: RunningLoop, extender: Any, expected: dict[str, int]) -> None:
    assert _prioritize(loop, extender) == expected


def test_a_replica_goes_where_its_image_is_arriving(loop: RunningLoop) -> None:
    # p1 (reg/x:1) was bound to n1 4 s ago: 40 of its 80 MB are in. A new replica:
    # n1: 4 s + 1 = 5 s -> 100 -> 10; n2, n3: 8 + 1 + 0.25 x 8 = 11 s -> 45 -> 4
    api = FakeApi()
    api.items[ALL_PODS_PATH] = [pod("p1", "n1", IMAGE, bound_at=BOUND_AT)]
    extender = _extender(loop, api, BOUND_S + 4.0)
    _assert_scores(loop, extender, {"n1": 10, "n2": 4, "n3": 4})
    # p1's containers start: the selector lets it go (DELETED); nothing is in flight,
    # every node costs 11 s
    started_pod = pod("p1", "n1", IMAGE, bound_at=BOUND_AT, phase="Running")
    api.put(ALL_PODS_PATH, event("MODIFIED", started_pod))
    _assert_scores(loop, extender, {"n1": 10, "n2": 10, "n3": 10})


def test_a_burst_follows_the_first_replica_and_a_busy_node_repels(loop: RunningLoop) -> None:
    # p1 bound to n1 just now (its bind seen by the watch, no condition: first seen):
    # n1 9 s -> 100; n3 pulls 80 MB of reg/y first: 8 + 8 + 1 + 2 = 19 s -> 47 -> 4;
    # n2 idle: 11 s -> 81 -> 8
    api = FakeApi()
    extender = _extender(loop, api, BOUND_S)
    _assert_scores(loop, extender, {"n1": 10, "n2": 10, "n3": 10})
    api.put(ALL_PODS_PATH, event("ADDED", pod("p1", "n1", IMAGE, bound_at=BOUND_AT)))
    api.put(ALL_PODS_PATH, event("ADDED", pod("q1", "n3", "reg/y:1", bound_at=BOUND_AT)))
    _assert_scores(loop, extender, {"n1": 10, "n2": 8, "n3": 4})
    assert extender.metrics.registry.get_sample_value("layersched_extender_pending_pods") == 2
    # q1 is deleted before it starts: n3 is idle again
    api.put(ALL_PODS_PATH, event("DELETED", pod("q1", "n3", "reg/y:1", bound_at=BOUND_AT)))
    _assert_scores(loop, extender, {"n1": 10, "n2": 8, "n3": 8})


def test_a_node_whose_agent_publishes_the_image_holds_it(loop: RunningLoop) -> None:
    # n2 pulls 80 MB of reg/y (19 s for a new replica of reg/x); its agent then
    # publishes reg/x as held (a pull done elsewhere): n2 holds the pod's bytes,
    # and its backlog is summed again at once: reg/y's 80 MB wait ahead (8 s) + 1 = 9 s
    api = FakeApi()
    api.items[ALL_PODS_PATH] = [pod("q1", "n2", "reg/y:1", bound_at=BOUND_AT)]
    extender = _extender(loop, api, BOUND_S)
    _assert_scores(loop, extender, {"n1": 10, "n2": 5, "n3": 10})
    from layersched.core.nodeimages import NodeImage

    held = NodeImage.held((IMAGE,), digest(100), (L1, L2))
    api.put(NODE_LAYERS_PATH, event("MODIFIED", layers("n2", held)))
    # n2: 9 s; n1, n3: 11 s -> floor(900 / 11) = 81 -> 8
    _assert_scores(loop, extender, {"n1": 8, "n2": 10, "n3": 8})


def test_without_the_right_to_list_pods_it_scores_and_says_so(loop: RunningLoop) -> None:
    # a cluster that forbids listing pods: the extender is ready and scores without
    # pulls in flight; /readyz says why the pods are not listed
    api = FakeApi()
    api.forbidden[ALL_PODS_PATH] = KubeError("listing /api/v1/pods: 403 forbidden", 403)
    extender = _extender(loop, api, BOUND_S)
    assert _prioritize(loop, extender) == {"n1": 10, "n2": 10, "n3": 10}

    @tenacity.retry(
        stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def assert_said() -> None:
        ok, why = extender.provider.ready()
        assert ok and "[-]pods: not listed yet" in why and "403 forbidden" in why

    assert_said()


def test_without_a_watch_it_degrades_to_no_pulls_in_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        extender = make_extender(
            get_strategy("in-flight"),
            StaticLayerSource(SOURCE),
            StaticLayerIndexProvider(None, StaticLayerSource(SOURCE)),
        )
    assert extender.pending_pods is None
    assert any("--strategy in-flight without --watch" in r.getMessage() for r in caplog.records)
    extender.close()


# ------------------------------------------------------------------- PendingPods alone


def test_pods_whose_layers_are_unknown_are_retried_and_bounded() -> None:
    known: dict[str, tuple[Layer, ...]] = {}
    changed: list[str] = []

    def layers_of(node: str, images: Any) -> tuple[tuple[Layer, ...], bool]:
        found = [known[i] for i in images if i in known]
        return tuple(x for layers in found for x in layers), len(found) == len(images)

    pods = PendingPods(PendingPulls(max_pods=1), layers_of, changed.append, clock=lambda: 7.0)
    parser = PodParser()
    parsed = parser.parse("pods", pod("p", "n1", IMAGE), 100)
    pods.apply("pods", "default/p", parsed)
    # not known yet: held without layers, retried
    assert pods.incomplete == 1 and pods.pending.pulls("n1")[0].layers == ()
    assert pods.pending.pulls("n1")[0].bound_at_s == 7.0  # first seen
    known[ImageName(IMAGE)] = (L1, L2)
    pods.retry()
    assert pods.incomplete == 0 and pods.pending.pulls("n1")[0].layers == (L1, L2)
    # over the bound: refused and counted, nothing held for it
    pods.apply("pods", "default/q", parser.parse("pods", pod("q", "n2", IMAGE), 100))
    assert len(pods) == 1 and pods.pending.refused == 1
    # a full list without p: p is dropped, its node summed again
    pods.replace_all("pods", {})
    assert len(pods) == 0 and len(pods.pending) == 0 and changed[-1] == "n1"


# ------------------------------------------------------------------- who may list pods


def _pod_rules(objects: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(role, verbs) of every rule on pods, and who is bound to each role."""
    found = []
    for obj in objects:
        for rule in obj.get("rules", ()):
            if "pods" in rule["resources"] and obj["metadata"]["name"].endswith(":pods"):
                found.append((obj["metadata"]["name"], rule["verbs"]))
    return found


def test_only_an_extender_scoring_in_flight_may_list_pods() -> None:
    from layersched.deploy import StackSpec
    from layersched.deploy._stack import stack_objects

    in_flight = stack_objects(StackSpec(strategy="in-flight"))["rbac.yaml"]
    assert _pod_rules(in_flight) == [("layersched:layer-locality:pods", ["list", "watch"])]
    binding = next(
        o
        for o in in_flight
        if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"].endswith(":pods")
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "layer-locality-extender", "namespace": "layersched"}
    ]
    for spec in (StackSpec(strategy="layer-locality"), StackSpec(strategy="pull-time")):
        assert _pod_rules(stack_objects(spec)["rbac.yaml"]) == []
    # the plugin reads kube-scheduler's own cache: no right of its own to list pods
    plugin = StackSpec(strategy="in-flight", scheduler="plugin").for_version("1.37.2")
    assert _pod_rules(stack_objects(plugin)["rbac.yaml"]) == []


def test_the_chart_grants_pods_only_with_in_flight() -> None:
    from layersched.deploy._chart_templates import templates

    rbac = templates()["templates/rbac.yaml"]
    guard = '{{- if and (eq $scheduler "extender") (eq .Values.strategy "in-flight") }}'
    assert rbac.count(guard) == 2  # the ClusterRole and its binding
    assert rbac.count("layersched:layer-locality:pods") == 3


def test_inventory_manifests_grant_pods_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from layersched.cli.main import main

    def roles(*flags: str) -> list[tuple[str, list[str]]]:
        assert main(["inventory", "manifests", "--no-crd", *flags]) == 0
        return _pod_rules(list(yaml.safe_load_all(capsys.readouterr().out)))

    assert roles() == []
    assert roles("--in-flight") == [("layersched:extender:pods", ["list", "watch"])]
