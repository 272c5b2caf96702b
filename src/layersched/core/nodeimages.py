"""What a node holds, as the scheduler reads it: :class:`NodeImage` (an entry of
``Node.status.images``, or an image an agent publishes), :class:`NodeInfo` (a node and its
images), and their parsing: the ``imageLayer.<digest>`` annotations, platform-prefixed
names, and an image's layers resolved through a layer source (the Go plugin's
``layers.NodeImage``, ``pkg/layers/inventory.go``). The index of them all is
:mod:`layersched.core.layerindex`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.layers import Layer, LayerSource, check_digest, check_size
from layersched.core.reference import ImageName

#: Prefix of the per-layer annotations the Ryax-patched CRI-O sets (CONTEXT §4).
LAYER_ANNOTATION_PREFIX = "imageLayer."
#: Separates a platform prefix from an image name (references never contain one): the
#: images of a node of another platform than the default are keyed ``"linux/arm64 repo:tag"``
#: so that they are resolved (and interned) for that platform.
PREFIX_SEPARATOR = " "


@dataclass(frozen=True, slots=True)
class NodeImage:
    """One image a node holds: an entry of ``Node.status.images``, or an image its agent
    read from the runtime and publishes in its NodeLayerInventory (:meth:`held`; the Go
    plugin's ``layers.NodeImage``)."""

    names: tuple[ImageName, ...]
    #: A status image's ``sizeBytes``; a held image's compressed bytes (its layers' sum:
    #: what a pull of it onto an empty node transfers).
    size_bytes: int
    #: The compressed layers in manifest order when known: an agent's published layers,
    #: or the Ryax-patched kubelet's ``layers`` map (source b). None: resolve them (a).
    layers: tuple[Layer, ...] | None = None
    #: A held image's manifest digest (or the runtime's image ID when the manifest is
    #: unknown); "" for a status image, which does not say.
    digest: str = ""

    @classmethod
    def held(
        cls, names: tuple[ImageName, ...], digest: str, layers: tuple[Layer, ...]
    ) -> NodeImage:
        """An image a runtime holds, with its compressed layers in manifest order."""
        return cls(names, sum(layer.size_bytes for layer in layers), layers, digest)

    @property
    def known_layers(self) -> tuple[Layer, ...]:
        """Its layers, or none when they are not known (a status image's)."""
        return self.layers or ()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the scheduler knows of a node."""

    name: str
    images: tuple[NodeImage, ...] = ()
    #: Layers from ``imageLayer.<digest>`` annotations (source c).
    annotation_layers: tuple[Layer, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


def _annotation_layer(key: str, value: str, where: str) -> Layer:
    digest = check_digest(key[len(LAYER_ANNOTATION_PREFIX) :], f"{where}[{key!r}]")
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise InputError(
            f"{where}[{key!r}]: value {value!r} must be the layer size in decimal bytes"
        ) from None
    return Layer(digest, check_size(size, f"{where}[{key!r}]"))


def annotation_layers(
    annotations: Mapping[str, str], where: str, problems: list[str] | None = None
) -> tuple[Layer, ...]:
    """Layers carried as ``imageLayer.<digest>: "<decimal size>"`` annotations.

    A malformed one is an InputError, unless ``problems`` is given: then it is
    skipped and described there.
    """
    layers = []
    for key, value in annotations.items():
        if not key.startswith(LAYER_ANNOTATION_PREFIX):
            continue
        try:
            layers.append(_annotation_layer(key, value, where))
        except InputError as err:
            if problems is None:
                raise
            problems.append(f"ignoring annotation {key!r}: {err}")
    return tuple(layers)


def prefixed_name(key: str, name: ImageName) -> ImageName:
    """``name`` prefixed by platform ``key`` (see :data:`PREFIX_SEPARATOR`): a name,
    no reference."""
    return ImageName(f"{key}{PREFIX_SEPARATOR}{name}")


def prefixed(image: NodeImage, key: str) -> NodeImage:
    """``image`` with every name prefixed by platform ``key``."""
    return replace(image, names=tuple(prefixed_name(key, name) for name in image.names))


#: How a node image is resolved from all its names at once (see :func:`names_resolver`).
NamesResolver = Callable[[Sequence[ImageName]], tuple[Layer, ...]]


def names_resolver(source: LayerSource) -> NamesResolver:
    """How ``source`` resolves a node image from its names: its own ``resolve_names``
    (a :class:`~layersched.core.layers.NodeImageSource`), else each name in turn.

    Ask once per source, not per image: ``isinstance`` against a runtime-checkable
    Protocol costs microseconds, a full-``Nodes`` request has thousands of images.
    """
    own: NamesResolver | None = getattr(source, "resolve_names", None)
    if own is not None:
        return own
    resolve = source.resolve

    def each_name(names: Sequence[ImageName]) -> tuple[Layer, ...]:
        reason = "it has no name to resolve"
        for name in names:
            try:
                return resolve(name)
            except LayerResolutionError as err:
                reason = str(err)
        raise LayerResolutionError(reason)

    return each_name


def resolve_node_image(
    image: NodeImage, source: LayerSource | None, resolver: NamesResolver | None = None
) -> tuple[tuple[Layer, ...] | None, str | None]:
    """Source (a): the layers of the first of ``image.names`` that ``source`` resolves.

    Returns ``(layers, None)``, or ``(None, warning)`` saying why the image is
    ignored (the last name's reason). Without a source (a strategy that needs no
    layers, such as image-locality) nothing is resolved and nothing is reported:
    ``(None, None)``. ``resolver`` is ``names_resolver(source)``, when the caller
    resolves many images through one source.
    """
    if source is None:
        return None, None
    try:
        return (resolver or names_resolver(source))(image.names), None
    except LayerResolutionError as err:
        reason = str(err)
    key = image.names[0] if image.names else ""
    return None, f"ignoring node image {key!r}: its layers are unknown ({reason})"
