"""The extender's live inventory (``--watch``) against an in-process API double.

The double serves lists and watch streams from scripted state, including a 410 Gone
(the watch's version is too old: the provider must relist and converge), a dropped
connection, and a malformed NodeLayerInventory (ignored for that node only). The real
API server is exercised end to end on the local testbed (tests/e2e)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import tenacity

from layersched.core.errors import KubeError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodeimages import NodeImage
from layersched.extender import WatchLayerIndexProvider
from layersched.kube import NODE_LAYERS_PATH, NODES_PATH, Gone, WatchEvent
from tests.fixtures.fake_kube import FakeApi, digest, layers, node, started

CONVERGE_TIMEOUT_S = 5.0
POLL_S = 0.02

BASE = Layer(digest(1), 30_000_000)
APP = Layer(digest(2), 1_000_000)
IMG = NodeImage.held(("reg/app:1",), digest(100), (BASE, APP))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=5)


def on_loop(loop: asyncio.AbstractEventLoop, fn: Any) -> Any:
    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=5)


@tenacity.retry(
    stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
    wait=tenacity.wait_fixed(POLL_S),
    reraise=True,
)
def assert_holders(
    loop: asyncio.AbstractEventLoop, provider: WatchLayerIndexProvider, expected: list[str]
) -> None:
    def holders() -> list[str]:
        inventory = provider.current()
        assert inventory is not None
        return sorted(inventory.nodes[i].name for i in inventory.layer_holders(BASE.digest))

    assert on_loop(loop, holders) == expected


def test_list_then_watch_applies_each_change(loop: asyncio.AbstractEventLoop) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1"), node("n2")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG)]
    provider = started(api, loop)
    assert provider.ready()[0] is True
    assert_holders(loop, provider, ["n1"])
    # n2's agent publishes after a pull
    api.streams[NODE_LAYERS_PATH].put(WatchEvent("ADDED", layers("n2", IMG)))
    assert_holders(loop, provider, ["n1", "n2"])
    # two nodes agree on the image (the default quorum): pod images resolve from the
    # inventory, by name and by digest
    assert on_loop(loop, lambda: provider.image_layers("reg/app:1")) == IMG.layers
    assert on_loop(loop, lambda: provider.image_layers(f"reg/app@{IMG.digest}")) == IMG.layers
    assert on_loop(loop, lambda: provider.image_layers("reg/other:1")) is None
    # the image is removed from n1: its agent republishes an empty object
    api.streams[NODE_LAYERS_PATH].put(WatchEvent("MODIFIED", layers("n1")))
    assert_holders(loop, provider, ["n2"])
    # one node's word is not enough for a pod image: the registry is asked
    assert on_loop(loop, lambda: provider.image_layers("reg/app:1")) is None
    # a node deleted: gone from the inventory, whatever its layers say
    api.streams[NODES_PATH].put(WatchEvent("DELETED", node("n2")))
    assert_holders(loop, provider, [])
    assert on_loop(loop, lambda: provider.current().node_count) == 1  # type: ignore[union-attr]


def test_gone_relists_and_converges(loop: asyncio.AbstractEventLoop) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1"), node("n2")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG)]
    provider = started(api, loop)
    lists = api.lists
    # while the watch was away, n1 lost the image and n2 gained it; the watch's version
    # is too old: 410 Gone, and the relist must bring the inventory to the new truth
    api.items[NODE_LAYERS_PATH] = [layers("n1"), layers("n2", IMG)]
    api.streams[NODE_LAYERS_PATH].put(Gone("watching: too old resource version"))
    assert_holders(loop, provider, ["n2"])
    assert api.lists == lists + 1
    assert provider.state["nodelayerinventories"].relists == 1


def test_a_dropped_watch_keeps_serving_and_says_so(loop: asyncio.AbstractEventLoop) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG)]
    provider = started(api, loop)
    api.streams[NODES_PATH].put(KubeError("watching /api/v1/nodes: connection refused"))

    @tenacity.retry(
        stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def assert_stale() -> None:
        ok, why = provider.ready()
        assert ok is True  # still answering from the last inventory
        assert "re-syncing" in why and "connection refused" in why

    assert_stale()
    assert_holders(loop, provider, ["n1"])


def test_a_malformed_object_is_ignored_for_its_node_only(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1"), node("n2")]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG), layers("n2", IMG)]
    provider = started(api, loop)
    broken = layers("n2", IMG)
    broken["images"][0]["layers"] = [0, 99]  # past the layer table
    api.streams[NODE_LAYERS_PATH].put(WatchEvent("MODIFIED", broken))
    assert_holders(loop, provider, ["n1"])
    assert "ignoring the layers published for node n2" in caplog.text
    assert "images[0].layers[1]" in caplog.text


def test_nodes_without_an_agent_fall_back_to_the_registry_after_the_grace(
    loop: asyncio.AbstractEventLoop,
) -> None:
    api = FakeApi()
    with_status = node("n3")
    with_status["status"]["images"] = [{"names": ["reg/app:1"], "sizeBytes": 31_000_000}]
    api.items[NODES_PATH] = [node("n1"), with_status]
    api.items[NODE_LAYERS_PATH] = [layers("n1", IMG)]
    source = StaticLayerSource({"reg/app:1": IMG.layers})
    provider = WatchLayerIndexProvider(api.client, source, agent_grace_s=0.3)  # type: ignore[arg-type]
    provider.bind_loop(loop)
    provider.load()
    # n3's agent may still be starting: nothing is asked of the registry yet
    assert provider.node_image_resolutions == 0
    assert_holders(loop, provider, ["n1"])
    # past the grace, n3's status images are resolved: it holds the base layer too
    assert_holders(loop, provider, ["n1", "n3"])
    assert provider.node_image_resolutions == 1


def test_an_agent_publishing_within_the_grace_costs_no_registry_call(
    loop: asyncio.AbstractEventLoop,
) -> None:
    api = FakeApi()
    api.items[NODES_PATH] = [node("n1")]
    source = StaticLayerSource({})
    provider = WatchLayerIndexProvider(api.client, source, agent_grace_s=60)  # type: ignore[arg-type]
    provider.bind_loop(loop)
    provider.load()
    api.streams[NODE_LAYERS_PATH].put(WatchEvent("ADDED", layers("n1", IMG)))
    assert_holders(loop, provider, ["n1"])
    provider.agent_grace_s = 0  # the grace is over: what its timer has the worker do
    assert provider._warmup.warm("n1") is False
    assert provider.node_image_resolutions == 0
