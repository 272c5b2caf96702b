"""Deterministic OCI images for tests and testbeds: build, lay out on disk, push.

Every byte is a function of the inputs: layer content comes from a seeded
generator, tars carry fixed owner/mode/mtime, gzip carries mtime 0, and JSON is
written with sorted keys. The same inputs therefore give the same digests on
every machine, so scenarios can say "Img1 and Img2 share L1 and L2" and
registries and runtimes really deduplicate those blobs.

A layer is one regular file whose name is derived from its content, so the
same content makes the same layer whichever image or position it is used in.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

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
# Random content does not compress: the fastest level gives the same size, sooner.
GZIP_LEVEL = 1
# Pushes smaller than this finish in a blink; a progress bar would only flicker.
PROGRESS_MIN_BYTES = 8 * 1024 * 1024
OCI_LAYOUT_VERSION = "1.0.0"
# The annotation OCI layouts use to name a manifest (what `skopeo oci:DIR:TAG` reads).
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
_FILE_NAME_DIGEST_CHARS = 16


def layer_bytes(seed: int, size_bytes: int) -> bytes:
    """``size_bytes`` of incompressible pseudo-random content, fixed by ``seed``."""
    if size_bytes < 0:
        raise ValueError(f"layer size must be non-negative, got {size_bytes}")
    return random.Random(seed).randbytes(size_bytes)


def _canonical_json(doc: Mapping[str, Any]) -> bytes:
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


def layer_tar(content: bytes, file_name: str) -> bytes:
    """An uncompressed tar holding one file, with fixed owner, mode and mtime."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(file_name)
        info.size = len(content)
        info.mtime = FIXED_MTIME
        info.mode = FILE_MODE
        info.uid, info.gid = FIXED_UID, FIXED_GID
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def make_layer(content: bytes) -> LayerBlob:
    """A layer holding ``content`` as one file named after its digest."""
    file_name = "layer-" + sha256_digest(content)[len("sha256:") :][:_FILE_NAME_DIGEST_CHARS]
    tar = layer_tar(content, file_name)
    blob = gzip.compress(tar, compresslevel=GZIP_LEVEL, mtime=FIXED_MTIME)
    return LayerBlob(blob, sha256_digest(blob), sha256_digest(tar))


def random_layer(seed: int, size_bytes: int) -> LayerBlob:
    """A layer of ``size_bytes`` seeded random content (the blob is a few hundred bytes more)."""
    return make_layer(layer_bytes(seed, size_bytes))


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
) -> BuiltImage:
    """Build an image from layers, base first; ``bytes`` items are file content.

    ``labels`` go into the config, which is how two images with the same
    layers are told apart.
    """
    built = [item if isinstance(item, LayerBlob) else make_layer(item) for item in layers]
    config: dict[str, Any] = {
        "architecture": platform.architecture,
        "os": platform.os,
        "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in built]},
        "config": {"Labels": dict(labels or {})},
    }
    if platform.variant:
        config["variant"] = platform.variant
    config_bytes = _canonical_json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": Descriptor(OCI_CONFIG, sha256_digest(config_bytes), len(config_bytes)).to_json(),
        "layers": [b.descriptor().to_json() for b in built],
    }
    blobs = {b.digest: b.blob for b in built}
    blobs[sha256_digest(config_bytes)] = config_bytes
    return BuiltImage(
        manifest_bytes=_canonical_json(manifest),
        config_bytes=config_bytes,
        blobs=blobs,
        layers=tuple(b.layer for b in built),
        platform=platform,
    )


def build_index(images: Sequence[BuiltImage]) -> BuiltIndex:
    """An OCI index listing ``images`` with their platforms, in the given order."""
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [image.descriptor().to_json() for image in images],
    }
    blobs: dict[str, bytes] = {}
    for image in images:
        blobs.update(image.blobs)
        blobs[image.digest] = image.manifest_bytes
    return BuiltIndex(_canonical_json(index), tuple(images), blobs=blobs)


def write_oci_layout(directory: Path, image: BuiltImage | BuiltIndex, tag: str) -> Path:
    """Write an OCI image layout (``oci-layout``, ``index.json``, ``blobs/``) for ``tag``.

    ``skopeo copy oci:DIR:TAG docker://…`` and ``umoci`` read it. Blobs already
    in the directory are kept, so several images can share one layout.
    """
    blob_dir = directory / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    (directory / "oci-layout").write_text(json.dumps({"imageLayoutVersion": OCI_LAYOUT_VERSION}))
    top = image.index_bytes if isinstance(image, BuiltIndex) else image.manifest_bytes
    blobs = dict(image.blobs)
    blobs[image.digest] = top
    for digest, data in blobs.items():
        path = blob_dir / digest.removeprefix("sha256:")
        if not path.exists():
            path.write_bytes(data)
    index_path = directory / "index.json"
    existing: list[dict[str, Any]] = []
    if index_path.exists():
        existing = json.loads(index_path.read_text()).get("manifests", [])
    entry = Descriptor(image.media_type, image.digest, len(top)).to_json()
    entry["annotations"] = {REF_NAME_ANNOTATION: tag}
    kept = [m for m in existing if m.get("annotations", {}).get(REF_NAME_ANNOTATION) != tag]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*kept, entry]}
    index_path.write_bytes(_canonical_json(index))
    return directory


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
