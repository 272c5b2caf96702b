"""The image builder's cache on disk: built layers by a hash of their inputs, and one lock
per cache so that two builds at once (two test runs, CI's lanes, a test run beside
``make images``) never download into the same directory together.

A layer file is written under a temporary name and renamed, so a reader sees a whole
layer or none, and a read is checked against the digest recorded beside it: a torn or
foreign file is a miss, and the layer is built again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from layersched.builds import CACHE_DIR_ENV
from layersched.core.errors import ImageBuildError
from layersched.core.manifest import sha256_digest
from layersched.images.oci import LayerBlob

#: Bump when a layer's recipe changes, so cached layers of the old recipe are not reused.
RECIPE_VERSION = "3"
#: The lock file of one cache's builds, in its ``images`` directory.
BUILD_LOCK = "build.lock"


def _cache_error(what: str, where: Path, err: OSError) -> ImageBuildError:
    return ImageBuildError(
        f"{what} under {where}: {err}; set {CACHE_DIR_ENV} to a writable directory"
    )


def _write_atomically(path: Path, data: bytes) -> None:
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BuiltLayers:
    """Built layers on disk, keyed by a hash of everything that went into them."""

    def __init__(self, root: Path) -> None:
        self.root = root / "images" / "layers"

    @staticmethod
    def key(kind: str, inputs: Iterable[str]) -> str:
        digest = hashlib.sha256(f"{RECIPE_VERSION}\n{kind}\n".encode())
        for item in inputs:
            digest.update(item.encode() + b"\n")
        return f"{kind}-{digest.hexdigest()[:32]}"

    def get(self, key: str) -> LayerBlob | None:
        meta, blob = self.root / f"{key}.json", self.root / f"{key}.tar.gz"
        try:
            doc = json.loads(meta.read_text())
            data = blob.read_bytes()
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or sha256_digest(data) != doc.get("digest"):
            return None
        return LayerBlob(data, doc["digest"], doc["diff_id"])

    def put(self, key: str, layer: LayerBlob) -> None:
        """The blob first, then the record naming its digest (each renamed into place)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            _write_atomically(self.root / f"{key}.tar.gz", layer.blob)
            doc = {"digest": layer.digest, "diff_id": layer.diff_id}
            _write_atomically(self.root / f"{key}.json", json.dumps(doc).encode())
        except OSError as err:
            raise _cache_error(f"caching layer {key}", self.root, err) from err

    def layer(self, key: str, build: Callable[[], LayerBlob]) -> LayerBlob:
        cached = self.get(key)
        if cached is not None:
            return cached
        built = build()
        self.put(key, built)
        return built


@contextmanager
def build_lock(root: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the cache's build lock (``<root>/images/build.lock``, ``flock``) for the body;
    says so when another build holds it. Released when the process ends, however it ends."""
    directory = root / "images"
    path = directory / BUILD_LOCK
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = path.open("a")  # held for the body, closed below
    except OSError as err:
        raise _cache_error("opening the build lock", directory, err) from err
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another image build using this cache (lock {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as err:
            raise _cache_error("taking the build lock", directory, err) from err
        yield
    finally:
        handle.close()
