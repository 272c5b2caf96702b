"""kube-scheduler extender wire types (``k8s.io/kube-scheduler/extender/v1``).

The Go types carry no JSON tags, so their keys travel capitalised (``Pod``,
``Nodes``, ``NodeNames``, ``Host``, ``Score``…). The Kubernetes objects inside
them (a v1 Pod, a v1 NodeList) are the core's one decoder of each
(:mod:`layersched.core.objects`), with their usual camelCase JSON names.
"""

from __future__ import annotations

import msgspec

from layersched.core.objects import NodeList, ObjectMeta, Pod

#: Highest score an extender may return (upstream ``MaxExtenderPriority``).
MAX_EXTENDER_PRIORITY = 10


class ExtenderArgs(msgspec.Struct, gc=False):
    """The body of a prioritize request."""

    Pod: Pod | None = None
    #: Full nodes (``nodeCacheCapable: false``).
    Nodes: NodeList | None = None
    #: Node names only (``nodeCacheCapable: true``).
    NodeNames: list[str] | None = None


class _NameOnly(msgspec.Struct, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class NodeNamesList(msgspec.Struct, gc=False):
    """A NodeList decoded for its shape and names only (filter validates with it)."""

    items: list[_NameOnly] | None = None


class NamesOnlyArgs(msgspec.Struct, gc=False):
    """A prioritize request decoded for the pod's and nodes' names only (an overload answer)."""

    Pod: _NameOnly | None = None
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
