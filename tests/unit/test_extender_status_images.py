"""A status image's name answers only for itself (issue 44, finding 2).

Nodes without an agent are scored from ``status.images``, resolved through the registry
by the watch's warm-up. Before, the warm-up kept an answer under an image's *first* name
whichever of its names gave it, and credited every node whose image had that first name:
a node listing ``[K, ghcr.io/attacker/tiny:1]``, with K unresolvable at that moment (a
private registry, docker.io's 429), made an honest node's 1 GB image K one 1-byte layer;
and a failure at first sight was kept for good, never retried. Now each name is looked
up for itself in the resolvers' one cache, with its TTLs, and a node whose images did not
all resolve is warmed again once the failures' TTL is over. The registry is a stand-in
here (it answers what the test says); the API is tests/fixtures/fake_kube.py's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tenacity

from layersched.core.errors import LayerResolutionError
from layersched.core.layers import Layer
from layersched.core.reference import ImageName
from layersched.core.strategies import get_strategy
from layersched.extender import make_extender
from layersched.extender.watch._provider import WatchLayerIndexProvider
from layersched.kube import NODES_PATH
from layersched.registry import _cache
from tests.fixtures.fake_kube import FakeApi, RunningLoop, digest, event, started

CONVERGE_TIMEOUT_S = 5.0
POLL_S = 0.02

#: The honest node's image (a private registry: unresolvable when first asked) and the
#: attacker's tiny one, each with a layer of its own.
BIG = "private.example.com/team/big:1"
TINY = "ghcr.io/attacker/tiny:1"
BIG_LAYER = Layer(digest(1), 1_000_000_000)
TINY_LAYER = Layer(digest(7), 1)


class Registry:
    """The registry: answers what ``known`` holds (the test changes it), counts calls."""

    def __init__(self, known: dict[str, tuple[Layer, ...]]) -> None:
        self.known = dict(known)
        self.asked: list[str] = []

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        self.asked.append(image)
        if image not in self.known:
            raise LayerResolutionError(f"{image}: 401 unauthorized (a private registry)")
        return self.known[image]


def status_node(name: str, *names: str, size_bytes: int = 1) -> dict[str, object]:
    """A Node whose one status image has ``names`` (the kubelet writes them: anyone's)."""
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "status": {"images": [{"names": list(names), "sizeBytes": size_bytes}]},
    }


@pytest.fixture
def loop() -> Iterator[RunningLoop]:
    running = RunningLoop()
    yield running
    running.close()


def holders(loop: RunningLoop, provider: WatchLayerIndexProvider, layer: Layer) -> list[str]:
    def find() -> list[str]:
        inventory = provider.current()
        assert inventory is not None
        return sorted(inventory.nodes[i].name for i in inventory.layer_holders(layer.digest))

    held: list[str] = loop.call(find)
    return held


@tenacity.retry(
    stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
    wait=tenacity.wait_fixed(POLL_S),
    reraise=True,
)
def assert_holders(
    loop: RunningLoop, provider: WatchLayerIndexProvider, layer: Layer, expected: list[str]
) -> None:
    assert holders(loop, provider, layer) == expected


def test_another_names_answer_is_never_this_names(loop: RunningLoop) -> None:
    # the attacker's node lists [BIG, TINY]: BIG fails, TINY resolves, so it holds TINY's
    # layer (its own claim about itself). The honest node listing BIG then joins: its
    # image is BIG's alone, which failed; it must not be credited with TINY's layer
    registry = Registry({TINY: (TINY_LAYER,)})
    api = FakeApi()
    api.items[NODES_PATH] = [status_node("attacker", BIG, TINY)]
    provider = started(api, loop.loop, source=registry, agent_grace_s=0)
    assert_holders(loop, provider, TINY_LAYER, ["attacker"])
    api.put(NODES_PATH, event("ADDED", status_node("honest", BIG, size_bytes=10**9)))
    # a node listing TINY alone joins after it: once it holds TINY's layer, the warm-up
    # (one worker, first in first out) has done the honest node too
    api.put(NODES_PATH, event("ADDED", status_node("probe", TINY)))
    assert_holders(loop, provider, TINY_LAYER, ["attacker", "probe"])
    assert holders(loop, provider, BIG_LAYER) == []


def test_a_failure_is_retried_once_its_ttl_is_over(
    loop: RunningLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BIG fails when first asked (the registry is down, or rate-limits); it is asked
    # again after the negative TTL and the node is then credited with its layers
    monkeypatch.setattr(_cache, "NEGATIVE_TTL_S", 0.2)
    registry = Registry({})
    api = FakeApi()
    api.items[NODES_PATH] = [status_node("n1", BIG, size_bytes=10**9)]
    provider = started(api, loop.loop, source=registry, agent_grace_s=0)

    @tenacity.retry(
        stop=tenacity.stop_after_delay(CONVERGE_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def asked() -> None:
        assert BIG in registry.asked

    asked()
    registry.known[BIG] = (BIG_LAYER,)  # the registry is back
    assert_holders(loop, provider, BIG_LAYER, ["n1"])


def test_the_warm_up_answers_are_the_extenders_cache(loop: RunningLoop) -> None:
    # the warm-up resolves through the extender's resolvers: their one cache (and its
    # budget) holds what it found, name by name, and a pod naming the image finds it there
    registry = Registry({BIG: (BIG_LAYER,), TINY: (TINY_LAYER,)})
    api = FakeApi()
    api.items[NODES_PATH] = [status_node("n1", BIG, TINY)]
    provider = started(api, loop.loop, source=registry, agent_grace_s=60)
    extender = make_extender(get_strategy("layer-locality"), registry, provider)  # type: ignore[arg-type]
    try:
        provider.agent_grace_s = 0  # its grace is over: what its timer has the worker do
        provider._warmup.want("warm", "n1")
        assert_holders(loop, provider, BIG_LAYER, ["n1"])
        cache = extender.resolver.cache
        assert cache.layers_of(ImageName(BIG)) == (BIG_LAYER,)
        assert cache.layers_of(ImageName(TINY)) is None  # BIG answered: TINY never asked
        assert cache.budget.held_bytes >= cache.held_bytes > 0
    finally:
        extender.close()
