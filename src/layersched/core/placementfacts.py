"""What placement saw, read from a live cluster as facts: a pod bound to a node
(:class:`PodFacts`), a node (:class:`NodeFacts`), a pull the kubelet reported
(:class:`PullFacts`), and whether a node admits a pod (:func:`node_admits`: its
allocatable against the pods' requests, its node selector, required node affinity,
taints and cordon). ``layersched estimate``'s what-if (:mod:`layersched.core.estimate`)
weighs them; the CLI reads the objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layersched.core.errors import InputError
from layersched.core.events import (
    PULLED_REASON,
    PullEvent,
    event_time_s,
    involved_uid,
    parse_pull_event,
    parse_time_s,
    reporting_host,
)
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeInfo
from layersched.core.objects import pod_images, pod_name
from layersched.core.placedobjects import (
    Affinity,
    NodeSelectorRequirement,
    PlacedPod,
    SchedulableNode,
)
from layersched.core.quantity import parse_quantity
from layersched.core.reference import (
    ImageName,
    parse_or_none,
)

#: Quantities are kept in thousandths (``500m`` CPU is 500, ``1`` pod is 1000), capped here
#: so that a hostile ``1e999`` neither overflows the int64 arrays nor builds a giant int.
MILLI = 1000
MAX_MILLI_UNITS = 2**62
#: Every pod takes one of a node's ``pods`` slots (upstream counts it so).
PODS_RESOURCE = "pods"
#: Taint effects that keep a pod off a node (PreferNoSchedule only discourages).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: The taint a cordoned node is treated as carrying (upstream's node.kubernetes.io/unschedulable).
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
#: A node selector requirement, hashable: (key, operator, values).
Requirement = tuple[str, str, tuple[str, ...]]
#: A node selector term: (label requirements, field requirements).
Term = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]
#: A toleration, hashable: (key, operator, value, effect).
Tolerance = tuple[str, str, str, str]
#: A taint: (key, value, effect).
TaintTuple = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node as placement saw it: its inventory entry (names, labels, allocatable,
    images with their layers when known), its taints and its cordon."""

    info: NodeInfo
    taints: tuple[TaintTuple, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class PodFacts:
    """A pod bound to a node, as placement saw it."""

    key: str
    uid: str
    node: str
    scheduler: str
    #: Every image the kubelet pulls for it (init containers, containers, image volumes).
    images: tuple[ImageName, ...]
    #: Epoch seconds: when the kubelet took the pod (``status.startTime``), and when it
    #: stopped holding its node's resources (None: still running).
    started_s: float
    finished_s: float | None
    #: Effective requests in thousandths of a unit, ``pods`` included.
    requests: Mapping[str, int] = field(default_factory=dict)
    node_selector: tuple[tuple[str, str], ...] = ()
    #: Required node affinity terms (ORed), None when it has none.
    affinity: tuple[Term, ...] | None = None
    tolerations: tuple[Tolerance, ...] = ()
    #: Why its node was not a scheduler's choice ("" when it was).
    pinned: str = ""
    #: The layers of each of ``images`` (filled for pods in the window; None: unknown).
    image_layers: Mapping[ImageName, tuple[Layer, ...]] | None = None
    #: Why its layers are unknown.
    unresolved: str = ""


@dataclass(frozen=True, slots=True)
class PullFacts:
    """One kubelet ``Pulled`` event: on which node, about which pod, when (its end)."""

    node: str
    pod_uid: str
    at_s: float
    event: PullEvent


# ---------------------------------------------------------------- reading objects


def milli_units(value: str, where: str) -> int:
    """A quantity in thousandths of a unit, rounded up and capped (InputError if it is no
    quantity)."""
    if len(value) > 64:
        raise InputError(f"{where}: {value[:64]!r}… is not a Kubernetes quantity")
    quantity = parse_quantity(value, where) * MILLI
    if quantity >= MAX_MILLI_UNITS:
        return MAX_MILLI_UNITS
    if quantity <= 0:
        return 0
    return int(quantity.to_integral_value(rounding="ROUND_CEILING"))


def effective_requests(
    containers: Iterable[Mapping[str, str]],
    init_containers: Iterable[Mapping[str, str]] = (),
    overhead: Mapping[str, str] | None = None,
    where: str = "pod",
    problems: list[str] | None = None,
) -> dict[str, int]:
    """Upstream's pod request: per resource, the larger of the containers' sum and the
    largest init container's, plus the pod overhead; and one ``pods`` slot. A malformed
    quantity counts 0 (described in ``problems``)."""

    def read(requests: Mapping[str, str], what: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for name, value in requests.items():
            try:
                found[name] = milli_units(str(value), f"{where}: {what} {name}")
            except InputError as err:
                if problems is not None:
                    problems.append(str(err))
        return found

    total: dict[str, int] = {}
    for i, requests in enumerate(containers):
        for name, value in read(requests, f"containers[{i}]").items():
            total[name] = min(total.get(name, 0) + value, MAX_MILLI_UNITS)
    for i, requests in enumerate(init_containers):
        for name, value in read(requests, f"initContainers[{i}]").items():
            total[name] = max(total.get(name, 0), value)
    for name, value in read(overhead or {}, "overhead").items():
        total[name] = min(total.get(name, 0) + value, MAX_MILLI_UNITS)
    total[PODS_RESOURCE] = total.get(PODS_RESOURCE, 0) + MILLI
    return total


#: Kinds of owners whose pods are pinned to a node (no scheduler chose it).
PINNING_OWNERS = frozenset({"DaemonSet"})
#: Set by the kubelet on the API's mirror of a static pod.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: Phases in which a pod holds no resources any more.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
#: A runtime's ``imageID`` may carry a scheme (``docker-pullable://repo@sha256:…``).
_SCHEME = "://"


def _requirements(entries: Iterable[NodeSelectorRequirement] | None) -> tuple[Requirement, ...]:
    return tuple((r.key, r.operator, tuple(r.values or ())) for r in entries or ())


def _terms(affinity: Affinity | None) -> tuple[Term, ...] | None:
    node = affinity.nodeAffinity if affinity is not None else None
    required = node.requiredDuringSchedulingIgnoredDuringExecution if node is not None else None
    if required is None:
        return None
    return tuple(
        (_requirements(term.matchExpressions), _requirements(term.matchFields))
        for term in required.nodeSelectorTerms or ()
    )


def ran_image(status: str) -> ImageName | None:
    """The reference a container status's ``imageID`` names by digest
    (``repo@sha256:…``), or None when it names none (a bare ``sha256:`` image id)."""
    text = status.split(_SCHEME, 1)[1] if _SCHEME in status else status
    ref = parse_or_none(text)
    return ImageName(text) if ref is not None and ref.digest is not None else None


def pod_facts(pod: PlacedPod, problems: list[str] | None = None) -> PodFacts | None:
    """A bound pod's facts, or None when it is not bound or not started yet (or is no
    usable pod: described in ``problems``)."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    key = pod_name(meta) or "pod"
    if spec is None or not spec.nodeName or status is None:
        return None
    started_s = parse_time_s(status.startTime)
    if started_s is None:
        return None
    try:
        images = pod_images(pod, f"pod {key}").pulled
    except InputError as err:
        if problems is not None:
            problems.append(str(err))
        return None
    finished_s: float | None = None
    if status.phase in FINISHED_PHASES:
        ends = [
            parse_time_s(s.state.terminated.finishedAt)
            for s in (*(status.containerStatuses or ()), *(status.initContainerStatuses or ()))
            if s.state is not None and s.state.terminated is not None
        ]
        finished_s = max((t for t in ends if t is not None), default=started_s)
    pinned = ""
    if any(owner.kind in PINNING_OWNERS for owner in meta.ownerReferences or ()):
        pinned = "DaemonSet"
    elif MIRROR_ANNOTATION in (meta.annotations or {}):
        pinned = "static pod"
    requests = effective_requests(
        [(c.resources.requests or {}) if c.resources else {} for c in spec.containers or ()],
        [(c.resources.requests or {}) if c.resources else {} for c in spec.initContainers or ()],
        spec.overhead,
        f"pod {key}",
        problems,
    )
    return PodFacts(
        key=key,
        uid=meta.uid,
        node=spec.nodeName,
        scheduler=spec.schedulerName,
        images=images,
        started_s=started_s,
        finished_s=finished_s,
        requests=requests,
        node_selector=tuple(sorted((spec.nodeSelector or {}).items())),
        affinity=_terms(spec.affinity),
        tolerations=tuple((t.key, t.operator, t.value, t.effect) for t in spec.tolerations or ()),
        pinned=pinned,
    )


def ran_images(pod: PlacedPod) -> dict[ImageName, ImageName]:
    """Each container image of ``pod`` -> the reference by digest its runtime ran it from
    (``status.containerStatuses[].imageID``), where the runtime names one."""
    spec, status = pod.spec, pod.status
    if spec is None or status is None:
        return {}
    by_name = {
        s.name: s.imageID
        for s in (*(status.containerStatuses or ()), *(status.initContainerStatuses or ()))
    }
    found: dict[ImageName, ImageName] = {}
    for container in (*(spec.initContainers or ()), *(spec.containers or ())):
        ran = ran_image(by_name.get(container.name, ""))
        if ran is not None:
            found.setdefault(container.image, ran)
    return found


def node_facts(node: SchedulableNode, info: NodeInfo) -> NodeFacts:
    """A node's facts: ``info`` (its inventory entry, images with their layers) with the
    taints and cordon of ``node``."""
    return NodeFacts(
        info=info,
        taints=tuple((t.key, t.value, t.effect) for t in node.spec.taints or ()),
        unschedulable=node.spec.unschedulable,
    )


def pull_facts(event: Mapping[str, Any], node_of: Mapping[str, str]) -> PullFacts | None:
    """A ``Pulled`` event's facts (its node: the reporting kubelet's, else the pod's in
    ``node_of`` by uid), or None when it is no readable pull report."""
    if event.get("reason") != PULLED_REASON:
        return None
    message = event.get("message")
    parsed = parse_pull_event(message) if isinstance(message, str) else None
    at_s = event_time_s(event, last=True)
    uid = involved_uid(event)
    node = reporting_host(event) or node_of.get(uid, "")
    if parsed is None or at_s is None or not node:
        return None
    return PullFacts(node=node, pod_uid=uid, at_s=at_s, event=parsed)


# ------------------------------------------------------------------- feasibility


def _requirement_holds(requirement: Requirement, value: str | None) -> bool:
    _key, operator, values = requirement
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # an unknown operator matches nothing, as upstream's selector errors


def _term_holds(term: Term, node: NodeInfo) -> bool:
    expressions, fields = term
    if not expressions and not fields:
        return False  # an empty term matches no node (upstream)
    labels = node.labels
    if not all(_requirement_holds(r, labels.get(r[0])) for r in expressions):
        return False
    return all(
        _requirement_holds(r, node.name if r[0] == "metadata.name" else None) for r in fields
    )


def _tolerates(tolerations: Sequence[Tolerance], taint: TaintTuple) -> bool:
    key, value, effect = taint
    for t_key, operator, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if operator == "Exists":
            if not t_key or t_key == key:
                return True
        elif t_key == key and t_value == value:  # "Equal" (or empty: Equal)
            return True
    return False


def node_admits(pod: PodFacts, node: NodeFacts) -> bool:
    """Whether ``pod``'s node selector, required node affinity and tolerations admit
    ``node`` (resources aside)."""
    labels = node.info.labels
    if any(labels.get(key) != value for key, value in pod.node_selector):
        return False
    if pod.affinity is not None and not any(_term_holds(t, node.info) for t in pod.affinity):
        return False
    taints = list(node.taints)
    if node.unschedulable:
        taints.append((UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule"))
    return all(
        _tolerates(pod.tolerations, taint) for taint in taints if taint[2] in BLOCKING_EFFECTS
    )
