"""The v1 Node and Pod as layersched reads them: one decoder of each, for every entry point.

A NodeList file (``kubectl get nodes -o json``, or YAML), an extender request's ``Nodes``,
a watched Node, the testbed's node snapshots and the simulator all decode Nodes through
:class:`Node`; a Pod file and an extender request's ``Pod`` decode through :class:`Pod`.
Only the fields layersched reads are declared: msgspec skips the rest without building
them, which is most of the cost of a 5 MB NodeList. ``gc=False`` keeps the thousands of
decoded objects out of the cyclic garbage collector. The field names are the API's
(camelCase): these structs *are* the wire format.

What a type cannot say is checked after decoding, with errors naming the origin and the
field (``nodes.json: items[3].status.images[7].sizeBytes: ...``): a node's name, image
sizes, a patched kubelet's ``layers`` map, ``imageLayer.<digest>`` annotations, a pod's
containers and images. A Node's ``status.images`` entries stay :class:`ContainerImage`
structs (hashable, so a builder interns the 25,000 entries of a request as the few
thousand distinct ones) until :func:`describe_image` makes a
:class:`~layersched.core.nodeimages.NodeImage` of a distinct one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any, TypeVar, cast

import msgspec
import yaml

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


# ------------------------------------------------------- placement (layersched estimate)
# What a pod's placement depended on, and when it ran; the extender never decodes these
# (a prioritize request's Pod and Nodes decode as Pod and Node above, at their cost).


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


class ResourceRequirements(msgspec.Struct, gc=False):
    """``resources``: only the requests take part in placement."""

    requests: dict[str, str] | None = None


class PlacedContainer(Container, gc=False):
    """A container with its resource requests."""

    resources: ResourceRequirements | None = None


class NodeSelectorRequirement(msgspec.Struct, gc=False):
    """One ``matchExpressions``/``matchFields`` entry of a node selector term."""

    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class NodeSelectorTerm(msgspec.Struct, gc=False):
    """Requirements that must all hold (terms are ORed)."""

    matchExpressions: list[NodeSelectorRequirement] | None = None
    matchFields: list[NodeSelectorRequirement] | None = None


class NodeSelector(msgspec.Struct, gc=False):
    """``requiredDuringSchedulingIgnoredDuringExecution``."""

    nodeSelectorTerms: list[NodeSelectorTerm] | None = None


class NodeAffinity(msgspec.Struct, gc=False):
    """``affinity.nodeAffinity``: only the required part restricts where a pod fits."""

    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class Affinity(msgspec.Struct, gc=False):
    """``affinity``: node affinity (pod (anti-)affinity is not evaluated)."""

    nodeAffinity: NodeAffinity | None = None


class Toleration(msgspec.Struct, frozen=True, gc=False):
    """``tolerations[]``."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class PlacedPodSpec(PodSpec, gc=False):
    """``Pod.spec`` with what placed it: node, scheduler, requests and constraints."""

    initContainers: Sequence[PlacedContainer] | None = None
    containers: Sequence[PlacedContainer] | None = None
    nodeName: str = ""
    schedulerName: str = ""
    nodeSelector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    overhead: dict[str, str] | None = None


class ContainerStateTerminated(msgspec.Struct, gc=False):
    """``state.terminated``: when the container stopped."""

    finishedAt: str = ""


class ContainerState(msgspec.Struct, gc=False):
    """``state``: only a terminated one's end matters."""

    terminated: ContainerStateTerminated | None = None


class ContainerStatus(msgspec.Struct, gc=False):
    """``containerStatuses[]``: the image the runtime ran (``imageID``, by digest)."""

    name: str = ""
    image: str = ""
    imageID: str = ""
    state: ContainerState | None = None


class PodStatus(msgspec.Struct, gc=False):
    """``Pod.status``: when the kubelet took the pod, its phase, its containers."""

    phase: str = ""
    startTime: str = ""
    containerStatuses: list[ContainerStatus] | None = None
    initContainerStatuses: list[ContainerStatus] | None = None


class PlacedPod(Pod, gc=False):
    """A v1 Pod as ``layersched estimate`` reads it: where it ran, from when to when,
    what it requested and what constrained its placement."""

    metadata: OwnedMeta = msgspec.field(default_factory=OwnedMeta)
    spec: PlacedPodSpec | None = None
    status: PodStatus | None = None


# ------------------------------------------ a pod bound to a node (in-flight scoring)
# What the extender's pod watch reads of a bound pod: enough to tell whether its
# containers have started, why not, and since when it is bound (core.inflight).


class ContainerStateWaiting(msgspec.Struct, gc=False):
    """``state.waiting``: why the container is not running yet (``ErrImagePull``, ...)."""

    reason: str = ""


class ContainerStateRunning(msgspec.Struct, gc=False):
    """``state.running``: since when."""

    startedAt: str = ""


class ContainerStatusState(msgspec.Struct, gc=False):
    """``state``: one of waiting, running or terminated."""

    waiting: ContainerStateWaiting | None = None
    running: ContainerStateRunning | None = None
    terminated: ContainerStateTerminated | None = None


class BoundContainerStatus(msgspec.Struct, gc=False):
    """``containerStatuses[]`` as a bound pod's pulls are judged by it."""

    name: str = ""
    imageID: str = ""
    state: ContainerStatusState | None = None


class PodCondition(msgspec.Struct, gc=False):
    """``conditions[]``: ``PodScheduled`` turns true when the pod is bound."""

    type: str = ""
    status: str = ""
    lastTransitionTime: str = ""


class BoundPodStatus(msgspec.Struct, gc=False):
    """``Pod.status`` of a bound pod: its phase, conditions and containers' states."""

    phase: str = ""
    conditions: list[PodCondition] | None = None
    initContainerStatuses: list[BoundContainerStatus] | None = None
    containerStatuses: list[BoundContainerStatus] | None = None


class BoundPodSpec(PodSpec, gc=False):
    """``Pod.spec`` with the node it is bound to."""

    nodeName: str = ""


class BoundPod(Pod, gc=False):
    """A v1 Pod as the extender's pod watch reads it (``layersched.core.inflight``)."""

    spec: BoundPodSpec | None = None
    status: BoundPodStatus | None = None


_BOUND_POD_DECODER = msgspec.json.Decoder(BoundPod)


def decode_bound_pod(document: Mapping[str, Any] | bytes, origin: str) -> BoundPod:
    """One watched or listed Pod, from its JSON bytes or the parsed object."""
    try:
        if isinstance(document, bytes):
            return _BOUND_POD_DECODER.decode(document)
        return msgspec.convert(document, BoundPod)
    except msgspec.ValidationError as err:
        raise InputError(f"{origin}: {_validation_message(err)}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as err:
        raise InputError(f"{origin}: malformed JSON ({type(err).__name__})") from None


class Taint(msgspec.Struct, frozen=True, gc=False):
    """``Node.spec.taints[]``."""

    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(msgspec.Struct, gc=False):
    """``Node.spec``: what keeps pods off the node."""

    unschedulable: bool = False
    taints: list[Taint] | None = None


class SchedulableNode(Node, gc=False):
    """A v1 Node with its taints and cordon, for ``layersched estimate``."""

    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)


T = TypeVar("T")

_NODE_DECODER = msgspec.json.Decoder(Node)
_AT = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.S)


def _validation_message(err: msgspec.MsgspecError) -> str:
    """msgspec's ``Expected `str`, got `int` - at `$.a[0].b``` as ``a[0].b: expected str,
    got int`` (a map's value is ``a[...]``: msgspec does not name the key)."""
    text = str(err)
    match = _AT.match(text)
    what, path = (match["what"], match["path"].lstrip(".")) if match else (text, "")
    # "Expected `array | null`": every field may be absent; say what it must be when present
    what = what.replace("`", "").replace(" | null", "")
    what = what[:1].lower() + what[1:]
    return f"{path}: {what}" if path else what


def _convert(document: Any, kind: type[T], origin: str, hint: str) -> T:
    """``document`` (parsed JSON/YAML) as ``kind``; InputError naming origin and field."""
    try:
        return msgspec.convert(document, kind)
    except msgspec.ValidationError as err:
        raise InputError(f"{origin}: {_validation_message(err)}: {hint}") from None
    except RecursionError:
        raise InputError(f"{origin}: nested too deeply: {hint}") from None


def decode(data: bytes, kind: type[T], origin: str, hint: str, what: str = "") -> T:
    """JSON ``data`` as ``kind`` (``what`` names it in messages, e.g. ``v1 NodeList``);
    InputError naming origin and field (also for JSON nested 100,000 deep or a string that
    is not UTF-8, which msgspec reports otherwise)."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as err:
        raise InputError(f"{origin}: {_validation_message(err)}: {hint}") from None
    except msgspec.DecodeError as err:
        described = f"not a {what}: " if what else ""
        raise InputError(f"{origin}: {described}malformed JSON ({err}): {hint}") from None
    except RecursionError:
        raise InputError(f"{origin}: JSON nested too deeply: {hint}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{origin}: a string is not valid UTF-8 ({err.reason})") from None


# ---------------------------------------------------------------------------- nodes

_NODE_HINT = "write it with 'kubectl get nodes -o json'"
_LIST = "v1 NodeList"


def check_node_list_kind(kind: object, origin: str) -> None:
    """A node file's top-level ``kind`` must be absent, ``NodeList`` or ``List``."""
    if kind not in NODE_LIST_KINDS:
        raise InputError(f"{origin}: kind is {kind!r}, expected 'NodeList': {_NODE_HINT}")


def check_node(node: Node, where: str) -> str:
    """The node's name, once its kind (when given) and name are right."""
    if node.kind is not None and node.kind != NODE_KIND:
        raise InputError(
            f"{where}: kind is {node.kind!r}, expected 'Node': a node list holds Nodes only "
            f"({_NODE_HINT})"
        )
    if not node.metadata.name:
        raise InputError(f"{where}: metadata.name is missing: every Node needs a name")
    return node.metadata.name


def decode_node(document: Any, origin: str) -> Node:
    """One v1 Node, from JSON bytes or a parsed object (a watch event's)."""
    if isinstance(document, bytes | bytearray | memoryview):
        node = decode(bytes(document), Node, origin, _NODE_HINT, "v1 Node")
    else:
        node = _convert(document, Node, origin, _NODE_HINT)
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
        raw = _RawNodeList(items=decode(data, list[msgspec.Raw], origin, _NODE_HINT, _LIST))
    else:
        raw = decode(data, _RawNodeList, origin, _NODE_HINT, _LIST)
        check_node_list_kind(raw.kind, origin)
    if raw.items is None:
        raise InputError(f"{origin}: no 'items' list: a v1 NodeList is {_NODE_HINT}")
    for i, item in enumerate(raw.items):
        node = decode(item, Node, f"{origin}: items[{i}]", _NODE_HINT, "v1 Node")
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
        raise InputError(f"{origin}: expected object, got {type(document).__name__}: {_NODE_HINT}")
    if not isinstance(items, list):
        raise InputError(f"{origin}: expected a v1 NodeList with an 'items' list: {_NODE_HINT}")
    for i, item in enumerate(items):
        node = _convert(item, Node, f"{origin}: items[{i}]", _NODE_HINT)
        check_node(node, f"{origin}: items[{i}]")
        yield node


def nodes_from_document(document: Any, origin: str) -> list[Node]:
    """The Nodes of a parsed NodeList document (a dict from JSON or YAML, or a list)."""
    return list(_nodes_of(document, origin))


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


# ----------------------------------------------------------------------------- pods

_POD_HINT = "a Pod needs spec.containers, each with an image"


def decode_pod(document: Any, origin: str) -> Pod:
    """One v1 Pod, from JSON bytes or a parsed object (a JSON or YAML file's)."""
    if isinstance(document, bytes | bytearray | memoryview):
        return decode(bytes(document), Pod, origin, _POD_HINT, "v1 Pod")
    if not isinstance(document, Mapping):
        raise InputError(f"{origin}: expected a v1 Pod object")
    return _convert(document, Pod, origin, _POD_HINT)


def decode_placed_pod(document: Any, origin: str) -> PlacedPod:
    """One v1 Pod with its placement (a listed item, parsed), for ``layersched estimate``."""
    if not isinstance(document, Mapping):
        raise InputError(f"{origin}: expected a v1 Pod object")
    return _convert(document, PlacedPod, origin, _POD_HINT)


def decode_schedulable_node(document: Any, origin: str) -> SchedulableNode:
    """One v1 Node with its taints and cordon (a listed item, parsed)."""
    node = _convert(document, SchedulableNode, origin, _NODE_HINT)
    check_node(node, origin)
    return node


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
        raise InputError(f"{origin}: spec is missing: {_POD_HINT}")
    containers = spec.containers or []
    if not containers:
        raise InputError(f"{origin}: spec.containers is empty: {_POD_HINT}")
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
