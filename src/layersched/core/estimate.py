"""What layer-aware placement would have saved on a live cluster: ``layersched estimate``'s
what-if, pure. The CLI reads the cluster and resolves layers; this module decides.

For every pod that started in the window (and was placed by a scheduler: DaemonSet and
static pods are pinned to their node), it compares

* **what it pulled where it ran**: the bytes of its distinct layers its node did not hold
  when it started, and
* **what it would have pulled on the best feasible node**: the least such bytes over the
  nodes it fitted on at that moment (the node's allocatable minus the requests of the pods
  running there then, its node selector, required node affinity, taints and cordon),

and sums the difference over the window: bytes and pull time avoidable, and the share of
pods that would have pulled less.

**What a node held when the pod started** is reconstructed, not recorded anywhere: a node
holds now what its ``status.images`` lists, and an image the kubelet pulled there at or
after the pod's start (a ``Pulled`` event that really pulled) was not there before that
pull, unless a pod running there then used it; a pull far quicker than its bytes at the
rate seen elsewhere moved nothing (``imagePullPolicy: Always``). A layer held through
another image with no such pull counts as held. An image removed since is not seen
(``status.images`` lists the present only, and is capped at 50 images per node by
default). :attr:`Estimate.approximations` says, in words, every such
approximation the data at hand forced.

**Time.** A pod's pull time where it ran is the kubelet's own measure (its ``Pulled``
events) when they are still kept (the API server keeps events an hour by default), else
its bytes over its node's rate. A node's rate is the bytes over the seconds of the pulls
observed on it, else its ``layersched.io/bandwidth-bits-per-s`` label or annotation, else
the rate observed over the whole cluster, else the default.

Each pod is weighed alone against the history that happened: moving one pod would have
changed what later pods found, which no estimate from the past can know.

The sweep through the window and each pod's weighing are
:mod:`layersched.core.placementsweep`; the in-flight what-if is
:mod:`layersched.core.inflightwhatif`. The facts it weighs (pods,
nodes, pulls) and the rule of which nodes admit a pod are
:mod:`layersched.core.placementfacts`; the cluster's state through the window, as the sweep
walks it, :mod:`layersched.core.placementstate`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from layersched.core.inflightwhatif import InFlightWhatIf
from layersched.core.placementfacts import (
    NodeFacts,
    PodFacts,
    PullFacts,
)
from layersched.core.placementstate import (
    History,
    NodeRate,
    Observed,
    Row,
    observed_pulls,
)
from layersched.core.placementsweep import Sweep
from layersched.core.reference import (
    ImageName,
)
from layersched.core.strategies import InFlightArgs
from layersched.core.strategies.pull_time import BITS_PER_BYTE, node_bandwidth_bits_per_s

T = TypeVar("T")

#: A timed pull that took less than this share of the time its bytes take at the rate
#: observed on the other pulls moved nothing (a manifest check): the image was there.
IDLE_PULL_SHARE = 0.1
#: Why a pod is not weighed (the estimate lists how many of each).
SKIP_PINNED = "pinned to its node (DaemonSet or static pod): no scheduler chose it"
SKIP_NODE_GONE = "its node is no longer in the cluster"
SKIP_UNRESOLVED = "its layers are unknown"


@dataclass(frozen=True, slots=True)
class PodEstimate:
    """What one pod pulled where it ran, against the best feasible node."""

    pod: str
    uid: str
    node: str
    scheduler: str
    started_s: float
    images: tuple[ImageName, ...]
    #: The bytes of its distinct layers.
    total_bytes: int
    pulled_bytes: int
    #: Seconds its pulls took where it ran, and whether the kubelet measured them
    #: (``observed``) or they are its bytes over the node's rate (``estimated``).
    pull_s: float
    pull_s_source: str
    #: Nodes it fitted on when it started (its own included).
    feasible_nodes: int
    best_node: str
    best_pulled_bytes: int
    avoidable_bytes: int
    avoidable_s: float
    #: In flight (the in-flight rule, docs/in-flight.md, from the weighed pods' pulls in
    #: flight at its start): its estimated wait where it ran, on the best node above
    #: (layer-locality's pick), and on in-flight scoring's pick, seconds.
    wait_s: float = 0.0
    layer_locality_wait_s: float = 0.0
    in_flight_node: str = ""
    in_flight_wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Totals:
    """The window's sums over the pods weighed."""

    pods: int
    pods_affected: int
    pulled_bytes: int
    best_pulled_bytes: int
    avoidable_bytes: int
    pull_s: float
    avoidable_s: float
    #: The estimated waits (in flight) summed: where the pods ran, on layer-locality's
    #: picks, on in-flight's picks; and the pods in-flight scoring would have moved.
    wait_s: float = 0.0
    layer_locality_wait_s: float = 0.0
    in_flight_wait_s: float = 0.0
    pods_in_flight_moved: int = 0

    @property
    def affected_share(self) -> float:
        return self.pods_affected / self.pods if self.pods else 0.0

    @property
    def avoidable_share(self) -> float:
        return self.avoidable_bytes / self.pulled_bytes if self.pulled_bytes else 0.0


@dataclass(frozen=True, slots=True)
class Estimate:
    """The what-if over a window."""

    since_s: float
    until_s: float
    nodes: int
    pods: list[PodEstimate]
    #: (pod, why it was not weighed)
    skipped: list[tuple[str, str]]
    rates: dict[str, NodeRate]
    approximations: list[str]
    totals: Totals


# -------------------------------------------------------------------- the what-if


def estimate(
    nodes: Sequence[NodeFacts],
    pods: Sequence[PodFacts],
    pulls: Sequence[PullFacts],
    *,
    since_s: float,
    until_s: float,
    default_bits_per_s: float,
    namespaces: Collection[str] | None = None,
    notes: Sequence[str] = (),
    in_flight: InFlightArgs | None = None,
) -> Estimate:
    """The what-if over pods of ``namespaces`` (default: all) that started in
    ``[since_s, until_s]`` (see the module docstring). ``pods`` are every pod bound to a
    node (those running before the window, or in other namespaces, take their nodes'
    resources); only those weighed need ``image_layers``. ``notes`` are approximations
    the caller made, reported with the others. ``in_flight``: the rule's settings for the
    waits in flight (its defaults: serial pulls)."""
    index = {node.info.name: i for i, node in enumerate(nodes)}
    problems: list[str] = []
    window = [p for p in pods if in_window(p, since_s, until_s, namespaces)]
    observed = observed_pulls(window, pulls)
    skipped = [(p.key, _skip_reason(p)) for p in window if _skip_reason(p) and p.node in index]
    skipped += [(p.key, SKIP_NODE_GONE) for p in window if p.node not in index]
    weighed = [p for p in window if not _skip_reason(p)]
    sweep = Sweep(nodes, pods, index, weighed, observed, problems)
    history = History(nodes, pulls, index)
    rows = sweep.run(history)
    # A pull far quicker than its bytes at the rate seen elsewhere moved nothing: the image
    # was there (imagePullPolicy: Always re-pulls on every start). Its pod's pull is then
    # no arrival of the image, and the pods are weighed again without it.
    idle = _idle_pulls(rows)
    extra = list(notes)
    if idle:
        history = History(nodes, [p for p in pulls if p.pod_uid not in idle], index)
        rows = sweep.run(history)
        extra.append(
            f"{len(idle)} pod(s) pulled in under {IDLE_PULL_SHARE:.0%} of the time their "
            "bytes take at the rate seen elsewhere: their pulls are counted as moving "
            "nothing (the image was there; imagePullPolicy: Always pulls on every start)"
        )
    rates = _rates(nodes, index, rows, default_bits_per_s)
    estimates = [_timed(row, nodes, index, rates) for row in rows]
    what_if = InFlightWhatIf(nodes, index, rates, rows, in_flight or InFlightArgs())
    waits = sweep.visit(history, what_if)
    estimates = [replace(e, **w) for e, w in zip(estimates, waits, strict=True)]
    extra.append(IN_FLIGHT_APPROXIMATED)
    estimates.sort(key=lambda e: (-e.avoidable_bytes, e.started_s, e.pod))
    return Estimate(
        since_s=since_s,
        until_s=until_s,
        nodes=len(nodes),
        pods=estimates,
        skipped=skipped,
        rates={nodes[i].info.name: rate for i, rate in enumerate(rates)},
        approximations=_approximations(window, observed, rates, extra, problems),
        totals=_totals(estimates),
    )


def _idle_pulls(rows: Sequence[Row]) -> set[str]:
    """The pods (uids) whose timed pulls took under IDLE_PULL_SHARE of the time their
    bytes take at the rate observed on the other pods' pulls."""
    samples = [
        (row.pod.uid, row.pulled_bytes, row.observed.seconds)
        for row in rows
        if row.observed is not None and row.observed.timed and row.pulled_bytes > 0
    ]
    total_bytes = sum(b for _, b, _ in samples)
    total_s = sum(s for _, _, s in samples)
    idle = set()
    for uid, pulled, seconds in samples:
        other_s = total_s - seconds
        if other_s <= 0:
            continue
        rate = (total_bytes - pulled) / other_s
        if rate > 0 and seconds < IDLE_PULL_SHARE * pulled / rate:
            idle.add(uid)
    return idle


def in_window(
    pod: PodFacts, since_s: float, until_s: float, namespaces: Collection[str] | None = None
) -> bool:
    """Whether ``pod`` is weighed: started in ``[since_s, until_s]``, in ``namespaces``
    (None: any)."""
    if not since_s <= pod.started_s <= until_s:
        return False
    return namespaces is None or pod.key.partition("/")[0] in namespaces


def _skip_reason(pod: PodFacts) -> str:
    if pod.pinned:
        return SKIP_PINNED
    if pod.image_layers is None:
        return f"{SKIP_UNRESOLVED}: {pod.unresolved}" if pod.unresolved else SKIP_UNRESOLVED
    return ""


#: Said of every estimate's waits in flight.
IN_FLIGHT_APPROXIMATED = (
    "waits in flight are the in-flight rule's estimates (docs/in-flight.md), the same for "
    "where a pod ran and for the nodes it could have run on: a weighed pod's pull is in "
    "flight on its node from its start (status.startTime) until its Pulled event, or its "
    "bytes at its node's rate; the pulls of pods not weighed (outside the window, pinned, "
    "layers unknown) are not counted"
)


def _rates(
    nodes: Sequence[NodeFacts],
    index: Mapping[str, int],
    rows: Sequence[Row],
    default_bits_per_s: float,
) -> list[NodeRate]:
    """Each node's pull rate (see the module docstring)."""
    pulled = np.zeros(len(nodes), dtype=np.float64)
    seconds = np.zeros(len(nodes), dtype=np.float64)
    for row in rows:
        seen = row.observed
        if seen is not None and seen.timed and seen.seconds > 0 and row.pulled_bytes > 0:
            ran = index[row.pod.node]
            pulled[ran] += row.pulled_bytes
            seconds[ran] += seen.seconds
    cluster = float(pulled.sum() / seconds.sum()) if seconds.sum() > 0 else 0.0
    rates = []
    for i, node in enumerate(nodes):
        if seconds[i] > 0:
            rates.append(NodeRate(float(pulled[i] / seconds[i]), "observed"))
            continue
        label = node_bandwidth_bits_per_s(node.info, 0.0)
        if label > 0:
            rates.append(NodeRate(label / BITS_PER_BYTE, "label"))
        elif cluster > 0:
            rates.append(NodeRate(cluster, "cluster"))
        else:
            rates.append(NodeRate(default_bits_per_s / BITS_PER_BYTE, "default"))
    return rates


def _timed(
    row: Row, nodes: Sequence[NodeFacts], index: Mapping[str, int], rates: Sequence[NodeRate]
) -> PodEstimate:
    own = index[row.pod.node]
    seen = row.observed
    if seen is not None and seen.timed:
        pull_s, source = seen.seconds, "observed"
    else:
        pull_s, source = row.pulled_bytes / rates[own].bytes_per_s, "estimated"
    avoidable = row.pulled_bytes - row.best_pulled_bytes
    best_s = row.best_pulled_bytes / rates[row.best].bytes_per_s
    return PodEstimate(
        pod=row.pod.key,
        uid=row.pod.uid,
        node=row.pod.node,
        scheduler=row.pod.scheduler,
        started_s=row.pod.started_s,
        images=row.pod.images,
        total_bytes=row.total_bytes,
        pulled_bytes=row.pulled_bytes,
        pull_s=pull_s,
        pull_s_source=source,
        feasible_nodes=row.feasible,
        best_node=nodes[row.best].info.name,
        best_pulled_bytes=row.best_pulled_bytes,
        avoidable_bytes=avoidable,
        avoidable_s=max(0.0, pull_s - best_s) if avoidable > 0 else 0.0,
    )


def _totals(estimates: Sequence[PodEstimate]) -> Totals:
    return Totals(
        wait_s=sum(e.wait_s for e in estimates),
        layer_locality_wait_s=sum(e.layer_locality_wait_s for e in estimates),
        in_flight_wait_s=sum(e.in_flight_wait_s for e in estimates),
        pods_in_flight_moved=sum(e.in_flight_node not in ("", e.node) for e in estimates),
        pods=len(estimates),
        pods_affected=sum(e.avoidable_bytes > 0 for e in estimates),
        pulled_bytes=sum(e.pulled_bytes for e in estimates),
        best_pulled_bytes=sum(e.best_pulled_bytes for e in estimates),
        avoidable_bytes=sum(e.avoidable_bytes for e in estimates),
        pull_s=sum(e.pull_s for e in estimates),
        avoidable_s=sum(e.avoidable_s for e in estimates),
    )


#: Said of every estimate: what no cluster's API records.
ALWAYS_APPROXIMATED = (
    "what a node held when a pod started is its status.images now (at most 50 images "
    "by default), less the images the kubelet pulled there since, plus the images of the "
    "pods running there then: an image removed since is not seen",
    "each pod is weighed alone against what happened: placing it elsewhere would have "
    "changed what later pods found",
    "feasibility is requests against allocatable, node selector, required node affinity, "
    "taints and cordon (as they are now); pod (anti-)affinity, topology spread, ports and "
    "volumes are not weighed, and pods deleted since no longer take resources",
)


def _approximations(
    window: Sequence[PodFacts],
    observed: Mapping[str, Observed],
    rates: Sequence[NodeRate],
    notes: Sequence[str],
    problems: Sequence[str],
) -> list[str]:
    found = list(ALWAYS_APPROXIMATED)
    untimed = sum(
        1
        for pod in window
        if not pod.pinned and not (pod.uid in observed and observed[pod.uid].timed)
    )
    if untimed:
        found.append(
            f"{untimed} pod(s) have no timed Pulled event left (the API keeps events about "
            "an hour by default): their pull time is their bytes over their node's rate"
        )
    sources: dict[str, int] = {}
    for rate in rates:
        sources[rate.source] = sources.get(rate.source, 0) + 1
    for source, what in (
        ("label", "their bandwidth label"),
        ("cluster", "the rate observed over the whole cluster"),
        ("default", "the default bandwidth (no pull was observed)"),
    ):
        if sources.get(source):
            found.append(f"{sources[source]} node(s) pull at {what}")
    found.extend(notes)
    if problems:
        found.append(
            f"{len(problems)} malformed quantity(ies) counted as 0 or unlimited, e.g. {problems[0]}"
        )
    return found
