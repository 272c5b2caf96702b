"""Demand: Poisson pod arrivals, Zipf-popular images, uniformly distributed pod durations.

Defaults follow the depsched simulator behind HotEdge '20 (CONTEXT §1): 125
requests/s, one image per pod drawn by the corpus's Zipf popularity, and pods
that run 1..10 s once started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError
from layersched_harness.sim.corpus import Corpus

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Extra arrivals drawn beyond the expected count so one draw nearly always covers
#: the window: the Poisson count's standard deviation is sqrt(mean); 6 of them
#: (plus a constant for tiny windows) leaves a top-up loop for the rare miss.
_ARRIVAL_SLACK_SIGMAS = 6.0
_ARRIVAL_SLACK_MIN = 16


@dataclass(frozen=True, slots=True)
class WorkloadParams:
    """How pods arrive and how long they run."""

    #: Mean arrival rate of pods (requests per second), Poisson.
    rate_per_s: float = 125.0
    #: Length of the arrival window in simulated seconds.
    window_s: float = 300.0
    #: Shortest run time of a pod once started (depsched: 1 s).
    min_pod_duration_s: float = 1.0
    #: Longest run time of a pod once started (depsched: 10 s).
    max_pod_duration_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Workload:
    """Pod requests in arrival order: when, which corpus image, how long it runs, and
    which controller owns it, if any (a Deployment's replicas share an owner)."""

    arrival_s: FloatArray
    image: IntArray
    pod_duration_s: FloatArray
    params: WorkloadParams
    #: Each request's owner (any id; negative: none); None: no request has one.
    owner: IntArray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)

    def owner_of(self, request: int) -> int | None:
        """The owner of request ``request``, or None."""
        if self.owner is None or self.owner[request] < 0:
            return None
        return int(self.owner[request])


def _arrivals(rng: np.random.Generator, rate_per_s: float, window_s: float) -> FloatArray:
    expected = rate_per_s * window_s
    draw = int(expected + _ARRIVAL_SLACK_SIGMAS * math.sqrt(expected) + _ARRIVAL_SLACK_MIN)
    times = np.cumsum(rng.exponential(1.0 / rate_per_s, size=draw))
    while times[-1] < window_s:  # rare: top up
        more = np.cumsum(rng.exponential(1.0 / rate_per_s, size=draw)) + times[-1]
        times = np.concatenate([times, more])
    inside: FloatArray = times[times < window_s]
    return inside


def generate_workload(corpus: Corpus, params: WorkloadParams, seed: int) -> Workload:
    """Seeded pod requests over ``params.window_s`` seconds."""
    if params.rate_per_s <= 0 or params.window_s <= 0:
        raise InputError(
            f"workload rate {params.rate_per_s}/s over {params.window_s} s: both must be positive"
        )
    if not 0 <= params.min_pod_duration_s <= params.max_pod_duration_s:
        raise InputError(
            f"pod durations {params.min_pod_duration_s}..{params.max_pod_duration_s} s "
            "must satisfy 0 <= min <= max"
        )
    rng = np.random.default_rng(seed)
    arrival_s = _arrivals(rng, params.rate_per_s, params.window_s)
    n = len(arrival_s)
    image = rng.choice(len(corpus.images), size=n, p=corpus.popularity).astype(np.int64)
    duration = rng.uniform(params.min_pod_duration_s, params.max_pod_duration_s, size=n)
    return Workload(arrival_s, image, duration, params)
