"""What the ``--watch`` extender keeps is bounded, whatever the objects it watches say.

Issue 23's findings, each reproduced with objects the test generates and an in-process
API (tests/fixtures/fake_kube.py): objects for nodes that do not exist were kept; a
stale object (its agent gone) was believed forever; objects of any size were held; the
shared pools only grew; each node without an agent had a Timer thread; per-node maps
were never pruned; and a watch thread failing on anything but a KubeError died while
``/readyz`` kept saying "watching".
"""

from __future__ import annotations

import gc
import json
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import tenacity

from layersched.agent import DEFAULT_HEARTBEAT_S
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayers import LIMITS
from layersched.extender import WatchLayerIndexProvider
from layersched.extender import _memory as memory_module
from layersched.extender.watch._parse import (
    AGENT_HEARTBEAT_S,
    DEFAULT_INVENTORY_MAX_AGE_S,
    MAX_OBJECT_BYTES,
)
from layersched.kube import NODE_LAYERS_PATH, NODES_PATH, WatchEvent
from tests.fixtures import prereq
from tests.fixtures.fake_kube import (
    FakeApi,
    RunningLoop,
    digest,
    event,
    layers,
    metric,
    node,
    started,
)

CONVERGE_TIMEOUT_S = 10.0
POLL_S = 0.02
MB = 10**6

BASE = Layer(digest(1), 30 * MB)
APP = Layer(digest(2), 1 * MB)
IMG = NodeImage.held(("reg/app:1",), digest(100), (BASE, APP))


@pytest.fixture
def loop() -> Iterator[RunningLoop]:
    running = RunningLoop()
    yield running
    running.close()


def holders(loop: RunningLoop, provider: WatchLayerIndexProvider, layer: Layer) -> list[str]:
    def read() -> list[str]:
        inventory = provider.current()
        assert inventory is not None
        return sorted(inventory.nodes[i].name for i in inventory.layer_holders(layer.digest))

    result: list[str] = loop.call(read)
    return result


converging = tenacity.retry(
    stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
    wait=tenacity.wait_fixed(POLL_S),
    reraise=True,
)


@converging
def assert_holders(
    loop: RunningLoop, provider: WatchLayerIndexProvider, layer: Layer, expected: list[str]
) -> None:
    assert holders(loop, provider, layer) == expected


def fresh_image(n: int, layer_count: int = 10, size_bytes: int = 1000) -> NodeImage:
    """An image of ``layer_count`` layers nobody else has (digests from ``n``)."""
    first = 1_000_000 + n * 10_000
    return NodeImage.held(
        (f"reg/fresh-{n}:1",),
        digest(first),
        tuple(Layer(digest(first + 1 + j), size_bytes) for j in range(layer_count)),
    )


# ------------------------------------------------------------------ unknown nodes
def test_objects_for_nodes_that_do_not_exist_are_ignored_and_counted(loop: RunningLoop) -> None:
    # 200 objects for nodes that do not exist, each with 10 layers nobody else has: none
    # is kept (before: all 201 were, and their layers), each is counted; an object for a
    # ghost that becomes a Node later is read again then
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    ghosts = [layers(f"ghost-{i}", fresh_image(i)) for i in range(200)]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG), *ghosts]
    provider = started(api, loop.loop)
    assert metric(provider, "layersched_extender_watch_nodes_with_layers") == 1
    reason = {"resource": "nodelayerinventories", "reason": "unknown_node"}
    assert metric(provider, "layersched_extender_watch_ignored_objects_total", **reason) == 200
    assert loop.call(provider.tracked)["pooled_layers"] == 2  # n1's BASE and APP only
    # one more through the watch
    api.put(NODE_LAYERS_PATH, event("ADDED", layers("ghost-200", fresh_image(200))))

    @converging
    def counted() -> None:
        value = metric(provider, "layersched_extender_watch_ignored_objects_total", **reason)
        assert value == 201

    counted()
    # ghost-7's Node registers: its object, ignored until now, is read again (one GET)
    api.put(NODES_PATH, event("ADDED", node("ghost-7")))
    assert_holders(loop, provider, fresh_image(7).layers[0], ["ghost-7"])
    assert api.gets == [f"{NODE_LAYERS_PATH}/ghost-7"]
    assert loop.call(provider.tracked)["orphans"] == 200  # names only (bounded)


# ------------------------------------------------------------------------ staleness
def test_a_stale_inventory_counts_as_missing(loop: RunningLoop) -> None:
    # Each node's status image resolves (through the "registry") to layer S; its
    # object says it holds BASE. n1's object was observed 2 h ago (its agent is gone):
    # it counts as missing from the start, and n1 falls back to S. n2's object is fresh
    # but outlives the maximum age (2 s here) while held: it expires, and n2 falls back.
    stale_layer = Layer(digest(50), 5 * MB)
    source = StaticLayerSource({"reg/status:1": (stale_layer,)})
    api = FakeApi()
    api.items[NODES_PATH] = [
        node("n1", ("reg/status:1", 5 * MB)),
        node("n2", ("reg/status:1", 5 * MB)),
    ]
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    api.items[NODE_LAYERS_PATH] = [
        layers("n1", IMG, observed_at=two_hours_ago),
        layers("n2", IMG),
    ]
    provider = started(api, loop.loop, source=source, agent_grace_s=0, max_age_s=2.0)
    assert_holders(loop, provider, BASE, ["n2"])
    assert_holders(loop, provider, stale_layer, ["n1"])
    assert metric(provider, "layersched_extender_watch_stale_inventories") == 1
    # n2's object expires while held
    assert_holders(loop, provider, BASE, [])
    assert_holders(loop, provider, stale_layer, ["n1", "n2"])
    assert metric(provider, "layersched_extender_watch_stale_inventories") == 2
    assert metric(provider, "layersched_extender_watch_expired_inventories_total") == 1
    # n2's agent is back: a fresh object is believed again (with a longer bound now)
    provider.max_age_s = 3600.0
    api.put(NODE_LAYERS_PATH, event("MODIFIED", layers("n2", IMG)))
    assert_holders(loop, provider, BASE, ["n2"])
    assert metric(provider, "layersched_extender_watch_stale_inventories") == 1


def test_the_default_maximum_age_is_three_agent_heartbeats() -> None:
    # the extender cannot import the agent (sibling adapters): the period is repeated
    # there, and held equal here
    assert AGENT_HEARTBEAT_S == DEFAULT_HEARTBEAT_S
    assert DEFAULT_INVENTORY_MAX_AGE_S == 3 * DEFAULT_HEARTBEAT_S


# ----------------------------------------------------------------------------- caps
def _padded(name: str) -> dict[str, Any]:
    document = layers(name, IMG)
    document["metadata"]["annotations"] = {"pad": "x" * MAX_OBJECT_BYTES}
    return document


def _many_layers(name: str) -> dict[str, Any]:
    document = layers(name, IMG)
    document["layers"] += [
        {"digest": digest(10_000 + i), "sizeBytes": 1} for i in range(LIMITS.max_layers)
    ]
    return document


def _many_images(name: str) -> dict[str, Any]:
    document = layers(name, IMG)
    document["images"] += [
        {"names": [f"i{i}:1"], "digest": digest(20_000 + i), "layers": [0]}
        for i in range(LIMITS.max_images)
    ]
    return document


def _long_image(name: str) -> dict[str, Any]:
    document = layers(name, IMG)
    document["images"][0]["layers"] = [0, 1] * (LIMITS.max_layers_per_image // 2 + 1)
    return document


@pytest.mark.parametrize(
    ("build", "sized"),
    [
        # over the byte cap (1.25 MiB): known from the watch line's length
        (_padded, True),
        # over the CRD's own list bounds (the API would refuse them; a hostile or
        # misconfigured API server might not): counted before the object is parsed
        (_many_layers, False),
        (_many_images, False),
        (_long_image, False),
    ],
    ids=["bytes", "layers", "images", "layers-per-image"],
)
def test_objects_over_a_cap_are_skipped_and_counted(
    loop: RunningLoop, build: Any, sized: bool
) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1"), node("n2")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG), layers("n2", IMG)]
    provider = started(api, loop.loop)
    hostile = build("n2")
    api.put(
        NODE_LAYERS_PATH, event("MODIFIED", hostile) if sized else WatchEvent("MODIFIED", hostile)
    )
    # n2 falls back as if it had no agent (nothing of the object is held); n1 untouched
    assert_holders(loop, provider, BASE, ["n1"])
    reason = {"resource": "nodelayerinventories", "reason": "too_large"}
    assert metric(provider, "layersched_extender_watch_ignored_objects_total", **reason) == 1
    assert loop.call(provider.tracked)["pooled_layers"] == 2


def test_a_listed_object_over_the_byte_cap_is_skipped_undecoded(loop: RunningLoop) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1"), node("n2")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG), _padded("n2")]
    provider = started(api, loop.loop)
    assert holders(loop, provider, BASE) == ["n1"]
    reason = {"resource": "nodelayerinventories", "reason": "too_large"}
    assert metric(provider, "layersched_extender_watch_ignored_objects_total", **reason) == 1


# ------------------------------------------------------------------------- pools
def _live(kind: type, wanted: set[str]) -> int:
    """Live objects of ``kind`` whose digest (Layer) or first name (NodeImage) is wanted."""
    gc.collect()
    if kind is Layer:
        return sum(1 for o in gc.get_objects() if type(o) is Layer and o.digest in wanted)
    return sum(
        1 for o in gc.get_objects() if type(o) is NodeImage and o.names and o.names[0] in wanted
    )


def test_the_pools_release_what_no_object_holds(loop: RunningLoop) -> None:
    # n1's agent republishes 100 times, each time an image of 20 fresh layers; n1's
    # kubelet 100 times a status image of a fresh name. Only the current ones stay
    # (before: 2,000 Layers and 100 status images, for ever); deleting releases all.
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    provider = started(api, loop.loop)
    rounds, first = 100, 5_000  # digests no other test uses
    for r in range(first, first + rounds):
        api.put(NODE_LAYERS_PATH, event("MODIFIED", layers("n1", fresh_image(r, layer_count=20))))
        api.put(NODES_PATH, event("MODIFIED", node("n1", (f"reg/status-{r}:1", MB))))
    assert_holders(loop, provider, fresh_image(first + rounds - 1, 20).layers[0], ["n1"])

    @converging
    def latest_status() -> None:
        names = loop.call(lambda: provider.held_images("n1"))
        assert names == [f"reg/fresh-{first + rounds - 1}:1"]
        assert loop.call(lambda: provider._store.nodes["n1"].info.images[0].names) == (
            f"reg/status-{first + rounds - 1}:1",
        )

    latest_status()
    span = range(first, first + rounds)
    generated = {layer.digest for r in span for layer in fresh_image(r, 20).layers}
    statuses = {f"reg/status-{r}:1" for r in span}
    assert _live(Layer, generated) == 20  # the current image's
    assert _live(NodeImage, statuses) == 1
    tracked = loop.call(provider.tracked)
    assert tracked["pooled_layers"] == 20
    assert tracked["pooled_images"] == 2  # the published image and the status image
    # the object and the Node go: nothing of them is left
    api.put(NODE_LAYERS_PATH, event("DELETED", layers("n1")))
    api.put(NODES_PATH, event("DELETED", node("n1")))

    @converging
    def emptied() -> None:
        tracked = loop.call(provider.tracked)
        assert (tracked["pooled_layers"], tracked["pooled_images"], tracked["held_bytes"]) == (
            0,
            0,
            0,
        )

    emptied()
    assert _live(Layer, generated) == 0


def test_nodes_falling_back_share_one_resolved_status_image(loop: RunningLoop) -> None:
    # 20 nodes without an agent report the same two status images, which the
    # "registry" resolves: every node's inventory entry is the same resolved object per
    # image (one per pooled status image, made once), not one per node (after a flood,
    # 1,000 nodes falling back made 50,000, each pinning the flood's freed pages). When
    # the last node holding an image goes, its resolved twin goes with the pool entry.
    app, db = Layer(digest(60), 5 * MB), Layer(digest(61), 7 * MB)
    source = StaticLayerSource({"reg/fallback-app:1": (app,), "reg/fallback-db:1": (db,)})
    api = FakeApi()
    names = sorted(f"n{i}" for i in range(20))
    api.items[NODES_PATH] = [
        node(n, ("reg/fallback-app:1", 5 * MB), ("reg/fallback-db:1", 7 * MB)) for n in names
    ]
    provider = started(api, loop.loop, source=source, agent_grace_s=0)
    assert_holders(loop, provider, app, names)
    assert_holders(loop, provider, db, names)

    def images() -> list[tuple[NodeImage, ...]]:
        inventory = provider.current()
        assert inventory is not None
        return [tuple(node_info.images) for node_info in inventory.nodes]

    held = loop.call(images)
    assert len(held) == 20
    by_name = {image.names[0]: image for image in held[0]}
    assert by_name["reg/fallback-app:1"].layers == (app,) and by_name[
        "reg/fallback-db:1"
    ].layers == (db,)
    for node_images in held:
        assert all(image is by_name[image.names[0]] for image in node_images)
    assert (
        _live(NodeImage, {"reg/fallback-app:1", "reg/fallback-db:1"}) == 4
    )  # two pooled, two resolved
    # every node goes: nothing of the images is left, resolved or not
    for n in names:
        api.put(NODES_PATH, event("DELETED", node(n)))

    @converging
    def emptied() -> None:
        assert loop.call(provider.tracked)["pooled_images"] == 0

    emptied()
    del held, by_name, node_images
    assert _live(NodeImage, {"reg/fallback-app:1", "reg/fallback-db:1"}) == 0


# ------------------------------------------------------------------------ threads
def test_one_timer_thread_for_every_node_without_an_agent(loop: RunningLoop) -> None:
    # 300 nodes without an agent wait out their grace (60 s) before the registry is
    # asked: one deadline each on one timer thread (before: 300 Timer threads)
    api = FakeApi()
    api.items[NODES_PATH] = [node(f"n{i}", ("reg/app:1", MB)) for i in range(300)]
    before = threading.active_count()
    provider = started(api, loop.loop, source=StaticLayerSource({}), agent_grace_s=60)
    added = threading.active_count() - before
    assert added <= 3, [t.name for t in threading.enumerate()]  # 2 watches and the timers
    assert loop.call(provider.tracked)["timers"] == 300
    # each node updated 3 times, each object published and republished: the heap keeps
    # one live deadline per key, and its dead entries stay bounded
    for round_ in range(3):
        for i in range(300):
            api.put(NODES_PATH, event("MODIFIED", node(f"n{i}", ("reg/app:1", MB + round_))))
    for _ in range(5):
        for i in range(100):
            api.put(NODE_LAYERS_PATH, event("MODIFIED", layers(f"n{i}", IMG)))

    @converging
    def published() -> None:
        assert len(holders(loop, provider, BASE)) == 100

    published()
    tracked = loop.call(provider.tracked)
    assert tracked["timer_heap"] <= 2 * tracked["timers"] + 64
    assert threading.active_count() - before <= 4  # and the worker, at most


def test_per_node_state_goes_with_the_node(loop: RunningLoop) -> None:
    # 100 nodes without an agent, 50 with one (10 of them stale), then every Node is
    # deleted, then every object: nothing per node is left (before: the grace maps kept
    # every node ever seen, and the pools every layer)
    api = FakeApi()
    names = [f"n{i}" for i in range(150)]
    api.items[NODES_PATH] = [node(name, ("reg/app:1", MB)) for name in names]
    old = datetime.now(UTC) - timedelta(hours=2)
    api.items[NODE_LAYERS_PATH] = [
        layers(name, fresh_image(i), observed_at=old if i < 10 else None)
        for i, name in enumerate(names[:50])
    ]
    provider = started(api, loop.loop, source=StaticLayerSource({}), agent_grace_s=60)
    tracked = loop.call(provider.tracked)
    assert (tracked["nodes"], tracked["layers"], tracked["stale"]) == (150, 40, 10)
    for name in names:
        api.put(NODES_PATH, event("DELETED", node(name)))

    @converging
    def nodes_gone() -> None:
        assert len(provider._warmup.first_seen) == len(provider._warmup.latest) == 0
        tracked = loop.call(provider.tracked)
        for key in ("nodes", "layers", "keys", "voted", "stale", "timers", "pooled_layers"):
            assert tracked[key] == 0, key
        assert tracked["orphans"] == 40  # the objects still in the API, by name

    nodes_gone()
    for name in names[:50]:
        api.put(NODE_LAYERS_PATH, event("DELETED", layers(name)))

    @converging
    def objects_gone() -> None:
        tracked = loop.call(provider.tracked)
        assert (tracked["orphans"], tracked["held_bytes"], tracked["pooled_images"]) == (0, 0, 0)

    objects_gone()


# ---------------------------------------------------------------- watch failures
def test_any_watch_failure_disconnects_retries_and_shows_in_readyz(loop: RunningLoop) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG)]
    provider = started(api, loop.loop)
    provider.unready_after_s = 0.0  # any disconnection is "too long" here
    # not a KubeError: a bug, or something no decoder foresaw
    api.put(NODES_PATH, RuntimeError("boom: not the API's doing"))

    @converging
    def disconnected() -> None:
        state = provider.state["nodes"]
        assert state.connected is False and state.failures == 1
        ok, why = provider.ready()
        assert ok is False
        assert "[-]nodes: serving the last inventory, re-syncing" in why
        assert "RuntimeError: boom" in why

    disconnected()
    # the thread retried (0.5 s later): a new Node arrives through it
    api.put(NODES_PATH, event("ADDED", node("n2")))
    api.put(NODE_LAYERS_PATH, event("ADDED", layers("n2", IMG)))
    assert_holders(loop, provider, BASE, ["n1", "n2"])
    assert provider.state["nodes"].connected is True
    assert provider.ready()[0] is True


def test_a_list_failing_on_anything_is_retried(loop: RunningLoop) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    failures = iter([ValueError("a bug while listing"), None])

    class Flaky:
        def __init__(self) -> None:
            self.inner = api.client()

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def __getattr__(self, verb: str) -> Any:
            if not verb.startswith("list"):
                return getattr(self.inner, verb)
            failure = next(failures, None)
            if failure is not None:  # the first list fails, as a bug would
                raise failure
            return getattr(self.inner, verb)

    provider = WatchLayerIndexProvider(Flaky, None)  # type: ignore[arg-type]
    provider.bind_loop(loop.loop)
    provider.load()
    assert provider.state["nodes"].failures == 1
    assert loop.call(lambda: provider.current().node_count) == 1  # type: ignore[union-attr]


# -------------------------------------------------------------------------- budget
def _shape(kind: str, i: int) -> list[NodeImage]:
    if kind == "fresh-layers":  # 400 layers nobody else has
        return [fresh_image(i, layer_count=400)]
    if kind == "many-names":  # 60 images of 8 long names each, on 2 shared layers
        shared = (BASE, APP)
        return [
            NodeImage.held(
                tuple(
                    f"registry.example.com/team-{i}/image-{k}/v-{m}:{'x' * 40}" for m in range(8)
                ),
                digest(5_000_000 + i * 1000 + k),
                shared,
            )
            for k in range(60)
        ]
    # every node the same 50 images over 300 shared layers: a cluster as it should be
    base = [Layer(digest(100 + j), MB) for j in range(300)]
    return [
        NodeImage.held(
            (f"reg/img{k}:1", f"reg/img{k}@{digest(9000 + k)}"),
            digest(9000 + k),
            tuple(base[(k * 7 + j) % 300] for j in range(10)),
        )
        for k in range(50)
    ]


@pytest.mark.parametrize("kind", ["fresh-layers", "many-names", "shared"])
def test_the_estimate_is_an_upper_bound_of_what_is_held(loop: RunningLoop, kind: str) -> None:
    # what the budget counts must not undercount: 40 nodes publish objects of one shape,
    # and the memory the extender really gained (tracemalloc, after the objects the test
    # built are dropped) stays at or below the estimate charged for them
    api = FakeApi()
    api.items[NODES_PATH] = [node(f"n{i}") for i in range(40)]
    provider = started(api, loop.loop)
    documents = [json.dumps(layers(f"n{i}", *_shape(kind, i))) for i in range(40)]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for text in documents:
            api.streams[NODE_LAYERS_PATH].put(event("ADDED", json.loads(text)))

        @converging
        def applied() -> None:
            assert loop.call(provider.tracked)["layers"] == 40

        applied()
        documents.clear()
        charged = loop.call(provider.tracked)["held_bytes"]

        @converging
        def within_the_charge() -> None:
            # the last apply's transient sets go a moment after it is counted
            gc.collect()
            gained = tracemalloc.get_traced_memory()[0] - base
            assert 0 < gained <= charged, (gained, charged)

        within_the_charge()
    finally:
        tracemalloc.stop()


def test_the_budget_refuses_objects_past_it(loop: RunningLoop) -> None:
    # a budget of 2 MB; 40 nodes publish 400 fresh layers each (~190 KB charged each):
    # about 10 are held, the rest refused and counted, and those nodes fall back
    api = FakeApi()
    api.items[NODES_PATH] = [node(f"n{i}") for i in range(40)]
    budget = 2 * MB
    provider = started(api, loop.loop, max_inventory_bytes=budget)
    nodes_bytes = loop.call(provider.tracked)["held_bytes"]  # the 40 Nodes' own charge
    for i in range(40):
        api.put(NODE_LAYERS_PATH, event("ADDED", layers(f"n{i}", *_shape("fresh-layers", i))))
    reason = {"resource": "nodelayerinventories", "reason": "over_budget"}

    @converging
    def settled() -> None:
        held = loop.call(provider.tracked)["layers"]
        refused = metric(provider, "layersched_extender_watch_ignored_objects_total", **reason)
        assert refused is not None and held + refused == 40 and refused > 0

    settled()
    assert 0 < loop.call(provider.tracked)["held_bytes"] <= budget
    # what was held is released with its objects, and the budget serves others again
    for i in range(40):
        api.put(NODE_LAYERS_PATH, event("DELETED", layers(f"n{i}")))

    @converging
    def released() -> None:
        assert loop.call(provider.tracked)["held_bytes"] == nodes_bytes

    released()
    api.put(NODE_LAYERS_PATH, event("ADDED", layers("n39", *_shape("fresh-layers", 39))))
    assert_holders(loop, provider, fresh_image(39, layer_count=400).layers[0], ["n39"])


def test_a_burst_of_objects_is_followed_by_a_trim(
    loop: RunningLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # after objects of more than TRIM_AFTER_BYTES were parsed (or released), glibc is
    # told to return its free pages (on glibc; elsewhere there is nothing to do)
    monkeypatch.setattr(memory_module, "TRIM_PERIOD_S", 0.1)
    monkeypatch.setattr(memory_module, "TRIM_AFTER_BYTES", 100_000)
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    provider = started(api, loop.loop)
    assert provider.trims == 0
    for r in range(20):
        api.put(NODE_LAYERS_PATH, event("MODIFIED", layers("n1", fresh_image(9_000 + r, 200))))
    if not memory_module.available():
        prereq.unavailable("the C library is not glibc: there is nothing to trim")

    @converging
    def trimmed() -> None:
        assert provider.trims >= 1

    trimmed()
