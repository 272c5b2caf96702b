"""The one layer cache (``layersched.registry.LayerCache``) in front of the plain registry
fetcher: TTLs, revalidation by digest, failures, sharing, and its bounds."""

from __future__ import annotations

import threading

import pytest

from layersched.core.errors import LayerResolutionError
from layersched.core.layers import Layer, LayerSource
from layersched.registry import (
    CachedLayerSource,
    Fetched,
    LayerCache,
    RegistryLayerSource,
)
from layersched.registry._entries import ENTRY_BYTES, EXPIRY_BYTES, LAYER_BYTES, LAYERS_BYTES
from tests.unit.test_registry_client import HOST, IMG, INDEX, FakeRegistry, client_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_tags_are_revalidated_by_digest_and_digests_reuse_a_tags_manifest() -> None:
    fake, clock = FakeRegistry(), FakeClock()
    with client_for(fake) as client:
        cache = LayerCache(positive_ttl_s=60, clock=clock)
        source = CachedLayerSource(RegistryLayerSource(client), cache)
        assert isinstance(source, LayerSource)
        # Cold: GET the index and the amd64 manifest (miss).
        assert source.resolve(f"{HOST}/multi:1") == IMG.layers
        # Warm tag: no request at all (hit).
        assert source.resolve(f"{HOST}/multi:1") == IMG.layers
        # Pinned to the index digest the tag's fetch found: no request (a miss, reused).
        assert source.resolve(f"{HOST}/multi@{INDEX.digest}") == IMG.layers
        assert len(fake.requests) == 2
        # TTL over: one HEAD revalidates the tag; same digest, so nothing is fetched.
        clock.now += 61
        assert source.resolve(f"{HOST}/multi:1") == IMG.layers
        assert fake.paths()[2:] == ["HEAD /v2/multi/manifests/1"]
        # The tag moves to IMG's manifest after expiry: HEAD, then GET.
        fake.manifests["/v2/multi/manifests/1"] = (
            IMG.manifest_bytes,
            "application/vnd.oci.image.manifest.v1+json",
        )
        clock.now += 61
        assert source.resolve(f"{HOST}/multi:1") == IMG.layers
        assert fake.paths()[3:] == ["HEAD /v2/multi/manifests/1", "GET /v2/multi/manifests/1"]
        # the pinned entry never expired: no request for it
        assert source.resolve(f"{HOST}/multi@{INDEX.digest}") == IMG.layers
        assert len(fake.requests) == 5
    # hits: the warm tag, both stale reads, the pinned re-read; misses: cold tag, pinned
    assert (cache.hits, cache.misses, cache.revalidations, cache.unchanged) == (4, 2, 2, 1)
    assert source.source.registry_errors == 0  # type: ignore[attr-defined]


def _layers(label: str, count: int) -> tuple[Layer, ...]:
    return tuple(
        Layer("sha256:" + f"{label}{i}".encode().hex().ljust(64, "0"), i) for i in range(count)
    )


class _Fetcher:
    """A plain LayerSource whose answers the test sets; counts calls; can fail."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[Layer, ...]] = {}
        self.calls: list[str] = []

    def resolve(self, image: str) -> tuple[Layer, ...]:
        self.calls.append(image)
        if image not in self.answers:
            raise LayerResolutionError(f"{image} is not in the registry")
        return self.answers[image]


def test_failures_are_remembered_and_known_layers_survive_a_failed_revalidation() -> None:
    clock, fetcher = FakeClock(), _Fetcher()
    cache = LayerCache(positive_ttl_s=60, negative_ttl_s=10, clock=clock)
    with pytest.raises(LayerResolutionError):
        cache.resolve("gone:1", fetcher)
    # within the negative TTL: refused without asking again
    with pytest.raises(LayerResolutionError, match="failed recently"):
        cache.resolve("gone:1", fetcher)
    assert fetcher.calls == ["gone:1"]
    clock.now += 11  # retried after it
    fetcher.answers["gone:1"] = _layers("g", 2)
    assert cache.resolve("gone:1", fetcher) == _layers("g", 2)
    # the registry goes away: the tag's last known layers are kept, retried in 10 s
    del fetcher.answers["gone:1"]
    clock.now += 61
    kept: list[str] = []
    assert cache.refresh("gone:1", fetcher, on_kept=lambda err: kept.append(str(err))) == _layers(
        "g", 2
    )
    assert kept == ["gone:1 is not in the registry"]
    assert cache.get("gone:1")[1] is False  # renewed for the negative TTL
    # the tag moves: reported once by changed()
    fetcher.answers["gone:1"] = _layers("h", 1)
    clock.now += 11
    assert cache.refresh("gone:1", fetcher) == _layers("h", 1)
    assert cache.changed() == {"gone:1"} and cache.changed() == set()


def test_due_tags_are_handed_out_once_and_at_most_limit_at_a_time() -> None:
    clock, fetcher = FakeClock(), _Fetcher()
    cache = LayerCache(positive_ttl_s=60, clock=clock)
    for name in ("a:1", "b:1", "c:1", f"d@sha256:{'d' * 64}"):
        fetcher.answers[name] = _layers(name[0], 1)
        cache.resolve(name, fetcher)
    assert cache.due() == []
    clock.now += 61
    assert cache.due(limit=2) == ["a:1", "b:1"]
    assert cache.due() == ["c:1"]  # the pinned one never expires
    assert cache.due() == []


#: What each of the test's entries is charged: a tag's ("a:1", 3 characters: a 52-byte
#: string) with an expiry, and its 10 layers (their digests 71 characters: 120 bytes each).
TAG_OF_10_BYTES = ENTRY_BYTES + 52 + EXPIRY_BYTES + LAYERS_BYTES + 10 * (LAYER_BYTES + 120)


@pytest.mark.parametrize(
    ("max_entries", "max_bytes", "kept"),
    [
        # 3 entries fit neither bound of 2: the least recently used goes
        (2, 10**9, ["b:1", "c:1"]),
        # bytes: each entry costs TAG_OF_10_BYTES; two fit
        (100, 2 * TAG_OF_10_BYTES, ["b:1", "c:1"]),
    ],
    ids=["entries", "bytes"],
)
def test_the_cache_is_bounded_in_entries_and_bytes(
    max_entries: int, max_bytes: int, kept: list[str]
) -> None:
    fetcher = _Fetcher()
    cache = LayerCache(max_entries=max_entries, max_bytes=max_bytes)
    for name in ("a:1", "b:1", "c:1"):
        fetcher.answers[name] = _layers(name[0], 10)
        cache.resolve(name, fetcher)
    assert [name for name in ("a:1", "b:1", "c:1") if cache.layers_of(name)] == kept
    assert cache.evictions == 1
    assert cache.cost_bytes == 2 * TAG_OF_10_BYTES


def test_tags_of_one_digest_share_their_layers() -> None:
    cache = LayerCache()
    layers = _layers("x", 3)
    first = cache.store("app:1", Fetched(layers, "sha256:" + "a" * 64))
    second = cache.store("app:latest", Fetched(tuple(layers), "sha256:" + "a" * 64))
    assert first is second


def test_the_cache_is_thread_safe() -> None:
    fake = FakeRegistry()
    # 8 threads x 25 resolves of two images: every answer right, every lookup counted once
    with client_for(fake) as client:
        cache = LayerCache()
        source = CachedLayerSource(RegistryLayerSource(client), cache)
        failures: list[BaseException] = []

        def work() -> None:
            try:
                for i in range(25):
                    image = f"{HOST}/app:1" if i % 2 else f"{HOST}/multi:1"
                    assert source.resolve(image) == IMG.layers
            except BaseException as err:  # noqa: BLE001 (collected and asserted below)
                failures.append(err)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    assert cache.hits + cache.misses == 200
