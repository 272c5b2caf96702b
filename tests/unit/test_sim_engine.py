"""The simulation engine: pull model, queueing, eviction, and a small end-to-end run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched.core.layers import Layer
from layersched_harness.sim.corpus import (
    Corpus,
    CorpusImage,
    CorpusParams,
    generate_corpus,
    zipf_weights,
)
from layersched_harness.sim.engine import (
    ClusterParams,
    RandomPlacement,
    RunResult,
    node_bandwidths,
    simulate,
)
from layersched_harness.sim.runner import run_setting
from layersched_harness.sim.settings import SMOKE, build_strategy
from layersched_harness.sim.workload import Workload, WorkloadParams, generate_workload

MB = 1_000_000
#: 80 Mbit/s = 10 MB/s: a 10 MB layer takes exactly 1 s alone.
LINK_BITS_PER_S = 80e6
OVERHEAD_S = 0.5


def _layer(i: int, size: int = 10 * MB) -> Layer:
    return Layer("sha256:" + f"{i:064x}", size)


def _corpus(*images: tuple[Layer, ...]) -> Corpus:
    named = tuple(CorpusImage(f"img{i}:1", layers) for i, layers in enumerate(images))
    return Corpus(named, zipf_weights(len(named), 0.0), CorpusParams(), seed=0)


def _run(
    corpus: Corpus,
    arrivals: list[tuple[float, int, float]],
    strategy: str = "layer-locality",
    **cluster: object,
) -> RunResult:
    """One node unless told otherwise; arrivals are (time s, image, run time s)."""
    workload = Workload(
        np.array([a for a, _, _ in arrivals], dtype=np.float64),
        np.array([i for _, i, _ in arrivals], dtype=np.int64),
        np.array([d for _, _, d in arrivals], dtype=np.float64),
        WorkloadParams(),
    )
    params = ClusterParams(
        **{
            "nodes": 1,
            "containers_per_node": 4,
            "bandwidth_bits_per_s": (LINK_BITS_PER_S, LINK_BITS_PER_S),
            "start_overhead_s": OVERHEAD_S,
            **cluster,
        }  # type: ignore[arg-type]
    )
    return simulate(corpus, workload, params, build_strategy(strategy), seed=0)


@pytest.mark.parametrize(
    ("images", "arrivals", "expected_startup_s", "expected_bytes"),
    [
        (
            # One 10 MB pull alone on a 10 MB/s link: 1 s + 0.5 s overhead.
            [(_layer(1),)],
            [(0.0, 0, 1.0)],
            [1.5],
            10 * MB,
        ),
        (
            # Two 10 MB pulls together share the link: each gets 5 MB/s -> both 2 s + 0.5.
            [(_layer(1),), (_layer(2),)],
            [(0.0, 0, 1.0), (0.0, 1, 1.0)],
            [2.5, 2.5],
            20 * MB,
        ),
        (
            # A alone 0.5 s (5 MB), then shared: A's last 5 MB at 5 MB/s ends at 1.5 s;
            # B has 5 MB by then and finishes alone at 2.0 s.
            # A = 1.5 + 0.5 = 2.0 s; B = (2.0 - 0.5) + 0.5 = 2.0 s.
            [(_layer(1),), (_layer(2),)],
            [(0.0, 0, 1.0), (0.5, 1, 1.0)],
            [2.0, 2.0],
            20 * MB,
        ),
        (
            # Same image 0.5 s later: B waits for A's in-flight blob, nothing pulled twice:
            # both ready at 1.0 s -> A 1.0 + 0.5, B 0.5 + 0.5.
            [(_layer(1),)],
            [(0.0, 0, 1.0), (0.5, 0, 1.0)],
            [1.5, 1.0],
            10 * MB,
        ),
        (
            # B shares A's 10 MB base and adds 10 MB: pulls only its own layer (20 MB in
            # total), and must also wait for the base A is fetching. Shared link: both
            # jobs end at 2.0 s -> A 2.0 + 0.5, B 2.0 + 0.5.
            [(_layer(1),), (_layer(1), _layer(2))],
            [(0.0, 0, 1.0), (0.0, 1, 1.0)],
            [2.5, 2.5],
            20 * MB,
        ),
        (
            # Cached image: 0 s pull -> only the overhead. The first pod pulls 1 s.
            [(_layer(1),)],
            [(0.0, 0, 1.0), (10.0, 0, 1.0)],
            [1.5, 0.5],
            10 * MB,
        ),
    ],
    ids=[
        "one-pull",
        "two-concurrent-pulls-twice-as-long",
        "staggered",
        "in-flight-blob",
        "shared-base",
        "cached",
    ],
)
def test_pull_model(
    images: list[tuple[Layer, ...]],
    arrivals: list[tuple[float, int, float]],
    expected_startup_s: list[float],
    expected_bytes: int,
) -> None:
    result = _run(_corpus(*images), arrivals)
    assert result.startup_s.tolist() == pytest.approx(expected_startup_s)
    # the pull wait is the same startup without the fixed overhead
    assert result.wait_s.tolist() == pytest.approx([t - OVERHEAD_S for t in expected_startup_s])
    assert result.bytes_pulled == expected_bytes


def test_a_pod_without_a_free_slot_queues() -> None:
    # One slot. A pulls 1 s, starts at 1.5 s, runs 2 s: exits at 3.5 s. B (same image,
    # cached by then) starts at 3.5 + 0.5 = 4.0 s: startup includes the queue wait.
    result = _run(_corpus((_layer(1),)), [(0.0, 0, 2.0), (0.0, 0, 2.0)], containers_per_node=1)
    assert result.startup_s.tolist() == pytest.approx([1.5, 4.0])
    assert result.queued_pods == 1


@pytest.mark.parametrize(
    ("eviction", "expected_bytes", "expected_evictions"),
    [
        # img0 used at 0, 10, 20; img1 at 30; img2 at 40 overflows 25 MB:
        # LRU drops img0 (last used 20 s) -> img0 at 50 is pulled again (and drops img1).
        ("lru", 40 * MB, 2),
        # LFU drops img1 (used once) -> img0 at 50 is still there.
        ("lfu", 30 * MB, 1),
    ],
    ids=["lru", "lfu"],
)
def test_eviction_policies(eviction: str, expected_bytes: int, expected_evictions: int) -> None:
    corpus = _corpus((_layer(0),), (_layer(1),), (_layer(2),))
    arrivals = [(0.0, 0, 1.0), (10.0, 0, 1.0), (20.0, 0, 1.0), (30.0, 1, 1.0), (40.0, 2, 1.0)]
    arrivals.append((50.0, 0, 1.0))
    result = _run(
        corpus,
        arrivals,
        eviction=eviction,
        store_capacity_bytes=25 * MB,
        gc_target_fraction=1.0,
    )
    assert result.bytes_pulled == expected_bytes
    assert result.evicted_images == expected_evictions
    assert result.overcommitted_pulls == 0


def test_shared_layer_survives_eviction_of_one_image() -> None:
    # img0 and img1 share a 10 MB base; each adds 5 MB: 20 MB stored. img2 (10 MB) would
    # make 30 > 26 MB: free down to 26 - 10 = 16 MB -> evicting img0 (LRU) frees only its
    # 5 MB top (the base stays for img1): 15 MB. img1 later pulls nothing:
    # 10 + 5 + 5 + 10 = 30 MB in total.
    base = _layer(9)
    corpus = _corpus((base, _layer(0, 5 * MB)), (base, _layer(1, 5 * MB)), (_layer(2),))
    arrivals = [(0.0, 0, 1.0), (10.0, 1, 1.0), (20.0, 2, 1.0), (30.0, 1, 1.0)]
    result = _run(
        corpus, arrivals, eviction="lru", store_capacity_bytes=26 * MB, gc_target_fraction=1.0
    )
    assert result.bytes_pulled == 30 * MB
    assert result.evicted_images == 1
    assert result.startup_s[-1] == pytest.approx(OVERHEAD_S)


def test_layer_aware_placement_uses_the_inventory() -> None:
    # Two nodes. P1 (img0 = L1+L2) lands somewhere; P2 (img1 = L1+L3) must follow it under
    # layer-locality (it holds L1), pulling only L3: 10 + 10 + 10 = 30 MB.
    corpus = _corpus((_layer(1), _layer(2)), (_layer(1), _layer(3)))
    arrivals = [(0.0, 0, 100.0), (10.0, 1, 1.0)]
    result = _run(corpus, arrivals, nodes=2)
    assert result.bytes_pulled == 30 * MB


@pytest.fixture(scope="module")
def smoke() -> dict[str, object]:
    return run_setting(SMOKE, seed=1)


def test_smoke_random_pulls_the_most_and_layer_aware_beats_image_level(
    smoke: dict[str, object],
) -> None:
    pulled: dict[str, int] = smoke["bytes_pulled"]  # type: ignore[assignment]
    others = {k: v for k, v in pulled.items() if k != "random"}
    assert pulled["random"] > max(others.values())
    mean: dict[str, float] = smoke["mean_startup_s"]  # type: ignore[assignment]
    assert mean["layer-locality"] < mean["image-locality"] < mean["random"]


def test_smoke_pull_time_beats_layer_locality_on_heterogeneous_links(
    smoke: dict[str, object],
) -> None:
    # SMOKE's links span 100 Mbit/s..10 Gbit/s: sending misses to fast links beats
    # sending them to slow nodes that hold a shared base (seed 1: 1.14 s vs 1.60 s).
    mean: dict[str, float] = smoke["mean_startup_s"]  # type: ignore[assignment]
    assert mean["pull-time"] < mean["layer-locality"]
    pull: dict[str, float] = smoke["mean_pull_s"]  # type: ignore[assignment]
    assert pull["pull-time"] < pull["layer-locality"]


def test_smoke_pull_wait_is_startup_minus_the_overhead(smoke: dict[str, object]) -> None:
    # No fixed overhead in the pull-wait metric: mean_pull_s = mean_startup_s - 1 s
    # (both rounded to 4 digits), and the speedups of both are computed from them.
    mean: dict[str, float] = smoke["mean_startup_s"]  # type: ignore[assignment]
    pull: dict[str, float] = smoke["mean_pull_s"]  # type: ignore[assignment]
    overhead_s = SMOKE.cluster.start_overhead_s
    for label in mean:
        assert pull[label] == pytest.approx(mean[label] - overhead_s, abs=2e-4)
    speedup: dict[str, float] = smoke["pull_speedup_vs_image-locality"]  # type: ignore[assignment]
    expected = pull["image-locality"] / pull["layer-locality"]
    assert speedup["layer-locality"] == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize(
    "label",
    ["layer-locality", "pull-time"],
    ids=["layer-locality", "pull-time"],
)
def test_locality_results_are_deterministic(label: str) -> None:
    # Everything but wall-clock measurements (wall_s, decision_time_us) repeats exactly
    # for a seeded run, also for the strategies that read the inventory.
    setting = replace(SMOKE, strategies=(label,))
    a = run_setting(setting, seed=4)
    b = run_setting(setting, seed=4)
    timing = {"wall_s", "decision_time_us"}
    assert {k: v for k, v in a.items() if k not in timing} == {
        k: v for k, v in b.items() if k not in timing
    }


@pytest.mark.parametrize(
    ("low", "high"),
    [
        # two orders of magnitude: log10 uniform over [8, 10]
        (1e8, 1e10),
        # three: log10 uniform over [6, 9]
        (1e6, 1e9),
    ],
    ids=["two-decades", "three-decades"],
)
def test_node_bandwidths_are_log_uniform(low: float, high: float) -> None:
    # 20,000 nodes: the quartiles of log10(bandwidth) sit at a quarter, half and three
    # quarters of the log range (sd of an empirical quartile: 0.006 decades for a
    # 2-decade range, 0.009 for 3), so each decade holds the same share of nodes, and
    # the mean of log10 is the middle of the range (sd 0.004 / 0.006 decades): the
    # geometric mean is sqrt(low * high).
    draws = node_bandwidths(ClusterParams(nodes=20_000, bandwidth_bits_per_s=(low, high)), seed=9)
    assert draws.min() >= low and draws.max() <= high
    logs = np.log10(draws)
    lo, hi = np.log10(low), np.log10(high)
    quartiles = np.quantile(logs, [0.25, 0.5, 0.75])
    assert quartiles == pytest.approx([lo + (hi - lo) * q for q in (0.25, 0.5, 0.75)], abs=0.03)
    assert logs.mean() == pytest.approx((lo + hi) / 2, abs=0.03)


def test_node_bandwidths_homogeneous_seeded_and_checked() -> None:
    # equal ends: every node gets exactly that link; same seed, same draws; bad range: error
    same = node_bandwidths(ClusterParams(nodes=5, bandwidth_bits_per_s=(1e9, 1e9)), seed=1)
    assert same.tolist() == pytest.approx([1e9] * 5)
    params = ClusterParams(nodes=50, bandwidth_bits_per_s=(1e8, 1e10))
    assert np.array_equal(node_bandwidths(params, seed=2), node_bandwidths(params, seed=2))
    with pytest.raises(InputError, match="0 < low <= high"):
        node_bandwidths(ClusterParams(bandwidth_bits_per_s=(1e9, 1e8)), seed=0)


def test_same_seed_same_result() -> None:
    # Corpus, workload, bandwidths and tie-breaks all derive from the seed.
    a = _smoke_once(seed=5)
    b = _smoke_once(seed=5)
    assert a.bytes_pulled == b.bytes_pulled
    assert np.array_equal(a.startup_s, b.startup_s)


def _smoke_once(seed: int) -> RunResult:
    corpus = generate_corpus(SMOKE.images, seed=seed)
    workload = generate_workload(corpus, WorkloadParams(rate_per_s=4.0, window_s=60.0), seed=seed)
    return simulate(corpus, workload, SMOKE.cluster, RandomPlacement(), seed=seed)
