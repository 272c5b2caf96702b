"""kube-scheduler extender wire types (``k8s.io/kube-scheduler/extender/v1``).

The Go types carry no JSON tags, so their keys travel capitalised (``Pod``,
``Nodes``, ``NodeNames``, ``Host``, ``Score``…); the Kubernetes objects inside
them (v1 Pod, v1 NodeList) use their usual camelCase JSON names. Only the
fields layersched reads are declared: msgspec skips the rest without building
them, which is most of the cost of a 5 MB NodeList. ``gc=False`` keeps the
thousands of decoded objects out of the cyclic garbage collector.
"""

from __future__ import annotations

import msgspec

#: Highest score an extender may return (upstream ``MaxExtenderPriority``).
MAX_EXTENDER_PRIORITY = 10


class ObjectMeta(msgspec.Struct, gc=False):
    """``metadata``: what identifies a node or pod."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ContainerImage(msgspec.Struct, frozen=True, gc=False):
    """One ``Node.status.images`` entry; hashable (to be interned) unless it has ``layers``."""

    names: tuple[str, ...] | None = None
    #: Checked where it is used: a negative size ignores the image, not the request.
    sizeBytes: int = 0
    #: Ryax-patched kubelet: ``{layer digest: compressed size}``.
    layers: dict[str, int] | None = None


class NodeSystemInfo(msgspec.Struct, gc=False):
    """``Node.status.nodeInfo``: the platform, when the node has no os/arch labels."""

    architecture: str = ""
    operatingSystem: str = ""


class NodeStatus(msgspec.Struct, gc=False):
    """``Node.status``: the images, and the platform they are for."""

    images: list[ContainerImage] | None = None
    nodeInfo: NodeSystemInfo | None = None


class Node(msgspec.Struct, gc=False):
    """A v1 Node, reduced to its kind, name, labels, annotations and images."""

    #: Usually absent inside a list; when present it must be ``Node``.
    kind: str | None = None
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class NodeList(msgspec.Struct, gc=False):
    """A v1 NodeList (``ExtenderArgs.Nodes``; also the ``--nodes`` file)."""

    items: list[Node] | None = None


class RawNodeList(msgspec.Struct, gc=False):
    """A v1 NodeList whose items stay undecoded, to decode a big file node by node."""

    kind: str | None = None
    items: list[msgspec.Raw] | None = None


class Container(msgspec.Struct, gc=False):
    """A container: only its image matters."""

    name: str = ""
    image: str = ""


class ImageVolumeSource(msgspec.Struct, gc=False):
    """``volumes[*].image`` (KEP-4639): an OCI image mounted as a volume."""

    reference: str = ""


class Volume(msgspec.Struct, gc=False):
    """A pod volume: only an image volume's reference matters."""

    name: str = ""
    image: ImageVolumeSource | None = None


class PodSpec(msgspec.Struct, gc=False):
    """``Pod.spec``: the containers, init containers first in upstream's order, and the
    volumes (ImageLocality counts image volumes from 1.36)."""

    initContainers: list[Container] | None = None
    containers: list[Container] | None = None
    volumes: list[Volume] | None = None


class Pod(msgspec.Struct, gc=False):
    """A v1 Pod, reduced to its name and container images."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class ExtenderArgs(msgspec.Struct, gc=False):
    """The body of a prioritize request."""

    Pod: Pod | None = None
    #: Full nodes (``nodeCacheCapable: false``).
    Nodes: NodeList | None = None
    #: Node names only (``nodeCacheCapable: true``).
    NodeNames: list[str] | None = None


class _NodeNameOnly(msgspec.Struct, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class NodeNamesList(msgspec.Struct, gc=False):
    """A NodeList decoded for its shape and names only (filter validates with it)."""

    items: list[_NodeNameOnly] | None = None


class NamesOnlyArgs(msgspec.Struct, gc=False):
    """A prioritize request decoded for the pod's and nodes' names only (an overload answer)."""

    Pod: _NodeNameOnly | None = None
    Nodes: NodeNamesList | None = None
    NodeNames: list[str] | None = None


class FilterArgs(msgspec.Struct, gc=False):
    """The body of a filter request: ``Nodes`` is kept as raw JSON to echo it unchanged."""

    Pod: msgspec.Raw = msgspec.Raw(b"null")
    Nodes: msgspec.Raw = msgspec.Raw(b"null")
    NodeNames: list[str] | None = None


class HostPriority(msgspec.Struct, gc=False):
    """One prioritize answer: a node and its score 0..MAX_EXTENDER_PRIORITY."""

    Host: str
    Score: int


class ExtenderFilterResult(msgspec.Struct, gc=False):
    """The filter answer; layersched filters nothing out."""

    Nodes: msgspec.Raw
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class ErrorBody(msgspec.Struct):
    """A 4xx/5xx body: ``{"Error": "…"}`` as the extender result types spell it."""

    Error: str
