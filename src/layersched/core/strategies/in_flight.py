"""``in-flight``: rank nodes by when the pod would start there, the pulls in flight counted.

The rule is :mod:`layersched.core.inflight`'s (one formula, ported to Go): each node's
cost is the pod's estimated start (its held, arriving and own new bytes against the
node's backlog and link, serial or parallel pulls) plus ``new_bytes_weight`` times the
link time of its own new bytes. As pull-time maps its estimates, the cheapest candidate
scores 100 and the others ``floor(100 * cost_min / cost)``; a pod whose layers weigh
nothing scores 0 everywhere.

The pending pulls come from a :class:`~layersched.core.inflight.PendingPulls` the
caller keeps current (the extender's pod watch, the simulator) and hands to the
strategy (:attr:`InFlight.pending`), with the clock they are timed by
(:attr:`InFlight.clock`: epoch seconds, or the simulator's). Without any, the strategy is
pull-time with the weight on the pod's own bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from layersched.core.indexstorage import IndexArray
from layersched.core.inflight import BITS_PER_BYTE, PendingPulls, start_costs_s
from layersched.core.layerindex import LayerIndexView
from layersched.core.layers import Layer
from layersched.core.pod import PodImages
from layersched.core.strategies.args import InFlightArgs
from layersched.core.strategies.base import (
    NodeScores,
    PlatformGroup,
    overflow_shift,
    unshift,
    zeros,
)
from layersched.core.strategies.pull_time import (
    FloatArray,
    bandwidths,
    compare_across_groups,
    present_units,
    ratio_scores,
)

NAME = InFlightArgs.strategy


def _holds(index: LayerIndexView, node: int) -> Callable[[str], bool]:
    """Whether node ``node`` of ``index`` holds a layer (by digest)."""

    def holds(digest: str) -> bool:
        return index.node_holds_layer(node, digest)

    return holds


class InFlight:
    """In-flight scoring: the earliest estimated start (with the weight on the pod's own
    new bytes) scores 100."""

    name: ClassVar[str] = NAME
    needs_layers: ClassVar[bool] = True

    def __init__(
        self,
        args: InFlightArgs | None = None,
        pending: PendingPulls | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.args = args or InFlightArgs()
        self.args.validate()
        #: The nodes' pending pulls (empty: none known, as full-Nodes mode without a watch).
        self.pending = (
            pending if pending is not None else PendingPulls(max_age_s=self.args.max_pending_age_s)
        )
        #: The time the pending pulls' bind times are on.
        self.clock = clock

    def refresh_node(self, name: str, index: LayerIndexView) -> None:
        """Sum node ``name``'s backlog now (after its pods or its layers changed), so that
        a request only reads it."""
        idx = index.index_of(name)
        if idx is None:
            return
        bits = bandwidths(index, float(self.args.default_bandwidth_bits_per_s))
        rate = float(bits[idx]) / BITS_PER_BYTE
        self.pending.backlog(name, _holds(index, idx), rate, self.clock())

    def costs_s(
        self, layers: Sequence[Layer], index: LayerIndexView, candidates: IndexArray
    ) -> tuple[FloatArray, IndexArray, int]:
        """Per candidate the cost in seconds (the module docstring), the bytes it holds,
        and the pod's total bytes (0: nothing to pull, every cost the overhead)."""
        total_bytes = sum(layer.size_bytes for layer in layers)
        # sizes in units of 2**shift bytes (1 for any pod read through the capped readers)
        shift = overflow_shift(total_bytes)
        total_units = sum(layer.size_bytes >> shift for layer in layers)
        held_units = present_units(index, layers, shift)
        arriving_units, remaining, enqueued, pulls = self._in_flight(layers, index, shift)
        scale = float(1 << shift)
        held = held_units[candidates]
        own = (total_units - held - arriving_units[candidates]).astype(np.float64) * scale
        arriving = arriving_units[candidates].astype(np.float64) * scale
        bits = bandwidths(index, float(self.args.default_bandwidth_bits_per_s))[candidates]
        _, cost = start_costs_s(
            own,
            arriving,
            remaining[candidates],
            enqueued[candidates],
            pulls[candidates],
            bits,
            self.args.pull_mode,
            self.args.overhead_s,
            self.args.new_bytes_weight,
        )
        return cost, unshift(held, shift), total_bytes

    def _in_flight(
        self,
        layers: Sequence[Layer],
        index: LayerIndexView,
        shift: int,
    ) -> tuple[IndexArray, FloatArray, FloatArray, FloatArray]:
        """Per node of the inventory: the pod's arriving bytes (units), ``W(now)``, ``E``
        (bytes) and ``k`` (zeros on a node without pending pulls)."""
        count = index.node_count
        arriving = np.zeros(count, dtype=np.int64)
        remaining = np.zeros(count, dtype=np.float64)
        enqueued = np.zeros(count, dtype=np.float64)
        pulls = np.zeros(count, dtype=np.float64)
        pending = self.pending
        if not len(pending):
            return arriving, remaining, enqueued, pulls
        now_s = self.clock()
        bits = bandwidths(index, float(self.args.default_bandwidth_bits_per_s))
        for name in pending.nodes:
            idx = index.index_of(name)
            if idx is None:
                continue
            rate = float(bits[idx]) / BITS_PER_BYTE
            backlog = pending.backlog(name, _holds(index, idx), rate, now_s)
            if backlog.pulls:
                remaining[idx] = backlog.remaining_bytes(rate, now_s)
                enqueued[idx] = float(backlog.enqueued_bytes)
                pulls[idx] = float(backlog.pulls)
        for layer in layers:
            nodes = pending.arriving_at(layer.digest)
            if not nodes:
                continue
            at = [i for i in map(index.index_of, nodes) if i is not None]
            if not at:
                continue
            positions = np.asarray(at, dtype=np.int64)
            # a layer the node holds counts as held, even if its backlog still has it coming
            held = np.zeros(count, dtype=bool)
            held[index.layer_holders(layer.digest)] = True
            positions = positions[~held[positions]]
            arriving[positions] += layer.size_bytes >> shift
        return arriving, remaining, enqueued, pulls

    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        cost, held, total_bytes = self.costs_s(layers, index, candidates)
        if total_bytes == 0:  # nothing to pull anywhere: no preference, as layer-locality
            return NodeScores(candidates, zeros(candidates), zeros(candidates), 0)
        return NodeScores(candidates, ratio_scores(cost), held, total_bytes)

    def score_groups(
        self,
        pod: PodImages,
        groups: Sequence[PlatformGroup],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> tuple[NodeScores, list[NodeScores]]:
        """Each platform's candidates with that platform's layers; the cheapest cost over
        *all* groups scores 100 (as pull-time compares its estimates across groups). A
        group with nothing to pull leaves every node at 0, as alone."""

        def part_of(group: PlatformGroup) -> tuple[NodeScores, FloatArray]:
            nodes = candidates[group.positions]
            cost, held, total = self.costs_s(group.layers, index, nodes)
            if total == 0:
                return NodeScores(nodes, zeros(nodes), zeros(nodes), 0), cost
            return NodeScores(nodes, ratio_scores(cost), held, total), cost

        return compare_across_groups(candidates, groups, part_of)
