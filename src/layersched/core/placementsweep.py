"""``layersched estimate``'s sweep through the window (:mod:`layersched.core.estimate`): the
pods weighed in time order against one history of the nodes (:class:`Sweep`: pods leave,
arrive, and their images come into use, in that order at one second), and each weighed
pod's row (:func:`weigh`): what it pulled where it ran, against the node layer-locality,
as installed, would have picked among the nodes it fitted on at its start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from layersched.core.indexbuilder import build_layer_index
from layersched.core.placementfacts import PODS_RESOURCE, NodeFacts, PodFacts, node_admits
from layersched.core.placementstate import (
    BoolArray,
    FloatArray,
    Held,
    History,
    IntArray,
    InUse,
    Observed,
    Row,
    Usage,
)
from layersched.core.strategies import pod_layers
from layersched.core.strategies.base import MAX_NODE_SCORE

T = TypeVar("T")

#: Kinds of moments in the sweep through time, in the order they apply at one second (a
#: pod's image counts as in use only after the pods arriving that second, itself first).
_LEAVE, _ARRIVE, _PULLED = 0, 1, 2


class Sweep:
    """The pods of the window weighed in time order, against one history of the nodes
    (``weighed``: the pods of the window it weighs; every pod of ``pods`` takes its node's
    resources)."""

    def __init__(
        self,
        nodes: Sequence[NodeFacts],
        pods: Sequence[PodFacts],
        index: Mapping[str, int],
        weighed: Sequence[PodFacts],
        observed: Mapping[str, Observed],
        problems: list[str],
    ) -> None:
        self.nodes, self.pods, self.index, self.observed = nodes, pods, index, observed
        self.inventory = build_layer_index(node.info for node in nodes)
        # the resources some node offers (bounded by the nodes, not by what pods ask for);
        # a pod asking for one no node offers fits only where it ran
        offered = {name for node in nodes for name in node.info.allocatable}
        self.resources = sorted(offered | {PODS_RESOURCE})
        self.problems = problems
        self.weighed = {id(pod) for pod in weighed}
        self.masks: dict[object, BoolArray] = {}
        # At the same second: pods leave first, then pods arrive, then the images of pods
        # that pulled become in use.
        timeline: list[tuple[float, int, int]] = []
        for i, pod in enumerate(pods):
            if pod.node not in index:
                continue
            timeline.append((pod.started_s, _ARRIVE, i))
            if pod.finished_s is not None:
                timeline.append((pod.finished_s, _LEAVE, i))
            if id(pod) in self.weighed:
                seen = observed.get(pod.uid)
                pulled_at = seen.last_at_s if seen is not None and seen.last_at_s else 0.0
                timeline.append((max(pulled_at, pod.started_s), _PULLED, i))
        timeline.sort()
        self.timeline = timeline

    def _static(self, pod: PodFacts) -> BoolArray:
        signature = (pod.node_selector, pod.affinity, pod.tolerations)
        static = self.masks.get(signature)
        if static is None:
            static = self.masks[signature] = np.fromiter(
                (node_admits(pod, n) for n in self.nodes), dtype=bool, count=len(self.nodes)
            )
        return static

    def run(self, history: History) -> list[Row]:
        """Every weighed pod's row, in the order they started."""

        def weigh_row(pod: PodFacts, node: int, feasible: BoolArray, held: Held) -> Row:
            return weigh(pod, node, feasible, held, self.observed.get(pod.uid))

        return self.visit(history, weigh_row)

    def visit(
        self, history: History, weigh: Callable[[PodFacts, int, BoolArray, Held], T]
    ) -> list[T]:
        """``weigh`` of every weighed pod (its node, the nodes it fitted on and what they
        held, at its start), in the order they started."""
        pods, index = self.pods, self.index
        usage = Usage(self.nodes, self.resources, self.problems)
        in_use = InUse(len(self.nodes))
        requests = {i: usage.vector(pods[i].requests) for _, _, i in self.timeline}
        layers_of: dict[int, set[str]] = {}
        rows: list[T] = []
        for at_s, kind, i in self.timeline:
            pod = pods[i]
            node = index[pod.node]
            if kind == _LEAVE:
                usage.add(node, requests[i], -1)
                if i in layers_of:
                    in_use.change(node, layers_of.pop(i), -1)
            elif kind == _PULLED:
                if pod.finished_s is None or pod.finished_s > at_s:
                    layers_of[i] = {
                        layer.digest
                        for layers in (pod.image_layers or {}).values()
                        for layer in layers
                    }
                    in_use.change(node, layers_of[i], 1)
            else:
                if id(pod) in self.weighed:
                    static = self._static(pod)
                    if usage.offered(pod.requests):
                        feasible = static & usage.fits(requests[i])
                    else:  # it asks for what no node offers: only unlimited nodes take it
                        feasible = static & usage.unlimited
                    feasible[node] = True  # it ran there
                    held = Held(self.inventory, history, in_use, at_s)
                    rows.append(weigh(pod, node, feasible, held))
                usage.add(node, requests[i], 1)
        return rows


def weigh(pod: PodFacts, own: int, feasible: BoolArray, held: Held, seen: Observed | None) -> Row:
    """What ``pod`` pulled on node ``own``, and what the best of the ``feasible`` nodes
    would have pulled: the node layer-locality, as installed (spread on), scores highest:
    each held layer weighed by how many nodes held it (issue 45), ties to the node missing
    the fewest bytes, then to where it ran."""
    image_layers = pod.image_layers or {}
    layers = pod_layers(pod.images, lambda image: image_layers.get(image, ()))
    total = sum(layer.size_bytes for layer in layers)
    present = np.zeros(len(feasible), dtype=np.int64)
    weighted = np.zeros(len(feasible), dtype=np.float64)
    masks = {}
    for layer in layers:
        masks[layer.digest] = mask = held.mask(layer.digest)
        present[mask] += layer.size_bytes
        weighted[mask] += layer.size_bytes * int(mask.sum()) / len(feasible)
    pulled = total - int(present[own])
    if seen is not None and seen.present:
        # the kubelet found these images on its node: it pulled none of their layers
        kept = {
            layer.digest
            for image in pod.images
            if image in seen.present
            for layer in image_layers.get(image, ())
        }
        found = [layer for layer in layers if layer.digest in kept and not masks[layer.digest][own]]
        pulled -= sum(layer.size_bytes for layer in found)
        present[own] = total - pulled
        # and its score counts them, its node one more of their holders
        for layer in found:
            weighted[own] += layer.size_bytes * (int(masks[layer.digest].sum()) + 1) / len(feasible)
    candidates = np.flatnonzero(feasible)
    best = _layer_locality_pick(candidates, own, total, weighted, total - present)
    return Row(
        pod=pod,
        total_bytes=total,
        pulled_bytes=pulled,
        best=best,
        best_pulled_bytes=int(total - present[best]),
        feasible=len(candidates),
        observed=seen,
    )


def _layer_locality_pick(
    candidates: IntArray, own: int, total: int, weighted: FloatArray, missing: IntArray
) -> int:
    """The candidate layer-locality scores highest, its score as the strategy computes it
    with spread (``floor(100 * weighted / total)``); among equal scores the one missing
    the fewest bytes, and where the pod ran when it is one of the best."""
    if total <= 0:
        return own
    scores = np.floor(MAX_NODE_SCORE * weighted / total).astype(np.int64)
    # best first: the highest score, then the fewest bytes missing
    order = np.lexsort((missing[candidates], -scores[candidates]))
    first = int(candidates[order[0]])
    if (scores[own], -missing[own]) == (scores[first], -missing[first]):
        return own  # a tie with where it ran: it ran on a best node
    return first
