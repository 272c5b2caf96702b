"""``image-locality``: a port of upstream kube-scheduler's ImageLocality plugin, per minor.

A node scores for the pod's images it already holds *by name* (after the
``:latest`` rule), each image's size scaled by the fraction of nodes that hold
it. Layers shared under other names count for nothing: that is the baseline
layersched improves on.

Upstream changed which images count, so the port takes the Kubernetes minor it
reproduces (:data:`KubernetesMinor`), 1.20 through 1.37:

* 1.20 .. 1.29: ``pod.Spec.Containers`` only; the upper threshold is 1000 MiB per
  container (``image_locality.go`` in the 1.20 tree, measured against kube-scheduler
  v1.20.2 by ``tests/integration/test_image_locality_differential.py``).
* 1.30 and later: init containers count too, in the sum and in the upper threshold
  (kubernetes#123366).
* 1.36 and later: image volumes (``pod.Spec.Volumes[*].Image.Reference``, KEP-4639)
  count in the sum, after the containers, but not in the upper threshold
  (kubernetes#130231; the gap is kubernetes#138952). v1.36.3's compiled plugin does so.
* 1.37: image volumes raise the upper threshold too, one per image volume
  (kubernetes#138951), as v1.37.2's compiled plugin does.

Nothing is de-duplicated: an image named twice counts twice, in every minor. The
spread factor's arithmetic is the same in every release that has one:
``int64(float64(size) * (float64(numNodes) / float64(total)))``, the quotient first.
Minors before 1.20 are refused: they are unchecked, and some had a fixed 1000 MiB upper
threshold (the 1.17-era plugin) or 0..10 buckets (the older priority function). Minors
after 1.37 are refused too: what they count is not known yet.

Upstream's own unit-test tables (1.20's, and the newest reachable) hold the port to
account: ``tests/unit/upstream/`` and ``tests/unit/test_image_locality_upstream.py``. So
does upstream's compiled code: a live kube-scheduler
(``tests/integration/test_image_locality_differential.py``), and the ``imagelocality``
plugin and scheduler cache of v1.35.4, v1.36.3 and v1.37.2 in process, with no API server
(``harness/imagelocality-reference``, ``tests/integration/test_image_locality_minors.py``:
every score of 1,289 generated pods equal in each minor).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from layersched.core.indexstorage import IndexArray
from layersched.core.layerindex import LayerIndexView
from layersched.core.layers import Layer
from layersched.core.pod import PodImages
from layersched.core.reference import normalized_image_name
from layersched.core.strategies.args import (
    DEFAULT_KUBERNETES_MINOR,
    NEWEST_KUBERNETES_MINOR,
    OLDEST_KUBERNETES_MINOR,
    ImageLocalityArgs,
    KubernetesMinor,
    format_kubernetes_minor,
    parse_kubernetes_minor,
)
from layersched.core.strategies.base import (
    MAX_NODE_SCORE,
    NodeScores,
    PerNodeStrategy,
)

NAME = ImageLocalityArgs.strategy

#: From this minor init containers count (kubernetes#123366).
INIT_CONTAINERS_COUNT_SINCE: KubernetesMinor = (1, 30)
#: From this minor image volumes count in the sum (kubernetes#130231).
IMAGE_VOLUMES_COUNT_SINCE: KubernetesMinor = (1, 36)
#: From this minor image volumes count in the upper threshold too (kubernetes#138951).
IMAGE_VOLUMES_RAISE_THRESHOLD_SINCE: KubernetesMinor = (1, 37)

__all__ = [
    "DEFAULT_KUBERNETES_MINOR",
    "IMAGE_VOLUMES_COUNT_SINCE",
    "IMAGE_VOLUMES_RAISE_THRESHOLD_SINCE",
    "INIT_CONTAINERS_COUNT_SINCE",
    "NAME",
    "NEWEST_KUBERNETES_MINOR",
    "OLDEST_KUBERNETES_MINOR",
    "ImageLocality",
    "KubernetesMinor",
    "format_kubernetes_minor",
    "parse_kubernetes_minor",
]

MB = 1024 * 1024
#: Below this sum a node scores 0: tiny images are not worth steering for.
MIN_THRESHOLD_BYTES = 23 * MB
#: Upper bound per container; the upper threshold is this times the container count.
MAX_CONTAINER_THRESHOLD_BYTES = 1000 * MB


def _scaled_image_score(size_bytes: int, num_nodes: int, total_num_nodes: int) -> int:
    """Image size scaled by how widespread it is, against "node heating": an image
    present on few nodes would otherwise pull every pod onto those few nodes.

    Go computes ``spread := float64(numNodes) / float64(total)`` first, then
    ``int64(float64(size) * spread)``. Python floats are IEEE doubles like Go's
    float64, and the order matters: ``size * n / t`` rounds differently in rare cases
    (238683863 * 3/11 is 65095598 this way, 65095599 the other).
    """
    spread = float(num_nodes) / float(total_num_nodes)
    return int(float(size_bytes) * spread)


def _calculate_priority(sums: IndexArray, num_containers: int) -> IndexArray:
    """Clamp into ``[min, max]`` thresholds and map linearly onto 0..100 (int64, truncating)."""
    max_threshold = MAX_CONTAINER_THRESHOLD_BYTES * num_containers
    clamped = np.clip(sums, MIN_THRESHOLD_BYTES, max_threshold)
    return (MAX_NODE_SCORE * (clamped - MIN_THRESHOLD_BYTES)) // (
        max_threshold - MIN_THRESHOLD_BYTES
    )


class ImageLocality(PerNodeStrategy):
    """Upstream ImageLocality as released in one Kubernetes minor; the baseline.

    Which images count depends on ``args.kubernetes_minor`` (module docstring); it
    defaults to the newest released minor (1.36).
    """

    name: ClassVar[str] = NAME
    needs_layers: ClassVar[bool] = False

    def __init__(self, args: ImageLocalityArgs | None = None) -> None:
        self.args = args or ImageLocalityArgs()
        self.args.validate()

    @property
    def kubernetes_minor(self) -> KubernetesMinor:
        """The Kubernetes release whose ImageLocality this instance reproduces."""
        return self.args.kubernetes_minor

    @property
    def counts_init_containers(self) -> bool:
        """Whether init containers' images count (1.30 and later)."""
        return self.kubernetes_minor >= INIT_CONTAINERS_COUNT_SINCE

    @property
    def counts_image_volumes(self) -> bool:
        """Whether image volumes' images count in the sum (1.36 and later)."""
        return self.kubernetes_minor >= IMAGE_VOLUMES_COUNT_SINCE

    def images(self, pod: PodImages) -> tuple[str, ...]:
        """The images this minor sums, in upstream order (init containers, containers,
        image volumes); repeats kept, as upstream does."""
        images = pod.images if self.counts_init_containers else pod.containers
        return images + pod.image_volumes if self.counts_image_volumes else images

    def threshold_count(self, pod: PodImages) -> int:
        """How many 1000 MiB the upper threshold spans: the containers this minor counts,
        plus the image volumes from 1.37 (1.36 sums their images but leaves them out
        here, kubernetes#138952)."""
        count = len(pod.images if self.counts_init_containers else pod.containers)
        if self.kubernetes_minor >= IMAGE_VOLUMES_RAISE_THRESHOLD_SINCE:
            count += len(pod.image_volumes)
        return count

    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        total_num_nodes = index.node_count
        sums = np.zeros(total_num_nodes, dtype=np.int64)
        images = self.images(pod)
        # a v1 Pod has at least one container; the guard only keeps the division defined
        num_containers = max(self.threshold_count(pod), 1)
        max_threshold = MAX_CONTAINER_THRESHOLD_BYTES * num_containers
        for image in images:
            name = normalized_image_name(image)
            state = index.image_state(name)
            if state is None:
                continue
            size_bytes, num_nodes = state
            # each term and each running sum clamped at the upper threshold: the final
            # clamp gives the same score (terms are non-negative), and no sum can wrap
            term = min(_scaled_image_score(size_bytes, num_nodes, total_num_nodes), max_threshold)
            holders = index.image_holders(name)
            sums[holders] = np.minimum(sums[holders] + term, max_threshold)
        present = sums[candidates]
        return NodeScores(
            nodes=candidates,
            scores=_calculate_priority(present, num_containers),
            present_bytes=present,
            total_bytes=MAX_CONTAINER_THRESHOLD_BYTES * num_containers,
        )
