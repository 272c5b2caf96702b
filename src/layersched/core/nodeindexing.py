"""A decoded v1 Node as the layer index takes it: its ``status.images`` entries as hashable
keys (a patched kubelet's ``layers`` map read), each distinct entry described once as a
:class:`~layersched.core.nodeimages.NodeImage`, its ``imageLayer.<digest>`` annotations,
and the node added to a builder (:func:`add_node_object`) or described whole
(:func:`node_info`); strict for a file, lenient (problems described) for a request.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable
from typing import Any, cast

from layersched.core.errors import InputError
from layersched.core.indexbuilder import LayerIndexBuilder
from layersched.core.layers import Layer, check_digest, check_size
from layersched.core.nodeimages import (
    LAYER_ANNOTATION_PREFIX,
    NodeImage,
    NodeInfo,
    annotation_layers,
    prefixed,
)
from layersched.core.objects import ContainerImage, Node, check_node
from layersched.core.reference import ImageName


def image_layers(image: ContainerImage, where: str) -> tuple[Layer, ...]:
    """A patched kubelet's ``layers`` map as layers; InputError naming ``where``."""
    return tuple(
        Layer(check_digest(d, f"{where}layers key"), check_size(s, f"{where}layers[{d!r}]"))
        for d, s in (image.layers or {}).items()
    )


def checked_image(image: ContainerImage, where: str) -> ContainerImage | NodeImage:
    """A status image with its size checked and its ``layers`` map (if any) read: an image
    with a map becomes a (hashable) NodeImage. ``where`` prefixes the field named in an
    error (``items[3].status.images[7].``, or nothing)."""
    check_size(image.sizeBytes, f"{where}sizeBytes")
    if image.layers is None:
        return image
    return NodeImage(image.names or (), image.sizeBytes, image_layers(image, where) or None)


def image_key_name(image: ContainerImage | NodeImage) -> str:
    """The first name of an image entry, for messages."""
    return (image.names or ("",))[0]


def describe_image(image: ContainerImage | NodeImage) -> NodeImage:
    """A distinct status image as an inventory entry; InputError if its size is negative."""
    if isinstance(image, NodeImage):
        return image
    try:
        check_size(image.sizeBytes, "sizeBytes")
    except InputError as err:
        raise InputError(f"ignoring image {image_key_name(image)!r}: {err}") from err
    # names repeat on every node holding the image: one string each
    names = cast("tuple[ImageName, ...]", tuple(sys.intern(n) for n in image.names or ()))
    return NodeImage(names, image.sizeBytes, None)


def node_image_keys(
    node: Node, where: str, problems: list[str] | None = None
) -> list[ContainerImage] | list[ContainerImage | NodeImage]:
    """The node's status images as hashable keys for an inventory builder.

    Entries with a ``layers`` map become NodeImages (a map is not hashable). Strict
    (``problems`` None): a malformed image is an InputError naming its field. Lenient: it
    is left out and described in ``problems``; a negative ``sizeBytes`` is then left for
    :func:`describe_image`, met once per distinct image rather than by a scan of all.
    """
    wire: list[ContainerImage] = node.status.images or []
    lenient = problems is not None
    if lenient:
        convert = any(image.layers is not None for image in wire)
    else:
        convert = any(image.layers is not None or image.sizeBytes < 0 for image in wire)
    if not convert:
        return wire
    checked: list[ContainerImage | NodeImage] = []
    for i, image in enumerate(wire):
        try:
            checked.append(checked_image(image, "" if lenient else f"{where}.status.images[{i}]."))
        except InputError as err:
            if problems is None:
                raise
            problems.append(f"ignoring image {image_key_name(image)!r}: {err}")
    return checked


def node_annotation_layers(
    node: Node, where: str, problems: list[str] | None = None
) -> tuple[Layer, ...]:
    """The node's ``imageLayer.<digest>`` annotations (source c); lenient with ``problems``."""
    annotations = node.metadata.annotations
    if not annotations or not any(k.startswith(LAYER_ANNOTATION_PREFIX) for k in annotations):
        return ()
    field = "metadata.annotations" if problems is not None else f"{where}.metadata.annotations"
    return annotation_layers(annotations, field, problems)


def node_info(node: Node, where: str, problems: list[str] | None = None) -> NodeInfo:
    """The inventory's view of one decoded Node, every image described (strict without
    ``problems``; with it, malformed images and annotations are left out and described)."""
    name = check_node(node, where)
    mine: list[str] | None = [] if problems is not None else None
    images: list[NodeImage] = []
    for key in node_image_keys(node, where, mine):
        try:
            images.append(describe_image(key))
        except InputError as err:
            if mine is None:
                raise InputError(f"{where}: {err}") from None
            mine.append(str(err))
    layers = node_annotation_layers(node, where, mine)
    if problems is not None and mine:
        problems.extend(f"node {name!r}: {problem}" for problem in mine)
    meta = node.metadata
    return NodeInfo(
        name=name,
        images=tuple(images),
        annotation_layers=layers,
        labels=meta.labels or {},
        annotations=meta.annotations or {},
        allocatable=node.status.allocatable or {},
    )


def add_node_object(
    builder: LayerIndexBuilder,
    node: Node,
    where: str,
    problems: list[str] | None = None,
    platform_key: str | None = None,
) -> int:
    """Add one decoded Node to ``builder`` (sources a, b and c); its index.

    Strict (``problems`` None: a file): a malformed image entry or ``imageLayer.*``
    annotation is an InputError naming where it is. Lenient (a request): it is ignored
    and described in ``problems`` by node name (one bad node image must not cost a whole
    request its scores; a node's position changes from cycle to cycle, its name does
    not), and ``builder`` must skip invalid images: a negative size is then found where
    the distinct image is described, once per request, not by a scan of every image.
    A node without a name or of another kind is an InputError either way.
    ``platform_key`` (a platform other than the default) prefixes the node's image names,
    so that they are resolved for that platform and interned apart from the same images
    on nodes of the default platform.
    """
    name = check_node(node, where)
    mine: list[str] | None = [] if problems is not None else None
    keys: Iterable[Hashable] = node_image_keys(node, where, mine)
    describe: Callable[[Any], NodeImage] = describe_image
    if platform_key is not None:
        keys = [(platform_key, image) for image in keys]
        describe = _platform_describer(platform_key)
    meta = node.metadata
    layers = node_annotation_layers(node, where, mine)
    idx = builder.add_node(
        name,
        keys,
        describe=describe,
        annotation_layers=layers,
        labels=meta.labels,
        annotations=meta.annotations,
        allocatable=node.status.allocatable,
    )
    if problems is not None and mine is not None:
        if builder.has_invalid:
            mine.extend(builder.invalid_images(idx))
        if mine:
            problems.extend(f"node {name!r}: {problem}" for problem in mine)
    return idx


def _platform_describer(key: str) -> Callable[[tuple[str, ContainerImage | NodeImage]], NodeImage]:
    """:func:`describe_image` for images keyed ``(platform key, image)``: names prefixed."""

    def describe(keyed: tuple[str, ContainerImage | NodeImage]) -> NodeImage:
        return prefixed(describe_image(keyed[1]), key)

    return describe
