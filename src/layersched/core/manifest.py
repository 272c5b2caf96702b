"""OCI / Docker schema2 manifests and indexes, and platform selection.

Pure parsing, no I/O: an adapter fetches the bytes and the ``Content-Type``,
:func:`parse_manifest` turns them into an :class:`ImageManifest` (config +
ordered layers) or an :class:`ImageIndex` (one manifest per platform), and
:func:`select_platform` picks the entry a node of a given platform would pull.
Field names follow the OCI image spec (``mediaType``, ``digest``, ``size``,
``platform.os``/``architecture``/``variant``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from layersched.core.errors import InputError, ManifestError
from layersched.core.layers import Layer, check_digest, check_size

# Media types (OCI image spec v1 and Docker image manifest v2 schema 2).
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
# Schema 1 was removed from Docker and distribution; we refuse it explicitly.
DOCKER_SCHEMA1 = "application/vnd.docker.distribution.manifest.v1+json"
DOCKER_SCHEMA1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"

MANIFEST_MEDIA_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_MEDIA_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
SCHEMA1_MEDIA_TYPES = (DOCKER_SCHEMA1, DOCKER_SCHEMA1_SIGNED)
#: The ``Accept`` header for manifest requests: every type we can parse, indexes too.
MANIFEST_ACCEPT = ", ".join(MANIFEST_MEDIA_TYPES + INDEX_MEDIA_TYPES)

# Content-Types that say nothing about the manifest kind; the body's mediaType decides.
_GENERIC_CONTENT_TYPES = frozenset(
    {"", "application/json", "application/octet-stream", "text/plain"}
)
_SCHEMA_VERSION = 2
_SCHEMA1_VERSION = 1
_PLATFORM_PART = re.compile(r"^[a-z0-9_]+$")
# Spellings runtimes accept for the same architecture (Go's GOARCH names are canonical).
_ARCH_ALIASES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64", "armhf": "arm"}
# arm64 images are v8 unless they say otherwise, so "linux/arm64" == "linux/arm64/v8".
_DEFAULT_VARIANTS = {"arm64": "v8"}


@dataclass(frozen=True, slots=True)
class Platform:
    """An OCI platform: ``os``/``architecture`` and an optional ``variant``."""

    os: str
    architecture: str
    variant: str | None = None

    @classmethod
    def parse(cls, text: str) -> Platform:
        """Parse ``os/arch[/variant]``, e.g. ``linux/amd64`` or ``linux/arm64/v8``."""
        parts = text.strip().lower().split("/")
        if not 2 <= len(parts) <= 3 or not all(_PLATFORM_PART.match(p) for p in parts):
            raise InputError(
                f"platform {text!r} is malformed: write os/architecture[/variant], "
                "e.g. 'linux/amd64' or 'linux/arm64/v8'"
            )
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None).normalized()

    def normalized(self) -> Platform:
        """Architecture aliases folded (``aarch64`` -> ``arm64``), default variant dropped."""
        arch = _ARCH_ALIASES.get(self.architecture, self.architecture)
        variant = self.variant or None
        if variant is not None and _DEFAULT_VARIANTS.get(arch) == variant:
            variant = None
        return Platform(self.os, arch, variant)

    def matches(self, candidate: Platform) -> bool:
        """Whether ``candidate`` (from an index) serves this wanted platform.

        os and architecture must be equal; the variant only counts when this
        platform names one.
        """
        want, have = self.normalized(), candidate.normalized()
        if (want.os, want.architecture) != (have.os, have.architecture):
            return False
        return want.variant is None or want.variant == have.variant

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


#: What layersched resolves for when nobody says otherwise.
DEFAULT_PLATFORM = Platform("linux", "amd64")


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI content descriptor (``mediaType``, ``digest``, ``size``, ``platform``)."""

    media_type: str
    digest: str
    size_bytes: int
    platform: Platform | None = None

    def to_json(self) -> dict[str, Any]:
        """The descriptor as the OCI spec spells it (for building manifests)."""
        doc: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size_bytes,
        }
        if self.platform is not None:
            plat: dict[str, str] = {
                "architecture": self.platform.architecture,
                "os": self.platform.os,
            }
            if self.platform.variant:
                plat["variant"] = self.platform.variant
            doc["platform"] = plat
        return doc


@dataclass(frozen=True, slots=True)
class ImageManifest:
    """A single-platform image manifest: its config blob and ordered layers."""

    media_type: str
    config: Descriptor
    layer_descriptors: tuple[Descriptor, ...]

    @property
    def layers(self) -> tuple[Layer, ...]:
        """The layers, base first, as ``(digest, compressed size)``."""
        return tuple(Layer(d.digest, d.size_bytes) for d in self.layer_descriptors)


@dataclass(frozen=True, slots=True)
class ImageIndex:
    """An image index / manifest list: one manifest descriptor per platform."""

    media_type: str
    manifests: tuple[Descriptor, ...]

    def platforms(self) -> list[str]:
        """The platforms on offer, as text, in index order (for error messages)."""
        return [str(d.platform) if d.platform else "(no platform)" for d in self.manifests]


def sha256_digest(data: bytes) -> str:
    """The ``sha256:<hex>`` content digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def media_type_of(content_type: str | None) -> str:
    """The bare media type of a ``Content-Type`` header (parameters dropped, lowercased)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_manifest(
    body: bytes,
    content_type: str | None = None,
    *,
    source: str = "manifest",
    max_layers: int | None = None,
) -> ImageManifest | ImageIndex:
    """Parse a manifest or index; ``source`` (e.g. ``host/repo:tag``) prefixes errors.

    The kind comes from ``content_type`` when it names a manifest type, else
    from the document's ``mediaType`` field, else from its shape (OCI allows
    omitting ``mediaType``). Schema 1 manifests are refused. An image manifest
    listing more than ``max_layers`` layers (if given) is refused before any
    of them is parsed.
    """
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ManifestError(f"{source}: the manifest is not valid JSON ({err})") from err
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: the manifest is not a JSON object")
    media_type = _kind(doc, media_type_of(content_type), source)
    if media_type in INDEX_MEDIA_TYPES:
        return _parse_index(doc, media_type, source)
    layers = doc.get("layers")
    if max_layers is not None and isinstance(layers, list) and len(layers) > max_layers:
        raise ManifestError(
            f"{source}: the manifest lists {len(layers)} layers, more than the {max_layers} "
            "an image may have (real images stop near 127, at overlayfs' stacking limit): "
            "the image or its registry is broken or hostile"
        )
    return _parse_image_manifest(doc, media_type, source)


def _kind(doc: Mapping[str, Any], header: str, source: str) -> str:
    field = doc.get("mediaType")
    field = field.lower() if isinstance(field, str) else ""
    if (
        header in SCHEMA1_MEDIA_TYPES
        or field in SCHEMA1_MEDIA_TYPES
        or doc.get("schemaVersion") == _SCHEMA1_VERSION
    ):
        raise ManifestError(
            f"{source}: is a Docker schema 1 manifest, which layersched does not read "
            "(it has no layer sizes): re-push the image with a current tool, e.g. "
            "'skopeo copy --format v2s2' or 'docker push'"
        )
    if doc.get("schemaVersion") != _SCHEMA_VERSION:
        raise ManifestError(
            f"{source}: schemaVersion is {doc.get('schemaVersion')!r}, expected 2 "
            "(an OCI or Docker schema 2 manifest)"
        )
    known = MANIFEST_MEDIA_TYPES + INDEX_MEDIA_TYPES
    if header in known:
        return header
    if header not in _GENERIC_CONTENT_TYPES:
        raise ManifestError(
            f"{source}: Content-Type {header!r} is not a manifest type; expected one of "
            f"{', '.join(known)}"
        )
    if field in known:
        return field
    if field:
        raise ManifestError(f"{source}: mediaType {field!r} is not an image manifest or index")
    if "manifests" in doc:
        return OCI_INDEX
    if "layers" in doc:
        return OCI_MANIFEST
    raise ManifestError(f"{source}: has neither 'layers' nor 'manifests'; not an image manifest")


def _parse_descriptor(raw: object, where: str) -> Descriptor:
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: expected a descriptor object")
    media_type = raw.get("mediaType", "")
    if not isinstance(media_type, str):
        raise ManifestError(f"{where}.mediaType: expected a string")
    try:
        digest = check_digest(raw.get("digest"), f"{where}.digest")
        size = check_size(raw.get("size"), f"{where}.size")
    except InputError as err:
        raise ManifestError(str(err)) from err
    platform = None
    plat = raw.get("platform")
    if plat is not None:
        if not isinstance(plat, dict):
            raise ManifestError(f"{where}.platform: expected an object")
        os_name, arch, variant = plat.get("os"), plat.get("architecture"), plat.get("variant")
        if not isinstance(os_name, str) or not isinstance(arch, str):
            raise ManifestError(f"{where}.platform: 'os' and 'architecture' must be strings")
        if variant is not None and not isinstance(variant, str):
            raise ManifestError(f"{where}.platform.variant: expected a string")
        platform = Platform(os_name, arch, variant or None)
    return Descriptor(media_type, digest, size, platform)


def _descriptor_list(doc: Mapping[str, Any], key: str, source: str) -> tuple[Descriptor, ...]:
    raw = doc.get(key)
    if not isinstance(raw, list):
        raise ManifestError(f"{source}: '{key}' must be a list of descriptors")
    return tuple(_parse_descriptor(item, f"{source}: {key}[{i}]") for i, item in enumerate(raw))


def _parse_image_manifest(doc: Mapping[str, Any], media_type: str, source: str) -> ImageManifest:
    config = _parse_descriptor(doc.get("config"), f"{source}: config")
    return ImageManifest(media_type, config, _descriptor_list(doc, "layers", source))


def _parse_index(doc: Mapping[str, Any], media_type: str, source: str) -> ImageIndex:
    return ImageIndex(media_type, _descriptor_list(doc, "manifests", source))


def select_platform(index: ImageIndex, platform: Platform, *, source: str = "index") -> Descriptor:
    """The index entry a ``platform`` node would pull.

    os and architecture must match exactly (after alias folding); a wanted
    variant must match too. Without a wanted variant, an entry without a
    variant is preferred, else the first matching one, as runtimes do.
    """
    candidates = [d for d in index.manifests if d.platform and platform.matches(d.platform)]
    if not candidates:
        offered = ", ".join(index.platforms()) or "none"
        raise ManifestError(
            f"{source}: the image index has no manifest for platform {platform} "
            f"(available: {offered}); pick one of those with --platform"
        )
    plain = [d for d in candidates if d.platform and d.platform.normalized().variant is None]
    return (plain or candidates)[0]
