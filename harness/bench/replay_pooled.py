"""Every round of every run of the replay trace, pooled (issue 42): the speedups against
the default profile of each round, and where the start-up time went by link.

Each results file (:data:`replay_report.DEFAULT_RESULTS` and the further runs,
:data:`replay_report.FURTHER_RUNS`) has its own block; this one reads them all, and the
trace for its pods' lifetimes. A ratio is
only ever taken within a round (an arm against the default profile of the same round and
pull mode); the pooling is over those ratios, never over seconds from different runs.

Where the time went: a pod's start-up counts towards the link of the node it ran on. Of
the pods on the slowest links, a pod was *sent with a faster slot free* when, at its
binding, some faster node had fewer than the trace's slots taken; otherwise *with every
faster slot taken*. A slot is taken from a pod's binding until its container's start plus
its trace lifetime plus the run's measured slot-release lag
(:func:`replay_report.overheads`), or to the end when it never started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import replay_report as report

from layersched_harness.sim.trace import parse_trace

#: The block in docs/replay.md.
BLOCK = "replay-pooled"
#: Every results file of the trace, the main run first.
SOURCES = (report.DEFAULT_RESULTS, *report.FURTHER_RUNS)
#: The trace they replayed, for its pods' lifetimes.
TRACE = "harness/bench/replay/trace.json"

FAST, FREE, FORCED = "fast", "free", "forced"


def trace_lifetimes(
    results: Mapping[str, Any], trace_doc: Mapping[str, Any], where: str
) -> dict[str, float] | None:
    """Each trace pod's lifetime (name to seconds) from ``trace_doc`` (the trace read at
    ``where``), or None when it is not the trace the file replayed: another seed, or
    other counts of pods, images or layers."""
    trace = parse_trace(trace_doc, where)
    recorded = results.get("trace") or {}
    mine = {
        "seed": trace.seed,
        "pods": len(trace.pods),
        "images": len(trace.images),
        "layers": len(trace.layers),
    }
    if any(recorded.get(key) != value for key, value in mine.items()):
        return None
    return {pod.name: pod.lifetime_s for pod in trace.pods}


def round_ratios(results: Mapping[str, Any], mode: str) -> list[dict[str, Any]]:
    """Each arm's speedup in each round of ``mode``
    (:func:`replay_report.round_ratio` of its mean and p95 start-up), with the default's
    mean start-up in that round."""
    nothing_below = int(results["trace"].get("smallest_layer_bytes") or report.NOTHING_BYTES)
    by_round = report.by_round_of(
        results["runs"], mode, lambda run: report.run_figures(run["pods"], nothing_below)
    )
    rows = []
    for number, arms in sorted(by_round.items()):
        for key in arms:
            speedup = report.round_ratio(arms, key, "mean_startup_s")
            p95 = report.round_ratio(arms, key, "p95_startup_s")
            if speedup is not None and p95 is not None:
                rows.append(
                    {
                        "round": number,
                        "arm": key,
                        "default_mean_startup_s": arms[report.BASELINE]["mean_startup_s"],
                        "speedup": speedup,
                        "p95_speedup": p95,
                    }
                )
    return rows


def burst_ratios(results: Mapping[str, Any], mode: str) -> list[dict[str, Any]]:
    """Each arm's burst speedup in each round of ``mode``
    (:func:`replay_report.round_ratio` of the time until all replicas were Ready), by arm."""
    by_round = report.by_round_of(results.get("bursts") or [], mode, lambda burst: burst)
    return [
        {"arm": key, "speedup": ratio}
        for _, arms in sorted(by_round.items())
        for key in arms
        if (ratio := report.round_ratio(arms, key, "all_ready_s")) is not None
    ]


def placements(
    pods: Sequence[Mapping[str, Any]],
    rates: Mapping[str, int],
    lifetimes: Mapping[str, float],
    slots: int,
    lag_s: float,
) -> list[str | None]:
    """For each pod of one run: :data:`FAST` on a node faster than the slowest, else
    :data:`FREE` or :data:`FORCED` (the module docstring); None when it was not bound.

    >>> rates = {"n1": 40, "n2": 10}
    >>> pods = [{"name": "a", "node": "n1", "scheduled_at_s": 0.0, "started_at_s": 1.0},
    ...         {"name": "b", "node": "n2", "scheduled_at_s": 2.0, "started_at_s": 3.0},
    ...         {"name": "c", "node": "n2", "scheduled_at_s": 20.0, "started_at_s": 21.0}]
    >>> placements(pods, rates, {"a": 10.0, "b": 10.0, "c": 10.0}, 1, 0.0)
    ['fast', 'forced', 'free']
    """
    slowest = min(rates.values(), default=0)
    faster = {node for node, rate in rates.items() if rate > slowest}
    held = []
    for pod in pods:
        bound, node = pod.get("scheduled_at_s"), pod.get("node")
        if bound is None or not node:
            continue
        started = pod.get("started_at_s")
        lifetime = lifetimes.get(str(pod.get("name")))
        end = (
            float("inf")
            if started is None or lifetime is None
            else float(started) + report.HALF_SECOND + lifetime + lag_s
        )
        held.append((str(node), float(bound), end))
    out: list[str | None] = []
    for pod in pods:
        bound, node = pod.get("scheduled_at_s"), pod.get("node")
        if bound is None or not node:
            out.append(None)
        elif node in faster:
            out.append(FAST)
        else:
            at = float(bound)
            taken = {n: 0 for n in faster}
            for n, start, end in held:
                if n in taken and start < at < end:
                    taken[n] += 1
            out.append(FREE if any(count < slots for count in taken.values()) else FORCED)
    return out


def link_split(
    results: Mapping[str, Any], mode: str, lifetimes: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Per arm of ``mode``, over its rounds: pods and the sum of their start-up, for every
    pod and for each of :data:`FAST`, :data:`FREE`, :data:`FORCED`."""
    rates = {str(k): int(v) for k, v in results["testbed"]["link_rates_bits_per_s"].items()}
    slots = int(results["trace"]["cluster"]["containers_per_node"])
    found = report.overheads(results["runs"], mode, rates, lifetimes, slots)
    lag = float(found["slot_release_s"] or 0.0)
    split: dict[str, dict[str, float]] = {}
    for run in results["runs"]:
        if run.get("mode") != mode:
            continue
        entry = split.setdefault(run["arm"], {})
        kinds = placements(run["pods"], rates, lifetimes, slots, lag)
        for pod, kind in zip(run["pods"], kinds, strict=True):
            if pod.get("startup_s") is None:
                continue
            for name in ("all", kind):
                if name is None:
                    continue
                entry[f"{name}_pods"] = entry.get(f"{name}_pods", 0) + 1
                entry[f"{name}_s"] = entry.get(f"{name}_s", 0.0) + float(pod["startup_s"])
    return split


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": float(np.median(values)),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def pooled(
    files: Mapping[str, Mapping[str, Any]], lifetimes: Mapping[str, float] | None
) -> dict[str, Any]:
    """Per pull mode and arm, over every round of every file: the speedups (median, range,
    rounds, files), the default's mean start-up in those rounds, the burst's speedups, and
    where the time went by link (summed over the rounds; None without ``lifetimes``)."""
    doc: dict[str, Any] = {}
    for mode in report.MODES:
        ratios: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        bursts: dict[str, list[float]] = {}
        links: dict[str, dict[str, float]] = {}
        for source, results in files.items():
            if results.get("format") != report.FORMAT:
                continue
            for row in round_ratios(results, mode):
                ratios.setdefault(row["arm"], []).append((source, row))
            for row in burst_ratios(results, mode):
                bursts.setdefault(row["arm"], []).append(row["speedup"])
            if lifetimes is not None:
                for key, entry in link_split(results, mode, lifetimes).items():
                    mine = links.setdefault(key, {})
                    for name, value in entry.items():
                        mine[name] = mine.get(name, 0.0) + value
        arms = {}
        for key, rows in ratios.items():
            arms[key] = {
                "rounds": len(rows),
                "files": sorted({source for source, _ in rows}),
                "speedup": _stats([row["speedup"] for _, row in rows]),
                "p95_speedup": _stats([row["p95_speedup"] for _, row in rows]),
                "default_mean_startup_s": _stats(
                    [row["default_mean_startup_s"] for _, row in rows]
                ),
                "links": links.get(key) if lifetimes is not None else None,
            }
        doc[mode] = {
            "arms": arms,
            "bursts": {key: _stats(values) for key, values in bursts.items()},
        }
    return doc


def _ordered(keys: Sequence[str]) -> list[str]:
    return [k for k in report.ARM_KEYS if k in keys] + [k for k in keys if k not in report.ARM_KEYS]


def _x(stats: Mapping[str, float]) -> str:
    if stats["n"] == 1 or stats["min"] == stats["max"]:
        return f"{stats['median']:.2f}×"
    return f"{stats['median']:.2f}× ({stats['min']:.2f}–{stats['max']:.2f})"


def _per_pod(links: Mapping[str, float], name: str) -> str:
    pods = links.get("all_pods") or 0
    mine = links.get(f"{name}_pods", 0)
    if not pods:
        return "- | -"
    return f"{mine / pods:.0%} | {links.get(f'{name}_s', 0.0) / pods:.1f}"


def markdown(documents: Mapping[str, Mapping[str, Any]]) -> str:
    """The block, from ``documents`` (path to document: :data:`SOURCES` and
    :data:`TRACE`): the files it pools (each with its commit), per pull mode the speedups
    over every round and where the time went by link, the burst over every round, and
    what bounds the best arm."""
    files = {path: doc for path, doc in documents.items() if path != TRACE}
    # the lifetimes only when every file replayed this trace
    each = [
        trace_lifetimes(results, documents[TRACE], TRACE) if TRACE in documents else None
        for results in files.values()
    ]
    lifetimes = each[0] if each and all(found is not None for found in each) else None
    found = pooled(files, lifetimes)
    named = []
    for source, results in files.items():
        record = results.get("provenance") or {}
        rounds = len(
            {
                int(step["round"])
                for step in [*(results.get("runs") or []), *(results.get("bursts") or [])]
            }
        )
        named.append(
            f"`{source}` ({rounds} rounds, at `{str(record.get('commit') or 'unknown')[:12]}`)"
        )
    lines = [
        f"Generated by `{report.REGENERATE}` from every results file of the trace: "
        + ", ".join(named)
        + ". Each ratio is an arm's figure against the default profile's in the same round "
        "and pull mode; the cells are the median over every round that ran the arm (the "
        "range, the rounds). Compare the arms by these, not by seconds across runs: the "
        "default profile's own mean start-up moves from round to round (its column).",
        "",
    ]
    for mode in report.MODES:
        arms = found[mode]["arms"]
        if not arms:
            continue
        lines += [
            f"**{report.mode_sentence(mode)[:1].upper()}{report.mode_sentence(mode)[1:]}**",
            "",
            "| arm | rounds | speedup vs default (mean) | speedup (p95) "
            "| the default's mean start-up in those rounds (s) |",
            "|---|---:|---:|---:|---:|",
        ]
        for key in _ordered(list(arms)):
            entry = arms[key]
            base = entry["default_mean_startup_s"]
            lines.append(
                f"| {report.arm(key).label} | {entry['rounds']} | {_x(entry['speedup'])} "
                f"| {_x(entry['p95_speedup'])} "
                f"| {base['median']:.1f} ({base['min']:.1f}–{base['max']:.1f}) |"
            )
        lines.append("")
        if lifetimes is None:
            lines += [
                f"Where the time went by link is left out: `{TRACE}` is not the trace the "
                "runs replayed.",
                "",
            ]
            continue
        lines += [
            "Where the start-up time went, over the same rounds: each share is of the arm's "
            "pods, each time is their start-up summed and divided by all the arm's pods, so "
            "the three times add up to its mean start-up.",
            "",
            "| arm | mean start-up (s) | on faster links: pods | their time (s) "
            "| on the slowest links, sent with a faster slot free: pods | their time (s) "
            "| on the slowest links, every faster slot taken: pods | their time (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for key in _ordered(list(arms)):
            links = arms[key]["links"] or {}
            pods = links.get("all_pods") or 0
            mean = links.get("all_s", 0.0) / pods if pods else None
            lines.append(
                f"| {report.arm(key).label} | {'-' if mean is None else f'{mean:.1f}'} "
                f"| {_per_pod(links, FAST)} | {_per_pod(links, FREE)} "
                f"| {_per_pod(links, FORCED)} |"
            )
        best = max(arms, key=lambda k: arms[k]["speedup"]["median"])
        links = arms[best]["links"] or {}
        if links.get("all_pods"):
            pods = links["all_pods"]
            lines += [
                "",
                f"The best arm here, {report.arm(best).label}, spent "
                f"{links.get(f'{FORCED}_s', 0.0) / pods:.1f} s of its "
                f"{links['all_s'] / pods:.1f} s mean start-up on pods sent to the slowest "
                "links when every faster node's slots were taken. At their binding no score "
                "could have sent them elsewhere (kube-scheduler binds a pod that fits "
                "somewhere); fewer of them would take holding a pod pending until a faster "
                "slot frees, or earlier placements that leave the faster nodes room.",
            ]
        lines.append("")
    burst_lines = []
    for mode in report.MODES:
        for key in _ordered(list(found[mode]["bursts"])):
            stats = found[mode]["bursts"][key]
            burst_lines.append(f"| {report.arm(key).label} | {mode} | {stats['n']} | {_x(stats)} |")
    if burst_lines:
        lines += [
            "**The burst**, every round of every file that ran it: the default profile's "
            "time until all replicas were Ready over the arm's, round by round.",
            "",
            "| arm | pulls | rounds | speedup vs default |",
            "|---|---|---:|---:|",
            *burst_lines,
            "",
        ]
    return "\n".join(lines).rstrip()
