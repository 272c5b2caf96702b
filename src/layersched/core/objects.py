"""The v1 Node and Pod as layersched reads them: one decoder of each, for every entry point.

A NodeList file (``kubectl get nodes -o json``, or YAML), an extender request's ``Nodes``,
a watched Node, the testbed's node snapshots and the simulator all decode Nodes through
:class:`Node`; a Pod file and an extender request's ``Pod`` decode through :class:`Pod`.
Only the fields layersched reads are declared: msgspec skips the rest without building
them, which is most of the cost of a 5 MB NodeList. ``gc=False`` keeps the thousands of
decoded objects out of the cyclic garbage collector. The field names are the API's
(camelCase): these structs *are* the wire format.

What a type cannot say is checked after decoding, with errors naming the origin and the
field (``nodes.json: items[3].status.images[7].sizeBytes: ...``): a node's name and kind,
a pod's containers and images. A Node's ``status.images`` entries stay
:class:`ContainerImage` structs (hashable, so a builder interns the 25,000 entries of a
request as the few thousand distinct ones) until :mod:`layersched.core.nodeindexing`
describes a distinct one. The same Pod and Node with more of their fields are
:mod:`layersched.core.placedobjects`' (``layersched estimate``) and
:mod:`layersched.core.boundpod`'s (the in-flight pod watch).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any, TypeVar

import msgspec
import yaml

from layersched.core.errors import InputError
from layersched.core.pod import PodImages
from layersched.core.reference import ImageName

NODE_KIND = "Node"
POD_KIND = "Pod"
#: What ``kubectl get nodes -o json`` prints (``List``) or the API returns (``NodeList``).
NODE_LIST_KINDS = (None, "NodeList", "List")


class ObjectMeta(msgspec.Struct, gc=False):
    """``metadata``: what identifies a node or pod."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    resourceVersion: str = ""


class ContainerImage(msgspec.Struct, frozen=True, gc=False):
    """One ``Node.status.images`` entry; hashable (to be interned) unless it has ``layers``."""

    names: tuple[ImageName, ...] | None = None
    #: Checked where it is used: a negative size ignores the image, not the request.
    sizeBytes: int = 0
    #: Ryax-patched kubelet: ``{layer digest: compressed size}``.
    layers: dict[str, int] | None = None


class NodeSystemInfo(msgspec.Struct, gc=False):
    """``Node.status.nodeInfo``: the platform, when the node has no os/arch labels."""

    architecture: str = ""
    operatingSystem: str = ""


class NodeStatus(msgspec.Struct, gc=False):
    """``Node.status``: the images, the platform they are for, and the allocatable."""

    images: list[ContainerImage] | None = None
    nodeInfo: NodeSystemInfo | None = None
    allocatable: dict[str, str] | None = None


class Node(msgspec.Struct, gc=False):
    """A v1 Node, reduced to its kind, metadata, images, platform and allocatable."""

    #: Usually absent inside a list; when present it must be ``Node``.
    kind: str | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class NodeList(msgspec.Struct, gc=False):
    """A v1 NodeList (an extender request's ``Nodes``)."""

    items: list[Node] | None = None


class _RawNodeList(msgspec.Struct, gc=False):
    """A v1 NodeList whose items stay undecoded, to decode a big file node by node."""

    kind: str | None = None
    items: list[msgspec.Raw] | None = None


class Container(msgspec.Struct, gc=False):
    """A container: only its image matters."""

    name: str = ""
    image: ImageName = ImageName("")


class ImageVolumeSource(msgspec.Struct, gc=False):
    """``volumes[].image`` (KEP-4639): an OCI image mounted as a volume."""

    reference: ImageName = ImageName("")


class Volume(msgspec.Struct, gc=False):
    """A pod volume: only an image volume's reference matters."""

    name: str = ""
    image: ImageVolumeSource | None = None


class LocalObjectReference(msgspec.Struct, gc=False):
    """A reference to an object of the same namespace, by name (a pull secret)."""

    name: str = ""


class PodSpec(msgspec.Struct, gc=False):
    """``Pod.spec``: the containers (init containers first, in upstream's order), volumes,
    and the pull secrets the kubelet pulls the images with."""

    initContainers: Sequence[Container] | None = None
    containers: Sequence[Container] | None = None
    volumes: list[Volume] | None = None
    imagePullSecrets: list[LocalObjectReference] | None = None


class Pod(msgspec.Struct, gc=False):
    """A v1 Pod, reduced to its identity, container images and image volumes."""

    #: Usually absent in a request; when present it must be ``Pod``.
    kind: str | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec | None = None


class OwnerReference(msgspec.Struct, gc=False):
    """``metadata.ownerReferences[]``: who made the object (the admission rule checks a
    NodeLayerInventory's is its Node, by apiVersion, kind, name and uid)."""

    apiVersion: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class OwnedMeta(ObjectMeta, gc=False):
    """``metadata`` with the owners (a DaemonSet's pods are pinned to their node; an
    agent's NodeLayerInventory must be owned by its Node). The extender's hot path decodes
    :class:`ObjectMeta`, which skips them."""

    ownerReferences: list[OwnerReference] | None = None
    creationTimestamp: str = ""


T = TypeVar("T")

_NODE_DECODER = msgspec.json.Decoder(Node)
_AT = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.S)


def validation_message(err: msgspec.MsgspecError) -> str:
    """msgspec's ``Expected `str`, got `int` - at `$.a[0].b``` as ``a[0].b: expected str,
    got int`` (a map's value is ``a[...]``: msgspec does not name the key)."""
    text = str(err)
    match = _AT.match(text)
    what, path = (match["what"], match["path"].lstrip(".")) if match else (text, "")
    # "Expected `array | null`": every field may be absent; say what it must be when present
    what = what.replace("`", "").replace(" | null", "")
    what = what[:1].lower() + what[1:]
    return f"{path}: {what}" if path else what


def convert(document: Any, kind: type[T], origin: str, hint: str) -> T:
    """``document`` (parsed JSON/YAML) as ``kind``; InputError naming origin and field."""
    try:
        return msgspec.convert(document, kind)
    except msgspec.ValidationError as err:
        raise InputError(f"{origin}: {validation_message(err)}: {hint}") from None
    except RecursionError:
        raise InputError(f"{origin}: nested too deeply: {hint}") from None


def decode(data: bytes, kind: type[T], origin: str, hint: str, what: str = "") -> T:
    """JSON ``data`` as ``kind`` (``what`` names it in messages, e.g. ``v1 NodeList``);
    InputError naming origin and field (also for JSON nested 100,000 deep or a string that
    is not UTF-8, which msgspec reports otherwise)."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as err:
        raise InputError(f"{origin}: {validation_message(err)}: {hint}") from None
    except msgspec.DecodeError as err:
        described = f"not a {what}: " if what else ""
        raise InputError(f"{origin}: {described}malformed JSON ({err}): {hint}") from None
    except RecursionError:
        raise InputError(f"{origin}: JSON nested too deeply: {hint}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{origin}: a string is not valid UTF-8 ({err.reason})") from None


# ---------------------------------------------------------------------------- nodes

NODE_HINT = "write it with 'kubectl get nodes -o json'"
_LIST = "v1 NodeList"


def check_node_list_kind(kind: object, origin: str) -> None:
    """A node file's top-level ``kind`` must be absent, ``NodeList`` or ``List``."""
    if kind not in NODE_LIST_KINDS:
        raise InputError(f"{origin}: kind is {kind!r}, expected 'NodeList': {NODE_HINT}")


def check_node(node: Node, where: str) -> str:
    """The node's name, once its kind (when given) and name are right."""
    if node.kind is not None and node.kind != NODE_KIND:
        raise InputError(
            f"{where}: kind is {node.kind!r}, expected 'Node': a node list holds Nodes only "
            f"({NODE_HINT})"
        )
    if not node.metadata.name:
        raise InputError(f"{where}: metadata.name is missing: every Node needs a name")
    return node.metadata.name


def decode_node(document: Any, origin: str) -> Node:
    """One v1 Node, from JSON bytes or a parsed object (a watch event's)."""
    if isinstance(document, bytes | bytearray | memoryview):
        node = decode(bytes(document), Node, origin, NODE_HINT, "v1 Node")
    else:
        node = convert(document, Node, origin, NODE_HINT)
    check_node(node, origin)
    return node


def _is_yaml(origin: str) -> bool:
    return PurePath(origin).suffix.lower() in (".yaml", ".yml")


def decode_node_list(data: bytes, origin: str) -> Iterator[Node]:
    """The Nodes of a v1 NodeList file (JSON; YAML when ``origin`` ends in .yaml/.yml).

    A JSON file is decoded node by node, so a 50 MB NodeList never exists as Python
    objects all at once. A bare list of Nodes is accepted too.
    """
    if _is_yaml(origin):
        try:
            document = yaml.safe_load(data)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise InputError(f"{origin}: invalid YAML{at}: fix the syntax") from None
        yield from _nodes_of(document, origin)
        return
    if data.lstrip()[:1] == b"[":
        raw = _RawNodeList(items=decode(data, list[msgspec.Raw], origin, NODE_HINT, _LIST))
    else:
        raw = decode(data, _RawNodeList, origin, NODE_HINT, _LIST)
        check_node_list_kind(raw.kind, origin)
    if raw.items is None:
        raise InputError(f"{origin}: no 'items' list: a v1 NodeList is {NODE_HINT}")
    for i, item in enumerate(raw.items):
        node = decode(item, Node, f"{origin}: items[{i}]", NODE_HINT, "v1 Node")
        check_node(node, f"{origin}: items[{i}]")
        yield node


def _nodes_of(document: Any, origin: str) -> Iterator[Node]:
    """The Nodes of a parsed NodeList (or a bare list of Nodes)."""
    if isinstance(document, Mapping):
        check_node_list_kind(document.get("kind"), origin)
        items = document.get("items")
    elif isinstance(document, list):
        items = document
    else:
        raise InputError(f"{origin}: expected object, got {type(document).__name__}: {NODE_HINT}")
    if not isinstance(items, list):
        raise InputError(f"{origin}: expected a v1 NodeList with an 'items' list: {NODE_HINT}")
    for i, item in enumerate(items):
        node = convert(item, Node, f"{origin}: items[{i}]", NODE_HINT)
        check_node(node, f"{origin}: items[{i}]")
        yield node


def nodes_from_document(document: Any, origin: str) -> list[Node]:
    """The Nodes of a parsed NodeList document (a dict from JSON or YAML, or a list)."""
    return list(_nodes_of(document, origin))


# ----------------------------------------------------------------------------- pods

POD_HINT = "a Pod needs spec.containers, each with an image"


def decode_pod(document: Any, origin: str) -> Pod:
    """One v1 Pod, from JSON bytes or a parsed object (a JSON or YAML file's)."""
    if isinstance(document, bytes | bytearray | memoryview):
        return decode(bytes(document), Pod, origin, POD_HINT, "v1 Pod")
    if not isinstance(document, Mapping):
        raise InputError(f"{origin}: expected a v1 Pod object")
    return convert(document, Pod, origin, POD_HINT)


def pod_name(meta: ObjectMeta) -> str:
    """``namespace/name`` (``name`` alone without a namespace)."""
    return f"{meta.namespace}/{meta.name}".lstrip("/")


def pod_images(pod: Pod | None, origin: str) -> PodImages:
    """The core's view of a decoded Pod; InputError naming ``origin`` and the field if it
    has no usable containers. The pod is named ``namespace/name``."""
    if pod is None:
        raise InputError(f"{origin}: Pod is missing")
    if pod.kind is not None and pod.kind != POD_KIND:
        raise InputError(f"{origin}: kind is {pod.kind!r}, expected 'Pod'")
    spec = pod.spec
    if spec is None:
        raise InputError(f"{origin}: spec is missing: {POD_HINT}")
    containers = spec.containers or []
    if not containers:
        raise InputError(f"{origin}: spec.containers is empty: {POD_HINT}")
    images: list[tuple[ImageName, ...]] = []
    for key, listed in (("initContainers", spec.initContainers or []), ("containers", containers)):
        for i, container in enumerate(listed):
            if not container.image:
                raise InputError(
                    f"{origin}: spec.{key}[{i}].image is missing: every container needs an "
                    "image reference"
                )
        images.append(tuple(c.image for c in listed))
    volumes: list[ImageName] = []
    for i, volume in enumerate(spec.volumes or []):
        if volume.image is None:
            continue  # another kind of volume
        if not volume.image.reference:
            raise InputError(
                f"{origin}: spec.volumes[{i}].image.reference is missing: an image volume "
                "names the image it mounts"
            )
        volumes.append(volume.image.reference)
    return PodImages(
        name=pod_name(pod.metadata) or "pod",
        init_containers=images[0],
        containers=images[1],
        image_volumes=tuple(volumes),
    )
