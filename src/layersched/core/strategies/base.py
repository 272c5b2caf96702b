"""What every strategy shares: the result type, the protocol, the pod's layers, platform groups.

A strategy scores candidate nodes for a pod whose layers are already resolved: the caller
(the extender, ``layersched score``, the simulator, the testbed) resolves the pod's images
once, through whatever source it has, and passes the distinct layers
(:func:`pod_layers`). On a cluster of several platforms the pod's layers differ per
platform; :meth:`Strategy.score_groups` scores each platform's candidates with that
platform's layers, and a strategy whose scores compare nodes with each other (pull-time)
does the comparison across the groups itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from layersched.core.errors import LayerResolutionError
from layersched.core.indexstorage import IndexArray
from layersched.core.inflight import PendingPulls
from layersched.core.layerindex import LayerIndexView
from layersched.core.layers import Layer, LayerSource
from layersched.core.pod import PodImages
from layersched.core.reference import ImageName

#: Framework scores run from 0 to MAX_NODE_SCORE (upstream ``framework.MaxNodeScore``).
MAX_NODE_SCORE = 100
#: The largest byte sum the strategies keep in int64: ``MAX_NODE_SCORE * sum`` must not
#: wrap (2^63 / 100 is about 2^56.3). Readers cap every size at 1 TiB
#: (``layersched.core.layers.MAX_SIZE_BYTES``), so only a pod of more than 65,536
#: terabyte layers comes near it; :func:`overflow_shift` handles it anyway.
MAX_EXACT_SUM_BYTES = 1 << 56


@dataclass(frozen=True, slots=True)
class NodeScores:
    """Scores for candidate nodes, with what explains them.

    ``present_bytes[i]`` and ``total_bytes`` are the strategy's own measure of
    "already there" versus "needed" for node ``nodes[i]`` (for image-locality:
    the spread-scaled sum of matching image sizes, and the upper threshold).
    """

    nodes: IndexArray
    scores: IndexArray
    present_bytes: IndexArray
    total_bytes: int

    def as_dict(self, index: LayerIndexView) -> dict[str, int]:
        """``{node name: score}`` in candidate order."""
        names = index.nodes
        return {names[int(i)].name: int(s) for i, s in zip(self.nodes, self.scores, strict=True)}


@dataclass(frozen=True, slots=True)
class PlatformGroup:
    """The candidates of one platform (positions into the candidate array) and the pod's
    layers as that platform pulls them."""

    positions: IndexArray
    layers: tuple[Layer, ...]


class Strategy(Protocol):
    """A scoring strategy: framework scores 0..100 for candidate nodes."""

    name: ClassVar[str]
    #: Whether the strategy needs the pod's layers (and the nodes').
    needs_layers: ClassVar[bool]

    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        """Score ``candidates`` (node indices) for ``pod``, whose distinct layers are
        ``layers`` (empty for a strategy that needs none)."""
        ...

    def score_groups(
        self,
        pod: PodImages,
        groups: Sequence[PlatformGroup],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> tuple[NodeScores, list[NodeScores]]:
        """Score candidates of several platforms, each group with its own layers: the
        combined scores in candidate order, and each group's own."""
        ...


@runtime_checkable
class InFlightAware(Protocol):
    """A strategy that counts the pulls in flight (``in-flight``): its caller keeps
    :attr:`pending` current (pods bound whose containers have not started, with the
    nodes' held layers changing under them: :meth:`PendingPulls.node_changed`) and sets
    :attr:`clock` to the time their bind times are on (epoch seconds; a simulator's)."""

    pending: PendingPulls
    clock: Callable[[], float]


def pod_layers(
    images: Iterable[ImageName], layers_of: Callable[[ImageName], Sequence[Layer]]
) -> tuple[Layer, ...]:
    """The distinct layers of ``images`` (``PodImages.pulled``), first occurrence order;
    ``layers_of`` gives an image's layers (a source's ``resolve``, or a mapping's lookup)."""
    seen: dict[str, Layer] = {}
    for image in images:
        for layer in layers_of(image):
            seen.setdefault(layer.digest, layer)
    return tuple(seen.values())


def resolve_pod_layers(pod: PodImages, source: LayerSource | None) -> tuple[Layer, ...]:
    """The pod's distinct layers through ``source``; LayerResolutionError naming the image
    that cannot be resolved (or saying there is no source)."""
    if source is None:
        raise LayerResolutionError(
            f"pod {pod.name!r}: no layer source to resolve its images: pass --layers or a registry"
        )
    return pod_layers(pod.pulled, source.resolve)


def overflow_shift(total_bytes: int) -> int:
    """How many bits to shift every size right so that sums up to ``total_bytes`` stay
    under :data:`MAX_EXACT_SUM_BYTES` (0, exact, for every pod whose sizes were read
    through the capped readers; otherwise sizes count in units of ``2**shift`` bytes,
    and a score may differ from the exact one by rounding, never wrap or raise)."""
    shift = 0
    while (total_bytes >> shift) > MAX_EXACT_SUM_BYTES:
        shift += 1
    return shift


def unshift(units: IndexArray, shift: int) -> IndexArray:
    """Sums counted in units of ``2**shift`` bytes back in bytes, saturating at int64's
    maximum (only an explanation: the scores were computed in units)."""
    if shift == 0:
        return units
    ceiling = np.iinfo(np.int64).max >> shift
    unshifted: IndexArray = np.minimum(units, ceiling) << shift
    return unshifted


def zeros(candidates: IndexArray) -> IndexArray:
    """An int64 zero vector shaped like ``candidates``."""
    return np.zeros(len(candidates), dtype=np.int64)


def per_node_groups(
    strategy: Strategy,
    pod: PodImages,
    groups: Sequence[PlatformGroup],
    index: LayerIndexView,
    candidates: IndexArray,
) -> tuple[NodeScores, list[NodeScores]]:
    """:meth:`Strategy.score_groups` of a strategy whose score of a node depends on that
    node alone: each group scored on its own, the scores put back in candidate order."""
    scores = zeros(candidates)
    present = zeros(candidates)
    parts = []
    for group in groups:
        part = strategy.score(pod, group.layers, index, candidates[group.positions])
        scores[group.positions] = part.scores
        present[group.positions] = part.present_bytes
        parts.append(part)
    total = max((part.total_bytes for part in parts), default=0)
    return NodeScores(candidates, scores, present, total), parts


class PerNodeStrategy(ABC):
    """A strategy whose score of a node depends on that node alone: its platform groups
    are scored each on its own (:func:`per_node_groups`)."""

    name: ClassVar[str]
    needs_layers: ClassVar[bool]

    @abstractmethod
    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        """See :meth:`Strategy.score`."""

    def score_groups(
        self,
        pod: PodImages,
        groups: Sequence[PlatformGroup],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> tuple[NodeScores, list[NodeScores]]:
        """See :meth:`Strategy.score_groups`."""
        return per_node_groups(self, pod, groups, index, candidates)
