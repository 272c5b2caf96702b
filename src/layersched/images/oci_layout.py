"""Deterministic OCI images on disk: an OCI image layout directory (``oci-layout``,
``index.json``, ``blobs/``: what ``skopeo copy oci:DIR:TAG`` and ``umoci`` read; several
images may share one), and an OCI archive, a tar of that layout named for ``ctr images
import``, byte for byte reproducible and replaced atomically."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from layersched.core.errors import InputError
from layersched.core.manifest import OCI_INDEX, Descriptor
from layersched.core.reference import DEFAULT_TAG, ImageReference
from layersched.images.oci import (
    EXECUTABLE_MODE,
    FILE_MODE,
    FIXED_GID,
    FIXED_MTIME,
    FIXED_UID,
    BuiltImage,
    BuiltIndex,
    canonical_json,
)

OCI_LAYOUT_VERSION = "1.0.0"
# The annotation OCI layouts use to name a manifest (what `skopeo oci:DIR:TAG` reads).
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
# The annotation containerd's importer takes an image's full name from, ahead of
# REF_NAME_ANNOTATION (which ctr would prefix with "import-<date>" when it is a bare tag).
CONTAINERD_IMAGE_NAME_ANNOTATION = "io.containerd.image.name"


def _layout_blobs(image: BuiltImage | BuiltIndex) -> tuple[bytes, dict[str, bytes]]:
    """The top-level manifest or index, and every blob a layout of ``image`` holds."""
    top = image.index_bytes if isinstance(image, BuiltIndex) else image.manifest_bytes
    blobs = dict(image.blobs)
    blobs[image.digest] = top
    return top, blobs


def _index_entry(
    image: BuiltImage | BuiltIndex, top: bytes, annotations: Mapping[str, str]
) -> dict[str, Any]:
    entry = Descriptor(image.media_type, image.digest, len(top)).to_json()
    entry["annotations"] = dict(annotations)
    return entry


def write_oci_layout(directory: Path, image: BuiltImage | BuiltIndex, tag: str) -> Path:
    """Write an OCI image layout (``oci-layout``, ``index.json``, ``blobs/``) for ``tag``.

    ``skopeo copy oci:DIR:TAG docker://…`` and ``umoci`` read it. Blobs already
    in the directory are kept, so several images can share one layout.
    """
    blob_dir = directory / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    (directory / "oci-layout").write_text(json.dumps({"imageLayoutVersion": OCI_LAYOUT_VERSION}))
    top, blobs = _layout_blobs(image)
    for digest, data in blobs.items():
        path = blob_dir / digest.removeprefix("sha256:")
        if not path.exists():
            path.write_bytes(data)
    index_path = directory / "index.json"
    existing: list[dict[str, Any]] = []
    if index_path.exists():
        existing = json.loads(index_path.read_text()).get("manifests", [])
    entry = _index_entry(image, top, {REF_NAME_ANNOTATION: tag})
    kept = [m for m in existing if m.get("annotations", {}).get(REF_NAME_ANNOTATION) != tag]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*kept, entry]}
    index_path.write_bytes(canonical_json(index))
    return directory


def archive_name(name: str) -> ImageReference:
    """Check that ``name`` is a full ``host/repository:tag`` name, as the CRI looks images up.

    The CRI plugin normalises a pod's or kubelet's image name (``pause:3.2``
    becomes ``docker.io/library/pause:3.2``) before it looks in the image
    store, so an imported image is only found under its normalised name.
    """
    ref = ImageReference.parse(name)
    if ref.digest is not None or ref.canonical() != name:
        full = f"{ref.domain}/{ref.path}:{ref.tag or DEFAULT_TAG}"
        raise InputError(
            f"image name {name!r} for an OCI archive: give the full name with registry host "
            f"and tag and no digest, e.g. {full!r}, since containerd's CRI plugin looks "
            "images up by that normalised name"
        )
    return ref


def _tar_member(tar: tarfile.TarFile, path: str, content: bytes | None) -> None:
    """Add a regular file (``content``) or, for None, a directory, with fixed metadata."""
    info = tarfile.TarInfo(path)
    info.mtime = FIXED_MTIME
    info.uid, info.gid = FIXED_UID, FIXED_GID
    info.uname = info.gname = ""
    if content is None:
        info.type, info.mode = tarfile.DIRTYPE, EXECUTABLE_MODE
        tar.addfile(info)
        return
    info.size, info.mode = len(content), FILE_MODE
    tar.addfile(info, io.BytesIO(content))


def oci_archive(image: BuiltImage | BuiltIndex, name: str) -> bytes:
    """An OCI archive (a tar of an image layout) that ``ctr images import`` names ``name``.

    ``name`` must be a full name (see :func:`archive_name`). Its index entry
    carries ``io.containerd.image.name`` (the full name, which containerd's
    importer uses as is) and ``org.opencontainers.image.ref.name`` (the tag,
    as the OCI layout spec and ``docker save`` write it). The tar is
    byte-for-byte reproducible: fixed metadata, members in sorted order.
    """
    ref = archive_name(name)
    top, blobs = _layout_blobs(image)
    annotations = {CONTAINERD_IMAGE_NAME_ANNOTATION: name, REF_NAME_ANNOTATION: ref.reference}
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [_index_entry(image, top, annotations)],
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _tar_member(tar, "oci-layout", canonical_json({"imageLayoutVersion": OCI_LAYOUT_VERSION}))
        _tar_member(tar, "index.json", canonical_json(index))
        _tar_member(tar, "blobs/", None)
        _tar_member(tar, "blobs/sha256/", None)
        for digest in sorted(blobs):
            _tar_member(tar, f"blobs/sha256/{digest.removeprefix('sha256:')}", blobs[digest])
    return out.getvalue()


def write_oci_archive(path: Path, image: BuiltImage | BuiltIndex, name: str) -> bool:
    """Write :func:`oci_archive` to ``path``; False when ``path`` already holds exactly it.

    The file is replaced atomically (written beside it, then renamed), so a
    reader never sees half an archive.
    """
    data = oci_archive(image, name)
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    except OSError as err:
        raise InputError(f"reading {path} to compare the OCI archive: {err}") from err
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(data)
        partial.replace(path)
    except OSError as err:
        raise InputError(
            f"writing the OCI archive {path}: {err}; is its directory there and writable?"
        ) from err
    return True
