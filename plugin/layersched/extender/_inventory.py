"""Where node inventories come from: request bodies, and the inventory the extender holds.

In ``NodeNames`` mode (``nodeCacheCapable: true``) kube-scheduler sends names
only, so the extender must already know what every node holds. An
:class:`InventoryProvider` is that seam: today the ``--nodes`` snapshot
(:class:`StaticInventoryProvider`); later a node agent or an API watch can
implement the same two members and be passed to :func:`create_app`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from layersched.core.errors import InputError
from layersched.core.inventory import (
    ClusterInventory,
    NodeImage,
    annotation_layers,
    check_node_kind,
    check_node_list_kind,
)
from layersched.core.layers import Layer, LayerSource, check_digest, check_size
from layersched.core.snapshot import NodeSnapshot, SlotCache, SnapshotBuilder
from layersched.extender._platforms import Platforms, PlatformSource, prefixed
from layersched.extender._wire import ContainerImage, Node, RawNodeList

log = logging.getLogger(__name__)


class InventoryProvider(Protocol):
    """Supplies the inventory ``NodeNames`` are resolved against."""

    def current(self) -> ClusterInventory | None:
        """The inventory now, or None while it is still loading (healthz answers 503)."""
        ...

    def load(self) -> None:
        """Load (blocking; run in a thread); raise a LayerschedError if it cannot."""
        ...


def _checked(image: ContainerImage, where: str) -> ContainerImage | NodeImage:
    """A status image with its size checked and its Ryax ``layers`` map (if any) read.

    An image with a ``layers`` map becomes a hashable NodeImage; InputError if
    the size is negative or the map is malformed. ``where`` prefixes the field
    named in an error (``items[3].status.images[7].``, or nothing).
    """
    check_size(image.sizeBytes, f"{where}sizeBytes")
    if image.layers is None:
        return image
    layers = tuple(
        Layer(check_digest(d, f"{where}layers key"), check_size(s, f"{where}layers[{d!r}]"))
        for d, s in image.layers.items()
    )
    return NodeImage(image.names or (), image.sizeBytes, layers or None)


def _first_name(image: ContainerImage | NodeImage) -> str:
    return (image.names or ("",))[0]


def add_wire_node(
    builder: SnapshotBuilder,
    node: Node,
    where: str,
    problems: list[str] | None = None,
    platform_key: str | None = None,
) -> None:
    """Add one decoded wire Node to ``builder`` (sources a, b and c as the core reads them).

    A malformed image entry (negative ``sizeBytes``, a bad ``layers`` map) or
    ``imageLayer.*`` annotation is an InputError naming ``where`` it is, unless
    ``problems`` is given: then it is ignored and described there, by node name
    (one bad node image must not cost a whole request its scores; the node's
    position in a request changes from cycle to cycle, its name does not). Then
    ``builder`` must skip invalid images: a negative size is found where the
    distinct image is described, once per request, not by a scan of every image.
    A node without a name or of another kind is an InputError either way.
    ``platform_key`` (a platform other than the default) prefixes the node's image
    names, so that a :class:`~layersched.extender._platforms.PlatformSource`
    resolves them for that platform (and they are interned apart from the same
    images on nodes of the default platform).
    """
    if node.kind is not None:  # usually absent inside a list: skip the call on the hot path
        check_node_kind(node.kind, where)
    meta = node.metadata
    if not meta.name:
        raise InputError(f"{where}: metadata.name is missing: every Node needs a name")
    lenient = problems is not None
    wire: list[ContainerImage] = node.status.images or []
    images: list[ContainerImage] | list[ContainerImage | NodeImage] = wire
    mine: list[str] = []
    # a ``layers`` map (a dict) is not hashable: such images are converted first
    if lenient:  # a request: negative sizes are left to _describe_image, once per image
        convert = any(image.layers is not None for image in wire)
    else:  # the --nodes file: every mistake is an error naming its place
        convert = any(image.layers is not None or image.sizeBytes < 0 for image in wire)
    if convert:
        checked: list[ContainerImage | NodeImage] = []
        images = checked
        for i, image in enumerate(wire):
            try:
                prefix = "" if lenient else f"{where}.status.images[{i}]."
                checked.append(_checked(image, prefix))
            except InputError as err:
                if not lenient:
                    raise
                mine.append(f"ignoring image {_first_name(image)!r}: {err}")
    annotations = meta.annotations or {}
    keys: Iterable[Hashable] = images
    describe: Callable[[Any], NodeImage] = _describe_image
    if platform_key is not None:
        keys = [(platform_key, image) for image in images]
        describe = _platform_describer(platform_key)
    idx = builder.add_node(
        meta.name,
        keys,
        describe=describe,
        annotation_layers=(
            annotation_layers(
                annotations,
                "metadata.annotations" if lenient else f"{where}.metadata.annotations",
                mine if lenient else None,
            )
            if annotations
            else ()
        ),
        labels=meta.labels,
        annotations=annotations,
    )
    if problems is not None:
        if builder.has_invalid:
            mine.extend(builder.invalid_images(idx))
        if mine:
            problems.extend(f"node {meta.name!r}: {problem}" for problem in mine)


def _describe_image(image: ContainerImage | NodeImage) -> NodeImage:
    """A distinct status image, described once; InputError if its size is negative."""
    if isinstance(image, NodeImage):
        return image
    try:
        check_size(image.sizeBytes, "sizeBytes")
    except InputError as err:
        raise InputError(f"ignoring image {_first_name(image)!r}: {err}") from err
    return NodeImage(image.names or (), image.sizeBytes, None)


def _platform_describer(key: str) -> Callable[[tuple[str, ContainerImage | NodeImage]], NodeImage]:
    """``_describe_image`` for images keyed ``(platform key, image)``: names prefixed."""

    def describe(keyed: tuple[str, ContainerImage | NodeImage]) -> NodeImage:
        return prefixed(_describe_image(keyed[1]), key)

    return describe


def snapshot_of(
    nodes: list[Node],
    source: LayerSource | None,
    where: str,
    cache: SlotCache | None = None,
    problems: list[str] | None = None,
    platform_keys: Sequence[str | None] | None = None,
) -> NodeSnapshot:
    """A snapshot of a request's ``Nodes.items`` (``cache``: entries seen by earlier requests;
    ``problems``: collects malformed images and annotations, ignored, instead of raising;
    ``platform_keys``: per node, its platform when not the default, else None)."""
    builder = SnapshotBuilder(source, cache, skip_invalid=problems is not None)
    for i, node in enumerate(nodes):
        key = platform_keys[i] if platform_keys is not None else None
        add_wire_node(builder, node, f"{where}[{i}]", problems, key)
    return builder.build()


class StaticInventoryProvider:
    """The inventory of a ``--nodes NODES.json`` file (a v1 NodeList), loaded once.

    The file is decoded node by node, so a 50 MB NodeList never exists as
    Python objects all at once; the result is an indexed :class:`NodeSnapshot`.
    """

    def __init__(
        self, path: str | None, source: LayerSource | None, platforms: Platforms | None = None
    ) -> None:
        self.path = path
        self._source = source
        #: Per-platform sources: each node's images are resolved for its platform.
        self.platforms = platforms if platforms is not None and platforms.enabled else None
        self._inventory: ClusterInventory | None = None
        #: Per node index, its platform key (the default's too); None: all the default.
        self.platform_keys: list[str] | None = None

    def current(self) -> ClusterInventory | None:
        return self._inventory

    def load(self) -> None:
        if self.path is None:
            self._inventory = SnapshotBuilder(self._source).build()
            return
        path = self.path
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise InputError(f"{path}: cannot read it ({err.strerror}): check the path") from None
        try:
            raw = msgspec.json.decode(data, type=RawNodeList)
        except msgspec.DecodeError as err:
            raise InputError(
                f"{path}: not a v1 NodeList ({err}): write it with 'kubectl get nodes -o json'"
            ) from None
        check_node_list_kind(raw.kind, path)
        if raw.items is None:
            raise InputError(
                f"{path}: no 'items' list: a v1 NodeList is written by 'kubectl get nodes -o json'"
            )
        decoder = msgspec.json.Decoder(Node)
        platforms = self.platforms
        source = self._source
        if platforms is not None and source is not None:
            source = PlatformSource(platforms.source, platforms.default_key)
        builder = SnapshotBuilder(source)
        keys: list[str] = []
        for i, item in enumerate(raw.items):
            where = f"{path}: items[{i}]"
            try:
                node = decoder.decode(item)
            except msgspec.DecodeError as err:
                raise InputError(f"{where}: not a v1 Node ({err})") from None
            key = None
            if platforms is not None:
                keys.append(platforms.key(node))
                key = keys[-1] if keys[-1] != platforms.default_key else None
            add_wire_node(builder, node, where, platform_key=key)
        del raw, data
        snapshot = builder.build()
        snapshot.index_layers()
        for warning in snapshot.warnings:
            log.warning("%s: %s", path, warning)
        log.info(
            "%s: %d nodes, %d distinct images, %d unresolved",
            path,
            snapshot.node_count,
            snapshot.slot_count,
            snapshot.unresolved_images,
        )
        if (keys and any(key != keys[0] for key in keys)) or (
            keys and platforms is not None and keys[0] != platforms.default_key
        ):
            self.platform_keys = keys
        self._inventory = snapshot
