"""The local driver's pure parts: the cpu/memory filter, the seeded tie-break, the
``/prioritize`` request it sends, and the registry access-log wait.

Everything stays in this process: node runtimes are in-memory fakes and the extender is
an ``httpx.MockTransport`` that decodes the request with the extender's own wire types.
The real runs (real containerd, real extender) are in tests/e2e.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from layersched.core.errors import TestbedError
from layersched.cri import CRIImage
from layersched.extender._wire import ExtenderArgs
from layersched.testbed.harness import (
    LocalDriver,
    RegistryAccessLog,
    choose_node,
    extender_args,
    fits,
)
from layersched.testbed.local import TestbedInventory, parse_inventory
from tests.unit._testbed_docs import inventory_doc

GI = 2**30
IMG1 = "10.250.50.1:5000/scenario/img1:v1"
IMG2 = "10.250.50.1:5000/scenario/img2:v1"


# ----------------------------------------------------------------------- filter
def _res(cpu: int | str, memory_bytes: int) -> dict[str, Decimal]:
    return {"cpu": Decimal(cpu), "memory": Decimal(memory_bytes)}


@pytest.mark.parametrize(
    ("free", "requests", "expected"),
    [
        # 2 cores and 4 GiB free, the pod asks for exactly that: fits (<=, not <).
        (_res(2, 4 * GI), _res(2, 4 * GI), True),
        # 1.5 cores free < 2 requested: the cpu alone rules the node out.
        (_res("1.5", 8 * GI), _res(2, 4 * GI), False),
        # cpu fits, but 4 GiB - 1 B free < 4 GiB requested.
        (_res(4, 4 * GI - 1), _res(2, 4 * GI), False),
        # A node that reports no memory has 0 of it: a memory request cannot fit.
        ({"cpu": Decimal(2)}, {"cpu": Decimal(1), "memory": Decimal(1)}, False),
        # A pod that requests nothing fits anywhere, even a full node.
        (_res(0, 0), {}, True),
    ],
    ids=["exact-fit", "cpu-short", "memory-short-by-1B", "resource-missing", "no-requests"],
)
def test_fits(free: dict[str, Decimal], requests: dict[str, Decimal], expected: bool) -> None:
    assert fits(free, requests) is expected


# --------------------------------------------------------------------- tie-break
@pytest.mark.parametrize(
    ("scores", "winner"),
    [
        # n2 holds L1+L2 (7) and n3 nothing (0): 7 > 0 wins whatever the seed.
        ({"n2": 7, "n3": 0}, "n2"),
        # Higher by one point is still strictly higher.
        ({"n1": 4, "n2": 5, "n3": 4}, "n2"),
        # A single candidate is chosen.
        ({"n3": 0}, "n3"),
    ],
    ids=["layer-locality-t3", "by-one-point", "single"],
)
def test_strictly_higher_score_always_wins(scores: dict[str, int], winner: str) -> None:
    for seed in range(50):
        assert choose_node(scores, random.Random(seed)) == winner


def test_equal_best_scores_are_broken_by_the_seed() -> None:
    # image-locality at t3: n2 and n3 tie at 0 (neither holds Img1 by name); n1 is lower.
    scores = {"n3": 0, "n2": 0, "n1": -1}
    picks = [choose_node(scores, random.Random(seed)) for seed in range(40)]
    # Only the tied best nodes are ever picked...
    assert set(picks) == {"n2", "n3"}
    # ...and the same seed gives the same pick (the names are sorted first, so the
    # order the extender listed them in does not matter).
    reordered = {"n1": -1, "n2": 0, "n3": 0}
    assert picks == [choose_node(reordered, random.Random(seed)) for seed in range(40)]


def test_choose_node_without_scores_is_an_error() -> None:
    with pytest.raises(TestbedError, match="no node was scored"):
        choose_node({}, random.Random(0))


# ------------------------------------------------------------ request and driver
def _inventory(node_count: int = 3) -> TestbedInventory:
    return parse_inventory(json.dumps(inventory_doc(node_count)).encode(), "inventory.json")


class _FakeRuntime:
    """A node's image store in memory: pulls add the image, removes drop it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.images: dict[str, CRIImage] = {}
        self.pulls: list[str] = []

    def list_images(self) -> list[CRIImage]:
        return list(self.images.values())

    def pull_image(self, ref: str, annotations: Mapping[str, str] | None = None) -> str:
        self.pulls.append(ref)
        image_id = f"sha256:{len(self.images):064x}"
        self.images[image_id] = CRIImage(image_id, (ref,), (), 30 * 2**20)
        return image_id

    def remove_image(self, ref: str) -> None:
        self.images.pop(ref, None)

    def close(self) -> None:
        pass


class _Extender:
    """Decodes each /prioritize body with the extender's wire types; answers ``score``."""

    def __init__(self, score: Callable[[str, list[str]], int]) -> None:
        self.score = score
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "POST" and request.url.path == "/prioritize"
        decoded = msgspec.json.decode(request.content, type=ExtenderArgs)  # shape check
        body = json.loads(request.content)
        self.bodies.append(body)
        assert decoded.Nodes is not None and decoded.Nodes.items is not None
        answer = [
            {"Host": n.metadata.name, "Score": self.score(n.metadata.name, _names(n))}
            for n in decoded.Nodes.items
        ]
        return httpx.Response(200, json=answer)


def _names(node: Any) -> list[str]:
    return [name for image in node.status.images or [] for name in image.names or []]


def _driver(extender: _Extender, tmp_path: Path, seed: int = 0) -> LocalDriver:
    access_log = RegistryAccessLog(tmp_path / "access.log", settle_poll_s=0.001)
    return LocalDriver(
        _inventory(),
        {"layer-locality": "http://extender.test"},
        seed=seed,
        runtime=_FakeRuntime,
        http=httpx.Client(transport=httpx.MockTransport(extender)),
        access_log=access_log,
    )


def test_extender_args_is_the_full_nodes_shape() -> None:
    pod = {"metadata": {"name": "P1"}}
    node = {"metadata": {"name": "n1"}, "status": {"images": []}}
    args = extender_args(pod, [node])
    # nodeCacheCapable: false -> full Nodes as a NodeList, NodeNames null, capitalised keys.
    assert args == {
        "Pod": pod,
        "Nodes": {"apiVersion": "v1", "kind": "NodeList", "items": [node]},
        "NodeNames": None,
    }


def test_prioritize_sends_full_nodes_of_fitting_nodes_only(tmp_path: Path) -> None:
    extender = _Extender(lambda node, names: 0)
    driver = _driver(extender, tmp_path)
    first = driver.schedule("P1", IMG1, "layer-locality")
    body = extender.bodies[0]
    # Every node is empty and free: all three are sent as full v1 Nodes.
    assert body["NodeNames"] is None
    items = body["Nodes"]["items"]
    assert [n["metadata"]["name"] for n in items] == ["n1", "n2", "n3"]
    for node in items:
        assert node["kind"] == "Node"
        assert node["status"]["allocatable"] == {"cpu": "2", "memory": "4Gi"}
        assert node["status"]["images"] == []
    # The pod requests a whole node (cpu 2, memory 4Gi) and runs the image.
    container = body["Pod"]["spec"]["containers"][0]
    assert container == {
        "name": "main",
        "image": IMG1,
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
    }
    # P1 took its node's whole cpu/memory: the next request leaves that node out, and
    # the remaining nodes still have no image.
    driver.schedule("P2", IMG2, "layer-locality")
    second = [n["metadata"]["name"] for n in extender.bodies[1]["Nodes"]["items"]]
    assert first.node not in second and len(second) == 2
    driver.close()


def test_schedule_cycle_images_and_resources(tmp_path: Path) -> None:
    # A layer-aware stand-in: 7 for a node holding Img2 (shares L1+L2 with Img1), else 0.
    extender = _Extender(lambda node, names: 7 if IMG2 in names else 0)
    driver = _driver(extender, tmp_path)
    p1 = driver.schedule("P1", IMG1, "layer-locality")
    p2 = driver.schedule("P2", IMG2, "layer-locality")
    assert p1.node != p2.node  # each pod takes a whole node
    driver.delete("P2")
    again = driver.schedule("P1-again", IMG1, "layer-locality")
    # P1's node is full; P2's node keeps Img2 in its status.images and scores 7 > 0.
    empty = ({"n1", "n2", "n3"} - {p1.node, p2.node}).pop()
    assert again.scores == {p2.node: 7, empty: 0}
    assert again.node == p2.node
    # The third node takes one more pod; then all three are full and a fourth has no room.
    assert driver.schedule("P3", IMG1, "layer-locality").node == empty
    with pytest.raises(TestbedError, match="P4: no node has room"):
        driver.schedule("P4", IMG1, "layer-locality")
    with pytest.raises(TestbedError, match="P9 is not running anywhere"):
        driver.delete("P9")
    driver.close()


def test_equal_scores_pick_follows_the_seed(tmp_path: Path) -> None:
    # An extender that scores everything 0 (image-locality at t0): the pick is the
    # seeded random choice, reproducible per seed and not always the first node.
    picks = []
    for seed in range(12):
        driver = _driver(_Extender(lambda node, names: 0), tmp_path, seed=seed)
        picks.append(driver.schedule("P1", IMG1, "layer-locality").node)
        again = _driver(_Extender(lambda node, names: 0), tmp_path, seed=seed)
        assert again.schedule("P1", IMG1, "layer-locality").node == picks[-1]
    assert len(set(picks)) > 1, picks


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        # The extender names a node it was not sent.
        (lambda hosts: [{"Host": "n9", "Score": 1}], "scored node.s. n9 it was not sent"),
        # Not the [{Host, Score}] shape.
        (lambda hosts: {"error": "boom"}, "answered something other than"),
    ],
    ids=["unknown-host", "wrong-shape"],
)
def test_bad_extender_answers_are_testbed_errors(
    answer: Callable[[list[str]], Any], error: str, tmp_path: Path
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer([]))

    driver = LocalDriver(
        _inventory(),
        {"layer-locality": "http://extender.test"},
        runtime=_FakeRuntime,
        http=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with pytest.raises(TestbedError, match=error):
        driver.schedule("P1", IMG1, "layer-locality")


# ------------------------------------------------------------------- access log
class _LateLog(RegistryAccessLog):
    """A log the registry appends to a little after the pull returned, a line per look.

    Lines appear only at looks at least ``delay_s`` after creation, as when the
    registry finishes writing after the client saw the response; then ``lines`` of
    them, one per look.
    """

    def __init__(self, path: Path, delay_s: float, lines: list[str], **kwargs: float) -> None:
        super().__init__(path, **kwargs)
        self.start = time.monotonic()
        self.delay_s = delay_s
        self.pending = list(lines)

    def mark(self) -> int:
        if self.pending and time.monotonic() - self.start >= self.delay_s:
            with self.path.open("a") as f:
                f.write(self.pending.pop(0))
        return super().mark()


def test_bytes_since_waits_for_lines_written_after_the_pull(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    lines = [
        f'10.0.0.2 - - [t] "GET /v2/a/blobs/sha256:{i} HTTP/1.1" 200 1000 "" "c"\n'
        for i in range(3)
    ]
    log = _LateLog(path, delay_s=0.05, lines=lines, settle_poll_s=0.1, settle_timeout_s=5.0)
    mark = log.mark()  # t=0: nothing yet
    # Two looks microseconds apart would agree on an empty log and count 0 B. Waiting
    # until the log stays put for a whole poll counts all three lines: 3 x 1000 B.
    assert log.bytes_since(mark, "10.0.0.2") == 3000


def test_bytes_since_gives_up_on_a_log_that_keeps_growing(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    line = '10.0.0.2 - - [t] "GET /v2/ HTTP/1.1" 200 10 "" "c"\n'
    log = _LateLog(path, delay_s=0, lines=[line] * 10_000, settle_poll_s=0.01, settle_timeout_s=0.2)
    started = time.monotonic()
    assert not log.wait_settled()
    # Bounded by the named timeout (plus one poll and scheduling slack), then it counts.
    assert time.monotonic() - started < 0.2 + 1.0
    assert log.bytes_since(0, "10.0.0.2") > 0


def test_bytes_since_with_no_log_yet_is_zero(tmp_path: Path) -> None:
    log = RegistryAccessLog(tmp_path / "missing.log", settle_poll_s=0.001)
    assert log.mark() == 0
    assert log.bytes_since(0, "10.0.0.2") == 0
