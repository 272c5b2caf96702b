"""The cluster's state through the window, as ``layersched estimate``'s sweep
(:mod:`layersched.core.estimate`) walks it: the layers that arrived on each node and when
(:class:`History`), the layers running pods use (:class:`InUse`), the resources the
running pods request (:class:`Usage`), each pod's own pulls (:class:`Observed`), a
weighed pod's row (:class:`Row`) and which nodes held a layer at one moment
(:class:`Held`), and a node's pull rate (:class:`NodeRate`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError
from layersched.core.layerindex import LayerIndex
from layersched.core.placementfacts import (
    NodeFacts,
    PodFacts,
    PullFacts,
    milli_units,
)
from layersched.core.reference import (
    ImageReference,
    listed_name_matches,
    parse_or_none,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass
class Observed:
    """A pod's own Pulled events."""

    seconds: float = 0.0
    timed: bool = False
    present: set[str] = field(default_factory=set)
    #: When its last pull ended (0: none).
    last_at_s: float = 0.0


class History:
    """When layers arrived on nodes: for a (node, layer) held now only through images the
    kubelet pulled in the window, the earliest time one of those images was last pulled.
    Held at ``t`` when that time is before ``t``; layers held through another image are
    held throughout."""

    def __init__(
        self, nodes: Sequence[NodeFacts], pulls: Sequence[PullFacts], index: Mapping[str, int]
    ) -> None:
        # node -> (registry, repository) -> [(reference, end of the pull)]
        by_node: dict[int, dict[tuple[str, str], list[tuple[ImageReference, float]]]] = {}
        for pull in pulls:
            ref = parse_or_none(pull.event.image) if pull.event.pulled else None
            if ref is not None and pull.node in index:
                repos = by_node.setdefault(index[pull.node], {})
                repos.setdefault((ref.domain, ref.path), []).append((ref, pull.at_s))
        parsed: dict[str, ImageReference | None] = {}
        since: dict[str, list[tuple[int, float]]] = {}
        for idx, repos in by_node.items():
            base: set[str] = set()
            late: dict[str, float] = {}
            for image in nodes[idx].info.images:
                last = last_pull(image.names, repos, parsed)
                digests = {layer.digest for layer in image.layers or ()}
                if last is None:
                    base |= digests
                    continue
                for digest in digests:
                    late[digest] = min(late.get(digest, last), last)
            for digest, at in late.items():
                if digest not in base:
                    since.setdefault(digest, []).append((idx, at))
        self._since = {
            digest: (
                np.fromiter((i for i, _ in entries), dtype=np.int64, count=len(entries)),
                np.fromiter((t for _, t in entries), dtype=np.float64, count=len(entries)),
            )
            for digest, entries in since.items()
        }

    def arrived_after(self, digest: str, at_s: float) -> IntArray:
        """The nodes holding ``digest`` now that did not hold it yet at ``at_s``."""
        entry = self._since.get(digest)
        if entry is None:
            return np.empty(0, dtype=np.int64)
        nodes, since = entry
        return nodes[since >= at_s]


def last_pull(
    names: Sequence[str],
    repos: Mapping[tuple[str, str], Sequence[tuple[ImageReference, float]]],
    parsed: dict[str, ImageReference | None],
) -> float | None:
    """When the kubelet last pulled the image listed as ``names`` (None: not in the
    window); ``parsed`` remembers each name's parse (names repeat on every node)."""
    last: float | None = None
    for name in names:
        if name not in parsed:
            parsed[name] = parse_or_none(name)
        have = parsed[name]
        if have is None:
            continue
        for ref, at in repos.get((have.domain, have.path), ()):
            if listed_name_matches(name, ref) and (last is None or at > last):
                last = at
    return last


class InUse:
    """The layers of the images that weighed pods running on each node use: a running
    container's image is never garbage-collected, so its layers are held meanwhile
    (whatever a later ``imagePullPolicy: Always`` re-pull makes the history say)."""

    def __init__(self, node_count: int) -> None:
        self._count = node_count
        #: layer digest -> node -> running pods using it
        self._users: dict[str, dict[int, int]] = {}

    def change(self, node: int, digests: Iterable[str], delta: int) -> None:
        for digest in digests:
            users = self._users.setdefault(digest, {})
            users[node] = users.get(node, 0) + delta
            if users[node] <= 0:
                del users[node]

    def holders(self, digest: str) -> IntArray:
        users = self._users.get(digest)
        if not users:
            return np.empty(0, dtype=np.int64)
        return np.fromiter(users, dtype=np.int64, count=len(users))


class Usage:
    """Requests of the pods running on each node, as time moves forward."""

    def __init__(self, nodes: Sequence[NodeFacts], resources: Sequence[str], problems: list[str]):
        self.resources = list(resources)
        self.row = {name: i for i, name in enumerate(self.resources)}
        count = len(nodes)
        self.allocatable = np.zeros((len(self.resources), count), dtype=np.int64)
        #: Nodes that report no allocatable at all: not limited (nothing to compare with).
        self.unlimited = np.zeros(count, dtype=bool)
        for j, node in enumerate(nodes):
            allocatable = node.info.allocatable
            if not allocatable:
                self.unlimited[j] = True
                continue
            for name, value in allocatable.items():
                row = self.row.get(name)
                if row is None:
                    continue
                try:
                    self.allocatable[row, j] = milli_units(
                        str(value), f"node {node.info.name!r} allocatable.{name}"
                    )
                except InputError as err:
                    problems.append(str(err))
                    self.unlimited[j] = True
        self.used = np.zeros_like(self.allocatable)

    def vector(self, requests: Mapping[str, int]) -> IntArray:
        """The requests of the resources some node offers, as a vector."""
        out = np.zeros(len(self.resources), dtype=np.int64)
        for name, value in requests.items():
            row = self.row.get(name)
            if row is not None:
                out[row] = value
        return out

    def offered(self, requests: Mapping[str, int]) -> bool:
        """Whether some node offers every resource ``requests`` asks for (a pod asking
        for one no node offers fits only where it ran, and on nodes reporting no
        allocatable)."""
        return all(value <= 0 or name in self.row for name, value in requests.items())

    def fits(self, request: IntArray) -> BoolArray:
        free = self.allocatable - self.used
        fitting: BoolArray = np.all(free >= request[:, None], axis=0) | self.unlimited
        return fitting

    def add(self, node: int, request: IntArray, sign: int) -> None:
        self.used[:, node] += sign * request


def observed_pulls(pods: Iterable[PodFacts], pulls: Iterable[PullFacts]) -> dict[str, Observed]:
    wanted = {pod.uid for pod in pods}
    found: dict[str, Observed] = {}
    for pull in pulls:
        if pull.pod_uid not in wanted:
            continue
        seen = found.setdefault(pull.pod_uid, Observed())
        seen.last_at_s = max(seen.last_at_s, pull.at_s)
        if not pull.event.pulled:
            seen.present.add(pull.event.image)
        elif pull.event.seconds is not None:
            seen.seconds += pull.event.seconds
            seen.timed = True
    return found


@dataclass
class Row:
    """A weighed pod before its times are known (rates need every pod's bytes first)."""

    pod: PodFacts
    total_bytes: int
    pulled_bytes: int
    best: int
    best_pulled_bytes: int
    feasible: int
    observed: Observed | None


@dataclass(frozen=True, slots=True)
class Held:
    """Which nodes held a layer at one moment: those holding it now through an image not
    pulled since, and those where a running pod used it."""

    index: LayerIndex
    history: History
    in_use: InUse
    at_s: float

    def mask(self, digest: str) -> BoolArray:
        held = np.zeros(self.index.node_count, dtype=bool)
        held[self.index.layer_holders(digest)] = True
        held[self.history.arrived_after(digest, self.at_s)] = False
        held[self.in_use.holders(digest)] = True
        return held


@dataclass(frozen=True, slots=True)
class NodeRate:
    """A node's pull rate, and where it comes from (``observed``, ``label``,
    ``cluster``, ``default``)."""

    bytes_per_s: float
    source: str
