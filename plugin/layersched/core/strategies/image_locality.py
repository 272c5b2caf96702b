"""``image-locality``: an exact port of upstream kube-scheduler's ImageLocality plugin.

A node scores for the pod's images it already holds *by name* (after the
``:latest`` rule), each image's size scaled by the fraction of nodes that hold
it. Layers shared under other names count for nothing: that is the baseline
layersched improves on.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from layersched.core.inventory import ClusterInventory, IndexArray
from layersched.core.layers import LayerSource
from layersched.core.pod import PodImages
from layersched.core.reference import normalized_image_name
from layersched.core.strategies.base import MAX_NODE_SCORE, NodeScores

NAME = "image-locality"

MB = 1024 * 1024
#: Below this sum a node scores 0: tiny images are not worth steering for.
MIN_THRESHOLD_BYTES = 23 * MB
#: Upper bound per container; the upper threshold is this times the container count.
MAX_CONTAINER_THRESHOLD_BYTES = 1000 * MB


def _scaled_image_score(size_bytes: int, num_nodes: int, total_num_nodes: int) -> int:
    """Image size scaled by how widespread it is, against "node heating": an image
    present on few nodes would otherwise pull every pod onto those few nodes.

    Go computes ``int64(float64(size) * float64(numNodes) / float64(total))``.
    """
    return int(float(size_bytes) * float(num_nodes) / float(total_num_nodes))


def _calculate_priority(sums: IndexArray, num_containers: int) -> IndexArray:
    """Clamp into ``[min, max]`` thresholds and map linearly onto 0..100 (int64, truncating)."""
    max_threshold = MAX_CONTAINER_THRESHOLD_BYTES * num_containers
    clamped = np.clip(sums, MIN_THRESHOLD_BYTES, max_threshold)
    return (MAX_NODE_SCORE * (clamped - MIN_THRESHOLD_BYTES)) // (
        max_threshold - MIN_THRESHOLD_BYTES
    )


class ImageLocality:
    """Upstream ImageLocality. No options: it is the baseline, kept exact."""

    name: ClassVar[str] = NAME
    needs_layers: ClassVar[bool] = False

    def score(
        self,
        pod: PodImages,
        inventory: ClusterInventory,
        candidates: IndexArray,
        source: LayerSource | None = None,
    ) -> NodeScores:
        total_num_nodes = inventory.node_count
        sums = np.zeros(total_num_nodes, dtype=np.int64)
        images = pod.images  # repeats are counted again, as upstream does
        for image in images:
            name = normalized_image_name(image)
            state = inventory.image_state(name)
            if state is None:
                continue
            size_bytes, num_nodes = state
            sums[inventory.image_holders(name)] += _scaled_image_score(
                size_bytes, num_nodes, total_num_nodes
            )
        present = sums[candidates]
        num_containers = max(len(images), 1)
        return NodeScores(
            nodes=candidates,
            scores=_calculate_priority(present, num_containers),
            present_bytes=present,
            total_bytes=MAX_CONTAINER_THRESHOLD_BYTES * num_containers,
        )
