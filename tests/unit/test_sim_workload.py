"""Demand generator: Poisson arrivals, Zipf popularity, bounded durations, seeded."""

from __future__ import annotations

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched_harness.sim.corpus import Corpus, CorpusParams, generate_corpus
from layersched_harness.sim.workload import WorkloadParams, generate_workload

#: 100 req/s over 200 s: 20,000 arrivals, enough for tight statistical bounds.
PARAMS = WorkloadParams(rate_per_s=100.0, window_s=200.0)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    # Exponent 1.0 makes the rank-frequency slope easy to check.
    return generate_corpus(300, seed=3, params=CorpusParams(popularity_exponent=1.0))


def test_seeded_and_deterministic(corpus: Corpus) -> None:
    a = generate_workload(corpus, PARAMS, seed=11)
    b = generate_workload(corpus, PARAMS, seed=11)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.image, b.image)
    c = generate_workload(corpus, PARAMS, seed=12)
    assert not np.array_equal(a.arrival_s[:100], c.arrival_s[:100])


def test_poisson_arrivals(corpus: Corpus) -> None:
    w = generate_workload(corpus, PARAMS, seed=1)
    gaps = np.diff(w.arrival_s)
    # Count ~ Poisson(20,000): sd = 141, so +-3 % is over 4 sd.
    assert len(w) == pytest.approx(20_000, rel=0.03)
    # Exponential gaps: mean 1/rate = 10 ms; coefficient of variation 1.
    assert gaps.mean() == pytest.approx(0.01, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)
    assert np.all(gaps >= 0) and w.arrival_s[-1] < PARAMS.window_s


def test_zipf_rank_frequency_slope(corpus: Corpus) -> None:
    w = generate_workload(corpus, PARAMS, seed=2)
    counts = np.bincount(w.image, minlength=len(corpus.images))
    # Fit log(count) against log(rank) on the well-sampled head (ranks 1..50):
    # Zipf(1.0) gives a slope of -1.
    ranks = np.arange(1, 51)
    slope = np.polyfit(np.log(ranks), np.log(counts[:50]), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.1)
    # Rank 1 gets 1 / H(300) = 15.9 % of all requests.
    assert counts[0] / len(w) == pytest.approx(corpus.popularity[0], abs=0.01)


def test_durations_uniform_within_bounds(corpus: Corpus) -> None:
    w = generate_workload(corpus, PARAMS, seed=4)
    assert w.pod_duration_s.min() >= 1.0 and w.pod_duration_s.max() <= 10.0
    # Uniform 1..10 s: mean 5.5 s.
    assert w.pod_duration_s.mean() == pytest.approx(5.5, rel=0.02)


@pytest.mark.parametrize(
    "params",
    [
        WorkloadParams(rate_per_s=0.0),
        WorkloadParams(window_s=-1.0),
        WorkloadParams(min_pod_duration_s=5.0, max_pod_duration_s=1.0),
    ],
    ids=["zero-rate", "negative-window", "inverted-durations"],
)
def test_invalid_parameters(corpus: Corpus, params: WorkloadParams) -> None:
    with pytest.raises(InputError):
        generate_workload(corpus, params, seed=0)
