"""A seeded synthetic image corpus: images stacked on shared base layers, Zipf popularity.

Real registries (Docker Hub, as characterised by Zhao et al., CLUSTER '19, and the
IBM registry traces of Anwar et al., FAST '18) show the same shape, which this
generator reproduces rather than any exact number:

* a few **OS bases** (think ``debian``, ``alpine``, ``ubuntu``) of one or two
  layers, shared by a large fraction of all images;
* a larger set of **runtimes** (``python:3``, ``node``, ``openjdk``…) that add
  one to four layers on top of an OS base and are themselves shared;
* **private** application layers, most of them small, a few very large
  (a log-normal size distribution with a heavy tail), referenced by one image
  only - so most *layers* are unshared while most *bytes* of a popular image
  sit in shared bases;
* image **popularity** that is heavily skewed: a Zipf law over ranks, with the
  exponent 0.75 the depsched simulator (HotEdge '20) uses.

Images have ``min_layers..max_layers`` layers (3..11 by default). Which base or
runtime an image builds on is itself Zipf-distributed, so a handful of bases
dominate, as on Docker Hub. Everything is drawn from one
:class:`numpy.random.Generator` seeded by ``seed``: the same seed gives the
same corpus, digests included.

>>> corpus = generate_corpus(2000, seed=1)
>>> name, layers = corpus.images[0]          # the most popular image
>>> weights = corpus.popularity              # sums to 1, rank order
>>> source = corpus.layer_source()           # a core StaticLayerSource
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.reference import ImageName

MIB = 1024 * 1024

#: Prefix of every generated image name; the tag is explicit so upstream's
#: ``:latest`` normalisation leaves names unchanged.
IMAGE_NAME_PREFIX = "sim.layersched.io/app"


@dataclass(frozen=True, slots=True)
class CorpusParams:
    """Shape of the generated corpus; every size is compressed bytes.

    Defaults approximate the published Docker Hub / registry-trace shapes
    (see the module docstring and ``docs/simulator.md``): bases of tens of MiB,
    runtime layers of tens of MiB, small-but-heavy-tailed private layers, so a
    typical image weighs a few hundred MiB.
    """

    #: Number of distinct OS base images (each a chain of 1..2 layers).
    os_bases: int = 12
    #: Layers per OS base, inclusive range.
    os_base_layers: tuple[int, int] = (1, 2)
    #: Median size of an OS base layer (log-normal).
    os_layer_median_bytes: int = 30 * MIB
    #: Log-normal sigma of OS base layer sizes (alpine vs. ubuntu: one order of magnitude).
    os_layer_sigma: float = 0.9
    #: Number of distinct runtime images built on the OS bases.
    runtimes: int = 60
    #: Layers a runtime adds on its OS base, inclusive range.
    runtime_layers: tuple[int, int] = (1, 4)
    #: Median size of a runtime layer.
    runtime_layer_median_bytes: int = 25 * MIB
    #: Log-normal sigma of runtime layer sizes.
    runtime_layer_sigma: float = 1.0
    #: Fraction of images built on a runtime rather than directly on an OS base.
    runtime_fraction: float = 0.75
    #: Zipf exponent of how often a base/runtime is chosen as a parent (a few dominate).
    parent_zipf_exponent: float = 1.0
    #: Median size of a private (application) layer.
    private_layer_median_bytes: int = 6 * MIB
    #: Log-normal sigma of private layer sizes: most are small, a few are huge.
    private_layer_sigma: float = 1.6
    #: Fewest layers an image has.
    min_layers: int = 3
    #: Most layers an image has.
    max_layers: int = 11
    #: Smallest layer (an empty-ish ``COPY`` still costs a blob).
    min_layer_bytes: int = 1024
    #: Largest layer: the tail is capped so one image cannot fill a node's store.
    max_layer_bytes: int = 2048 * MIB
    #: Zipf exponent of image popularity over ranks (depsched uses 0.75).
    popularity_exponent: float = 0.75


class CorpusImage(NamedTuple):
    """One image: its (normalised, tagged) name and its ordered layers, base first."""

    name: ImageName
    layers: tuple[Layer, ...]

    @property
    def size_bytes(self) -> int:
        """Total compressed size of the image's layers."""
        return sum(layer.size_bytes for layer in self.layers)


@dataclass(frozen=True, slots=True)
class Corpus:
    """Images in popularity-rank order (``images[0]`` is rank 1) and their weights."""

    images: tuple[CorpusImage, ...]
    #: Request probability of each image, rank order, sums to 1.
    popularity: npt.NDArray[np.float64]
    params: CorpusParams
    seed: int

    def layers_by_image(self) -> dict[ImageName, tuple[Layer, ...]]:
        """``{image name: layers}``, e.g. to write a LAYERS.json for ``layersched score``."""
        return {image.name: image.layers for image in self.images}

    def layer_source(self) -> StaticLayerSource:
        """The corpus as the core's offline layer source."""
        return StaticLayerSource(self.layers_by_image())

    def distinct_layers(self) -> dict[str, Layer]:
        """Every distinct layer, by digest."""
        return {layer.digest: layer for image in self.images for layer in image.layers}

    def layer_reference_counts(self) -> dict[str, int]:
        """How many images reference each layer digest (1 = private)."""
        counts: dict[str, int] = {}
        for image in self.images:
            for layer in image.layers:
                counts[layer.digest] = counts.get(layer.digest, 0) + 1
        return counts


def zipf_weights(n: int, exponent: float) -> npt.NDArray[np.float64]:
    """Normalised Zipf weights ``w_r ∝ r^-exponent`` for ranks ``1..n``."""
    if n < 1:
        raise InputError(f"a Zipf distribution needs at least one rank, got n={n}")
    ranks = np.arange(1, n + 1, dtype=np.float64)
    weights = ranks**-exponent
    normalised: npt.NDArray[np.float64] = weights / weights.sum()
    return normalised


def _digest(seed: int, kind: str, index: int) -> str:
    """A deterministic, unique sha256 digest for a generated layer."""
    text = f"layersched-sim/{seed}/{kind}/{index}".encode()
    return "sha256:" + hashlib.sha256(text).hexdigest()


class _LayerMaker:
    """Draws log-normal layer sizes and hands out unique digests."""

    def __init__(self, rng: np.random.Generator, params: CorpusParams, seed: int) -> None:
        self._rng = rng
        self._params = params
        self._seed = seed
        self._count = 0

    def make(self, kind: str, median_bytes: int, sigma: float, n: int) -> tuple[Layer, ...]:
        sizes = self._rng.lognormal(np.log(median_bytes), sigma, size=n)
        clipped = np.clip(sizes, self._params.min_layer_bytes, self._params.max_layer_bytes)
        layers = []
        for size in clipped:
            layers.append(Layer(_digest(self._seed, kind, self._count), int(size)))
            self._count += 1
        return tuple(layers)


def _check(params: CorpusParams, n_images: int) -> None:
    if n_images < 1:
        raise InputError(f"n_images must be at least 1, got {n_images}")
    if params.os_bases < 1 or params.runtimes < 0:
        raise InputError("a corpus needs at least one OS base and a non-negative runtime count")
    if not 1 <= params.min_layers <= params.max_layers:
        raise InputError(
            f"layer bounds {params.min_layers}..{params.max_layers} are invalid: "
            "need 1 <= min_layers <= max_layers"
        )
    longest_parent = params.os_base_layers[1] + params.runtime_layers[1]
    if longest_parent >= params.max_layers:
        raise InputError(
            f"an OS base plus a runtime can have {longest_parent} layers, which leaves no room "
            f"for a private layer under max_layers={params.max_layers}: lower the parent ranges"
        )
    if not 0.0 <= params.runtime_fraction <= 1.0:
        raise InputError(f"runtime_fraction {params.runtime_fraction} must be within 0..1")


def generate_corpus(
    n_images: int = 2000, seed: int = 0, params: CorpusParams | None = None
) -> Corpus:
    """Generate ``n_images`` distinct images (see the module docstring), seeded."""
    params = params or CorpusParams()
    _check(params, n_images)
    rng = np.random.default_rng(seed)
    maker = _LayerMaker(rng, params, seed)

    lo, hi = params.os_base_layers
    os_bases = [
        maker.make(
            "os", params.os_layer_median_bytes, params.os_layer_sigma, int(rng.integers(lo, hi + 1))
        )
        for _ in range(params.os_bases)
    ]
    os_choice = zipf_weights(params.os_bases, params.parent_zipf_exponent)
    lo, hi = params.runtime_layers
    runtimes = []
    for _ in range(params.runtimes):
        base = os_bases[int(rng.choice(params.os_bases, p=os_choice))]
        added = maker.make(
            "runtime",
            params.runtime_layer_median_bytes,
            params.runtime_layer_sigma,
            int(rng.integers(lo, hi + 1)),
        )
        runtimes.append(base + added)
    runtime_choice = zipf_weights(max(params.runtimes, 1), params.parent_zipf_exponent)

    images = []
    for rank in range(1, n_images + 1):
        if runtimes and rng.random() < params.runtime_fraction:
            parent = runtimes[int(rng.choice(params.runtimes, p=runtime_choice))]
        else:
            parent = os_bases[int(rng.choice(params.os_bases, p=os_choice))]
        target = int(rng.integers(params.min_layers, params.max_layers + 1))
        private = maker.make(
            "private",
            params.private_layer_median_bytes,
            params.private_layer_sigma,
            max(1, target - len(parent)),
        )
        images.append(
            CorpusImage(ImageName(f"{IMAGE_NAME_PREFIX}-{rank:05d}:v1"), parent + private)
        )

    return Corpus(
        images=tuple(images),
        popularity=zipf_weights(n_images, params.popularity_exponent),
        params=params,
        seed=seed,
    )
