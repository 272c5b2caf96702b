"""Layers and layer sources.

A :class:`Layer` is a compressed blob digest and its size, as a registry
manifest lists it. A :class:`LayerSource` answers "which layers make up this
image reference?"; the core only defines the protocol and the offline,
in-memory source (``--layers LAYERS.json``). The registry-backed source lives
in the ``layersched.registry`` adapter.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.reference import ImageName, normalized_image_name, parse_or_none

#: A layer or manifest digest: algorithm, colon, hex (sha256 and sha512). The CRD's
#: schema uses the same pattern; the API server matches it with Go's regexp, where ``$``
#: is the end of the text, so it is matched here in full (``re.match`` would let a
#: trailing newline through).
DIGEST_PATTERN = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$"
_DIGEST = re.compile(DIGEST_PATTERN)

#: The largest layer or image size read from anywhere (a registry manifest, a
#: NodeLayerInventory, ``status.images``, an annotation, ``--layers``): 1 TiB. No real
#: layer comes near it (the largest public images are tens of GB in all), and capping
#: every size at read keeps sums far from int64: 65,536 layers at the cap sum to 2^56,
#: and ``100 * present`` is still below 2^63 (the strategies also guard their sums
#: themselves, see ``layersched.core.strategies.base.overflow_shift``).
MAX_SIZE_BYTES = 1 << 40


@dataclass(frozen=True, slots=True)
class Layer:
    """One image layer: compressed blob digest and compressed size in bytes."""

    digest: str
    size_bytes: int


@runtime_checkable
class LayerSource(Protocol):
    """Resolves an image reference to its ordered layers."""

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        """Return the image's layers, or raise :class:`LayerResolutionError`."""
        ...


@runtime_checkable
class NodeImageSource(Protocol):
    """A layer source that resolves a node image from all its names at once.

    kubelet reports an image under several names (repo digests, then tags). A
    source implementing this decides itself which name to look up or fetch,
    instead of being asked for each name in turn (the extender's cache-only view
    uses it to queue one registry resolution per node image, not one per name).
    """

    def resolve_names(self, names: Sequence[ImageName]) -> tuple[Layer, ...]:
        """The layers of the image reported as ``names``, or raise LayerResolutionError."""
        ...


def is_digest(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a digest string (the whole of it)."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def check_digest(digest: object, where: str) -> str:
    """Validate a layer digest, naming ``where`` it came from on failure."""
    if not is_digest(digest):
        raise InputError(
            f"{where}: {digest!r} is not a digest; expected 'sha256:' followed by 64 hex digits"
        )
    return digest


def check_size(size: object, where: str, max_bytes: int = MAX_SIZE_BYTES) -> int:
    """Validate a layer or image size in bytes: an integer from 0 to ``max_bytes``
    (:data:`MAX_SIZE_BYTES` unless a reader caps lower)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InputError(f"{where}: size {size!r} must be a non-negative integer (bytes)")
    if size > max_bytes:
        raise InputError(
            f"{where}: size {size} bytes is over the {max_bytes}-byte cap on a layer or "
            "image: no real one is that large, so the data is wrong or hostile"
        )
    return size


#: Names whose canonical form is remembered: every distinct node image name of a
#: cluster (thousands) fits, and a name missing from LAYERS.json is asked for on
#: every full-``Nodes`` request.
CANONICAL_CACHE_SIZE = 65_536


@functools.lru_cache(maxsize=CANONICAL_CACHE_SIZE)
def _canonical(image: ImageName) -> str | None:
    """What ``image`` names, in registry form (``docker.io/library/nginx:1.25``, or
    ``docker.io/library/nginx@sha256:…`` when a digest pins it, tag or not);
    None if unparsable."""
    ref = parse_or_none(image)
    return None if ref is None else ref.identity()


class StaticLayerSource:
    """An offline layer source: image reference -> layers, from a JSON document.

    Keys are matched after upstream's ``:latest`` normalisation, so ``app`` and
    ``app:latest`` are the same key. When that exact key is absent, the
    canonical registry forms of both sides are compared: kubelet reports
    ``docker.io/library/nginx:1.25`` for a pod's ``nginx:1.25``, and either may
    be the key. A digest names the content without its tag, so a key
    ``nginx:1.25@sha256:X`` matches kubelet's ``docker.io/library/nginx@sha256:X``.
    No network access ever happens.
    """

    def __init__(self, layers_by_image: Mapping[ImageName, tuple[Layer, ...]]) -> None:
        self._layers = {normalized_image_name(k): v for k, v in layers_by_image.items()}
        self._by_canonical: dict[str, tuple[ImageName, tuple[Layer, ...]]] = {}
        for key, layers in self._layers.items():
            canonical = _canonical(key)
            if canonical is None:
                continue
            seen = self._by_canonical.setdefault(canonical, (key, layers))
            if seen[1] != layers:
                raise InputError(
                    f"keys {seen[0]!r} and {key!r} name the same image ({canonical}) but "
                    "list different layers: keep one of them"
                )

    @classmethod
    def from_json(cls, document: Any, origin: str) -> StaticLayerSource:
        """Build from a parsed LAYERS.json; ``origin`` (a file name) prefixes errors."""
        if not isinstance(document, dict):
            raise InputError(
                f"{origin}: expected a JSON object mapping image reference -> "
                '[{"digest": "sha256:…", "size": <bytes>}, …]'
            )
        parsed: dict[ImageName, tuple[Layer, ...]] = {}
        for image, entries in document.items():
            where = f"{origin}: [{image!r}]"
            if not isinstance(entries, list):
                raise InputError(f"{where}: expected a list of layers")
            layers = []
            for i, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    raise InputError(f'{where}[{i}]: expected {{"digest": …, "size": …}}')
                layers.append(
                    Layer(
                        check_digest(entry.get("digest"), f"{where}[{i}].digest"),
                        check_size(entry.get("size"), f"{where}[{i}].size"),
                    )
                )
            parsed[ImageName(image)] = tuple(layers)
        try:
            return cls(parsed)
        except InputError as err:
            raise InputError(f"{origin}: {err}") from None

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        layers = self._layers.get(normalized_image_name(image))
        if layers is not None:
            return layers
        canonical = _canonical(image)
        found = self._by_canonical.get(canonical) if canonical is not None else None
        if found is not None:
            return found[1]
        raise LayerResolutionError(
            f"image {image!r} is not in the offline layer file: add its layers there"
        )

    def images(self) -> list[ImageName]:
        """The normalised image names this source knows."""
        return list(self._layers)


class NoLayerSource:
    """A layer source that knows nothing (used when only ``status.images`` carry layers)."""

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        raise LayerResolutionError(
            f"no layer source is configured to resolve {image!r}: pass --layers or a registry"
        )
