"""A node's layers as one object: the ``NodeLayerInventory`` custom resource's data.

A node agent publishes one such object per node (named after the node); the extender
watches them. This module is the pure part: the object's CRD limits (:data:`LIMITS`, the
one place they are written; the CRD's schema is generated from them), and reading it
back, with the checks the CRD's OpenAPI schema cannot express (an image's layer indexes
must point into the node's layer table), as the Go plugin's ``layers/inventory.go`` does.
Building it from what a runtime holds is :mod:`layersched.core.nodelayersbuilder`.

The object deduplicates layers per node: ``layers`` lists each distinct compressed
layer once, and every image names its layers by index into that table. A node of 300
images that share a base costs ~100 bytes per distinct layer plus a few bytes per
image layer, far under etcd's request limit (1.5 MiB by default). An object the builder
cut to the limits is marked ``truncated``, with how many images were left out and why
(:data:`OMIT_REASONS`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from layersched.core.errors import InputError
from layersched.core.layers import MAX_SIZE_BYTES, Layer, check_digest, check_size
from layersched.core.nodeimages import NodeImage
from layersched.core.reference import ImageName

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


@dataclass(frozen=True, slots=True)
class Limits:
    """What one ``NodeLayerInventory`` may hold: the one place these numbers are written.

    The CRD's OpenAPI schema (:func:`layersched.kube.node_layers_crd`) is generated from
    :data:`LIMITS`, and :func:`build_document` applies the same object, so the agent never
    builds an object the API server refuses (a 422 it would retry forever). A test holds
    the schema to them (tests/unit/test_nodelayers_limits.py)."""

    #: Images per object: one node cannot make the extender hold millions of entries.
    max_images: int = 5_000
    #: Distinct layers per object (20,000 x ~100 bytes is already past the size budget).
    max_layers: int = 20_000
    #: Layers per image: OCI allows any number; 1,000 is far past real images (~127 at
    #: most under overlayfs's lower-dir limit).
    max_layers_per_image: int = 1_000
    #: Names kept per image (kubelet keeps 5 in status.images; more tags and digests of one
    #: image add bytes and no scheduling signal). Names past it are left out silently.
    max_names_per_image: int = 8
    #: Characters per image name: a valid reference is at most 255 (repository) + 1 + 128
    #: (tag), or + 1 + 71 (a sha256 digest), so 512 leaves room for any real name.
    max_name_chars: int = 512
    #: Bytes per layer, 1 TiB (the cap every size read has, ``core.layers.MAX_SIZE_BYTES``):
    #: far past any real layer, and it keeps sums in int64: one object's 20,000 layers add
    #: up to under 2^55, 2^8 times short of overflowing (two 2^62-byte layers already wrap
    #: a numpy int64 sum negative).
    max_layer_size_bytes: int = MAX_SIZE_BYTES
    #: Characters of ``runtime`` (name://version, as the runtime reports it).
    max_runtime_chars: int = 128


#: The CRD's limits (see :class:`Limits`).
LIMITS = Limits()

#: Why an image was left out of the object (the keys of ``omittedByReason``).
OMIT_LAYER_COUNT = "layerCount"  # more than max_layers_per_image layers
OMIT_NAME_LENGTH = "nameLength"  # a name longer than max_name_chars
OMIT_DIGEST = "digest"  # its digest, or a layer's, is not a digest
OMIT_LAYER_SIZE = "layerSize"  # a layer past max_layer_size_bytes (or negative)
OMIT_IMAGE_COUNT = "imageCount"  # past max_images: the smallest go
OMIT_LAYER_TABLE = "layerTable"  # its layers would take the node past max_layers
OMIT_OBJECT_SIZE = "objectSize"  # past the object's byte budget: the smallest go
OMIT_REASONS = (
    OMIT_LAYER_COUNT,
    OMIT_NAME_LENGTH,
    OMIT_DIGEST,
    OMIT_LAYER_SIZE,
    OMIT_IMAGE_COUNT,
    OMIT_LAYER_TABLE,
    OMIT_OBJECT_SIZE,
)
#: A hostile name or digest is shown this long at most (in Omission.detail and logs).
SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class NodeLayerInventory:
    """A parsed ``NodeLayerInventory`` object (the Go plugin's ``layers.NodeLayerInventory``)."""

    node: str
    images: tuple[NodeImage, ...]
    runtime: str = ""
    source: str = ""
    observed_at: str = ""
    truncated: bool = False
    resource_version: str = ""

    def node_images(self) -> tuple[NodeImage, ...]:
        """The images as the layer index takes them: names, size, and layers known (no
        resolving). They are the images themselves: one NodeImage serves both."""
        return self.images

    def layer_digests(self) -> set[str]:
        """The node's distinct layers."""
        return {layer.digest for image in self.images for layer in image.known_layers}


def shown(text: str, max_chars: int = SHOWN_CHARS) -> str:
    """``text`` cut for a message: a hostile name or digest can be megabytes long."""
    return text if len(text) <= max_chars else f"{text[:max_chars]}… ({len(text)} chars)"


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
    intern: Callable[[str], str] = sys.intern,
) -> NodeLayerInventory:
    """Read a ``NodeLayerInventory`` object; InputError naming the node and field if it is
    malformed (an index out of range, a bad digest or size; sizes are capped by
    ``check_size`` at ``layersched.core.layers.MAX_SIZE_BYTES``).

    ``intern`` shares image names. The watching extender shares layers and whole images
    across objects in its own pools (``layersched.core.budget``), and interns nothing
    an object it may refuse names."""
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
            check_size(raw.get("sizeBytes"), f"{lw}.sizeBytes", LIMITS.max_layer_size_bytes),
        )
        table.append(layer)
    images = []
    for i, raw in enumerate(_list(document.get("images"), f"{where}: images")):
        iw = f"{where}: images[{i}]"
        if not isinstance(raw, dict):
            raise InputError(f"{iw}: expected {{names, digest, layers}}")
        names = _list(raw.get("names"), f"{iw}.names")
        if not all(isinstance(n, str) for n in names):
            raise InputError(f"{iw}.names must be a list of strings")
        if len(names) > LIMITS.max_names_per_image:
            raise InputError(
                f"{iw}.names has {len(names)} names, over the cap of "
                f"{LIMITS.max_names_per_image}: the agent that wrote it is broken or hostile"
            )
        digest = raw.get("digest")
        if not isinstance(digest, str) or not digest:
            raise InputError(f"{iw}.digest is missing: the image's manifest digest")
        indexes = _list(raw.get("layers"), f"{iw}.layers")
        if len(indexes) > LIMITS.max_layers_per_image:
            raise InputError(
                f"{iw}.layers has {len(indexes)} layers, over the cap of "
                f"{LIMITS.max_layers_per_image}: the agent that wrote it is broken or hostile"
            )
        layers = []
        first: dict[int, int] = {}
        for j, index in enumerate(indexes):
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(table):
                raise InputError(
                    f"{iw}.layers[{j}] = {index!r}: not an index into layers "
                    f"(0..{len(table) - 1}): the agent that wrote it is broken"
                )
            if index in first:
                raise InputError(
                    f"{iw}.layers[{j}] = {index} repeats layers[{first[index]}]: an image "
                    "lists each distinct layer once (the agent that wrote it is broken or "
                    "hostile)"
                )
            first[index] = j
            layers.append(table[index])
        held_names = cast("tuple[ImageName, ...]", tuple(intern(n) for n in names))
        images.append(NodeImage.held(held_names, digest, tuple(layers)))
    return NodeLayerInventory(
        node=node,
        images=tuple(images),
        runtime=str(document.get("runtime") or ""),
        source=str(document.get("source") or ""),
        observed_at=str(document.get("observedAt") or ""),
        truncated=bool(document.get("truncated")),
        resource_version=str(meta.get("resourceVersion") or ""),
    )
