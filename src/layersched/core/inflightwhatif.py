"""The in-flight what-if of ``layersched estimate`` (:mod:`layersched.core.estimate`): where
the ``in-flight`` strategy would have placed a pod, given the pulls in flight on each node at
its start (the pods' own pulls, ended at their last Pulled event or their bytes at their
node's rate), and how long it would have waited there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from layersched.core.inflight import PendingPull, node_backlog, start_costs_s
from layersched.core.layers import Layer
from layersched.core.placementfacts import (
    NodeFacts,
    PodFacts,
)
from layersched.core.placementstate import (
    BoolArray,
    Held,
    NodeRate,
    Row,
)
from layersched.core.strategies import InFlightArgs, pod_layers
from layersched.core.strategies.pull_time import BITS_PER_BYTE


class InFlightWhatIf:
    """The in-flight view of each weighed pod, visited in the order they started: the
    pulls in flight then (the weighed pods before it whose pulls had not ended) give each
    feasible node's backlog, and the rule its wait there."""

    def __init__(
        self,
        nodes: Sequence[NodeFacts],
        index: Mapping[str, int],
        rates: Sequence[NodeRate],
        rows: Sequence[Row],
        args: InFlightArgs,
    ) -> None:
        self.nodes, self.args = nodes, args
        self.rates = np.fromiter((r.bytes_per_s for r in rates), np.float64, count=len(rates))
        self.bits = self.rates * BITS_PER_BYTE
        self.rows = {row.pod.uid: row for row in rows}
        #: when each pod's pull ended: its last Pulled event, else its bytes at the rate
        self.ends = {row.pod.uid: pull_end(row, self.rates[index[row.pod.node]]) for row in rows}
        #: node -> (pod, its layers, when its pull ends), for pulls maybe still in flight
        self.pending: dict[int, list[tuple[PodFacts, tuple[Layer, ...], float]]] = {}

    def __call__(self, pod: PodFacts, node: int, feasible: BoolArray, held: Held) -> dict[str, Any]:
        at_s, row, count = pod.started_s, self.rows[pod.uid], len(self.nodes)
        image_layers = pod.image_layers or {}
        layers = pod_layers(pod.images, lambda image: image_layers.get(image, ()))
        masks: dict[str, BoolArray] = {}

        def mask(digest: str) -> BoolArray:
            found = masks.get(digest)
            if found is None:
                found = masks[digest] = held.mask(digest)
            return found

        held_bytes = np.zeros(count, dtype=np.int64)
        for layer in layers:
            held_bytes[mask(layer.digest)] += layer.size_bytes
        total = sum(layer.size_bytes for layer in layers)
        backlog = np.zeros((4, count), dtype=np.float64)  # W(now), E, k, arriving
        for at, entries in list(self.pending.items()):
            live = [entry for entry in entries if entry[2] > at_s]
            if not live:
                del self.pending[at]
                continue
            self.pending[at] = live
            summed = node_backlog(
                [PendingPull(p.uid, p.started_s, p_layers) for p, p_layers, _ in live],
                holder(mask, at),
                float(self.rates[at]),
                at_s,
                self.args.max_pending_age_s,
            )
            backlog[:, at] = (
                summed.remaining_bytes(float(self.rates[at]), at_s),
                summed.enqueued_bytes,
                summed.pulls,
                sum(
                    layer.size_bytes
                    for layer in layers
                    if layer.digest in summed.arriving and not mask(layer.digest)[at]
                ),
            )
        candidates = np.flatnonzero(feasible)
        c = candidates
        own = (total - held_bytes[c] - backlog[3, c]).astype(np.float64)
        start, cost = start_costs_s(
            own,
            backlog[3, c],
            backlog[0, c],
            backlog[1, c],
            backlog[2, c],
            self.bits[c],
            self.args.pull_mode,
            self.args.overhead_s,
            self.args.new_bytes_weight,
        )
        wait = start - self.args.overhead_s
        here = int(np.searchsorted(candidates, node))
        pick = int(np.argmin(cost)) if len(cost) else here
        if cost[here] <= cost[pick]:  # a tie with where it ran: it ran on a best node
            pick = here
        layer_locality = int(np.searchsorted(candidates, row.best))
        end = self.ends[pod.uid]
        if row.pulled_bytes > 0 and end > at_s:
            self.pending.setdefault(node, []).append((pod, layers, end))
        return {
            "wait_s": float(wait[here]),
            "layer_locality_wait_s": float(wait[layer_locality]),
            "in_flight_node": self.nodes[int(candidates[pick])].info.name,
            "in_flight_wait_s": float(wait[pick]),
        }


def holder(mask: Callable[[str], BoolArray], node: int) -> Callable[[str], bool]:
    """Whether ``node`` held a layer (by digest) at the moment ``mask`` is of."""

    def holds(digest: str) -> bool:
        return bool(mask(digest)[node])

    return holds


def pull_end(row: Row, bytes_per_s: float) -> float:
    """When ``row``'s pod's pull ended: its last Pulled event after its start, else its
    bytes at its node's rate from its start."""
    seen = row.observed
    if seen is not None and seen.last_at_s > row.pod.started_s:
        return seen.last_at_s
    return row.pod.started_s + row.pulled_bytes / bytes_per_s
