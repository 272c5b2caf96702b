"""Nodes and pods for the extender benchmarks, drawn from the simulator's image corpus.

The images come from :func:`layersched_harness.sim.corpus.generate_corpus` (≈2,000 images
of 3–11 layers on shared OS/runtime bases, Zipf popularity). This module only
places them: every node holds ``images_per_node`` distinct images drawn by
popularity, reported the way kubelet does (``names = [repo@digest, repo:tag]``,
largest first), and pods of 1–3 containers draw their images the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from layersched_harness.sim.corpus import Corpus, CorpusImage, generate_corpus

#: Containers per pod, as the issue fixes them.
MIN_CONTAINERS, MAX_CONTAINERS = 1, 3


def image_digest(image: CorpusImage) -> str:
    """The manifest digest ``image`` is given (a hash of its name)."""
    return f"sha256:{hashlib.sha256(image.name.encode()).hexdigest()}"


def digest_reference(image: CorpusImage) -> str:
    """A ``repo@sha256:…`` name for ``image``, as kubelet lists first in ``names``."""
    repo = image.name.rsplit(":", 1)[0]
    return f"{repo}@{image_digest(image)}"


@dataclass(frozen=True)
class Workload:
    """A corpus plus seeded node and pod generators."""

    corpus: Corpus

    def layers_document(self) -> dict[str, list[dict[str, Any]]]:
        """LAYERS.json: the tag and the digest reference both map to the layers."""
        doc: dict[str, list[dict[str, Any]]] = {}
        for image in self.corpus.images:
            layers = [{"digest": layer.digest, "size": layer.size_bytes} for layer in image.layers]
            doc[image.name] = layers
            doc[digest_reference(image)] = layers
        return doc

    def node_list(self, count: int, images_per_node: int, seed: int = 1) -> dict[str, Any]:
        """A v1 NodeList of ``count`` nodes each holding ``images_per_node`` images."""
        rng = np.random.default_rng(seed)
        images = self.corpus.images
        items = []
        for n in range(count):
            chosen = rng.choice(
                len(images), size=images_per_node, replace=False, p=self.corpus.popularity
            )
            held = sorted((images[int(i)] for i in chosen), key=lambda im: -im.size_bytes)
            items.append(
                {
                    "metadata": {"name": f"node-{n:05d}", "labels": {"zone": f"z{n % 4}"}},
                    "status": {
                        "images": [
                            {"names": [digest_reference(im), im.name], "sizeBytes": im.size_bytes}
                            for im in held
                        ],
                        "allocatable": {"cpu": "4", "memory": "16Gi"},
                    },
                }
            )
        return {"apiVersion": "v1", "kind": "NodeList", "items": items}

    def pods(self, count: int, seed: int = 2) -> list[dict[str, Any]]:
        """``count`` v1 Pods of 1–3 containers, images drawn by popularity."""
        rng = np.random.default_rng(seed)
        images = self.corpus.images
        pods = []
        for p in range(count):
            n = int(rng.integers(MIN_CONTAINERS, MAX_CONTAINERS + 1))
            chosen = rng.choice(len(images), size=n, replace=False, p=self.corpus.popularity)
            containers = [
                {"name": f"c{j}", "image": images[int(i)].name} for j, i in enumerate(chosen)
            ]
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"pod-{p}", "namespace": "bench"},
                    "spec": {"containers": containers},
                }
            )
        return pods


def workload(image_count: int = 2000, seed: int = 7) -> Workload:
    """The benchmark workload: ≈``image_count`` images, seeded."""
    return Workload(generate_corpus(image_count, seed=seed))
