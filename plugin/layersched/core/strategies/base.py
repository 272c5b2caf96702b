"""What every strategy shares: the result type, the protocol, pod layer resolution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from layersched.core.errors import LayerResolutionError
from layersched.core.inventory import ClusterInventory, IndexArray
from layersched.core.layers import Layer, LayerSource
from layersched.core.pod import PodImages

#: Framework scores run from 0 to MAX_NODE_SCORE (upstream ``framework.MaxNodeScore``).
MAX_NODE_SCORE = 100


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

    def as_dict(self, inventory: ClusterInventory) -> dict[str, int]:
        """``{node name: score}`` in candidate order."""
        names = inventory.nodes
        return {names[int(i)].name: int(s) for i, s in zip(self.nodes, self.scores, strict=True)}


class Strategy(Protocol):
    """A scoring strategy: framework scores 0..100 for candidate nodes."""

    name: ClassVar[str]
    #: Whether the strategy needs layer data (a layer source or layer-bearing nodes).
    needs_layers: ClassVar[bool]

    def score(
        self,
        pod: PodImages,
        inventory: ClusterInventory,
        candidates: IndexArray,
        source: LayerSource | None,
    ) -> NodeScores:
        """Score ``candidates`` (node indices) for ``pod``."""
        ...


def pod_layers(pod: PodImages, source: LayerSource | None) -> tuple[Layer, ...]:
    """The pod's distinct layers (init containers and containers), first occurrence order.

    Raises :class:`LayerResolutionError` naming the image that cannot be resolved.
    """
    if source is None:
        raise LayerResolutionError(
            f"pod {pod.name!r}: no layer source to resolve its images: pass --layers or a registry"
        )
    seen: dict[str, Layer] = {}
    for image in pod.images:
        for layer in source.resolve(image):
            seen.setdefault(layer.digest, layer)
    return tuple(seen.values())


def zeros(candidates: IndexArray) -> IndexArray:
    """An int64 zero vector shaped like ``candidates``."""
    return np.zeros(len(candidates), dtype=np.int64)
