"""The synthetic image corpus: seeded, bounded, shared bases, Zipf popularity."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched.core.layers import check_digest
from layersched_harness.sim.corpus import MIB, Corpus, CorpusParams, generate_corpus, zipf_weights

#: Small enough to generate in milliseconds, large enough for stable statistics.
N_IMAGES = 500


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return generate_corpus(N_IMAGES, seed=7)


def test_same_seed_same_corpus_other_seed_differs(corpus: Corpus) -> None:
    # Digests and sizes are drawn from one seeded generator: a rerun is identical.
    again = generate_corpus(N_IMAGES, seed=7)
    assert again.images == corpus.images
    other = generate_corpus(N_IMAGES, seed=8)
    assert other.images != corpus.images


def test_every_image_has_3_to_11_valid_layers(corpus: Corpus) -> None:
    counts = {len(image.layers) for image in corpus.images}
    assert min(counts) >= 3 and max(counts) <= 11
    # The whole range is used, not just the bounds.
    assert len(counts) >= 7
    for image in corpus.images[:50]:
        for layer in image.layers:
            check_digest(layer.digest, image.name)
            assert layer.size_bytes >= corpus.params.min_layer_bytes


def test_names_are_distinct_and_resolve_through_the_core_source(corpus: Corpus) -> None:
    names = [image.name for image in corpus.images]
    assert len(set(names)) == N_IMAGES
    source = corpus.layer_source()
    assert source.resolve(names[3]) == corpus.images[3].layers


def test_bases_are_widely_shared_and_most_layers_private(corpus: Corpus) -> None:
    refs = corpus.layer_reference_counts()
    # Private layers: one per image at least, referenced once (the Docker Hub shape).
    private = sum(1 for count in refs.values() if count == 1)
    assert private / len(refs) > 0.9
    # The most popular base layer is under a large fraction of all images: with a
    # Zipf(1.0) choice over 12 bases, rank 1 gets 1/H(12) = 32 % of its picks.
    assert max(refs.values()) > 0.2 * N_IMAGES
    # Every image shares at least its bottom layer with some other image.
    shared_bottom = sum(1 for image in corpus.images if refs[image.layers[0].digest] > 1)
    assert shared_bottom > 0.95 * N_IMAGES


def test_popularity_is_zipf_with_the_configured_exponent(corpus: Corpus) -> None:
    weights = corpus.popularity
    assert weights.sum() == pytest.approx(1.0)
    assert np.all(np.diff(weights) <= 0)  # rank order
    # log w_r = c - s log r exactly: the fitted slope is -0.75.
    ranks = np.arange(1, N_IMAGES + 1)
    slope = np.polyfit(np.log(ranks), np.log(weights), 1)[0]
    assert slope == pytest.approx(-0.75)


@pytest.mark.parametrize(
    ("n", "exponent", "expected"),
    [
        # 1/1 : 1/2 normalised by 1.5.
        (2, 1.0, [2 / 3, 1 / 3]),
        # Exponent 0 is uniform.
        (4, 0.0, [0.25] * 4),
        # 1 : 2^-2 = 0.25, normalised by 1.25.
        (2, 2.0, [0.8, 0.2]),
    ],
    ids=["harmonic", "uniform", "squared"],
)
def test_zipf_weights(n: int, exponent: float, expected: list[float]) -> None:
    assert zipf_weights(n, exponent) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n_images", "params"),
    [
        (0, CorpusParams()),
        (10, CorpusParams(min_layers=5, max_layers=4)),
        # A 2-layer base plus a 4-layer runtime leaves no room under 6 layers.
        (10, CorpusParams(max_layers=6)),
    ],
    ids=["no-images", "inverted-bounds", "no-room-for-private"],
)
def test_invalid_parameters_say_what_to_fix(n_images: int, params: CorpusParams) -> None:
    with pytest.raises(InputError):
        generate_corpus(n_images, seed=0, params=params)


#: One OS layer under one runtime layer under private layers, parents chosen uniformly
#: from 1,000 each: layer 0 of an image is an OS layer, layer 1 a runtime layer, the rest
#: private, and ~600 / ~860 / ~10,000 distinct layers of each kind are sampled.
_KIND_PARAMS = CorpusParams(
    parent_zipf_exponent=0.0,
    os_bases=1000,
    os_base_layers=(1, 1),
    runtimes=1000,
    runtime_layers=(1, 1),
    runtime_fraction=1.0,
)


@pytest.mark.parametrize(
    ("positions", "median_mib", "sigma", "median_rel", "sigma_abs"),
    [
        # OS layers: log-normal median 30 MiB, sigma 0.9. ~600 samples: the sd of the
        # log of a sample median is 1.25 * 0.9 / sqrt(600) = 0.046, so +-20 % is 4 sd;
        # the sd of the log sd is 0.9 / sqrt(1200) = 0.026, +-0.1 is 4 sd.
        (slice(0, 1), 30, 0.9, 0.20, 0.10),
        # runtime layers: median 25 MiB, sigma 1.0; ~860 samples: 0.043 -> +-18 %.
        (slice(1, 2), 25, 1.0, 0.18, 0.10),
        # private layers: median 6 MiB, sigma 1.6; ~10,000 samples: 0.020 -> +-8 %,
        # sd of the log sd 0.011 -> +-0.05.
        (slice(2, None), 6, 1.6, 0.08, 0.05),
    ],
    ids=["os", "runtime", "private"],
)
def test_layer_sizes_are_lognormal_with_the_documented_medians(
    positions: slice, median_mib: float, sigma: float, median_rel: float, sigma_abs: float
) -> None:
    corpus = generate_corpus(2000, seed=5, params=_KIND_PARAMS)
    sizes = np.array(
        list(
            {
                layer.digest: layer.size_bytes
                for image in corpus.images
                for layer in image.layers[positions]
            }.values()
        ),
        dtype=np.float64,
    )
    assert np.median(sizes) / MIB == pytest.approx(median_mib, rel=median_rel)
    assert np.log(sizes).std() == pytest.approx(sigma, abs=sigma_abs)


def test_default_image_sizes_match_the_documented_shape() -> None:
    # docs/simulator.md: with 2,000 images (seed 1) the median image is 153 MiB, the
    # mean 193 MiB, p95 440 MiB: a few hundred MiB, heavy-tailed (mean > median).
    sizes = np.array([image.size_bytes for image in generate_corpus(2000, seed=1).images]) / MIB
    assert np.median(sizes) == pytest.approx(153, abs=1)
    assert sizes.mean() == pytest.approx(193, abs=1)
    assert np.percentile(sizes, 95) == pytest.approx(440, abs=1)
    # a different seed gives the same shape within a band: median 100..250 MiB
    other = np.array([image.size_bytes for image in generate_corpus(2000, seed=2).images]) / MIB
    assert 100 < np.median(other) < 250 and other.mean() > np.median(other)


def test_default_layer_sharing_matches_the_documented_figures() -> None:
    # docs/simulator.md: with 2,000 images (seed 1), 8,777 distinct layers of which only
    # 166 are shared, yet 61 % of an average image's bytes sit in shared layers; 187 GiB
    # of distinct layers in all (the seeded corpus is the same on every run)
    images = generate_corpus(2000, seed=1).images
    refs = Counter(layer.digest for image in images for layer in image.layers)
    sizes = {layer.digest: layer.size_bytes for image in images for layer in image.layers}
    shared = {digest for digest, count in refs.items() if count > 1}
    in_shared = [
        sum(layer.size_bytes for layer in image.layers if layer.digest in shared) / image.size_bytes
        for image in images
    ]
    assert (len(refs), len(shared)) == (8_777, 166)
    assert np.mean(in_shared) == pytest.approx(0.61, abs=0.005)
    assert sum(sizes.values()) / 2**30 == pytest.approx(187, abs=0.5)
