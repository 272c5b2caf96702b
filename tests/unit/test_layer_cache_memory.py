"""What the layer caches cost, against what they are charged (issue 44): measured with
tracemalloc, as the pools' own tests do (test_extender_watch_bounds.py).

Issue 44 found a failure charged 300 bytes that cost about 5.8 KB (its exception kept
its chained cause, traceback and frame locals), positive entries charged 1.3 KB that cost
2.6 KB, expired failures that stayed until their name was asked for again, a set of
refused registries without bound, and one cache per platform each with its own bound.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
import weakref
from collections.abc import Callable, Iterator

import pytest

from layersched.core.errors import LayerResolutionError
from layersched.core.layers import Layer
from layersched.core.reference import ImageName
from layersched.registry import (
    NEGATIVE_TTL_S,
    Fetched,
    LayerCache,
    MemoryBudget,
    RegistryLayerSource,
)
from layersched.registry._entries import MAX_ERROR_CHARS
from tests.unit.test_registry_client import FakeRegistry, client_for

#: Entries per measurement: right after the cache's dicts grew (a worst case: 5,500 is
#: past 2/3 of 8,192 slots), and between two growths.
SIZES = (5_500, 4_000)
#: The charge may exceed what is measured by this much at most: it is what entries cost,
#: not a guess an order of magnitude off either way.
MAX_OVERCHARGE = 1.25
REFUSED = "refused.example.net"
ALLOWED = "registry.example.com"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _digest(i: int, j: int = 0) -> str:
    return f"sha256:{i:032x}{j:032x}"


def _failure(i: int) -> tuple[ImageName, Fetched | None, BaseException | None]:
    name = ImageName(f"{REFUSED}/p{i}/c{i % 300}:1")
    try:  # raised and chained as the registry source raises it: a traceback, a cause
        try:
            raise ValueError(f"registry {REFUSED} is not allowed: resolving {name!r}")
        except ValueError as err:
            raise LayerResolutionError(str(err)) from err
    except LayerResolutionError as err:
        return name, None, err


def _tag(i: int) -> tuple[ImageName, Fetched | None, BaseException | None]:
    layers = tuple(Layer(_digest(i, j), 1_000_000 + j) for j in range(10))
    return ImageName(f"{ALLOWED}/app{i}:1"), Fetched(layers, _digest(i)), None


def _pinned(i: int) -> tuple[ImageName, Fetched | None, BaseException | None]:
    layers = (Layer(_digest(i, 1), 5_000_000),)
    return ImageName(f"{ALLOWED}/app{i}@{_digest(i)}"), Fetched(layers, _digest(i)), None


def _without_digest(i: int) -> tuple[ImageName, Fetched | None, BaseException | None]:
    layers = tuple(Layer(_digest(i, j), 1_000_000 + j) for j in range(3))
    return ImageName(f"app{i}:1"), Fetched(layers), None


def _long_name(i: int) -> tuple[ImageName, Fetched | None, BaseException | None]:
    # a name of characters outside Latin-1 (4 bytes each in a Python string), and a
    # reason past MAX_ERROR_CHARS: charged by what the strings cost, not their length
    name = ImageName(f"{REFUSED}/{i}/" + "\U0001f600" * 200)
    return name, None, LayerResolutionError(f"resolving {name!r}: " + "x" * 2000)


SHAPES: dict[str, Callable[[int], tuple[ImageName, Fetched | None, BaseException | None]]] = {
    "failure": _failure,
    "tag-of-10-layers": _tag,
    "pinned-of-1-layer": _pinned,
    "tag-without-digest": _without_digest,
    "long-name-and-reason": _long_name,
}


@pytest.fixture
def traced() -> Iterator[Callable[[], int]]:
    """Bytes allocated since the fixture began and still held (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        yield lambda: tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("size", SIZES, ids=[f"{n}-entries" for n in SIZES])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_entry_is_charged_what_it_costs(
    traced: Callable[[], int], shape: str, size: int
) -> None:
    # the names, layers and errors are made while traced, as a request's are: what the
    # cache keeps of them is its own; what it does not keep (the exceptions) is freed
    # a clock that stands still: a loaded machine's loop may outlast the failures' TTL
    cache = LayerCache(budget=MemoryBudget(2**40), max_entries=10**7, clock=FakeClock())
    make = SHAPES[shape]
    for i in range(size):
        name, fetched, error = make(i)
        cache.store(name, fetched, error)
    del name, fetched, error
    gc.collect()
    measured = traced()
    charged = cache.held_bytes
    assert len(cache) == size
    assert charged == cache.budget.held_bytes
    # charged at least what is held, and not much more
    assert measured <= charged <= MAX_OVERCHARGE * measured, (measured, charged)


def test_a_failure_keeps_text_not_the_exception() -> None:
    # the exception (its cause, traceback and frames) is freed once stored; its reason
    # stays, cut to MAX_ERROR_CHARS
    cache = LayerCache()
    name, _, error = _long_name(1)
    assert error is not None
    gone = weakref.ref(error)
    cache.store(name, None, error)
    del error
    gc.collect()
    assert gone() is None
    entry, _ = cache.get(name)
    assert entry is not None and isinstance(entry.error, str)
    assert len(entry.error) == MAX_ERROR_CHARS and entry.error.endswith("…")


def test_refused_images_cost_what_they_are_charged(traced: Callable[[], int]) -> None:
    # issue 44's flood on the real path: images of a registry outside the allowlist,
    # through the registry source and the cache (no request leaves: the registry is never
    # asked); 5,000 failures are charged at least what they hold (before: 300 bytes
    # charged for ~5.8 KB held each)
    fake = FakeRegistry()
    with client_for(fake, allowed_registries=[ALLOWED]) as client:
        source = RegistryLayerSource(client)
        # a clock that stands still: on a loaded machine the loop can outlast the
        # failures' TTL, and the cache rightly sweeps what expired
        cache = LayerCache(max_entries=10**7, clock=FakeClock())
        for i in range(5_000):
            with pytest.raises(LayerResolutionError, match="not an allowed registry"):
                cache.refresh(ImageName(f"{REFUSED}/p{i}/c{i % 300}:1"), source)
        gc.collect()
        measured = traced()
    assert fake.requests == []
    assert len(cache) == 5_000
    assert measured <= cache.cost_bytes + source.refused_registries.held_bytes, (
        measured,
        cache.cost_bytes,
    )


def test_expired_failures_are_swept_without_being_asked_for() -> None:
    # 1,000 failures, then their TTL passes: the next answers stored (and the revalidation
    # pass every request makes, due()) sweep them, though nobody asks for their names
    clock = FakeClock()
    cache, fresh = LayerCache(clock=clock), LayerCache(clock=clock)
    for i in range(1_000):
        cache.store(*_failure(i))
    assert len(cache) == 1_000
    clock.now += NEGATIVE_TTL_S + 1
    for i in range(10):
        cache.store(*_tag(i))
        fresh.store(*_tag(i))
    assert 10 < len(cache) < 1_010  # a batch per insertion
    cache.due()
    assert len(cache) == 10
    assert cache.held_bytes == fresh.held_bytes  # what the 10 answers cost, nothing more


def test_every_cache_shares_one_budget() -> None:
    # two platforms' caches and a registry source's refused set on one budget: a flood of
    # failures into one takes room from itself; the total never passes the budget
    budget = MemoryBudget(2 * 1024 * 1024)
    amd64, arm64 = LayerCache(budget=budget), LayerCache(budget=budget)
    for i in range(200):
        arm64.store(*_tag(i))
    honest = arm64.held_bytes
    for i in range(50_000):
        amd64.store(*_failure(i))
        assert budget.held_bytes <= budget.max_bytes
    assert budget.evictions > 0
    assert arm64.held_bytes == honest  # the flooded cache gave, the other kept its own
    assert budget.held_bytes == amd64.held_bytes + arm64.held_bytes
    # a cache that goes (its platform dropped) gives its room back
    arm64.clear()
    assert budget.held_bytes == amd64.held_bytes and budget.members == 1


def test_refused_registries_are_bounded_in_memory_and_warnings(
    traced: Callable[[], int], caplog: pytest.LogCaptureFixture
) -> None:
    # issue 44: 20,000 refused domains cost 7.4 MB and 20,000 warnings; now the least
    # recently refused are forgotten past a bound (here 5,000 domains: 1.9 MB before), and
    # first refusals are logged a few a minute, the next warning counting those not logged
    fake = FakeRegistry()
    caplog.set_level(logging.WARNING, logger="layersched.registry")
    with client_for(fake, allowed_registries=[ALLOWED]) as client:
        source = RegistryLayerSource(client)
        for i in range(5_000):
            with pytest.raises(LayerResolutionError):
                source.resolve(ImageName(f"r{i}.{REFUSED}/app:1"))
        gc.collect()
        measured = traced()
    assert fake.requests == []
    assert source.not_allowed == 5_000
    warnings = [r for r in caplog.records if "not an allowed registry" in r.getMessage()]
    assert 0 < len(warnings) <= 20
    assert measured < 512 * 1024, measured
