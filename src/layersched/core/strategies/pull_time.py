"""``pull-time``: rank nodes by how long the pod's missing layers take to pull there.

``estimate_s = missing_bytes * 8 / bandwidth_bits_per_s + overhead_s`` per node,
where ``missing_bytes`` are the bytes of the pod's distinct layers the node does
not hold, and the bandwidth comes from the node (below). The score is

    score = floor(100 * min(estimate_s over candidates) / estimate_s)

so the fastest candidate scores 100, a node twice as slow 50, ten times 10.
The ratio is scale-free (it does not depend on which nodes happen to be
candidates beyond the fastest one) and ties stay ties. ``overhead_s`` is the
fixed cost of starting a container even with nothing to pull; it keeps the
ratio meaningful when the best node has nothing to pull (without it every other
node would score 0 however close it is): a node that must pull for 1 s, against
one that pulls nothing, scores ``floor(100 * 1 / 2) = 50`` with the default 1 s.

**Bandwidth.** The node label ``layersched.io/bandwidth-bits-per-s`` wins over
the annotation of the same key (labels are what operators set with ``kubectl
label`` and can also select on; the annotation is the fallback for agents that
measure). A value must be a positive decimal number of bits per second
(``"100000000"`` or ``"1e8"``); an unreadable value is ignored with a warning
and the next source is used, finally ``default_bandwidth_bits_per_s`` (100
Mbit/s). If no node carries a bandwidth, every node gets the default and the
ranking equals ``layer-locality``'s (fewest missing bytes first).
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from layersched.core.indexstorage import IndexArray
from layersched.core.layerindex import LayerIndexView
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeInfo
from layersched.core.pod import PodImages
from layersched.core.strategies.args import (
    DEFAULT_BANDWIDTH_BITS_PER_S,
    DEFAULT_OVERHEAD_S,
    PullTimeArgs,
)
from layersched.core.strategies.base import (
    MAX_NODE_SCORE,
    NodeScores,
    PlatformGroup,
    overflow_shift,
    unshift,
    zeros,
)

log = logging.getLogger(__name__)

NAME = PullTimeArgs.strategy

#: Node label (preferred) or annotation carrying the node's pull bandwidth.
BANDWIDTH_KEY = "layersched.io/bandwidth-bits-per-s"
BITS_PER_BYTE = 8
__all__ = [
    "BANDWIDTH_KEY",
    "DEFAULT_BANDWIDTH_BITS_PER_S",
    "DEFAULT_OVERHEAD_S",
    "NAME",
    "PullTime",
    "bandwidths",
    "compare_across_groups",
    "node_bandwidth_bits_per_s",
    "present_units",
    "ratio_scores",
]

FloatArray = npt.NDArray[np.float64]

# Bandwidths per inventory, recomputed when its nodes' facts change (a live inventory
# changes in place: its node_facts counter moves). Weak keys: an inventory built per
# extender request is dropped with its cache entry.
_BANDWIDTH_CACHE: weakref.WeakKeyDictionary[
    LayerIndexView, tuple[float, tuple[int, int], FloatArray]
] = weakref.WeakKeyDictionary()


def _parse_bandwidth(value: str, where: str) -> float | None:
    try:
        parsed = float(value)
    except ValueError:
        parsed = math.nan
    if not math.isfinite(parsed) or parsed <= 0:
        log.warning(
            "%s %s=%r is not a positive number of bits per second: ignoring it",
            where,
            BANDWIDTH_KEY,
            value,
        )
        return None
    return parsed


def node_bandwidth_bits_per_s(node: NodeInfo, default_bits_per_s: float) -> float:
    """The node's bandwidth: its label, else its annotation, else the default."""
    sources: tuple[tuple[str, Mapping[str, str]], ...] = (
        ("label", node.labels),
        ("annotation", node.annotations),
    )
    for kind, values in sources:
        raw = values.get(BANDWIDTH_KEY)
        if raw is not None:
            parsed = _parse_bandwidth(raw, f"node {node.name!r} {kind}")
            if parsed is not None:
                return parsed
    return default_bits_per_s


def bandwidths(index: LayerIndexView, default_bits_per_s: float) -> FloatArray:
    """Every node's bandwidth in bits per second, by node index (remembered per inventory
    until its nodes' facts change)."""
    cached = _BANDWIDTH_CACHE.get(index)
    count = index.node_count
    # a live inventory changes in place: node_facts moves when labels may have changed
    generation = (count, index.node_facts)
    if cached is not None and cached[0] == default_bits_per_s and cached[1] == generation:
        return cached[2]
    nodes: Sequence[NodeInfo] = index.nodes
    arr = np.fromiter(
        (node_bandwidth_bits_per_s(n, default_bits_per_s) for n in nodes),
        dtype=np.float64,
        count=count,
    )
    _BANDWIDTH_CACHE[index] = (default_bits_per_s, generation, arr)
    return arr


def present_units(index: LayerIndexView, layers: Sequence[Layer], shift: int) -> IndexArray:
    """Bytes of ``layers`` each node (by index) already holds, in units of ``2**shift``
    bytes (see :func:`~layersched.core.strategies.base.overflow_shift`)."""
    acc = np.zeros(index.node_count, dtype=np.int64)
    for layer in layers:
        acc[index.layer_holders(layer.digest)] += layer.size_bytes >> shift
    return acc


def ratio_scores(estimate_s: FloatArray) -> IndexArray:
    """``floor(100 * t_min / t)``; a zero estimate scores 100 (only with zero overhead)."""
    if len(estimate_s) == 0:
        return np.empty(0, dtype=np.int64)
    t_min = float(estimate_s.min())
    if t_min == 0.0:
        return np.where(estimate_s == 0.0, MAX_NODE_SCORE, 0).astype(np.int64)
    return np.floor(MAX_NODE_SCORE * t_min / estimate_s).astype(np.int64)


class PullTime:
    """Pull-time scoring: fastest estimated pull scores 100."""

    name: ClassVar[str] = NAME
    needs_layers: ClassVar[bool] = True

    def __init__(self, args: PullTimeArgs | None = None) -> None:
        self.args = args or PullTimeArgs()
        self.args.validate()

    @property
    def default_bandwidth_bits_per_s(self) -> float:
        """Bandwidth assumed for a node without a readable label or annotation."""
        return self.args.default_bandwidth_bits_per_s

    @property
    def overhead_s(self) -> float:
        """Fixed start cost added to every estimate."""
        return self.args.overhead_s

    def estimates_s(
        self, index: LayerIndexView, candidates: IndexArray, present: IndexArray, total: int
    ) -> FloatArray:
        """Estimated start time per candidate, given its present bytes of ``total``."""
        # in floats: a difference of byte counts never wraps, whatever their size
        return self._estimates_s(index, candidates, float(total) - present.astype(np.float64))

    def _estimates_s(
        self, index: LayerIndexView, candidates: IndexArray, missing_bytes: FloatArray
    ) -> FloatArray:
        bandwidth = bandwidths(index, float(self.default_bandwidth_bits_per_s))[candidates]
        estimate: FloatArray = missing_bytes * BITS_PER_BYTE / bandwidth + self.overhead_s
        return estimate

    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        total_bytes = sum(layer.size_bytes for layer in layers)
        if total_bytes == 0:  # nothing to pull anywhere: no preference, as layer-locality
            return NodeScores(candidates, zeros(candidates), zeros(candidates), 0)
        shift = overflow_shift(total_bytes)  # 0 for sizes read through the capped readers
        total_units = sum(layer.size_bytes >> shift for layer in layers)
        held_units = present_units(index, layers, shift)[candidates]
        missing_bytes = (total_units - held_units).astype(np.float64) * float(1 << shift)
        estimate = self._estimates_s(index, candidates, missing_bytes)
        present = unshift(held_units, shift)
        return NodeScores(candidates, ratio_scores(estimate), present, total_bytes)

    def score_groups(
        self,
        pod: PodImages,
        groups: Sequence[PlatformGroup],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> tuple[NodeScores, list[NodeScores]]:
        """Each platform's candidates with that platform's layers; the fastest estimate
        over *all* groups scores 100 (estimates compare nodes, so they are compared
        across groups). A group with nothing to pull leaves every node at 0, as alone."""

        def part_of(group: PlatformGroup) -> tuple[NodeScores, FloatArray]:
            part = self.score(pod, group.layers, index, candidates[group.positions])
            if part.total_bytes == 0:
                return part, np.zeros(len(part.nodes), dtype=np.float64)
            estimate = self.estimates_s(index, part.nodes, part.present_bytes, part.total_bytes)
            return part, estimate

        return compare_across_groups(candidates, groups, part_of)


def compare_across_groups(
    candidates: IndexArray,
    groups: Sequence[PlatformGroup],
    part_of: Callable[[PlatformGroup], tuple[NodeScores, FloatArray]],
) -> tuple[NodeScores, list[NodeScores]]:
    """A time-ranking strategy's :meth:`~Strategy.score_groups`: each group scored alone
    (``part_of``: its scores and its candidates' seconds), then, when every group has
    bytes to pull, ``floor(100 * min / seconds)`` over *all* candidates (pull-time's and
    in-flight's estimates compare nodes, so they are compared across groups)."""
    scores = zeros(candidates)
    present = zeros(candidates)
    seconds = np.zeros(len(candidates), dtype=np.float64)
    parts = []
    for group in groups:
        part, part_seconds = part_of(group)
        scores[group.positions] = part.scores
        present[group.positions] = part.present_bytes
        seconds[group.positions] = part_seconds
        parts.append(part)
    if parts and all(part.total_bytes > 0 for part in parts):
        least_s = float(seconds.min()) if len(seconds) else 0.0
        if least_s > 0:
            scores = np.floor(MAX_NODE_SCORE * least_s / seconds).astype(np.int64)
    total = max((part.total_bytes for part in parts), default=0)
    return NodeScores(candidates, scores, present, total), parts
