"""Building a node's ``NodeLayerInventory`` from what its runtime holds, within the CRD's
limits (:data:`~layersched.core.nodelayers.LIMITS`).

The object deduplicates layers per node: ``layers`` lists each distinct compressed
layer once, and every image names its layers by index into that table. A node of 300
images that share a base costs ~100 bytes per distinct layer plus a few bytes per
image layer, far under etcd's request limit (1.5 MiB by default). An image the CRD
would refuse (too many layers, a name too long, a bad digest, a layer past the size cap)
is left out (an :class:`Omission`), and past the image or layer caps or
:data:`~layersched.core.nodelayers.DEFAULT_MAX_OBJECT_BYTES` the builder drops the
smallest images (kubelet's own order for ``status.images``); the object is then marked
``truncated``, with how many images were left out and why. The scheduler sees a node's
largest images, which carry most of the bytes placement saves.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from layersched.core.errors import InputError
from layersched.core.layers import is_digest
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayers import (
    API_VERSION,
    DEFAULT_MAX_OBJECT_BYTES,
    KIND,
    LIMITS,
    OMIT_DIGEST,
    OMIT_IMAGE_COUNT,
    OMIT_LAYER_COUNT,
    OMIT_LAYER_SIZE,
    OMIT_LAYER_TABLE,
    OMIT_NAME_LENGTH,
    OMIT_OBJECT_SIZE,
    SOURCES,
    Limits,
    shown,
)


def rfc3339(moment: datetime) -> str:
    """``moment`` as the API server writes times (UTC, seconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _encoded_bytes(document: Mapping[str, Any]) -> int:
    return len(json.dumps(document, separators=(",", ":")).encode())


@dataclass(frozen=True, slots=True)
class Omission:
    """An image left out of the object, and why."""

    #: The image's first name (or its digest when it has none), cut for display.
    image: str
    digest: str
    #: One of :data:`OMIT_REASONS`.
    reason: str
    #: What exactly broke the limit, for the agent's log.
    detail: str


@dataclass(frozen=True, slots=True)
class BuiltDocument:
    """A built object and the images it leaves out."""

    document: dict[str, Any]
    omitted: tuple[Omission, ...]


def _omission(image: NodeImage, reason: str, detail: str) -> Omission:
    label = image.names[0] if image.names else image.digest
    return Omission(shown(label), shown(image.digest), reason, detail)


def _violation(image: NodeImage, limits: Limits) -> Omission | None:
    """The first of the CRD's per-image limits ``image`` breaks, if any."""
    if len(image.known_layers) > limits.max_layers_per_image:
        detail = f"{len(image.known_layers)} layers, more than {limits.max_layers_per_image}"
        return _omission(image, OMIT_LAYER_COUNT, detail)
    for name in image.names[: limits.max_names_per_image]:
        if len(name) > limits.max_name_chars:
            detail = f"a name of {len(name)} characters, more than {limits.max_name_chars}"
            return _omission(image, OMIT_NAME_LENGTH, detail)
    if not is_digest(image.digest):
        return _omission(image, OMIT_DIGEST, f"{shown(image.digest)!r} is not a digest")
    for layer in image.known_layers:
        if not is_digest(layer.digest):
            return _omission(image, OMIT_DIGEST, f"layer {shown(layer.digest)!r} is not a digest")
        if not 0 <= layer.size_bytes <= limits.max_layer_size_bytes:
            detail = (
                f"layer {shown(layer.digest)} of {layer.size_bytes} bytes, outside 0.."
                f"{limits.max_layer_size_bytes}"
            )
            return _omission(image, OMIT_LAYER_SIZE, detail)
    return None


def _body(images: Sequence[NodeImage], limits: Limits) -> dict[str, Any]:
    table: dict[str, int] = {}
    layers: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for image in images:
        indexes: dict[int, None] = {}  # a layer repeated in a manifest is one blob: once
        for layer in image.known_layers:
            index = table.get(layer.digest)
            if index is None:
                index = table[layer.digest] = len(layers)
                layers.append({"digest": layer.digest, "sizeBytes": layer.size_bytes})
            indexes[index] = None
        entries.append(
            {
                "names": list(image.names[: limits.max_names_per_image]),
                "digest": image.digest,
                "layers": list(indexes),
            }
        )
    return {"layers": layers, "images": entries}


def _ordered(images: Iterable[NodeImage]) -> list[NodeImage]:
    """Largest first, then by digest: kubelet's status.images order, and deterministic."""
    unique: dict[str, NodeImage] = {}
    for image in images:
        kept = unique.get(image.digest)
        if kept is None:
            unique[image.digest] = image
        else:  # one manifest under several records: one entry, every name
            names = tuple(dict.fromkeys((*kept.names, *image.names)))
            unique[image.digest] = replace(kept, names=names)
    return sorted(unique.values(), key=lambda i: (-i.size_bytes, i.digest))


def _within_limits(
    images: Iterable[NodeImage], limits: Limits
) -> tuple[list[NodeImage], list[Omission]]:
    """The images the CRD accepts, largest first, and the ones left out (why)."""
    omitted: list[Omission] = []
    ordered: list[NodeImage] = []
    for image in _ordered(images):  # records of one manifest merged, then checked
        violation = _violation(image, limits)
        if violation is None:
            ordered.append(image)
        else:
            omitted.append(violation)
    for image in ordered[limits.max_images :]:
        detail = f"the {limits.max_images} largest images are kept"
        omitted.append(_omission(image, OMIT_IMAGE_COUNT, detail))
    kept: list[NodeImage] = []
    table: set[str] = set()
    for image in ordered[: limits.max_images]:
        new = {layer.digest for layer in image.known_layers} - table
        if len(table) + len(new) > limits.max_layers:
            detail = f"its layers would take the node past {limits.max_layers} distinct layers"
            omitted.append(_omission(image, OMIT_LAYER_TABLE, detail))
            continue
        table |= new
        kept.append(image)
    return kept, omitted


def build_document(
    node: str,
    images: Iterable[NodeImage],
    *,
    runtime: str,
    source: str,
    observed_at: datetime | None = None,
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
    limits: Limits = LIMITS,
) -> dict[str, Any]:
    """The ``NodeLayerInventory`` object for ``node`` (for a server-side apply); see
    :func:`build_inventory`."""
    return build_inventory(
        node,
        images,
        runtime=runtime,
        source=source,
        observed_at=observed_at,
        max_object_bytes=max_object_bytes,
        limits=limits,
    ).document


def build_inventory(
    node: str,
    images: Iterable[NodeImage],
    *,
    runtime: str,
    source: str,
    observed_at: datetime | None = None,
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
    limits: Limits = LIMITS,
) -> BuiltDocument:
    """The ``NodeLayerInventory`` object for ``node``, within the CRD's ``limits``, and
    the images it leaves out.

    An image that breaks a per-image limit (too many layers, a name too long, a digest
    that is not one, a layer past the size cap) is left out; of the rest the largest
    ``max_images`` are kept, then as many as the distinct-layer cap allows. Past
    ``max_object_bytes`` the smallest images are dropped (halving the cut until it
    fits). ``truncated`` is set when anything was left out, ``omittedImages`` says how
    many and ``omittedByReason`` why.
    """
    if not node:
        raise InputError("node name is empty: give the node a name (--node-name)")
    if source not in SOURCES:
        raise InputError(f"layer source {source!r}: expected one of {', '.join(SOURCES)}")
    runtime = runtime[: limits.max_runtime_chars]
    kept, omitted = _within_limits(images, limits)
    cut = len(kept)
    document = _document(node, _body(kept, limits), runtime, source, observed_at, omitted)
    dropped: list[Omission] = []
    while _encoded_bytes(document) > max_object_bytes and cut > 0:
        cut = cut // 2 if cut > 1 else 0
        detail = f"the object stays under {max_object_bytes} bytes"
        dropped = [_omission(image, OMIT_OBJECT_SIZE, detail) for image in kept[cut:]]
        body = _body(kept[:cut], limits)
        document = _document(node, body, runtime, source, observed_at, [*omitted, *dropped])
    return BuiltDocument(document, (*omitted, *dropped))


def _document(
    node: str,
    body: dict[str, Any],
    runtime: str,
    source: str,
    observed_at: datetime | None,
    omitted: Sequence[Omission],
) -> dict[str, Any]:
    by_reason: dict[str, int] = {}
    for omission in omitted:
        by_reason[omission.reason] = by_reason.get(omission.reason, 0) + 1
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node},
        "runtime": runtime,
        "source": source,
        "observedAt": rfc3339(observed_at or datetime.now(UTC)),
        "truncated": bool(omitted),
        "omittedImages": len(omitted),
        "omittedByReason": dict(sorted(by_reason.items())),
        **body,
    }
