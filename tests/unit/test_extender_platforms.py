"""A platform is given a source while two nodes report it, and dropped when they do not
(issue 44): the live watch's nodes, counted as they come and go.

Before, the first node to report a platform got it a registry source, a resolver and a
cache, held for good: one kubelet could claim every slot, and what a platform's cache
held outlived its last node. (Full-``Nodes`` requests: test_extender_hardening.py's
``test_one_kubelet_cannot_claim_the_platform_slots``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import tenacity

from layersched.core.layers import Layer
from layersched.core.manifest import DEFAULT_PLATFORM, Platform
from layersched.core.reference import ImageName
from layersched.core.strategies import get_strategy
from layersched.extender import Platforms, make_extender
from layersched.extender._wire import ExtenderArgs
from layersched.extender.watch._provider import WatchLayerIndexProvider
from layersched.kube import NODES_PATH
from layersched.registry import MemoryBudget
from tests.fixtures.fake_kube import FakeApi, RunningLoop, digest, event, started

CONVERGE_TIMEOUT_S = 5.0
POLL_S = 0.02
ARM64 = "linux/arm64"
APP = ImageName("reg.example/app:1")


class Registry:
    """One platform's registry: answers every image with one layer of its own."""

    def __init__(self, platform: str) -> None:
        self.platform = platform
        self.asked: list[str] = []

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        self.asked.append(image)
        return (Layer(digest(1 if self.platform == ARM64 else 2), 1_000),)


def arm_node(name: str) -> dict[str, Any]:
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}
    return {"metadata": {"name": name, "resourceVersion": "1", "labels": labels}}


@pytest.fixture
def loop() -> Iterator[RunningLoop]:
    running = RunningLoop()
    yield running
    running.close()


def converging(check: Any) -> Any:
    return tenacity.retry(
        stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )(check)


def test_a_platform_needs_two_nodes_and_goes_with_them(loop: RunningLoop) -> None:
    made: list[str] = []

    def factory(platform: Platform) -> Registry:
        made.append(str(platform))
        return Registry(str(platform))

    default = Registry(str(DEFAULT_PLATFORM))
    platforms = Platforms(DEFAULT_PLATFORM, default, factory)
    api = FakeApi()
    api.items[NODES_PATH] = [arm_node("arm-1")]
    provider: WatchLayerIndexProvider = started(
        api, loop.loop, source=default, platforms=platforms, agent_grace_s=60
    )
    budget = MemoryBudget()
    extender = make_extender(
        get_strategy("layer-locality"), default, provider, platforms=platforms, budget=budget
    )

    def pod_request() -> None:
        # a pod scored on every node: what a request does (the sweep of dropped platforms)
        body = {
            "Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"image": APP}]}},
            "NodeNames": ["arm-1", "arm-2"],
        }
        args = msgspec.json.decode(msgspec.json.encode(body), type=ExtenderArgs)
        asyncio.run_coroutine_threadsafe(extender.prioritize(args), loop.loop).result(30)

    try:
        # one node reports arm64: no source of its own, scored in the default
        assert loop.call(lambda: provider.platform_keys) in (None, [str(DEFAULT_PLATFORM)])
        assert made == [] and platforms.active() == {str(DEFAULT_PLATFORM)}
        # a second one: arm64 gets its source, both nodes are scored in it
        api.put(NODES_PATH, event("ADDED", arm_node("arm-2")))

        @converging
        def both_in_arm64() -> None:
            assert loop.call(lambda: provider.platform_keys) == [ARM64, ARM64]

        both_in_arm64()
        pod_request()
        assert made == [ARM64] and ARM64 in platforms.active()
        arm_cache = extender.pod_layers.resolver(ARM64).cache

        @converging
        def resolved_for_arm64() -> None:
            assert arm_cache.layers_of(APP) == (Layer(digest(1), 1_000),)

        resolved_for_arm64()
        assert budget.members == 2  # the default platform's cache and arm64's
        # one goes: fewer than two report arm64, which is dropped with what it held
        api.put(NODES_PATH, event("DELETED", arm_node("arm-2")))

        @converging
        def back_in_the_default() -> None:
            assert loop.call(lambda: provider.platform_keys) in (None, [str(DEFAULT_PLATFORM)])

        back_in_the_default()
        pod_request()
        assert platforms.active() == {str(DEFAULT_PLATFORM)}
        # arm64's cache is empty and out of the budget: only the default's is charged
        assert len(arm_cache) == 0 and budget.members == 1
        assert budget.held_bytes == extender.resolver.cache.held_bytes
    finally:
        extender.close()
