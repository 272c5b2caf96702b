"""What ``make replay`` measured, summarised and written as docs: pure functions only.

``bench/replay.py`` replays ``bench/replay/trace.json`` through the local testbed's
kube-schedulers and writes ``bench/results/replay.json``; this module turns its runs into
per-scheduler figures (each round's, then their mean and range over the rounds), puts the
simulator's prediction for the same trace beside them, renders the README block
``bench/figures.py`` writes (``make figures``) and draws the start-up distributions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from layersched.evidence import provenance
from layersched.evidence.results import plot_metadata

#: The committed results, their plot, and the README block generated from them.
DEFAULT_RESULTS = "bench/results/replay.json"
DEFAULT_PLOT = "bench/results/replay.png"
BLOCK = "replay"
REGENERATE = "make figures"
BASELINE = "image-locality"
#: What each testbed scheduler is in the simulator (the extender and the plugin run the
#: same strategy, with spread, as installed: issue 45). A run records the mapping it used
#: (``simulation.simulated_as``).
SIMULATED_AS = {
    "image-locality": "image-locality",
    "layer-locality": "layer-locality+spread",
    "layer-locality-plugin": "layer-locality+spread",
    "pull-time": "pull-time",
}
#: The mapping of runs that recorded none: the testbed ran both without spread then.
SIMULATED_AS_WITHOUT_SPREAD = {
    **SIMULATED_AS,
    "layer-locality": "layer-locality",
    "layer-locality-plugin": "layer-locality",
}


def simulated_as(results: dict[str, Any]) -> dict[str, str]:
    """What each testbed scheduler of ``results`` was in the simulator."""
    recorded = (results.get("simulation") or {}).get("simulated_as")
    return dict(recorded) if recorded else SIMULATED_AS_WITHOUT_SPREAD


#: Labels in the block, in its order.
LABELS = {
    "image-locality": "image-locality (upstream ImageLocality alone)",
    "layer-locality": "layer-locality, extender (default plugins + extender)",
    "layer-locality-plugin": "layer-locality, plugin (default plugins + LayerLocality)",
    "pull-time": "pull-time, extender",
}
#: A pod sent less than this pulled no layer, only manifest and config (a few KiB); the
#: results name their trace's smallest layer, which is used instead.
NOTHING_BYTES = 64 * 1024
MIB = 1024 * 1024
TAIL = 95
#: HotEdge '20's reported range (CONTEXT §1).
HOTEDGE_RANGE = (1.4, 2.3)


def _values(pods: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(p[key]) for p in pods if p.get(key) is not None]


def run_figures(
    pods: Sequence[Mapping[str, Any]], nothing_below: int = NOTHING_BYTES
) -> dict[str, Any]:
    """One run's figures from its pods: start-up (the API's) mean, p50 and p95, the start-up
    seen by the replay, mean pull, total bytes and the share of pods that pulled no layer.

    >>> f = run_figures([{"startup_s": 2.0, "observed_startup_s": 2.2, "pull_s": 1.0,
    ...                   "bytes": 10 * MIB}, {"startup_s": 4.0, "observed_startup_s": 4.4,
    ...                   "pull_s": 0.0, "bytes": 1000}])
    >>> f["mean_startup_s"], f["bytes_pulled"], f["pulled_nothing_share"]
    (3.0, 10486760, 0.5)
    """
    startup = _values(pods, "startup_s")
    observed = _values(pods, "observed_startup_s")
    pulls = _values(pods, "pull_s")
    sizes = [int(p.get("bytes") or 0) for p in pods]
    return {
        "pods": len(pods),
        "measured": len(startup),
        "mean_startup_s": _round(np.mean(startup)) if startup else None,
        "p50_startup_s": _round(np.percentile(startup, 50)) if startup else None,
        "p95_startup_s": _round(np.percentile(startup, TAIL)) if startup else None,
        "mean_observed_startup_s": _round(np.mean(observed)) if observed else None,
        "mean_pull_s": _round(np.mean(pulls)) if pulls else None,
        "bytes_pulled": sum(sizes),
        "pulled_nothing_share": _round(sum(1 for s in sizes if s < nothing_below) / len(pods))
        if pods
        else None,
    }


def _round(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """Mean, min and max of the known ``values`` (None when there is none).

    >>> spread([1.0, 3.0, None])
    {'mean': 2.0, 'min': 1.0, 'max': 3.0, 'n': 2}
    """
    known = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not known:
        return None
    return {
        "mean": _round(np.mean(known)),
        "min": _round(min(known)),
        "max": _round(max(known)),
        "n": len(known),
    }


FIGURES = (
    "mean_startup_s",
    "p50_startup_s",
    "p95_startup_s",
    "mean_observed_startup_s",
    "mean_pull_s",
    "bytes_pulled",
    "pulled_nothing_share",
)


def summarise(
    runs: Sequence[Mapping[str, Any]], nothing_below: int = NOTHING_BYTES
) -> dict[str, Any]:
    """Per strategy, every figure over its rounds (:func:`spread`), and the speedup against
    image-locality, round by round (the baseline's mean start-up in that round over the
    strategy's), then over the rounds."""
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for run in runs:
        by_round.setdefault(int(run["round"]), {})[run["strategy"]] = run_figures(
            run["pods"], nothing_below
        )
    strategies = list(dict.fromkeys(run["strategy"] for run in runs))
    summary: dict[str, Any] = {}
    for strategy in strategies:
        rounds = [r for r in sorted(by_round) if strategy in by_round[r]]
        figures = [by_round[r][strategy] for r in rounds]
        entry: dict[str, Any] = {"rounds": len(rounds)}
        for key in FIGURES:
            entry[key] = spread([f[key] for f in figures])
        speedups = []
        for r in rounds:
            base = by_round[r].get(BASELINE, {}).get("mean_startup_s")
            mine = by_round[r][strategy]["mean_startup_s"]
            if base and mine:
                speedups.append(base / mine)
        entry[f"speedup_vs_{BASELINE}"] = spread(speedups)
        summary[strategy] = entry
    return summary


def simulation_summary(
    sim: Mapping[str, Sequence[Mapping[str, Any]]], nothing_below: int = NOTHING_BYTES
) -> dict[str, Any]:
    """The simulator's runs (per strategy, one per tie-break seed: ``startup_s`` and
    ``bytes_pulled`` per pod) summarised as :func:`summarise` does the real ones, with the
    speedup seed by seed."""
    figures: dict[str, list[dict[str, Any]]] = {}
    for strategy, runs in sim.items():
        figures[strategy] = [
            run_figures(
                [
                    {"startup_s": s, "bytes": b, "pull_s": None, "observed_startup_s": None}
                    for s, b in zip(run["startup_s"], run["bytes_pulled"], strict=True)
                ],
                nothing_below,
            )
            for run in runs
        ]
    summary: dict[str, Any] = {}
    for strategy, rows in figures.items():
        entry: dict[str, Any] = {"seeds": len(rows)}
        for key in (
            "mean_startup_s",
            "p50_startup_s",
            "p95_startup_s",
            "bytes_pulled",
            "pulled_nothing_share",
        ):
            entry[key] = spread([row[key] for row in rows])
        base_rows = figures.get(BASELINE, [])
        entry[f"speedup_vs_{BASELINE}"] = spread(
            [
                base["mean_startup_s"] / row["mean_startup_s"]
                for base, row in zip(base_rows, rows, strict=False)
                if base["mean_startup_s"] and row["mean_startup_s"]
            ]
        )
        summary[strategy] = entry
    return summary


def estimate_comparison(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per round: the bytes ``layersched estimate`` called avoidable after the
    image-locality run, and the bytes each layer-aware run of that round pulled fewer than
    image-locality's."""
    rows = []
    by_round: dict[int, dict[str, Mapping[str, Any]]] = {}
    for run in runs:
        by_round.setdefault(int(run["round"]), {})[run["strategy"]] = run
    for number in sorted(by_round):
        base = by_round[number].get(BASELINE)
        if base is None or not isinstance(base.get("estimate"), Mapping):
            continue
        totals = base["estimate"].get("totals") or {}
        pulled = run_figures(base["pods"])["bytes_pulled"]
        saved = {
            strategy: pulled - run_figures(run["pods"])["bytes_pulled"]
            for strategy, run in by_round[number].items()
            if strategy != BASELINE
        }
        rows.append(
            {
                "round": number,
                "image_locality_bytes": pulled,
                "estimate_pulled_bytes": totals.get("pulled_bytes"),
                "estimate_avoidable_bytes": totals.get("avoidable_bytes"),
                "estimate_pods": totals.get("pods"),
                "saved_bytes": saved,
            }
        )
    return rows


# ------------------------------------------------------------------ the block


def _cell(entry: Mapping[str, Any] | None, fmt: str, scale: float = 1.0) -> str:
    if not entry:
        return "-"
    mean, low, high = (entry[k] / scale for k in ("mean", "min", "max"))
    if entry.get("n", 1) == 1 or low == high:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ({format(low, fmt)}–{format(high, fmt)})"


def _ratio(entry: Mapping[str, Any] | None) -> str:
    cell = _cell(entry, ".2f")
    return cell if cell == "-" else cell.replace(" (", "× (", 1) if "(" in cell else cell + "×"


def links_text(cluster: Mapping[str, Any]) -> str:
    """The trace's links in words: one rate for all (results from before issue 37), or
    each node's, ``n1`` first."""
    rates = cluster.get("link_rates_bits_per_s")
    if rates is None:
        return f"{cluster['link_rate_bits_per_s'] / 1e6:g} Mbit/s links"
    if len(set(rates)) == 1:
        return f"{rates[0] / 1e6:g} Mbit/s links"
    return f"links of {', '.join(f'{r / 1e6:g}' for r in rates)} Mbit/s, n1 first"


def markdown(results: Mapping[str, Any]) -> str:
    """The README block: the per-scheduler table with each figure's range over the rounds,
    the simulator's prediction for the same trace beside it, the estimate check, and where
    the figures come from."""
    trace = results["trace"]
    nothing_below = int(trace.get("smallest_layer_bytes") or NOTHING_BYTES)
    summary = summarise(results["runs"], nothing_below)
    sim = results.get("simulation") or {}
    mapping = simulated_as(results)
    sim_summary = simulation_summary(sim.get("runs") or {}, nothing_below)
    cluster = trace["cluster"]
    asked = results.get("rounds_asked")
    done = max((entry["rounds"] for entry in summary.values()), default=0)
    lines = [
        f"Generated by `{REGENERATE}` from `{DEFAULT_RESULTS}` (`make replay`): "
        f"`{trace['path']}` (seed {trace['seed']}: {trace['pods']} pods of {trace['images']} "
        f"images, {trace['layers']} distinct layers, {trace['distinct_bytes'] / MIB:,.0f} MiB) "
        f"replayed through the real kube-schedulers of the local testbed "
        f"({cluster['nodes']} nodes × {cluster['containers_per_node']} slots, "
        f"{links_text(cluster)}), "
        f"{done} round{'s' if done != 1 else ''} per scheduler, alternated"
        + (f" (**{asked} were asked; the others did not run**)" if asked and done < asked else "")
        + ". Start-up is pod creation to container start from the API's timestamps "
        "(1 s resolution); each cell is the mean over the rounds (their range). "
        f"The simulator column is `layersched.sim` on the same trace, {sim.get('seeds_count', 0)} "
        "tie-break seeds.",
        "",
        "| scheduler | mean start-up (s) | p50 (s) | p95 (s) | pulled (MiB) | pulled no layer "
        "| speedup vs image-locality | simulator: mean start-up (s) | simulator: speedup |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for strategy, entry in summary.items():
        simulated = sim_summary.get(mapping.get(strategy, strategy)) or {}
        lines.append(
            f"| {LABELS.get(strategy, strategy)} | {_cell(entry['mean_startup_s'], '.1f')} "
            f"| {_cell(entry['p50_startup_s'], '.1f')} | {_cell(entry['p95_startup_s'], '.1f')} "
            f"| {_cell(entry['bytes_pulled'], ',.0f', MIB)} "
            f"| {_cell(entry['pulled_nothing_share'], '.0%')} "
            f"| {_ratio(entry[f'speedup_vs_{BASELINE}'])} "
            f"| {_cell(simulated.get('mean_startup_s'), '.1f')} "
            f"| {_ratio(simulated.get(f'speedup_vs_{BASELINE}'))} |"
        )
    low, high = HOTEDGE_RANGE
    lines += ["", f"HotEdge '20 reports {low}–{high}× with dependency-aware scheduling."]
    estimates = estimate_comparison(results["runs"])
    if estimates:
        avoidable = spread([row["estimate_avoidable_bytes"] for row in estimates])
        saved = {
            strategy: spread([row["saved_bytes"].get(strategy) for row in estimates])
            for strategy in summary
            if strategy != BASELINE
        }
        said = "; ".join(
            f"{strategy} pulled {_cell(entry, ',.0f', MIB)} MiB less"
            for strategy, entry in saved.items()
            if entry
        )
        lines += [
            "",
            f"**`layersched estimate`**, run on the live cluster after each image-locality run, "
            f"called {_cell(avoidable, ',.0f', MIB)} MiB of that run's pulls avoidable; in the "
            f"same rounds {said}.",
        ]
    record = results.get("provenance")
    lines += ["", provenance.describe(record)]
    why = provenance.why_overloaded(record)
    if why:
        lines.append(f"**Inconclusive as a benchmark: {why}.**")
    return "\n".join(lines)


def plot(results: Mapping[str, Any], path: Path) -> None:
    """The start-up distributions (CDF), real (pooled over the rounds) and simulated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    mapping = simulated_as(results)
    colours = {}
    for strategy in dict.fromkeys(run["strategy"] for run in results["runs"]):
        values = sorted(
            v
            for run in results["runs"]
            if run["strategy"] == strategy
            for v in _values(run["pods"], "startup_s")
        )
        if not values:
            continue
        ys = np.arange(1, len(values) + 1) / len(values)
        (line,) = ax.step(values, ys, where="post", label=f"{strategy} (testbed)")
        colours[mapping.get(strategy, strategy)] = line.get_color()
    for strategy, runs in ((results.get("simulation") or {}).get("runs") or {}).items():
        values = sorted(v for run in runs for v in run["startup_s"])
        if not values:
            continue
        ys = np.arange(1, len(values) + 1) / len(values)
        ax.step(
            values,
            ys,
            where="post",
            linestyle="--",
            color=colours.get(strategy),
            label=f"{strategy} (simulator)",
        )
    ax.set_xlabel("start-up: pod creation to container start (s)")
    ax.set_ylabel("share of pods")
    ax.set_title("Replayed trace: start-up distribution per scheduler")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata=plot_metadata(results.get("provenance")))
    plt.close(fig)
