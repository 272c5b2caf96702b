"""The extender's HTTP handling, in process (aiohttp's test server on loopback).

The cluster is the seed scenario (CONTEXT §1): Img1 = L1+L2+L3, Img2 = L1+L2+L4,
N1 holds Img1, N2 holds Img2 (so L1+L2), N3 holds nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import threading
import time
from array import array
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
import tenacity
from aiohttp.test_utils import TestClient, TestServer

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.objects import Container, ObjectMeta, Pod, PodSpec, pod_images
from layersched.core.strategies import get_strategy
from layersched.extender import (
    DeadlineResolver,
    Extender,
    StaticLayerIndexProvider,
    _request_indexes,
    create_app,
    make_extender,
)
from layersched.extender._decisions import Decisions
from layersched.extender._wire import ExtenderArgs, HostPriority
from tests.fixtures.strategies import without_spread

MB = 1024 * 1024
#: How long a background resolution may take to warm the cache in these tests.
WARM_TIMEOUT_S = 5.0
#: A deadline small enough that the tests stay fast, large enough for a loaded box.
SHORT_DEADLINE_S = 0.05


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


L1, L2, L3, L4 = (
    Layer(_digest("l1"), 30 * MB),
    Layer(_digest("l2"), 20 * MB),
    Layer(_digest("l3"), 40 * MB),
    Layer(_digest("l4"), 10 * MB),
)
SOURCE = StaticLayerSource({"img1:1": (L1, L2, L3), "img2:1": (L1, L2, L4)})


def _node(name: str, *images: str, **extra: Any) -> dict[str, Any]:
    sizes = {"img1:1": 90 * MB, "img2:1": 60 * MB}
    status = {"images": [{"names": [i], "sizeBytes": sizes.get(i, MB)} for i in images]}
    node: dict[str, Any] = {"metadata": {"name": name}, "status": status}
    node["metadata"].update(extra.get("metadata", {}))
    for image, layers in zip(node["status"]["images"], extra.get("layers", []), strict=False):
        image["layers"] = layers
    return node


NODES = [_node("N1", "img1:1"), _node("N2", "img2:1"), _node("N3")]


def _pod(*images: str, init: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"name": "p1", "namespace": "default"},
        "spec": {
            "initContainers": [{"name": f"i{k}", "image": i} for k, i in enumerate(init)],
            "containers": [{"name": f"c{k}", "image": i} for k, i in enumerate(images)],
        },
    }


def _nodes_file(tmp_path: Any, nodes: list[dict[str, Any]]) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": nodes}))
    return str(path)


def _extender(
    tmp_path: Any, strategy: str = "layer-locality", source: Any = SOURCE, **kw: Any
) -> Extender:
    # the held inventory is loaded from the offline source: only pods meet ``source``
    provider = StaticLayerIndexProvider(_nodes_file(tmp_path, NODES), SOURCE)
    provider.load()
    # unscaled scores, worked out in each case's comment: spread off, said here
    return make_extender(without_spread(strategy), source, provider, **kw)


Call = Callable[[str, str, Any], Awaitable[tuple[int, Any]]]


def _serve(
    extender: Extender, scenario: Callable[[Call], Awaitable[None]], **app_options: Any
) -> None:
    """Run ``scenario(call)`` against an in-process server for ``extender``."""

    async def main() -> None:
        async with TestClient(TestServer(create_app(extender, **app_options))) as client:

            async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
                data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
                response = await client.request(method, path, data=data)
                text = await response.text()
                is_json = response.content_type == "application/json"
                return response.status, json.loads(text) if is_json else text

            await scenario(call)

    asyncio.run(main())


def _request(
    tmp_path: Any, extender: Extender, method: str, path: str, body: Any
) -> tuple[int, Any]:
    results: list[tuple[int, Any]] = []

    async def scenario(call: Call) -> None:
        results.append(await call(method, path, body))

    _serve(extender, scenario)
    return results[0]


# ------------------------------------------------------------------ prioritize
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            # NodeNames: pod Img1 weighs 90M. N1 holds it all: 100 -> 10.
            # N2 holds L1+L2 = 50M: floor(100 * 50 / 90) = 55 -> 55 // 10 = 5. N3: 0.
            {"Pod": _pod("img1:1"), "NodeNames": ["N1", "N2", "N3"]},
            {"N1": 10, "N2": 5, "N3": 0},
        ),
        (
            # the same cluster sent as full Nodes gives the same answer
            {"Pod": _pod("img1:1"), "Nodes": {"items": NODES}},
            {"N1": 10, "N2": 5, "N3": 0},
        ),
        (
            # request order is kept; an unknown name scores 0 (and is logged once)
            {"Pod": _pod("img2:1"), "NodeNames": ["ghost", "N3", "N2", "N1"]},
            # Img2 = 60M: N2 100 -> 10; N1 holds L1+L2 = 50M: floor(100*50/60) = 83 -> 8
            {"ghost": 0, "N3": 0, "N2": 10, "N1": 8},
        ),
        (
            # init containers count, de-duplicated: Img1 ∪ Img2 = L1..L4 = 100M.
            # N1: 90M -> 90 -> 9; N2: 60M -> 60 -> 6
            {"Pod": _pod("img2:1", init=("img1:1",)), "NodeNames": ["N1", "N2", "N3"]},
            {"N1": 9, "N2": 6, "N3": 0},
        ),
        (
            # full Nodes with (b) a layers map and (c) annotations, no source needed for them:
            # A publishes L3 only for an unknown image: 40/90 = 44 -> 4;
            # B annotates L1+L2: 50/90 = 55 -> 5
            {
                "Pod": _pod("img1:1"),
                "Nodes": {
                    "items": [
                        _node("A", "private:1", layers=[{L3.digest: L3.size_bytes}]),
                        _node(
                            "B",
                            metadata={
                                "annotations": {
                                    f"imageLayer.{L1.digest}": str(L1.size_bytes),
                                    f"imageLayer.{L2.digest}": str(L2.size_bytes),
                                }
                            },
                        ),
                    ]
                },
            },
            {"A": 4, "B": 5},
        ),
        (
            # no nodes at all: an empty answer
            {"Pod": _pod("img1:1"), "NodeNames": []},
            {},
        ),
    ],
    ids=["node-names", "full-nodes", "order-and-unknown", "init-containers", "layers-b-c", "empty"],
)
def test_prioritize(tmp_path: Any, body: dict[str, Any], expected: dict[str, int]) -> None:
    status, answer = _request(tmp_path, _extender(tmp_path), "POST", "/prioritize", body)
    assert status == 200
    assert [entry["Host"] for entry in answer] == list(expected)
    assert {entry["Host"]: entry["Score"] for entry in answer} == expected


def test_image_locality_strategy(tmp_path: Any) -> None:
    # image-locality needs no layers: N1 holds img1:1 (90M) and is the only one of 3 nodes:
    # 90M * 1/3 = 30M -> 100 * (30M - 23M) / (1000M - 23M) = 0 (tiny images barely count)
    extender = _extender(tmp_path, "image-locality")
    status, answer = _request(
        tmp_path, extender, "POST", "/prioritize", {"Pod": _pod("img1:1"), "NodeNames": ["N1"]}
    )
    assert (status, answer) == (200, [{"Host": "N1", "Score": 0}])


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        # not JSON at all
        (b"{not json", "malformed ExtenderArgs"),
        # the top level must be an object
        ([1, 2], "malformed ExtenderArgs"),
        # Pod missing
        ({"NodeNames": ["N1"]}, "Pod is missing"),
        # Pod of the wrong type
        ({"Pod": 3, "NodeNames": ["N1"]}, "$.Pod"),
        # Nodes.items not a list
        ({"Pod": _pod("img1:1"), "Nodes": {"items": 5}}, "$.Nodes.items"),
        # NodeNames not a list of strings
        ({"Pod": _pod("img1:1"), "NodeNames": [1]}, "$.NodeNames"),
        # neither Nodes nor NodeNames
        ({"Pod": _pod("img1:1")}, "neither Nodes nor NodeNames"),
        # a container without an image
        ({"Pod": {"spec": {"containers": [{"name": "c"}]}}, "NodeNames": []}, "image is missing"),
        # a pod without containers
        ({"Pod": {"spec": {}}, "NodeNames": []}, "spec.containers is empty"),
        # the same node twice in Nodes
        ({"Pod": _pod("img1:1"), "Nodes": {"items": [NODES[0], NODES[0]]}}, "appears twice"),
        # a node without a name
        ({"Pod": _pod("img1:1"), "Nodes": {"items": [{"status": {}}]}}, "metadata.name"),
    ],
    ids=[
        "not-json",
        "not-object",
        "pod-missing",
        "pod-wrong-type",
        "items-not-list",
        "names-not-strings",
        "no-nodes",
        "no-image",
        "no-containers",
        "duplicate-node",
        "nameless-node",
    ],
)
def test_bad_requests_get_4xx_and_the_server_keeps_serving(
    tmp_path: Any, body: Any, fragment: str
) -> None:
    extender = _extender(tmp_path)

    async def scenario(call: Call) -> None:
        status, answer = await call("POST", "/prioritize", body)
        assert status == 400
        assert fragment in answer["Error"]
        status, answer = await call(
            "POST", "/prioritize", {"Pod": _pod("img1:1"), "NodeNames": ["N1"]}
        )
        assert (status, answer) == (200, [{"Host": "N1", "Score": 10}])

    _serve(extender, scenario)
    assert 'code="400"' in _metrics_text(extender)


def _metrics_text(extender: Extender) -> str:
    from prometheus_client import generate_latest

    return generate_latest(extender.metrics.registry).decode()


def test_unknown_pod_image_is_neutral(tmp_path: Any) -> None:
    # 'ghcr.io/unknown:1' is in no layer source: every node 0, and the neutral answer is counted
    extender = _extender(tmp_path)
    status, answer = _request(
        tmp_path,
        extender,
        "POST",
        "/prioritize",
        {"Pod": _pod("ghcr.io/unknown:1"), "NodeNames": ["N1", "N2"]},
    )
    assert status == 200
    assert answer == [{"Host": "N1", "Score": 0}, {"Host": "N2", "Score": 0}]
    assert (
        'layersched_extender_neutral_answers_total{reason="pod_unresolved"} 1.0'
        in _metrics_text(extender)
    )


def test_debug_decisions_hold_each_pods_latest_answer(tmp_path: Any) -> None:
    extender = _extender(tmp_path)
    pod = _pod("img1:1")
    pod["metadata"]["uid"] = "uid-1"
    unknown = _pod("ghcr.io/unknown:1")
    unknown["metadata"] |= {"name": "p2", "uid": "uid-2"}
    seen: list[tuple[int, Any]] = []

    async def scenario(call: Call) -> None:
        seen.append(await call("GET", "/debug/decisions?pod=default/p1", None))
        answer = await call("POST", "/prioritize", {"Pod": pod, "NodeNames": ["N1", "N2"]})
        seen.append(answer)
        await call("POST", "/prioritize", {"Pod": unknown, "NodeNames": ["N1"]})
        seen.append(await call("GET", "/debug/decisions?pod=default/p1", None))
        seen.append(await call("GET", "/debug/decisions?pod=default/p2", None))
        seen.append(await call("GET", "/debug/decisions", None))

    _serve(extender, scenario)
    (missing, error), (status, answered), (_, p1), (_, p2), (_, listing) = seen
    # nothing recorded yet: a 404 that says what to give
    assert missing == 404 and "NAMESPACE/NAME" in error["Error"]
    # what kube-scheduler got, with the pod's uid (names repeat, uids do not)
    assert p1["uid"] == "uid-1" and p1["mode"] == "NodeNames" and p1["neutral"] == ""
    assert status == 200 and p1["scores"] == {e["Host"]: e["Score"] for e in answered}
    assert p1["scores"]["N1"] == 10
    # a neutral answer says why
    assert p2["neutral"] == "pod_unresolved" and p2["scores"] == {"N1": 0}
    assert listing == {"pods": ["default/p1", "default/p2"]}
    # the bytes that explain the scores: N1 holds all of Img1 (L1+L2+L3 = 90 MB), N2 its
    # L1+L2 (50 MB); a neutral answer has none
    assert p1["strategy"] == "layer-locality"
    assert p1["bytes"] == {
        "N1": {"present_bytes": 90 * MB, "total_bytes": 90 * MB},
        "N2": {"present_bytes": 50 * MB, "total_bytes": 90 * MB},
    }
    assert p2["bytes"] == {} and p2["strategy"] == ""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # full Nodes: each node of the request, in its order; N3 holds nothing of 90 MB
        (
            {"Nodes": {"items": NODES}},
            {"N1": (90 * MB, 90 * MB), "N2": (50 * MB, 90 * MB), "N3": (0, 90 * MB)},
        ),
        # a name the held inventory does not know scores 0 and holds nothing of nothing
        (
            {"NodeNames": ["N2", "ghost", "N1"]},
            {"N2": (50 * MB, 90 * MB), "ghost": (0, 0), "N1": (90 * MB, 90 * MB)},
        ),
    ],
    ids=["nodes", "unknown-node-name"],
)
def test_decisions_keep_each_nodes_held_and_needed_bytes(
    tmp_path: Any, body: dict[str, Any], expected: dict[str, tuple[int, int]]
) -> None:
    extender = _extender(tmp_path)
    pod = _pod("img1:1")
    pod["metadata"]["uid"] = "uid-1"
    seen: list[tuple[int, Any]] = []

    async def scenario(call: Call) -> None:
        seen.append(await call("POST", "/prioritize", {"Pod": pod, **body}))
        seen.append(await call("GET", "/debug/decisions?pod=default/p1", None))

    _serve(extender, scenario)
    (status, answer), (_, decision) = seen
    assert status == 200
    assert list(decision["bytes"]) == [entry["Host"] for entry in answer]  # answer's order
    assert {
        node: (held["present_bytes"], held["total_bytes"])
        for node, held in decision["bytes"].items()
    } == expected


def test_decisions_bound_bytes_with_scores() -> None:
    # the per-node bytes ride on the score budget: two pods of 3 nodes fit in 6 scores,
    # a third evicts the oldest, held bytes and all
    decisions = Decisions(max_pods=10, max_scores=6)
    answer = [HostPriority(n, 1) for n in ("a", "b", "c")]
    for name in ("p1", "p2", "p3"):
        meta = ObjectMeta(name=name, namespace="ns", uid=name)
        held = ("layer-locality", array("q", [1, 2, 3]), array("q", [4, 4, 4]))
        decisions.record(meta, "NodeNames", answer, "", held)
    assert decisions.pods() == ["ns/p2", "ns/p3"]
    kept = decisions.get("ns/p3")
    assert kept is not None and kept.held()["c"] == {"present_bytes": 3, "total_bytes": 4}


def test_decisions_forget_the_oldest_pods_first() -> None:
    decisions = Decisions(max_pods=2)
    for name in ("a", "b", "a", "c"):
        decisions.record(ObjectMeta(name=name, namespace="ns"), "NodeNames", [])
    # "a" was scored again after "b": "b" is the oldest and goes
    assert decisions.pods() == ["ns/a", "ns/c"]


def test_decisions_hold_a_bounded_number_of_node_scores() -> None:
    decisions = Decisions(max_pods=100, max_scores=10)
    answer = [HostPriority(f"n{i}", i % 11) for i in range(4)]
    for name in ("a", "b", "c"):
        decisions.record(ObjectMeta(name=name, namespace="ns"), "NodeNames", answer)
    # 3 x 4 scores is over 10: the oldest pod goes, whatever the pod bound
    assert decisions.pods() == ["ns/b", "ns/c"]
    # one answer over the whole budget is still kept: the latest is what operators ask for
    big = [HostPriority(f"n{i}", 0) for i in range(50)]
    decisions.record(ObjectMeta(name="d", namespace="ns"), "NodeNames", big)
    assert decisions.pods() == ["ns/d"]
    assert decisions.get("ns/d") is not None


class _SlowSource:
    """A registry stand-in that answers only once ``release`` is set; counts like one."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.cache_hits = 0
        self.cache_misses = 0
        self.registry_errors = 0

    def resolve(self, image: str) -> tuple[Layer, ...]:
        self.cache_misses += 1
        if not self.release.wait(WARM_TIMEOUT_S):
            self.registry_errors += 1
            raise LayerResolutionError(f"{image!r}: registry timed out")
        return SOURCE.resolve(image)


def test_slow_registry_answers_neutral_fast_then_warms(tmp_path: Any) -> None:
    # The first pod cannot wait for the registry: zeros within the deadline. The resolution
    # goes on; once it lands, the next pod with that image is scored for real (N1: 10).
    source = _SlowSource()
    extender = _extender(tmp_path, source=source, resolve_timeout_s=SHORT_DEADLINE_S)
    body = {"Pod": _pod("img1:1"), "NodeNames": ["N1", "N2"]}

    @tenacity.retry(
        stop=tenacity.stop_after_delay(WARM_TIMEOUT_S), wait=tenacity.wait_fixed(0.02), reraise=True
    )
    async def assert_warm(call: Call) -> None:
        _, answer = await call("POST", "/prioritize", body)
        assert answer == [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 5}]

    async def scenario(call: Call) -> None:
        started = time.monotonic()
        status, answer = await call("POST", "/prioritize", body)
        assert time.monotonic() - started < WARM_TIMEOUT_S / 2
        assert (status, answer) == (200, [{"Host": "N1", "Score": 0}, {"Host": "N2", "Score": 0}])
        source.release.set()
        await assert_warm(call)

    try:
        _serve(extender, scenario)
    finally:
        source.release.set()
        extender.resolver.close()
    text = _metrics_text(extender)
    assert "layersched_extender_resolve_timeouts_total 1.0" in text
    assert "layersched_layer_cache_misses_total" in text
    assert "layersched_registry_errors_total 0.0" in text


# ---------------------------------------------------------------------- filter
@pytest.mark.parametrize(
    ("body", "expected_nodes", "expected_names"),
    [
        # NodeNames are echoed, Nodes stays null
        ({"Pod": _pod("img1:1"), "NodeNames": ["N1", "N2"]}, None, ["N1", "N2"]),
        # full Nodes are echoed unchanged, fields layersched does not read included
        (
            {
                "Pod": _pod("img1:1"),
                "Nodes": {"kind": "NodeList", "items": [NODES[0] | {"spec": {"x": 1}}]},
            },
            {"kind": "NodeList", "items": [NODES[0] | {"spec": {"x": 1}}]},
            None,
        ),
    ],
    ids=["names", "nodes"],
)
def test_filter_passes_everything(
    tmp_path: Any, body: dict[str, Any], expected_nodes: Any, expected_names: Any
) -> None:
    status, answer = _request(tmp_path, _extender(tmp_path), "POST", "/filter", body)
    assert status == 200
    assert answer == {
        "Nodes": expected_nodes,
        "NodeNames": expected_names,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"NodeNames": ["N1"]}, "Pod is missing"),  # no Pod
        ({"Pod": _pod("img1:1")}, "neither Nodes nor NodeNames"),  # nothing to filter
        ({"Pod": _pod("img1:1"), "Nodes": {"items": 5}}, "$.items"),  # items not a list
    ],
    ids=["pod-missing", "no-nodes", "items-not-list"],
)
def test_filter_bad_requests(tmp_path: Any, body: dict[str, Any], fragment: str) -> None:
    status, answer = _request(tmp_path, _extender(tmp_path), "POST", "/filter", body)
    assert status == 400
    assert fragment in answer["Error"]


# ------------------------------------------------------------ health, metrics, logs
def test_healthz_is_503_until_the_inventory_is_loaded(tmp_path: Any) -> None:
    provider = StaticLayerIndexProvider(_nodes_file(tmp_path, NODES), SOURCE)
    extender = make_extender(without_spread("layer-locality"), SOURCE, provider)

    async def scenario(call: Call) -> None:
        assert (await call("GET", "/healthz"))[0] == 503
        assert (await call("GET", "/readyz"))[0] == 503
        # alive while loading: a slow load is no reason for the kubelet to restart it
        assert (await call("GET", "/livez"))[0] == 200
        # a NodeNames request before then is answered neutrally, not refused
        status, answer = await call(
            "POST", "/prioritize", {"Pod": _pod("img1:1"), "NodeNames": ["N1"]}
        )
        assert (status, answer) == (200, [{"Host": "N1", "Score": 0}])
        provider.load()
        assert (await call("GET", "/healthz"))[0] == 200
        assert (await call("GET", "/readyz"))[0] == 200

    _serve(extender, scenario)
    assert 'reason="not_ready"' in _metrics_text(extender)


def test_metrics(tmp_path: Any) -> None:
    extender = _extender(tmp_path)

    async def scenario(call: Call) -> None:
        await call("POST", "/prioritize", {"Pod": _pod("img1:1"), "NodeNames": ["N1", "ghost"]})
        status, text = await call("GET", "/metrics")
        assert status == 200
        for name in (
            'layersched_extender_request_duration_seconds_bucket{le="0.005",verb="prioritize"}',
            'layersched_extender_requests_total{code="200",verb="prioritize"} 1.0',
            "layersched_extender_unknown_nodes_total 1.0",
            "layersched_extender_inventory_nodes 3.0",
            "layersched_extender_inventory_unresolved_node_images 0.0",
        ):
            assert name in text

    _serve(extender, scenario)


def test_debug_log_explains_each_node(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    # N2 holds L1+L2 = 50M of 90M: 55/100, i.e. 5/10
    caplog.set_level(logging.DEBUG, logger="layersched.extender")
    _request(
        tmp_path,
        _extender(tmp_path),
        "POST",
        "/prioritize",
        {"Pod": _pod("img1:1"), "NodeNames": ["N2"]},
    )
    assert f"N2: present {50 * MB} / total {90 * MB} bytes -> 55/100 -> 5/10" in caplog.text


def test_no_debug_formatting_when_debug_is_off(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the hot path must not build per-node strings nobody will read
    caplog.set_level(logging.INFO, logger="layersched.extender")

    def forbidden(*_: object) -> None:
        raise AssertionError("per-node debug lines formatted with debug off")

    monkeypatch.setattr(Extender, "_log_decision", forbidden)
    status, _ = _request(
        tmp_path,
        _extender(tmp_path),
        "POST",
        "/prioritize",
        {"Pod": _pod("img1:1"), "NodeNames": ["N1"]},
    )
    assert status == 200


def test_pod_images_keeps_upstream_order() -> None:
    # init containers first, then containers, repeats kept
    pod = Pod(
        spec=PodSpec(
            initContainers=[Container(image="init:1")],
            containers=[Container(image="a:1"), Container(image="a:1")],
        )
    )
    assert pod_images(pod, "request").images == ("init:1", "a:1", "a:1")


def test_pod_images_reads_image_volumes_off_the_wire() -> None:
    # spec.volumes[*].image.reference, in volume order; other volume kinds skipped
    args = msgspec.json.decode(
        json.dumps(
            {
                "Pod": {
                    "metadata": {"name": "p", "namespace": "ns"},
                    "spec": {
                        "containers": [{"name": "c", "image": "a:1"}],
                        "volumes": [
                            {"name": "cfg", "configMap": {"name": "x"}},
                            {
                                "name": "m",
                                "image": {"reference": "models:3", "pullPolicy": "Never"},
                            },
                        ],
                    },
                },
                "NodeNames": ["n1"],
            }
        ),
        type=ExtenderArgs,
    )
    pod = pod_images(args.Pod, "request")
    assert (pod.containers, pod.image_volumes) == (("a:1",), ("models:3",))
    # an image volume without its reference is refused like a container without an image
    assert args.Pod is not None and args.Pod.spec is not None and args.Pod.spec.volumes
    volume = args.Pod.spec.volumes[1].image
    assert volume is not None
    volume.reference = ""
    with pytest.raises(InputError, match=r"spec.volumes\[1\].image.reference is missing"):
        pod_images(args.Pod, "request")


def test_repeated_and_changed_node_lists(tmp_path: Any) -> None:
    # the remembered NodeNames lookup must follow the list as it changes between pods
    extender = _extender(tmp_path)
    pod = _pod("img1:1")

    async def scenario(call: Call) -> None:
        for names, expected in (
            (["N1", "N2"], [10, 5]),
            (["N1", "N2"], [10, 5]),
            (["N2", "N1"], [5, 10]),
            (["N2", "ghost", "N1"], [5, 0, 10]),
            (["N1", "N2"], [10, 5]),
        ):
            _, answer = await call("POST", "/prioritize", {"Pod": pod, "NodeNames": names})
            assert [e["Host"] for e in answer] == names
            assert [e["Score"] for e in answer] == expected

    _serve(extender, scenario)


# ------------------------------------------------- background resolution and its logs
class _BlockingSource:
    """A registry stand-in: images in ``stuck`` wait for ``release``; ``failing`` ones
    then fail, the others resolve to L1. Records the names it was asked for."""

    def __init__(self, stuck: set[str] | None = None, failing: set[str] | None = None) -> None:
        self.release = threading.Event()
        self.stuck = stuck or set()
        self.failing = failing or set()
        self.asked: list[str] = []
        self._lock = threading.Lock()

    def resolve(self, image: str) -> tuple[Layer, ...]:
        with self._lock:
            self.asked.append(image)
        if image in self.stuck:
            self.release.wait(WARM_TIMEOUT_S)
        if image in self.failing:
            raise LayerResolutionError(f"{image!r}: manifest unknown")
        return SOURCE.resolve(image) if image.startswith("img") else (L1,)


@tenacity.retry(
    stop=tenacity.stop_after_delay(WARM_TIMEOUT_S), wait=tenacity.wait_fixed(0.01), reraise=True
)
async def _assert_cached(extender: Extender, image: str) -> None:
    assert extender.resolver._lookup(image) is not None


def test_late_failure_logs_one_warning_and_no_traceback(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The pod misses the deadline (neutral); the resolution fails later in the background.
    # Its failure is one WARNING naming image and reason, never asyncio's "Future exception
    # was never retrieved" ERROR with a traceback.
    caplog.set_level(logging.INFO)
    source = _BlockingSource(stuck={"bad:1"}, failing={"bad:1"})
    extender = _extender(tmp_path, source=source, resolve_timeout_s=SHORT_DEADLINE_S)
    body = {"Pod": _pod("bad:1"), "NodeNames": ["N1"]}

    async def scenario(call: Call) -> None:
        assert await call("POST", "/prioritize", body) == (200, [{"Host": "N1", "Score": 0}])
        source.release.set()
        await _assert_cached(extender, "bad:1")
        # within the negative-cache period: answered at once, not resolved or warned again
        assert await call("POST", "/prioritize", body) == (200, [{"Host": "N1", "Score": 0}])
        gc.collect()  # an unretrieved wrapper would log its ERROR when collected
        await asyncio.sleep(0)

    try:
        _serve(extender, scenario)
    finally:
        source.release.set()
        extender.resolver.close()
    gc.collect()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'bad:1'" in warnings[0] and "manifest unknown" in warnings[0]
    assert source.asked == ["bad:1"]


class _BuggySource:
    """A layer source with a bug: a KeyError, not a LayerschedError. Records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def resolve(self, image: str) -> tuple[Layer, ...]:
        self.asked.append(image)
        parsed: dict[str, tuple[Layer, ...]] = {}  # a parser that forgot to fill its table
        return parsed[image]


def test_a_layer_source_bug_is_negative_cached_and_logged_once_with_its_traceback(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The source raises KeyError for 'buggy:1'. The pod scores neutrally; the failure is
    # cached like any other (the second pod does not ask the source again) and logged once
    # at ERROR with the KeyError's traceback, for the operator to report.
    caplog.set_level(logging.INFO)
    source = _BuggySource()
    extender = _extender(tmp_path, source=source, resolve_timeout_s=WARM_TIMEOUT_S)
    body = {"Pod": _pod("buggy:1"), "NodeNames": ["N1"]}

    async def scenario(call: Call) -> None:
        for _ in range(2):
            assert await call("POST", "/prioritize", body) == (200, [{"Host": "N1", "Score": 0}])

    try:
        _serve(extender, scenario)
    finally:
        extender.resolver.close()
    assert source.asked == ["buggy:1"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "'buggy:1'" in errors[0].getMessage()
    assert "failed unexpectedly" in errors[0].getMessage()
    assert errors[0].exc_info is not None and isinstance(errors[0].exc_info[1], KeyError)
    assert (
        'layersched_extender_neutral_answers_total{reason="pod_unresolved"} 2.0'
        in _metrics_text(extender)
    )


@pytest.mark.parametrize(
    "when",
    [
        # the pod finds the warm-up running and waits for it: it fails within the deadline
        "joins-running-warm-up",
        # the warm-up failed before the pod came: the pod is answered from the negative cache
        "after-failed-warm-up",
    ],
)
def test_a_pod_image_failed_by_a_node_warm_up_gets_the_pod_warning(
    caplog: pytest.LogCaptureFixture, when: str
) -> None:
    # A pod names its image exactly as a node warm-up resolves it (a repo digest). The
    # warm-up's failure is logged as a node image's; the pod's documented WARNING ("pods
    # using it score 0") must be logged too, once: a second pod within 10 s adds nothing.
    caplog.set_level(logging.WARNING)
    name = "reg.lan/app@" + _digest("app")
    source = _BlockingSource(stuck={name}, failing={name})
    resolver = DeadlineResolver(source, timeout_s=WARM_TIMEOUT_S)

    @tenacity.retry(
        stop=tenacity.stop_after_delay(WARM_TIMEOUT_S),
        wait=tenacity.wait_fixed(0.01),
        reraise=True,
    )
    async def assert_asked() -> None:
        assert source.asked == [name]

    async def scenario() -> None:
        resolver.warm(name)
        await assert_asked()  # the warm-up is running, blocked in the source
        if when == "after-failed-warm-up":
            source.release.set()
            await _assert_cached_in(resolver, name)
        pod = asyncio.create_task(resolver.resolve_pod([name]))
        await asyncio.sleep(0)  # the pod has joined the warm-up or read the cache
        source.release.set()
        assert await pod is None
        assert await resolver.resolve_pod([name]) is None

    try:
        asyncio.run(scenario())
    finally:
        source.release.set()
        resolver.close()
    assert source.asked == [name]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    pod_warnings = [w for w in warnings if w.startswith(f"pod image {name!r}")]
    assert len(pod_warnings) == 1, warnings
    assert "pods using it score 0" in pod_warnings[0]
    assert "manifest unknown" in pod_warnings[0]
    assert [w for w in warnings if w.startswith(f"node image {name!r}")] != []


@tenacity.retry(
    stop=tenacity.stop_after_delay(WARM_TIMEOUT_S), wait=tenacity.wait_fixed(0.01), reraise=True
)
async def _assert_cached_in(resolver: DeadlineResolver, image: str) -> None:
    assert resolver._lookup(image) is not None


class _CountingStatic(StaticLayerSource):
    """The offline source, counting what it is asked (still answered inline, as offline)."""

    def __init__(self, layers: dict[str, tuple[Layer, ...]]) -> None:
        super().__init__(layers)
        self.asked: list[str] = []

    def resolve(self, image: str) -> tuple[Layer, ...]:
        self.asked.append(image)
        return super().resolve(image)


def test_offline_source_unknown_node_image_is_looked_up_once_and_counted_per_request(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # 'ghost:1' on N3 is not in LAYERS.json, which cannot change: asked once, not per
    # request, yet every request counts it as unresolved and the operator is warned once.
    # Pod img1:1 (90M): N1 holds it all -> 10; N3 holds nothing known -> 0.
    caplog.set_level(logging.WARNING, logger="layersched.extender")
    source = _CountingStatic({"img1:1": (L1, L2, L3)})
    extender = _extender(tmp_path, source=source)
    nodes = [_node("N1", "img1:1"), _node("N3", "ghost:1")]
    body = {"Pod": _pod("img1:1"), "Nodes": {"items": nodes}}

    async def scenario(call: Call) -> None:
        for _ in range(3):
            answer = [{"Host": "N1", "Score": 10}, {"Host": "N3", "Score": 0}]
            assert await call("POST", "/prioritize", body) == (200, answer)

    _serve(extender, scenario)
    assert source.asked.count("ghost:1") == 1
    assert "layersched_extender_unresolved_node_images_total 3.0" in _metrics_text(extender)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'ghost:1'" in warnings[0]


def test_offline_source_warns_once_per_unknown_pod_image(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # 'ghost:1' is not in LAYERS.json: the operator sees one WARNING, not one per pod
    caplog.set_level(logging.INFO)
    extender = _extender(tmp_path)
    body = {"Pod": _pod("ghost:1"), "NodeNames": ["N1"]}

    async def scenario(call: Call) -> None:
        for _ in range(3):
            assert await call("POST", "/prioritize", body) == (200, [{"Host": "N1", "Score": 0}])

    _serve(extender, scenario)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'ghost:1'" in warnings[0] and "not in the offline layer file" in warnings[0]


def _image_nodes(count: int) -> list[dict[str, Any]]:
    """``count`` nodes, node k holding image 'node-k:1'."""
    return [
        {
            "metadata": {"name": f"w{k}"},
            "status": {"images": [{"names": [f"node-{k}:1"], "sizeBytes": MB}]},
        }
        for k in range(count)
    ]


def test_pod_images_are_resolved_before_node_image_warming(tmp_path: Any) -> None:
    # A cold full-Nodes request queues 300 node images whose registry hangs. Pod images
    # must not wait behind them: img2:1 is new and 'node-150:1' is itself queued for
    # warming; both are resolved within the deadline and scored for real.
    # N2 holds all of img2:1 (L1+L2+L4): 100 -> 10. node-150:1 is L1 alone, which N1
    # holds (img1:1 = L1+L2+L3): 100 -> 10. A neutral answer would be 0 for both.
    nodes = _image_nodes(300)
    stuck = {f"node-{k}:1" for k in range(300)} - {"node-150:1"}
    source = _BlockingSource(stuck=stuck)
    extender = _extender(tmp_path, source=source, resolve_timeout_s=WARM_TIMEOUT_S / 2)

    async def scenario(call: Call) -> None:
        status, _ = await call(
            "POST", "/prioritize", {"Pod": _pod("img1:1"), "Nodes": {"items": nodes}}
        )
        assert status == 200
        assert len(extender.resolver._warming) > 200  # the warm-up is queued and stuck
        started = time.monotonic()
        for pod, host, score in (("img2:1", "N2", 10), ("node-150:1", "N1", 10)):
            status, answer = await call(
                "POST", "/prioritize", {"Pod": _pod(pod), "NodeNames": ["N1", "N2"]}
            )
            assert status == 200
            assert dict((e["Host"], e["Score"]) for e in answer)[host] == score
        assert extender.resolver.timeouts == 0
        assert time.monotonic() - started < WARM_TIMEOUT_S / 2

    try:
        _serve(extender, scenario)
    finally:
        source.release.set()
        extender.resolver.close()
    assert "img2:1" in source.asked and "node-150:1" in source.asked


def test_a_node_image_is_warmed_once_by_its_digest_name(tmp_path: Any) -> None:
    # kubelet lists a repo digest and a tag for one image: only the digest is resolved
    # (one registry conversation per node image, not one per name)
    digest_name = "reg.lan/app@" + _digest("app")
    node = {
        "metadata": {"name": "A"},
        "status": {"images": [{"names": ["reg.lan/app:1", digest_name], "sizeBytes": MB}]},
    }
    source = _BlockingSource()
    extender = _extender(tmp_path, source=source, resolve_timeout_s=WARM_TIMEOUT_S / 2)
    body = {"Pod": _pod("img1:1"), "Nodes": {"items": [node]}}

    async def scenario(call: Call) -> None:
        # first request: A's image is not cached yet (0); once warmed, A holds L1 = 30M
        # of img1:1's 90M: floor(100 * 30 / 90) = 33 -> 3
        assert await call("POST", "/prioritize", body) == (200, [{"Host": "A", "Score": 0}])
        await _assert_cached(extender, digest_name)
        assert await call("POST", "/prioritize", body) == (200, [{"Host": "A", "Score": 3}])

    try:
        _serve(extender, scenario)
    finally:
        extender.resolver.close()
    assert source.asked == ["img1:1", digest_name]


# ------------------------------------------------------------------ more strategies
BANDWIDTH = "layersched.io/bandwidth-bits-per-s"
PULL_NODES = [
    # fast: label 1e10 bit/s, holds img2:1 (L1+L2), misses L3 = 40 MiB
    _node("fast", "img2:1", metadata={"labels": {BANDWIDTH: "1e10"}}),
    # slow: no bandwidth, so the default 1e8 bit/s; misses L3 = 40 MiB too
    _node("slow", "img2:1"),
    # empty: annotation 1e10 bit/s, misses all 90 MiB
    _node("empty", metadata={"annotations": {BANDWIDTH: "10000000000"}}),
]


@pytest.mark.parametrize("mode", ["NodeNames", "Nodes"], ids=["node-names", "full-nodes"])
def test_pull_time_uses_node_bandwidth(tmp_path: Any, mode: str) -> None:
    # estimate = missing bytes * 8 / bandwidth + 1 s overhead; score = 100 * fastest / estimate
    # fast:  40 MiB * 8 / 1e10 + 1 = 1.0336 s -> 100 -> 10
    # slow:  40 MiB * 8 / 1e8  + 1 = 4.3554 s -> floor(100 * 1.0336 / 4.3554) = 23 -> 2
    # empty: 90 MiB * 8 / 1e10 + 1 = 1.0755 s -> floor(100 * 1.0336 / 1.0755) = 96 -> 9
    provider = StaticLayerIndexProvider(_nodes_file(tmp_path, PULL_NODES), SOURCE)
    provider.load()
    extender = make_extender(get_strategy("pull-time"), SOURCE, provider)
    names = ["fast", "slow", "empty"]
    body: dict[str, Any] = {"Pod": _pod("img1:1")}
    body |= {"NodeNames": names} if mode == "NodeNames" else {"Nodes": {"items": PULL_NODES}}
    status, answer = _request(tmp_path, extender, "POST", "/prioritize", body)
    assert status == 200
    assert answer == [
        {"Host": "fast", "Score": 10},
        {"Host": "slow", "Score": 2},
        {"Host": "empty", "Score": 9},
    ]


def _sized_node(name: str, image: str, size_bytes: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"images": [{"names": [image], "sizeBytes": size_bytes}]},
    }


#: Node images no layer source knows, big enough for image-locality to score.
BIG_NODES = [
    _sized_node("N1", "big:1", 600 * MB),
    _sized_node("N2", "big:1", 600 * MB),
    _sized_node("N3", "other:1", 600 * MB),
]


@pytest.mark.parametrize(
    ("node_names", "expected"),
    [
        # big:1 is 600M on N1 and N2 of 3 nodes: 600M * 2 / 3 = 400M
        # -> 100 * (400M - 23M) / (1000M - 23M) = 38 -> 38 // 10 = 3 for both
        (["N1", "N2"], [3, 3]),
        # N3 holds other:1 only, not the pod's image: 0
        (["N3", "N1"], [0, 3]),
    ],
    ids=["holders", "non-holder"],
)
def test_image_locality_inventory_resolves_nothing(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, node_names: list[str], expected: list[int]
) -> None:
    # image-locality reads names and sizes only: the held inventory is loaded without a
    # layer source (as 'layersched extender --strategy image-locality' does), no node image
    # is reported as unresolved although none of them is in SOURCE (with SOURCE, big:1 and
    # other:1 would be warned about and counted), and the pod's image, not in SOURCE either,
    # is scored (resolving it would answer neutrally: all 0).
    caplog.set_level(logging.INFO)
    provider = StaticLayerIndexProvider(_nodes_file(tmp_path, BIG_NODES), None)
    provider.load()
    extender = make_extender(get_strategy("image-locality"), SOURCE, provider)
    body = {"Pod": _pod("big:1"), "NodeNames": node_names}
    assert _request(tmp_path, extender, "POST", "/prioritize", body) == (
        200,
        [{"Host": n, "Score": e} for n, e in zip(node_names, expected, strict=True)],
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "layersched_extender_inventory_unresolved_node_images 0.0" in _metrics_text(extender)


# ------------------------------------------------------------------ inputs and limits
@pytest.mark.parametrize(
    ("document", "message"),
    [
        # 'extender --nodes pod.json': a Pod is no node list
        (
            {"kind": "Pod", "spec": {"containers": []}},
            "kind is 'Pod', expected 'NodeList'",
        ),
        # 'kubectl get pods -o json' prints a List of Pods: its first item is named
        (
            {"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]},
            "items[0]: kind is 'Pod', expected 'Node'",
        ),
        # no items at all
        ({"apiVersion": "v1"}, "no 'items' list"),
    ],
    ids=["a-pod", "list-of-pods", "no-items"],
)
def test_nodes_file_must_be_a_node_list(tmp_path: Any, document: Any, message: str) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(document))
    provider = StaticLayerIndexProvider(str(path), SOURCE)
    with pytest.raises(InputError) as info:
        provider.load()
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert provider.current() is None


def test_request_nodes_of_another_kind_are_a_400(tmp_path: Any) -> None:
    body = {"Pod": _pod("img1:1"), "Nodes": {"items": [NODES[0], {"kind": "Pod"} | NODES[1]]}}
    status, answer = _request(tmp_path, _extender(tmp_path), "POST", "/prioritize", body)
    assert status == 400
    assert "Nodes.items[1]: kind is 'Pod', expected 'Node'" in answer["Error"]


def test_oversized_body_is_a_json_413_and_counted(tmp_path: Any) -> None:
    # a 1 KiB limit here (256 MiB in production): the answer is JSON like every other error
    extender = _extender(tmp_path)
    big = {"Pod": _pod("img1:1"), "NodeNames": [f"node-{k}" for k in range(200)]}

    async def scenario(call: Call) -> None:
        status, answer = await call("POST", "/prioritize", big)
        assert status == 413
        assert answer["Error"].startswith("prioritize: request body too large (")
        assert "1024" in answer["Error"]
        small = {"Pod": _pod("img1:1"), "NodeNames": ["N1"]}
        assert await call("POST", "/prioritize", small) == (200, [{"Host": "N1", "Score": 10}])

    _serve(extender, scenario, max_request_bytes=1024)
    text = _metrics_text(extender)
    assert 'layersched_extender_requests_total{code="413",verb="prioritize"} 1.0' in text
    assert 'layersched_extender_request_duration_seconds_count{verb="prioritize"} 2.0' in text


def test_malformed_node_data_is_ignored_counted_and_warned(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # One node's bad data must not cost every node its score (the request stays a 200):
    # A: a negative sizeBytes, and a layers map with a bad key, next to a good layers map.
    # B: one good imageLayer annotation (L1), one with a non-numeric size.
    # C: the same negative-size entry as A (found where the distinct image is described,
    #    not by a layers-map check), next to img2:1 (L1+L2+L4, resolved through SOURCE).
    # img1:1 = 90M. A keeps only its good map (L1+L2 = 50M): floor(100 * 50 / 90) = 55 -> 5.
    # B keeps L1 = 30M: floor(100 * 30 / 90) = 33 -> 3. C holds L1+L2 = 50M: 55 -> 5.
    # Four problems, counted and warned naming the node (not its place in the request).
    caplog.set_level(logging.WARNING, logger="layersched.extender")
    node_a = {
        "metadata": {"name": "A"},
        "status": {
            "images": [
                {"names": ["neg:1"], "sizeBytes": -1},
                {"names": ["badmap:1"], "sizeBytes": MB, "layers": {"nope": 1}},
                {
                    "names": ["good:1"],
                    "sizeBytes": MB,
                    "layers": {L1.digest: L1.size_bytes, L2.digest: L2.size_bytes},
                },
            ]
        },
    }
    node_b = _node(
        "B",
        metadata={
            "annotations": {
                f"imageLayer.{L1.digest}": str(L1.size_bytes),
                f"imageLayer.{L3.digest}": "big",
            }
        },
    )

    def node_c(name: str) -> dict[str, Any]:
        images = [{"names": ["neg:1"], "sizeBytes": -1}, {"names": ["img2:1"], "sizeBytes": MB}]
        return {"metadata": {"name": name}, "status": {"images": images}}

    extender = _extender(tmp_path)
    body = {"Pod": _pod("img1:1"), "Nodes": {"items": [node_a, node_b, node_c("C")]}}
    assert _request(tmp_path, extender, "POST", "/prioritize", body) == (
        200,
        [{"Host": "A", "Score": 5}, {"Host": "B", "Score": 3}, {"Host": "C", "Score": 5}],
    )
    assert "layersched_extender_invalid_node_data_total 4.0" in _metrics_text(extender)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    negative = "sizeBytes: size -1 must be a non-negative integer (bytes)"
    assert warnings == [
        f"node 'A': ignoring image 'neg:1': {negative}",
        "node 'A': ignoring image 'badmap:1': layers key: 'nope' is not a digest; "
        "expected 'sha256:' followed by 64 hex digits",
        f"node 'B': ignoring annotation 'imageLayer.{L3.digest}': "
        f"metadata.annotations['imageLayer.{L3.digest}']: value 'big' must be the layer "
        "size in decimal bytes",
        f"node 'C': ignoring image 'neg:1': {negative}",
    ]
    # the next cycle sends the nodes in another order, with D (C's twin) as well: the same
    # problems are counted again (4 + 5 = 9) but only D's is new to the log
    caplog.clear()
    body = {"Pod": _pod("img1:1"), "Nodes": {"items": [node_c("C"), node_c("D"), node_b, node_a]}}
    assert _request(tmp_path, extender, "POST", "/prioritize", body) == (
        200,
        [
            {"Host": "C", "Score": 5},
            {"Host": "D", "Score": 5},
            {"Host": "B", "Score": 3},
            {"Host": "A", "Score": 5},
        ],
    )
    assert "layersched_extender_invalid_node_data_total 9.0" in _metrics_text(extender)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"node 'D': ignoring image 'neg:1': {negative}"]


def test_a_full_warning_memory_forgets_the_oldest_not_the_newest(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With room for 2 remembered warnings, nodes X0, X1, X2 (one bad image each) are all
    # warned: a full memory drops its least recently seen entry (X0), it does not stop
    # warning. X2 again is still remembered (silent); X0 again was forgotten (warned again).
    monkeypatch.setattr(_request_indexes, "MAX_LOGGED_INVALID_NODE_DATA", 2)
    caplog.set_level(logging.WARNING, logger="layersched.extender")
    extender = _extender(tmp_path)

    def bad_node(name: str) -> dict[str, Any]:
        images = [{"names": ["neg:1"], "sizeBytes": -1}]
        return {"metadata": {"name": name}, "status": {"images": images}}

    async def scenario(call: Call) -> None:
        for name in ("X0", "X1", "X2", "X2", "X0"):
            body = {"Pod": _pod("img1:1"), "Nodes": {"items": [bad_node(name)]}}
            assert await call("POST", "/prioritize", body) == (200, [{"Host": name, "Score": 0}])

    _serve(extender, scenario)
    warned = [r.getMessage().split(":")[0] for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["node 'X0'", "node 'X1'", "node 'X2'", "node 'X0'"]
    assert "layersched_extender_invalid_node_data_total 5.0" in _metrics_text(extender)


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ({"names": ["x:1"], "sizeBytes": -1}, "items[0].status.images[0].sizeBytes: size -1"),
        (
            {"names": ["x:1"], "sizeBytes": 1, "layers": {"nope": 1}},
            "items[0].status.images[0].layers key",
        ),
    ],
    ids=["negative-size", "bad-layer-digest"],
)
def test_malformed_nodes_file_is_refused(
    tmp_path: Any, image: dict[str, Any], message: str
) -> None:
    # the --nodes file is the operator's own: its mistakes are errors to fix, not ignored
    nodes = [{"metadata": {"name": "A"}, "status": {"images": [image]}}]
    provider = StaticLayerIndexProvider(_nodes_file(tmp_path, nodes), SOURCE)
    with pytest.raises(InputError, match=re.escape(message)):
        provider.load()


@pytest.mark.parametrize("strategy", ["layer-locality", "pull-time"])
@pytest.mark.parametrize(
    "sizes",
    [
        # the reproduction: two 2^62-byte layers wrap int64 negative
        (2**62, 2**62),
        # a larger total: numpy raised OverflowError (a 500 and a traceback per request)
        (2**63, 2**63),
        (10**30, 1),
    ],
    ids=["two-2^62", "two-2^63", "1e30"],
)
def test_hostile_layer_sizes_are_scored_not_a_500(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, strategy: str, sizes: tuple[int, ...]
) -> None:
    # a layer source that hands out sizes no reader would accept (the readers cap them
    # at 1 TiB; this source bypasses them, as a buggy plugin could): a full-Nodes request
    # where N1 holds the pod's image (its status image resolves through the same source)
    # is scored: N1 10, N2 0; nothing fails, nothing is logged as a bug
    layers = tuple(Layer(_digest(f"h{i}"), size) for i, size in enumerate(sizes))
    source = StaticLayerSource({"huge:1": layers})
    extender = make_extender(without_spread(strategy), source)
    nodes = [_node("N1", "huge:1"), _node("N2")]
    body = {"Pod": _pod("huge:1"), "Nodes": {"items": nodes}}
    status, answer = _request(tmp_path, extender, "POST", "/prioritize", body)
    assert (status, answer) == (200, [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 0}])
    assert "Traceback" not in caplog.text and "a bug" not in caplog.text
