"""A node's layers as one object: the ``NodeLayerInventory`` custom resource's data.

A node agent publishes one such object per node (named after the node); the extender
watches them. This module is the pure part: building the object from what a runtime
holds, and reading it back, with the checks the CRD's OpenAPI schema cannot express
(an image's layer indexes must point into the node's layer table).

The object deduplicates layers per node: ``layers`` lists each distinct compressed
layer once, and every image names its layers by index into that table. A node of 300
images that share a base costs ~100 bytes per distinct layer plus a few bytes per
image layer, far under etcd's request limit (1.5 MiB by default). Past
:data:`DEFAULT_MAX_OBJECT_BYTES` the builder drops the smallest images (kubelet's own
order for ``status.images``) and marks the object ``truncated``: the scheduler then
sees a node's largest images, which carry most of the bytes that placement saves.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from layersched.core.errors import InputError
from layersched.core.inventory import NodeImage
from layersched.core.layers import Layer, check_digest, check_size

GROUP = "layersched.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeLayerInventory"
LIST_KIND = f"{KIND}List"
PLURAL = "nodelayerinventories"
SINGULAR = "nodelayerinventory"
SHORT_NAME = "nli"
#: Where the layers came from, best first (the agent says which it used).
SOURCES = ("content-store", "crio-storage", "annotations", "registry", "mixed")
#: The object size the builder stays under: etcd refuses requests past 1.5 MiB by
#: default (--max-request-bytes); 1 MiB leaves room for metadata and managedFields.
DEFAULT_MAX_OBJECT_BYTES = 1024 * 1024
#: Names kept per image (kubelet keeps 5 in status.images; tags and digests of one image
#: beyond that add bytes and no scheduling signal).
MAX_NAMES_PER_IMAGE = 8
#: Bounds the CRD schema enforces, so one node cannot make the extender hold millions
#: of entries (20,000 layers x ~100 bytes is already past the size budget).
MAX_LAYERS = 20_000
MAX_IMAGES = 5_000


@dataclass(frozen=True, slots=True)
class HeldImage:
    """One image a runtime holds, with its compressed layers in manifest order."""

    names: tuple[str, ...]
    #: The manifest digest (or the runtime's image ID when the manifest is unknown).
    digest: str
    layers: tuple[Layer, ...]

    @property
    def size_bytes(self) -> int:
        """Compressed bytes: what a pull of it onto an empty node transfers."""
        return sum(layer.size_bytes for layer in self.layers)


@dataclass(frozen=True, slots=True)
class NodeLayers:
    """A parsed ``NodeLayerInventory``."""

    node: str
    images: tuple[HeldImage, ...]
    runtime: str = ""
    source: str = ""
    observed_at: str = ""
    truncated: bool = False
    resource_version: str = ""

    def node_images(self) -> tuple[NodeImage, ...]:
        """The images as inventory entries: names, size, and layers known (no resolving)."""
        return tuple(NodeImage(i.names, i.size_bytes, i.layers) for i in self.images)

    def layer_digests(self) -> set[str]:
        """The node's distinct layers."""
        return {layer.digest for image in self.images for layer in image.layers}


def rfc3339(moment: datetime) -> str:
    """``moment`` as the API server writes times (UTC, seconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _encoded_bytes(document: Mapping[str, Any]) -> int:
    return len(json.dumps(document, separators=(",", ":")).encode())


def _body(images: Sequence[HeldImage]) -> dict[str, Any]:
    table: dict[str, int] = {}
    layers: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for image in images:
        indexes = []
        for layer in image.layers:
            index = table.get(layer.digest)
            if index is None:
                index = table[layer.digest] = len(layers)
                layers.append({"digest": layer.digest, "sizeBytes": layer.size_bytes})
            indexes.append(index)
        entries.append(
            {
                "names": list(image.names[:MAX_NAMES_PER_IMAGE]),
                "digest": image.digest,
                "layers": indexes,
            }
        )
    return {"layers": layers, "images": entries}


def _ordered(images: Iterable[HeldImage]) -> list[HeldImage]:
    """Largest first, then by digest: kubelet's status.images order, and deterministic."""
    unique: dict[str, HeldImage] = {}
    for image in images:
        kept = unique.get(image.digest)
        if kept is None:
            unique[image.digest] = image
        else:  # one manifest under several records: one entry, every name
            names = tuple(dict.fromkeys((*kept.names, *image.names)))
            unique[image.digest] = HeldImage(names, kept.digest, kept.layers)
    return sorted(unique.values(), key=lambda i: (-i.size_bytes, i.digest))


def build_document(
    node: str,
    images: Iterable[HeldImage],
    *,
    runtime: str,
    source: str,
    observed_at: datetime | None = None,
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
) -> dict[str, Any]:
    """The ``NodeLayerInventory`` object for ``node`` (for a server-side apply).

    Past ``max_object_bytes`` the smallest images are dropped (halving the cut until it
    fits) and ``truncated`` is set; ``omittedImages`` says how many.
    """
    if not node:
        raise InputError("node name is empty: give the node a name (--node-name)")
    if source not in SOURCES:
        raise InputError(f"layer source {source!r}: expected one of {', '.join(SOURCES)}")
    ordered = _ordered(images)
    kept = len(ordered)
    body = _body(ordered)
    document = _document(node, body, runtime, source, observed_at, omitted=0)
    while _encoded_bytes(document) > max_object_bytes and kept > 0:
        kept = kept // 2 if kept > 1 else 0
        body = _body(ordered[:kept])
        document = _document(node, body, runtime, source, observed_at, len(ordered) - kept)
    return document


def _document(
    node: str,
    body: dict[str, Any],
    runtime: str,
    source: str,
    observed_at: datetime | None,
    omitted: int,
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node},
        "runtime": runtime,
        "source": source,
        "observedAt": rfc3339(observed_at or datetime.now(UTC)),
        "truncated": omitted > 0,
        "omittedImages": omitted,
        **body,
    }


def content_hash(document: Mapping[str, Any]) -> str:
    """A digest of what a document says about the node, ignoring when it was observed:
    the agent applies only when this changes."""
    kept = {k: v for k, v in document.items() if k not in ("observedAt", "metadata", "status")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where} must be a list")
    return value


def parse_document(
    document: Any,
    origin: str,
    pool: dict[str, Layer] | None = None,
    intern: Callable[[str], str] = sys.intern,
) -> NodeLayers:
    """Read a ``NodeLayerInventory`` object; InputError naming the node and field if it is
    malformed (an index out of range, a bad digest or size; sizes are capped by
    ``check_size`` at ``layersched.core.layers.MAX_SIZE_BYTES``).

    ``pool`` shares one :class:`Layer` per digest across objects (a base layer on 5,000
    nodes is then one object, not 5,000); ``intern`` shares image names (the watching
    extender pools whole images instead, and interns nothing an object it may refuse
    names)."""
    if not isinstance(document, dict):
        raise InputError(f"{origin}: expected a {KIND} object")
    meta = document.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InputError(f"{origin}: metadata.name is missing: the object is named after its node")
    node: str = meta["name"]
    where = f"{origin}: {KIND} {node!r}"
    table: list[Layer] = []
    for i, raw in enumerate(_list(document.get("layers"), f"{where}: layers")):
        lw = f"{where}: layers[{i}]"
        if not isinstance(raw, dict):
            raise InputError(f"{lw}: expected {{digest, sizeBytes}}")
        layer = Layer(
            check_digest(raw.get("digest"), f"{lw}.digest"),
            check_size(raw.get("sizeBytes"), f"{lw}.sizeBytes"),
        )
        if pool is not None:
            shared = pool.setdefault(layer.digest, layer)
            layer = shared if shared == layer else layer
        table.append(layer)
    images = []
    for i, raw in enumerate(_list(document.get("images"), f"{where}: images")):
        iw = f"{where}: images[{i}]"
        if not isinstance(raw, dict):
            raise InputError(f"{iw}: expected {{names, digest, layers}}")
        names = _list(raw.get("names"), f"{iw}.names")
        if not all(isinstance(n, str) for n in names):
            raise InputError(f"{iw}.names must be a list of strings")
        digest = raw.get("digest")
        if not isinstance(digest, str) or not digest:
            raise InputError(f"{iw}.digest is missing: the image's manifest digest")
        layers = []
        for j, index in enumerate(_list(raw.get("layers"), f"{iw}.layers")):
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(table):
                raise InputError(
                    f"{iw}.layers[{j}] = {index!r}: not an index into layers "
                    f"(0..{len(table) - 1}): the agent that wrote it is broken"
                )
            layers.append(table[index])
        images.append(HeldImage(tuple(intern(n) for n in names), digest, tuple(layers)))
    return NodeLayers(
        node=node,
        images=tuple(images),
        runtime=str(document.get("runtime") or ""),
        source=str(document.get("source") or ""),
        observed_at=str(document.get("observedAt") or ""),
        truncated=bool(document.get("truncated")),
        resource_version=str(meta.get("resourceVersion") or ""),
    )
