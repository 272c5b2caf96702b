"""The synthetic image corpus: seeded, bounded, shared bases, Zipf popularity."""

from __future__ import annotations

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched.core.layers import check_digest
from layersched.sim.corpus import Corpus, CorpusParams, generate_corpus, zipf_weights

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
