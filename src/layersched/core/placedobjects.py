"""The v1 Pod and Node as ``layersched estimate`` reads them: where a pod ran, from when to
when, what it requested and what constrained its placement (:class:`PlacedPod`), and a
node's taints and cordon (:class:`SchedulableNode`).

The extender never decodes these: a prioritize request's Pod and Nodes decode as
:mod:`layersched.core.objects`' ``Pod`` and ``Node``, at their cost. These extend them
with the fields placement depended on, checked the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from layersched.core.errors import InputError
from layersched.core.objects import (
    NODE_HINT,
    POD_HINT,
    Container,
    Node,
    OwnedMeta,
    Pod,
    PodSpec,
    check_node,
    convert,
)


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


def decode_placed_pod(document: Any, origin: str) -> PlacedPod:
    """One v1 Pod with its placement (a listed item, parsed), for ``layersched estimate``."""
    if not isinstance(document, Mapping):
        raise InputError(f"{origin}: expected a v1 Pod object")
    return convert(document, PlacedPod, origin, POD_HINT)


def decode_schedulable_node(document: Any, origin: str) -> SchedulableNode:
    """One v1 Node with its taints and cordon (a listed item, parsed)."""
    node = convert(document, SchedulableNode, origin, NODE_HINT)
    check_node(node, origin)
    return node
