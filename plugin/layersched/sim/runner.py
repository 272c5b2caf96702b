"""Run settings and turn raw results into the report's JSON-ready dictionaries."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from layersched.core.inventory import ClusterInventory, NodeInfo
from layersched.core.pod import PodImages
from layersched.core.strategies.pull_time import BANDWIDTH_KEY
from layersched.sim.corpus import Corpus, generate_corpus
from layersched.sim.engine import ClusterParams, RunResult, node_bandwidths, simulate
from layersched.sim.settings import (
    BASELINE,
    IMAGE_LOCALITY,
    LAYER_LOCALITY,
    ScaleSetting,
    Setting,
    build_strategy,
)
from layersched.sim.workload import generate_workload

#: Percentiles of startup time kept in the report, enough to redraw a CDF.
CDF_PERCENTILES = np.concatenate([np.arange(0, 99, 1.0), np.arange(99, 100.01, 0.1)])
TAIL_PERCENTILE = 95
DECISION_TAIL_PERCENTILE = 99
US_PER_S = 1e6
MS_PER_S = 1e3

#: Called as ``progress(setting, strategy, simulated_s)``.
Progress = Callable[[str, str, float], None]


def _rounded(value: float, digits: int = 4) -> float:
    return round(float(value), digits)


def summarise(results: dict[str, RunResult]) -> dict[str, Any]:
    """The per-strategy metric maps of one setting (see ``docs/simulator.md``)."""
    mean = {k: _rounded(r.startup_s.mean()) for k, r in results.items()}
    base = mean.get(BASELINE)
    return {
        "mean_startup_s": mean,
        "p95_startup_s": {
            k: _rounded(np.percentile(r.startup_s, TAIL_PERCENTILE)) for k, r in results.items()
        },
        "bytes_pulled": {k: r.bytes_pulled for k, r in results.items()},
        "load_imbalance": {k: _rounded(r.load_imbalance, 3) for k, r in results.items()},
        f"speedup_vs_{BASELINE}": (
            {k: _rounded(base / m, 3) for k, m in mean.items()} if base else {}
        ),
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


def _warm_inventory(
    scale: ScaleSetting, corpus: Corpus, seed: int
) -> tuple[ClusterInventory, list[PodImages]]:
    rng = np.random.default_rng(seed + 1)
    cluster = ClusterParams(nodes=scale.nodes, bandwidth_bits_per_s=scale.bandwidth_bits_per_s)
    inventory = ClusterInventory()
    sizes = [image.size_bytes for image in corpus.images]
    for i, bits in enumerate(node_bandwidths(cluster, seed)):
        node = inventory.add_node(NodeInfo(f"node-{i:05d}", labels={BANDWIDTH_KEY: f"{bits:.0f}"}))
        used = 0
        held: set[int] = set()
        while used < scale.cached_bytes_per_node and len(held) < len(sizes):
            pick = int(rng.choice(len(sizes), p=corpus.popularity))
            if pick in held:
                continue
            held.add(pick)
            used += sizes[pick]
            image = corpus.images[pick]
            inventory.add_layers(node, image.layers)
            inventory.add_image_name(node, image.name, sizes[pick])
    draws = rng.choice(len(sizes), size=scale.decisions, p=corpus.popularity)
    pods = [PodImages.of(corpus.images[int(d)].name) for d in draws]
    return inventory, pods


def run_scale(scale: ScaleSetting, seed: int) -> dict[str, Any]:
    """Time ``scale.decisions`` scoring decisions per strategy over every node."""
    started = time.perf_counter()
    corpus = generate_corpus(scale.images, seed=seed, params=scale.corpus)
    source = corpus.layer_source()
    inventory, pods = _warm_inventory(scale, corpus, seed)
    build_s = time.perf_counter() - started
    candidates = np.arange(inventory.node_count, dtype=np.int64)
    # One untimed pass builds the inventory's cached holder arrays, as a long-lived
    # extender inventory has them; its cost is reported separately.
    warm_started = time.perf_counter()
    for warm_up in (build_strategy(IMAGE_LOCALITY), build_strategy(LAYER_LOCALITY)):
        for pod in pods:
            warm_up.score(pod, inventory, candidates, source)
    cold_pass_s = (time.perf_counter() - warm_started) / max(len(pods), 1)
    timings: dict[str, dict[str, float]] = {}
    for label in scale.strategies:
        strategy = build_strategy(label)
        times = np.empty(len(pods), dtype=np.float64)
        for i, pod in enumerate(pods):
            t0 = time.perf_counter()
            strategy.score(pod, inventory, candidates, source)
            times[i] = time.perf_counter() - t0
        timings[label] = {
            "mean": _rounded(times.mean() * MS_PER_S, 3),
            "p50": _rounded(np.percentile(times, 50) * MS_PER_S, 3),
            "p99": _rounded(np.percentile(times, DECISION_TAIL_PERCENTILE) * MS_PER_S, 3),
            "within_budget": bool(np.percentile(times, DECISION_TAIL_PERCENTILE) <= scale.budget_s),
        }
    return {
        "description": scale.description,
        "params": {**asdict(scale), "seed": seed},
        "inventory_build_s": _rounded(build_s, 2),
        "distinct_layers_per_node_mean": _rounded(
            float(np.mean([sum(1 for _ in inventory.node_layer_digests(i)) for i in range(50)])), 1
        ),
        "cache_building_pass_ms_per_decision": _rounded(cold_pass_s * MS_PER_S, 3),
        "decision_time_ms": timings,
        "budget_ms": _rounded(scale.budget_s * MS_PER_S, 3),
    }
