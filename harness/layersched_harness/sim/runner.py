"""Run settings and turn raw results into the report's JSON-ready dictionaries."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from layersched.core.indexbuilder import LayerIndexBuilder
from layersched.core.layerindex import LayerIndex
from layersched.core.nodeimages import NodeImage
from layersched.core.pod import PodImages
from layersched.core.strategies import resolve_pod_layers
from layersched.core.strategies.pull_time import BANDWIDTH_KEY
from layersched_harness.sim.corpus import Corpus, generate_corpus
from layersched_harness.sim.engine import ClusterParams, RunResult, node_bandwidths, simulate
from layersched_harness.sim.settings import (
    BASELINE,
    IMAGE_LOCALITY,
    PULL_TIME,
    ScaleSetting,
    Setting,
    build_strategy,
)
from layersched_harness.sim.workload import generate_workload

#: Percentiles of startup time kept in the report, enough to redraw a CDF.
CDF_PERCENTILES = np.concatenate([np.arange(0, 99, 1.0), np.arange(99, 100.01, 0.1)])
TAIL_PERCENTILE = 95
DECISION_TAIL_PERCENTILE = 99
US_PER_S = 1e6
MS_PER_S = 1e3
#: Nodes whose distinct layers are counted for the report (the mean is stable by then).
_LAYER_SAMPLE_NODES = 50
#: Images drawn at once while filling a warm node's cache.
_DRAW_BATCH = 256

#: Called as ``progress(setting, strategy, simulated_s)``.
Progress = Callable[[str, str, float], None]


def _rounded(value: float, digits: int = 4) -> float:
    return round(float(value), digits)


def _speedups(mean: dict[str, float]) -> dict[str, float]:
    """``mean[BASELINE] / mean[k]`` per strategy; a zero mean (no ratio) is left out."""
    base = mean.get(BASELINE)
    if not base:
        return {}
    return {k: _rounded(base / m, 3) for k, m in mean.items() if m > 0}


def summarise(results: dict[str, RunResult]) -> dict[str, Any]:
    """The per-strategy metric maps of one setting (see ``docs/simulator.md``)."""
    mean = {k: _rounded(r.startup_s.mean()) for k, r in results.items()}
    mean_pull = {k: _rounded(r.wait_s.mean()) for k, r in results.items()}
    return {
        "mean_startup_s": mean,
        "p95_startup_s": {
            k: _rounded(np.percentile(r.startup_s, TAIL_PERCENTILE)) for k, r in results.items()
        },
        "mean_pull_s": mean_pull,
        "p95_pull_s": {
            k: _rounded(np.percentile(r.wait_s, TAIL_PERCENTILE)) for k, r in results.items()
        },
        "bytes_pulled": {k: r.bytes_pulled for k, r in results.items()},
        "load_imbalance": {k: _rounded(r.load_imbalance, 3) for k, r in results.items()},
        f"speedup_vs_{BASELINE}": _speedups(mean),
        f"pull_speedup_vs_{BASELINE}": _speedups(mean_pull),
        "pods_measured": {k: len(r.startup_s) for k, r in results.items()},
        "queued_pods": {k: r.queued_pods for k, r in results.items()},
        "evicted_images": {k: r.evicted_images for k, r in results.items()},
        "overcommitted_pulls": {k: r.overcommitted_pulls for k, r in results.items()},
        "decision_time_us": {
            k: {
                "mean": _rounded(r.decision_time_s.mean() * US_PER_S, 1),
                "p99": _rounded(
                    np.percentile(r.decision_time_s, DECISION_TAIL_PERCENTILE) * US_PER_S, 1
                ),
            }
            for k, r in results.items()
        },
        "startup_cdf_s": {
            "percentiles": [_rounded(p, 1) for p in CDF_PERCENTILES],
            **{
                k: [_rounded(v) for v in np.percentile(r.startup_s, CDF_PERCENTILES)]
                for k, r in results.items()
            },
        },
        "pull_cdf_s": {
            "percentiles": [_rounded(p, 1) for p in CDF_PERCENTILES],
            **{
                k: [_rounded(v) for v in np.percentile(r.wait_s, CDF_PERCENTILES)]
                for k, r in results.items()
            },
        },
    }


def run_setting(setting: Setting, seed: int, progress: Progress | None = None) -> dict[str, Any]:
    """Simulate every strategy of ``setting`` on one seeded corpus and workload."""
    corpus = generate_corpus(setting.images, seed=seed, params=setting.corpus)
    workload = generate_workload(corpus, setting.workload, seed=seed + 1)
    results: dict[str, RunResult] = {}
    wall: dict[str, float] = {}
    for label in setting.strategies:
        started = time.perf_counter()

        def tick(simulated_s: float, label: str = label) -> None:
            if progress is not None:
                progress(setting.name, label, simulated_s)

        results[label] = simulate(
            corpus,
            workload,
            setting.cluster,
            build_strategy(label),
            seed=seed + 2,
            warmup_s=setting.warmup_s,
            on_progress=tick,
        )
        wall[label] = _rounded(time.perf_counter() - started, 2)
        tick(setting.workload.window_s)
    return {
        "description": setting.description,
        "params": {**asdict(setting), "seed": seed, "pods": len(workload)},
        **summarise(results),
        "wall_s": wall,
    }


def _warm_snapshot(
    scale: ScaleSetting, corpus: Corpus, seed: int
) -> tuple[LayerIndex, list[PodImages]]:
    """What the extender scores against: an indexed (packed) inventory of warm nodes.

    Built as the extender's ``--nodes`` provider builds it (``LayerIndexBuilder``
    over each node's ``status.images`` entries and labels, then ``index_layers``),
    with images resolved through the corpus as the extender resolves them
    through the registry.
    """
    rng = np.random.default_rng(seed + 1)
    cluster = ClusterParams(nodes=scale.nodes, bandwidth_bits_per_s=scale.bandwidth_bits_per_s)
    builder = LayerIndexBuilder(corpus.layer_source())
    entries = [NodeImage((image.name,), image.size_bytes) for image in corpus.images]
    for i, bits in enumerate(node_bandwidths(cluster, seed)):
        used = 0
        held: dict[int, None] = {}
        while used < scale.cached_bytes_per_node and len(held) < len(entries):
            # draws in batches (one rng.choice per pick costs a cumsum over the corpus)
            for pick in rng.choice(len(entries), size=_DRAW_BATCH, p=corpus.popularity).tolist():
                if used >= scale.cached_bytes_per_node:
                    break
                if pick not in held:
                    held[pick] = None
                    used += entries[pick].size_bytes
        builder.add_node(
            f"node-{i:05d}", [entries[k] for k in held], labels={BANDWIDTH_KEY: f"{bits:.0f}"}
        )
    snapshot = builder.build()
    snapshot.index_layers()
    draws = rng.choice(len(entries), size=scale.decisions, p=corpus.popularity)
    pods = [PodImages.of(corpus.images[int(d)].name) for d in draws]
    return snapshot, pods


def run_scale(scale: ScaleSetting, seed: int) -> dict[str, Any]:
    """Time ``scale.decisions`` scoring decisions per strategy over every node.

    The strategies score a packed inventory, the form the extender serves ``NodeNames``
    requests from (``--nodes``), not the simulator's node-by-node one (the two answer
    identically: ``tests/unit/test_layer_index.py``). A decision is timed with the pod's
    layers resolved through the corpus, as the extender resolves them from its cache.
    """
    started = time.perf_counter()
    corpus = generate_corpus(scale.images, seed=seed, params=scale.corpus)
    source = corpus.layer_source()
    snapshot, pods = _warm_snapshot(scale, corpus, seed)
    build_s = time.perf_counter() - started
    candidates = np.arange(snapshot.node_count, dtype=np.int64)
    # One untimed pass fills the snapshot's per-image-name memo and pull-time's
    # bandwidth array, as a long-lived extender snapshot has them; its cost is
    # reported separately.
    warm_started = time.perf_counter()
    for warm_up in (build_strategy(IMAGE_LOCALITY), build_strategy(PULL_TIME)):
        for pod in pods:
            warm_up.score(pod, resolve_pod_layers(pod, source), snapshot, candidates)
    warm_pass_s = (time.perf_counter() - warm_started) / max(2 * len(pods), 1)
    timings: dict[str, dict[str, float]] = {}
    for label in scale.strategies:
        strategy = build_strategy(label)
        times = np.empty(len(pods), dtype=np.float64)
        for i, pod in enumerate(pods):
            t0 = time.perf_counter()
            layers = resolve_pod_layers(pod, source) if strategy.needs_layers else ()
            strategy.score(pod, layers, snapshot, candidates)
            times[i] = time.perf_counter() - t0
        timings[label] = {
            "mean": _rounded(times.mean() * MS_PER_S, 3),
            "p50": _rounded(np.percentile(times, 50) * MS_PER_S, 3),
            "p99": _rounded(np.percentile(times, DECISION_TAIL_PERCENTILE) * MS_PER_S, 3),
            "within_budget": bool(np.percentile(times, DECISION_TAIL_PERCENTILE) <= scale.budget_s),
        }
    sample = range(min(_LAYER_SAMPLE_NODES, snapshot.node_count))
    return {
        "description": scale.description,
        "params": {**asdict(scale), "seed": seed},
        "inventory": "packed inventory (indexed), as the extender's --nodes provider",
        "inventory_build_s": _rounded(build_s, 2),
        "distinct_images": snapshot.slot_count,
        "images_per_node_mean": _rounded(snapshot.pair_count / max(snapshot.node_count, 1), 1),
        "distinct_layers_per_node_mean": _rounded(
            float(np.mean([sum(1 for _ in snapshot.node_layer_digests(i)) for i in sample])), 1
        ),
        "warm_up_pass_ms_per_decision": _rounded(warm_pass_s * MS_PER_S, 3),
        "decision_time_ms": timings,
        "budget_ms": _rounded(scale.budget_s * MS_PER_S, 3),
    }
