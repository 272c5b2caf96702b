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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError
from layersched.core.inventory import ClusterInventory, IndexArray, NodeInfo
from layersched.core.layers import Layer, LayerSource
from layersched.core.pod import PodImages
from layersched.core.strategies.base import MAX_NODE_SCORE, NodeScores, pod_layers, zeros

log = logging.getLogger(__name__)

NAME = "pull-time"

#: Node label (preferred) or annotation carrying the node's pull bandwidth.
BANDWIDTH_KEY = "layersched.io/bandwidth-bits-per-s"
#: A common edge uplink; with no node labelled, any value gives the same ranking.
DEFAULT_BANDWIDTH_BITS_PER_S = 100_000_000
#: Creating and starting a container costs about a second even with every layer
#: cached; pull-time differences well below that hardly matter.
DEFAULT_OVERHEAD_S = 1.0
BITS_PER_BYTE = 8

FloatArray = npt.NDArray[np.float64]

# Bandwidths per inventory, recomputed when its nodes' facts change (a live inventory
# changes in place: its node_facts counter moves). Weak keys: an inventory built per
# extender request is dropped with its cache entry.
_BANDWIDTH_CACHE: weakref.WeakKeyDictionary[
    ClusterInventory, tuple[float, tuple[int, int], FloatArray]
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


def _bandwidths(inventory: ClusterInventory, default_bits_per_s: float) -> FloatArray:
    cached = _BANDWIDTH_CACHE.get(inventory)
    count = inventory.node_count
    # a live inventory changes in place: node_facts moves when labels may have changed
    generation = (count, inventory.node_facts)
    if cached is not None and cached[0] == default_bits_per_s and cached[1] == generation:
        return cached[2]
    nodes: Sequence[NodeInfo] = inventory.nodes
    arr = np.fromiter(
        (node_bandwidth_bits_per_s(n, default_bits_per_s) for n in nodes),
        dtype=np.float64,
        count=count,
    )
    _BANDWIDTH_CACHE[inventory] = (default_bits_per_s, generation, arr)
    return arr


def _present_bytes(inventory: ClusterInventory, layers: tuple[Layer, ...]) -> IndexArray:
    """Bytes of ``layers`` each node (by index) already holds."""
    acc = np.zeros(inventory.node_count, dtype=np.int64)
    for layer in layers:
        acc[inventory.layer_holders(layer.digest)] += layer.size_bytes
    return acc


def _ratio_scores(estimate_s: FloatArray) -> IndexArray:
    """``floor(100 * t_min / t)``; a zero estimate scores 100 (only with zero overhead)."""
    if len(estimate_s) == 0:
        return np.empty(0, dtype=np.int64)
    t_min = float(estimate_s.min())
    if t_min == 0.0:
        return np.where(estimate_s == 0.0, MAX_NODE_SCORE, 0).astype(np.int64)
    return np.floor(MAX_NODE_SCORE * t_min / estimate_s).astype(np.int64)


@dataclass(frozen=True, slots=True)
class PullTime:
    """Pull-time scoring: fastest estimated pull scores 100."""

    name: ClassVar[str] = NAME
    needs_layers: ClassVar[bool] = True

    #: Bandwidth assumed for a node without a readable label or annotation.
    default_bandwidth_bits_per_s: float = DEFAULT_BANDWIDTH_BITS_PER_S
    #: Fixed start cost added to every estimate (seconds, >= 0).
    overhead_s: float = DEFAULT_OVERHEAD_S

    def __post_init__(self) -> None:
        if not self.default_bandwidth_bits_per_s > 0:
            raise InputError(
                f"pull-time: default_bandwidth_bits_per_s={self.default_bandwidth_bits_per_s} "
                "must be a positive number of bits per second"
            )
        if not self.overhead_s >= 0:
            raise InputError(f"pull-time: overhead_s={self.overhead_s} must be >= 0 seconds")

    def estimates_s(
        self, inventory: ClusterInventory, candidates: IndexArray, present: IndexArray, total: int
    ) -> FloatArray:
        """Estimated start time per candidate, given its present bytes of ``total``."""
        bandwidth = _bandwidths(inventory, float(self.default_bandwidth_bits_per_s))[candidates]
        missing_bits = (total - present).astype(np.float64) * BITS_PER_BYTE
        estimate: FloatArray = missing_bits / bandwidth + self.overhead_s
        return estimate

    def score(
        self,
        pod: PodImages,
        inventory: ClusterInventory,
        candidates: IndexArray,
        source: LayerSource | None,
    ) -> NodeScores:
        layers = pod_layers(pod, source)
        total_bytes = sum(layer.size_bytes for layer in layers)
        if total_bytes == 0:  # nothing to pull anywhere: no preference, as layer-locality
            return NodeScores(candidates, zeros(candidates), zeros(candidates), 0)
        present = _present_bytes(inventory, layers)[candidates]
        estimate = self.estimates_s(inventory, candidates, present, total_bytes)
        return NodeScores(candidates, _ratio_scores(estimate), present, total_bytes)
