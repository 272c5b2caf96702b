"""The image builder's cache: layers by their inputs, whole or missing, and one build at a
time per cache (two processes at once)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from layersched.core.errors import ImageBuildError
from layersched.images.buildcache import BUILD_LOCK, BuiltLayers, build_lock
from layersched.images.oci import LayerBlob
from layersched.images.rootfs import TarTree


def _layer(name: str) -> LayerBlob:
    tree = TarTree()
    tree.add_file(f"usr/lib/{name}", name.encode())
    return tree.layer()


def test_layers_round_trip_and_a_corrupt_one_is_a_miss(tmp_path: Path) -> None:
    cache = BuiltLayers(tmp_path)
    key = cache.key("python", ["a=1"])
    # the key depends on the inputs
    assert key != cache.key("python", ["a=2"])
    built = _layer("x")
    assert cache.layer(key, lambda: built) == built
    # served from the cache now: the builder is not called
    assert cache.layer(key, lambda: pytest.fail("rebuilt a cached layer")) == built
    # a corrupted blob, or a record that is not an object, is rebuilt, never served
    (cache.root / f"{key}.tar.gz").write_bytes(b"garbage")
    assert cache.get(key) is None
    cache.put(key, built)
    (cache.root / f"{key}.json").write_text("[]")
    assert cache.get(key) is None


def test_a_put_leaves_no_temporary_file(tmp_path: Path) -> None:
    cache = BuiltLayers(tmp_path)
    cache.put(cache.key("debian", []), _layer("y"))
    assert sorted(p.suffix for p in cache.root.iterdir()) == [".gz", ".json"]


def test_an_unwritable_cache_names_the_directory_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "images").write_text("a file where the directory should be")
    lock = build_lock(tmp_path, print)
    with pytest.raises(ImageBuildError, match=r"under .*images: .*LAYERSCHED_CACHE_DIR"):
        lock.__enter__()


def _hold(root: str, started: object, release: object) -> None:
    with build_lock(Path(root), print):
        started.set()  # type: ignore[attr-defined]
        release.wait(30)  # type: ignore[attr-defined]


def test_a_second_build_waits_for_the_first_and_says_so(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    started, release = context.Event(), context.Event()
    holder = context.Process(target=_hold, args=(str(tmp_path), started, release))
    holder.start()
    try:
        assert started.wait(30)
        said: list[str] = []

        def release_soon(message: str) -> None:
            said.append(message)
            release.set()

        with build_lock(tmp_path, release_soon):
            # the holder has let go: it has finished, or is finishing
            holder.join(30)
            assert holder.exitcode == 0
        assert said == [
            "waiting for another image build using this cache "
            f"(lock {tmp_path / 'images' / BUILD_LOCK})"
        ]
    finally:
        release.set()
        holder.join(30)


def test_an_uncontended_lock_says_nothing(tmp_path: Path) -> None:
    said: list[str] = []
    with build_lock(tmp_path, said.append):
        pass
    with build_lock(tmp_path, said.append):
        pass
    assert said == []
