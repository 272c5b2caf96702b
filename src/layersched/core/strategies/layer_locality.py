"""``layer-locality``: score a node by the bytes of the pod's layers it already holds.

``score = floor(100 * present_bytes / total_bytes)`` over the pod's *distinct*
layers (init containers, containers and image volumes together, de-duplicated by
digest). A pod whose layers weigh nothing scores 0 everywhere.

With ``spread=True`` each present layer counts ``size * holders / nodes``, as
upstream ImageLocality scales images, so a layer found on one node in a
thousand does not drag every pod to that node ("node heating"), and an agent
claiming layers it copied from other nodes' objects gains at most what their real
holders share. On by default, as installed (:class:`LayerLocalityArgs`); on a small
cluster it blurs the signal somewhat (a layer on two of three nodes counts two thirds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from layersched.core.indexstorage import IndexArray
from layersched.core.layerindex import LayerIndexView
from layersched.core.layers import Layer
from layersched.core.pod import PodImages
from layersched.core.strategies.args import LayerLocalityArgs
from layersched.core.strategies.base import (
    MAX_NODE_SCORE,
    NodeScores,
    PerNodeStrategy,
    overflow_shift,
    unshift,
    zeros,
)

NAME = LayerLocalityArgs.strategy


class LayerLocality(PerNodeStrategy):
    """Layer-locality scoring."""

    name: ClassVar[str] = NAME
    needs_layers: ClassVar[bool] = True

    def __init__(self, args: LayerLocalityArgs | None = None) -> None:
        self.args = args or LayerLocalityArgs()
        self.args.validate()

    @property
    def spread(self) -> bool:
        """Whether present layers are scaled by how widespread they are."""
        return self.args.spread

    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        # sizes in units of 2**shift bytes (1 for any pod read through the capped readers):
        # every sum below stays under 2^56, so 100 * present cannot wrap int64
        shift = overflow_shift(sum(layer.size_bytes for layer in layers))
        sizes = [layer.size_bytes >> shift for layer in layers]
        total_bytes = sum(sizes)
        if total_bytes == 0:
            return NodeScores(candidates, zeros(candidates), zeros(candidates), 0)
        node_count = index.node_count
        if self.spread:
            # the score weighs each layer by how widespread it is; the bytes reported stay
            # the bytes the node really holds (what explain shows as held and missing)
            weighted = np.zeros(node_count, dtype=np.float64)
            held = np.zeros(node_count, dtype=np.int64)
            for layer, size in zip(layers, sizes, strict=True):
                holders = index.layer_holders(layer.digest)
                if len(holders):
                    weighted[holders] += size * len(holders) / node_count
                    held[holders] += size
            chosen = weighted[candidates]
            scores = np.floor(MAX_NODE_SCORE * chosen / total_bytes).astype(np.int64)
            present = held[candidates]
        else:
            acc = np.zeros(node_count, dtype=np.int64)
            for layer, size in zip(layers, sizes, strict=True):
                acc[index.layer_holders(layer.digest)] += size
            present = acc[candidates]
            scores = (MAX_NODE_SCORE * present) // total_bytes
        return NodeScores(candidates, scores, unshift(present, shift), total_bytes << shift)
