"""The pulls in flight on each node, and a pod's estimated start there: the one rule of
``in-flight`` scoring (the Go plugin's ``layers/inflight.go`` is its port, held to it by a
parity test).

No scheduler sees the kubelet's pull queue. What every scheduler does see is the pods
bound (or, inside kube-scheduler, assumed) to a node whose containers have not started:
their images are on their way. From them, the node's held layers and its link rate, this
module estimates when a new pod would start on the node.

**A node's backlog** (:func:`node_backlog`). The node's *pending pulls* are taken in the
order they were bound (ties by key). Each brings its *new bytes*: its layers the node
neither holds nor already has arriving for an earlier pull, each digest counted once on
the node; those layers are *arriving*. The link drains the bytes at the node's rate from
the moment each pull was bound, as a work-conserving queue does (serial or parallel pulls
move the same bytes)::

    W = 0
    for each pending pull p, in bound order:
        W = max(0, W - rate * (bound(p) - bound(previous)))   # drained meanwhile
        W = W + new_bytes(p)
    W(now) = max(0, W - rate * (now - bound(last)))

``W(now)`` is the bytes still to come on the node; ``E`` the new bytes enqueued in all;
``k`` the pulls that brought any.

**A pod's start there** (:func:`start_cost_s`). Its distinct layers split into held
(``H``), arriving (``N``) and its own new bytes (``M = total - H - N``). The arriving
ones are assumed as far along as the backlog is: ``N_left = N * W(now) / E``.

* serial pulls (the kubelet's default): the pod waits for the whole backlog, then pulls
  ``M``: ``wait = W(now) + M``;
* parallel pulls (``serializeImagePulls: false``): the pod's bytes still to come,
  ``X = M + N_left``, share the link with the rest of the backlog, each of its ``k``
  pulls taking at most as much as the pod's own: ``wait = X + min(W(now) - N_left, k*X)``.

``start = wait * 8 / bits_per_s + overhead_s``, and the cost scored is
``start + new_bytes_weight * M * 8 / bits_per_s``: the link time the pod's own new
bytes take from every later pod on that node. It breaks the tie between an idle node
and one that has just begun pulling the same image (both would start the pod at the
same time) in favour of the one that pulls nothing more, so a burst of same-image
replicas goes to the nodes already pulling it, as far as the other plugins allow.

**Bounds.** A pending pull counts for at most :data:`DEFAULT_MAX_PENDING_AGE_S` after
it was bound (a pull that failed, or a pod that never starts, stops counting), with at
most :data:`MAX_LAYERS_PER_PENDING_POD` layers, and at most
:data:`MAX_PENDING_PULLS_PER_NODE` per node (the earliest bound: they are ahead in the
kubelet's queue); :class:`PendingPulls` holds at most ``max_pods`` in all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from layersched.core.layers import Layer

#: The kubelet's image pulls: one at a time (``serializeImagePulls: true``, its default)
#: or several at once sharing the link (``serializeImagePulls: false``).
PullMode = Literal["serial", "parallel"]
SERIAL: PullMode = "serial"
PARALLEL: PullMode = "parallel"
PULL_MODES: tuple[PullMode, ...] = (SERIAL, PARALLEL)

BITS_PER_BYTE = 8
#: A pending pull stops counting this long after its pod was bound: longer than any
#: healthy pull of a few GB at tens of Mbit/s, far shorter than a pod stuck for good.
DEFAULT_MAX_PENDING_AGE_S = 600.0
#: Pending pulls counted per node, the earliest bound first (a kubelet runs 110 pods by
#: default, and seldom pulls for more than a few at once).
MAX_PENDING_PULLS_PER_NODE = 64
#: Distinct layers counted per pending pod (the first ones, in image order).
MAX_LAYERS_PER_PENDING_POD = 128
#: Pending pods held in all (:class:`PendingPulls`): 64 per node on 1,000 nodes.
DEFAULT_MAX_PENDING_PODS = 65_536
#: The weight of the pod's own new bytes' link time in the cost (see the module
#: docstring): a quarter keeps an idle node two extender points (20 of 100) behind a
#: node of the same link that has just begun pulling the pod's image, and never ranks a
#: node pulling it on half the link above an idle one on the whole link.
DEFAULT_NEW_BYTES_WEIGHT = 0.25


@dataclass(frozen=True, slots=True)
class PendingPull:
    """A pod bound to a node whose containers have not started: the pull in flight."""

    #: Identifies the pod (its uid); also orders pulls bound at the same instant.
    key: str
    #: When it was bound (epoch seconds; the simulator's clock in a simulation).
    bound_at_s: float
    #: Its distinct layers (at most :data:`MAX_LAYERS_PER_PENDING_POD`).
    layers: tuple[Layer, ...]


@dataclass(frozen=True, slots=True)
class NodeBacklog:
    """A node's pending pulls summed up at the last one's bind (see the module docstring)."""

    #: When the last counted pull was bound (no pull: 0).
    since_s: float = 0.0
    #: ``W`` right after it: the bytes still to come then.
    backlog_bytes: float = 0.0
    #: ``E``: the new bytes the counted pulls brought in all.
    enqueued_bytes: int = 0
    #: ``k``: the counted pulls that brought new bytes.
    pulls: int = 0
    #: The arriving layers: digest -> size.
    arriving: Mapping[str, int] = field(default_factory=dict)
    #: When the earliest counted pull stops counting (its age passes the bound): the
    #: backlog must be summed again then.
    expires_s: float = math.inf

    def remaining_bytes(self, bytes_per_s: float, now_s: float) -> float:
        """``W(now)``: what is still to come at ``now_s`` (never negative)."""
        if self.pulls == 0:
            return 0.0
        return max(0.0, self.backlog_bytes - bytes_per_s * (now_s - self.since_s))


#: No pending pull.
IDLE = NodeBacklog()


def counted_pulls(
    pulls: Iterable[PendingPull], now_s: float, max_age_s: float
) -> list[PendingPull]:
    """The pulls the rule counts at ``now_s``, in bound order: bound no longer than
    ``max_age_s`` ago (a bind time after now is taken as now), the first
    :data:`MAX_PENDING_PULLS_PER_NODE`, each with its first
    :data:`MAX_LAYERS_PER_PENDING_POD` layers."""
    fresh = []
    for pull in pulls:
        bound_s = min(pull.bound_at_s, now_s)
        if now_s - bound_s <= max_age_s:
            fresh.append(PendingPull(pull.key, bound_s, pull.layers[:MAX_LAYERS_PER_PENDING_POD]))
    fresh.sort(key=lambda pull: (pull.bound_at_s, pull.key))
    return fresh[:MAX_PENDING_PULLS_PER_NODE]


def node_backlog(
    pulls: Iterable[PendingPull],
    holds: Callable[[str], bool],
    bytes_per_s: float,
    now_s: float,
    max_age_s: float = DEFAULT_MAX_PENDING_AGE_S,
) -> NodeBacklog:
    """The node's backlog from its pending ``pulls``, the layers it ``holds`` and its rate
    (bytes per second), as counted at ``now_s``."""
    counted = counted_pulls(pulls, now_s, max_age_s)
    if not counted:
        return IDLE
    arriving: dict[str, int] = {}
    backlog = 0.0
    enqueued = 0
    brought = 0
    previous_s = counted[0].bound_at_s
    for pull in counted:
        backlog = max(0.0, backlog - bytes_per_s * (pull.bound_at_s - previous_s))
        new_bytes = 0
        for layer in pull.layers:
            if layer.digest in arriving or holds(layer.digest):
                continue
            arriving[layer.digest] = layer.size_bytes
            new_bytes += layer.size_bytes
        backlog = backlog + float(new_bytes)
        enqueued += new_bytes
        brought += 1 if new_bytes > 0 else 0
        previous_s = pull.bound_at_s
    if brought == 0:
        return NodeBacklog(expires_s=counted[0].bound_at_s + max_age_s)
    return NodeBacklog(
        since_s=previous_s,
        backlog_bytes=backlog,
        enqueued_bytes=enqueued,
        pulls=brought,
        arriving=arriving,
        expires_s=counted[0].bound_at_s + max_age_s,
    )


def start_cost_s(
    held_bytes: int,
    arriving_bytes: int,
    total_bytes: int,
    remaining_bytes: float,
    enqueued_bytes: int,
    pulls: int,
    bits_per_s: float,
    mode: PullMode,
    overhead_s: float,
    new_bytes_weight: float,
) -> float:
    """The cost of starting a pod on a node (seconds; the module docstring's formula):
    the pod's ``total_bytes``, of which the node holds ``held_bytes`` and has
    ``arriving_bytes`` arriving; the node's backlog ``W(now)`` (``remaining_bytes``),
    ``E`` and ``k``. :class:`~layersched.core.strategies.in_flight.InFlight` computes
    the same, in the same order, over arrays."""
    own = float(total_bytes - held_bytes - arriving_bytes)
    left = (
        float(arriving_bytes) * remaining_bytes / float(enqueued_bytes) if enqueued_bytes else 0.0
    )
    if mode == SERIAL:
        wait = remaining_bytes + own
    else:
        ahead = own + left
        wait = ahead + min(max(0.0, remaining_bytes - left), float(pulls) * ahead)
    start = wait * BITS_PER_BYTE / bits_per_s + overhead_s
    return start + new_bytes_weight * (own * BITS_PER_BYTE / bits_per_s)


FloatArray = npt.NDArray[np.float64]


def start_costs_s(
    own_bytes: FloatArray,
    arriving_bytes: FloatArray,
    remaining_bytes: FloatArray,
    enqueued_bytes: FloatArray,
    pulls: FloatArray,
    bits_per_s: FloatArray,
    mode: PullMode,
    overhead_s: float,
    new_bytes_weight: float,
) -> tuple[FloatArray, FloatArray]:
    """:func:`start_cost_s` over arrays (one entry a node), in the same order of
    operations: each node's estimated start and its cost, seconds. ``own_bytes`` is
    ``total - held - arriving``."""
    left = np.zeros(len(own_bytes), dtype=np.float64)
    np.divide(arriving_bytes * remaining_bytes, enqueued_bytes, out=left, where=enqueued_bytes > 0)
    if mode == SERIAL:
        wait = remaining_bytes + own_bytes
    else:
        ahead = own_bytes + left
        others = np.maximum(0.0, remaining_bytes - left)
        wait = ahead + np.minimum(others, pulls * ahead)
    start: FloatArray = wait * BITS_PER_BYTE / bits_per_s + overhead_s
    cost: FloatArray = start + new_bytes_weight * (own_bytes * BITS_PER_BYTE / bits_per_s)
    return start, cost


def split_bytes(
    layers: Sequence[Layer], holds: Callable[[str], bool], backlog: NodeBacklog
) -> tuple[int, int, int]:
    """(held, arriving, total) bytes of the pod's distinct ``layers`` on a node."""
    held = arriving = total = 0
    for layer in layers:
        total += layer.size_bytes
        if holds(layer.digest):
            held += layer.size_bytes
        elif layer.digest in backlog.arriving:
            arriving += layer.size_bytes
    return held, arriving, total


class PendingPulls:
    """Every node's pending pulls, kept as the pods change (a watch, the simulator), and
    each node's backlog, summed when asked for after a change.

    Memory is bounded by construction: at most ``max_pods`` pods (more are refused and
    counted in :attr:`refused`), each with at most :data:`MAX_LAYERS_PER_PENDING_POD`
    layers. A node's backlog is summed again only after one of its pods changed, its
    layers changed (:meth:`node_changed`), its rate changed, or a pull aged out.
    """

    def __init__(
        self,
        max_pods: int = DEFAULT_MAX_PENDING_PODS,
        max_age_s: float = DEFAULT_MAX_PENDING_AGE_S,
    ) -> None:
        self.max_pods = max_pods
        self.max_age_s = max_age_s
        #: Moves on every change (a strategy's memo of positions keys on it).
        self.version = 0
        #: Pods refused because ``max_pods`` were held.
        self.refused = 0
        self._node_of: dict[str, str] = {}
        self._by_node: dict[str, dict[str, PendingPull]] = {}
        #: node -> (rate it was summed at, its backlog)
        self._backlogs: dict[str, tuple[float, NodeBacklog]] = {}
        #: digest -> nodes where it is arriving (from the summed backlogs)
        self._arriving: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._node_of)

    @property
    def nodes(self) -> list[str]:
        """The nodes with pending pulls."""
        return list(self._by_node)

    def pulls(self, node: str) -> list[PendingPull]:
        """The pending pulls on ``node``, as held (not ordered)."""
        return list(self._by_node.get(node, {}).values())

    def put(self, node: str, pull: PendingPull) -> bool:
        """Pod ``pull.key`` is pending on ``node`` (added, or replaced: moved, or its layers
        known better); False if refused for the bound."""
        was = self._node_of.get(pull.key)
        if was is None and len(self._node_of) >= self.max_pods:
            self.refused += 1
            return False
        if was is not None and was != node:
            self.discard(pull.key)
        layers = pull.layers
        if len(layers) > MAX_LAYERS_PER_PENDING_POD:
            pull = PendingPull(pull.key, pull.bound_at_s, layers[:MAX_LAYERS_PER_PENDING_POD])
        held = self._by_node.setdefault(node, {})
        if held.get(pull.key) == pull:
            return True
        held[pull.key] = pull
        self._node_of[pull.key] = node
        self._changed(node)
        return True

    def discard(self, key: str) -> None:
        """Pod ``key`` is no longer pending (started, deleted, or never was)."""
        node = self._node_of.pop(key, None)
        if node is None:
            return
        held = self._by_node[node]
        del held[key]
        if not held:
            del self._by_node[node]
        self._changed(node)

    def remove_node(self, node: str) -> None:
        """Node ``node`` is gone: its pending pulls with it."""
        for key in list(self._by_node.get(node, {})):
            self.discard(key)

    def node_changed(self, node: str) -> None:
        """The layers ``node`` holds changed: its backlog is summed again when asked."""
        if node in self._backlogs:
            self._changed(node)

    def _changed(self, node: str) -> None:
        self.version += 1
        dropped = self._backlogs.pop(node, None)
        if dropped is not None:
            for digest in dropped[1].arriving:
                holders = self._arriving.get(digest)
                if holders is not None:
                    holders.discard(node)
                    if not holders:
                        del self._arriving[digest]

    def backlog(
        self, node: str, holds: Callable[[str], bool], bytes_per_s: float, now_s: float
    ) -> NodeBacklog:
        """``node``'s backlog at ``now_s`` (summed again if anything changed since)."""
        pulls = self._by_node.get(node)
        if not pulls:
            return IDLE
        cached = self._backlogs.get(node)
        if cached is not None and cached[0] == bytes_per_s and now_s < cached[1].expires_s:
            return cached[1]
        if cached is not None:
            self._changed(node)
        summed = node_backlog(pulls.values(), holds, bytes_per_s, now_s, self.max_age_s)
        self._backlogs[node] = (bytes_per_s, summed)
        for digest in summed.arriving:
            self._arriving.setdefault(digest, set()).add(node)
        return summed

    def arriving_at(self, digest: str) -> set[str]:
        """The nodes whose summed backlog has layer ``digest`` arriving (sum the backlogs
        of :attr:`nodes` first: a node not summed since its last change is not here)."""
        return self._arriving.get(digest, set())
