"""Deterministic OCI images for tests and testbeds: build and push (on disk:
:mod:`layersched.images.oci_layout`).

Every byte is a function of the inputs: layer content comes from a seeded
generator, tars carry fixed owner/mode/mtime, gzip carries mtime 0, and JSON is
written with sorted keys. The same inputs therefore give the same digests on
every machine, so scenarios can say "Img1 and Img2 share L1 and L2" and
registries and runtimes really deduplicate those blobs.

A content layer is one regular file whose name is derived from its content,
so the same content makes the same layer whichever image or position it is
used in. A layer may carry further files given by path and mode (the scenario
images' base layer adds their entrypoint program, the pause image is one
executable); those are written first, in the order given.

An image can be written as an OCI image layout directory (for skopeo) or as an
OCI archive, a tar of that layout named for ``ctr images import``
(:mod:`layersched.images.oci_layout`).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

from layersched.core.errors import InputError
from layersched.core.layers import Layer
from layersched.core.manifest import (
    DEFAULT_PLATFORM,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_GZIP,
    OCI_MANIFEST,
    Descriptor,
    Platform,
    sha256_digest,
)
from layersched.core.reference import ImageReference
from layersched.registry import RegistryClient

# Reproducible-build conventions: the epoch as every timestamp, root as every owner.
FIXED_MTIME = 0
FIXED_UID = 0
FIXED_GID = 0
FILE_MODE = 0o644
EXECUTABLE_MODE = 0o755
# Random content does not compress: the fastest level gives the same size, sooner.
GZIP_LEVEL = 1
# Pushes smaller than this finish in a blink; a progress bar would only flicker.
PROGRESS_MIN_BYTES = 8 * 1024 * 1024
_FILE_NAME_DIGEST_CHARS = 16


def layer_bytes(seed: int, size_bytes: int) -> bytes:
    """``size_bytes`` of incompressible pseudo-random content, fixed by ``seed``."""
    if size_bytes < 0:
        raise ValueError(f"layer size must be non-negative, got {size_bytes}")
    return random.Random(seed).randbytes(size_bytes)


def canonical_json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class LayerBlob:
    """A built layer: the gzipped tar (``blob``), its digest/size and uncompressed ``diff_id``."""

    blob: bytes
    digest: str
    diff_id: str

    @property
    def size_bytes(self) -> int:
        return len(self.blob)

    @property
    def layer(self) -> Layer:
        return Layer(self.digest, self.size_bytes)

    def descriptor(self) -> Descriptor:
        return Descriptor(OCI_LAYER_GZIP, self.digest, self.size_bytes)


@dataclass(frozen=True, slots=True)
class LayerFile:
    """One regular file in a layer: its path (relative, no leading ``/``), content and mode."""

    path: str
    content: bytes
    mode: int = FILE_MODE


def content_file(content: bytes) -> LayerFile:
    """``content`` as a file named after its digest (``layer-<16 hex digits>``), mode 0644."""
    name = "layer-" + sha256_digest(content)[len("sha256:") :][:_FILE_NAME_DIGEST_CHARS]
    return LayerFile(name, content)


def layer_tar(files: Sequence[LayerFile]) -> bytes:
    """An uncompressed tar holding ``files`` in order, with fixed owner and mtime."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for file in files:
            info = tarfile.TarInfo(file.path)
            info.size = len(file.content)
            info.mtime = FIXED_MTIME
            info.mode = file.mode
            info.uid, info.gid = FIXED_UID, FIXED_GID
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(file.content))
    return out.getvalue()


def files_layer(files: Sequence[LayerFile]) -> LayerBlob:
    """A layer holding ``files``: the gzipped :func:`layer_tar` with its digests."""
    tar = layer_tar(files)
    blob = gzip.compress(tar, compresslevel=GZIP_LEVEL, mtime=FIXED_MTIME)
    return LayerBlob(blob, sha256_digest(blob), sha256_digest(tar))


def make_layer(content: bytes, extra_files: Sequence[LayerFile] = ()) -> LayerBlob:
    """A layer holding ``extra_files`` and then ``content`` as one file named after its digest."""
    return files_layer([*extra_files, content_file(content)])


def random_layer(seed: int, size_bytes: int, extra_files: Sequence[LayerFile] = ()) -> LayerBlob:
    """A layer of ``size_bytes`` seeded random content (the blob is a few hundred bytes more).

    ``extra_files`` come first in the layer (see :func:`make_layer`).
    """
    return make_layer(layer_bytes(seed, size_bytes), extra_files)


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """A single-platform OCI image: manifest, config and every blob by digest."""

    manifest_bytes: bytes
    config_bytes: bytes
    blobs: Mapping[str, bytes]
    layers: tuple[Layer, ...]
    platform: Platform = DEFAULT_PLATFORM
    media_type: str = OCI_MANIFEST

    @property
    def digest(self) -> str:
        return sha256_digest(self.manifest_bytes)

    @property
    def config_digest(self) -> str:
        return sha256_digest(self.config_bytes)

    def descriptor(self) -> Descriptor:
        """This manifest as an index entry (with its platform)."""
        return Descriptor(self.media_type, self.digest, len(self.manifest_bytes), self.platform)


@dataclass(frozen=True, slots=True)
class BuiltIndex:
    """An OCI image index over several single-platform images."""

    index_bytes: bytes
    images: tuple[BuiltImage, ...]
    media_type: str = OCI_INDEX
    blobs: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return sha256_digest(self.index_bytes)


def build_image(
    layers: Sequence[bytes | LayerBlob],
    *,
    platform: Platform = DEFAULT_PLATFORM,
    labels: Mapping[str, str] | None = None,
    entrypoint: Sequence[str] | None = None,
    working_dir: str | None = None,
    cmd: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
) -> BuiltImage:
    """Build an image from layers, base first; ``bytes`` items are file content.

    ``labels`` go into the config, which is how two images with the same
    layers are told apart. ``entrypoint``, ``working_dir``, ``cmd``, ``env``
    (``NAME=value`` in the given order) and ``user`` become the config's
    ``Entrypoint``, ``WorkingDir``, ``Cmd``, ``Env`` and ``User`` (each left
    out when None, so images built without them keep their digests).
    """
    built = [item if isinstance(item, LayerBlob) else make_layer(item) for item in layers]
    run_config: dict[str, Any] = {"Labels": dict(labels or {})}
    if entrypoint is not None:
        run_config["Entrypoint"] = list(entrypoint)
    if working_dir is not None:
        run_config["WorkingDir"] = working_dir
    if cmd is not None:
        run_config["Cmd"] = list(cmd)
    if env is not None:
        run_config["Env"] = [f"{name}={value}" for name, value in env.items()]
    if user is not None:
        run_config["User"] = user
    config: dict[str, Any] = {
        "architecture": platform.architecture,
        "os": platform.os,
        "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in built]},
        "config": run_config,
    }
    if platform.variant:
        config["variant"] = platform.variant
    config_bytes = canonical_json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": Descriptor(OCI_CONFIG, sha256_digest(config_bytes), len(config_bytes)).to_json(),
        "layers": [b.descriptor().to_json() for b in built],
    }
    blobs = {b.digest: b.blob for b in built}
    blobs[sha256_digest(config_bytes)] = config_bytes
    return BuiltImage(
        manifest_bytes=canonical_json(manifest),
        config_bytes=config_bytes,
        blobs=blobs,
        layers=tuple(b.layer for b in built),
        platform=platform,
    )


def build_index(
    images: Sequence[BuiltImage], annotations: Mapping[str, str] | None = None
) -> BuiltIndex:
    """An OCI index listing ``images`` with their platforms, in the given order; with
    ``annotations`` (each left out when None, so indexes built without them keep their
    digests)."""
    platforms = [image.platform for image in images]
    if len(set(platforms)) != len(platforms):
        raise InputError(f"an index lists each platform once: {platforms} repeats one")
    index: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [image.descriptor().to_json() for image in images],
    }
    if annotations is not None:
        index["annotations"] = dict(annotations)
    blobs: dict[str, bytes] = {}
    for image in images:
        blobs.update(image.blobs)
        blobs[image.digest] = image.manifest_bytes
    return BuiltIndex(canonical_json(index), tuple(images), blobs=blobs)


def push_image(
    client: RegistryClient,
    ref: str | ImageReference,
    image: BuiltImage | BuiltIndex,
    *,
    show_progress: bool | None = None,
) -> str:
    """Push every blob (skipping those the registry has), then the manifest(s); tag last.

    Returns the digest the tag now points to. A rich progress bar is shown
    for pushes of at least PROGRESS_MIN_BYTES unless ``show_progress`` says.
    """
    target = ImageReference.parse(ref) if isinstance(ref, str) else ref
    images = image.images if isinstance(image, BuiltIndex) else (image,)
    blobs: dict[str, bytes] = {}
    for one in images:
        blobs.update(one.blobs)
    total_bytes = sum(len(b) for b in blobs.values())
    if show_progress is None:
        show_progress = total_bytes >= PROGRESS_MIN_BYTES
    columns = (
        TextColumn("pushing {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
    )
    with Progress(*columns, disable=not show_progress, transient=True) as progress:
        task = progress.add_task(target.canonical(), total=total_bytes)
        for digest, data in blobs.items():
            client.push_blob(target, data, digest)
            progress.advance(task, len(data))
    if isinstance(image, BuiltIndex):
        for one in images:
            client.push_manifest(target, one.manifest_bytes, one.media_type, one.digest)
        return client.push_manifest(target, image.index_bytes, image.media_type)
    return client.push_manifest(target, image.manifest_bytes, image.media_type)
