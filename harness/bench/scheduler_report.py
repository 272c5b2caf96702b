"""Pure parts of the scheduler benchmark (``harness/bench/bench_scheduler.py``).

Nothing here talks to a process: Prometheus histograms read from ``/metrics`` text
(differences between two scrapes, quantiles the way ``histogram_quantile`` estimates
them), latency statistics, binding times from kube-scheduler's ``Scheduled`` events and
the drain rate between the first and the last binding, py-spy's collapsed stacks, the
bytes a pod would pull on a node, and what the results become: the README block, the
profile block of ``docs/bench-scheduler.md`` and the plot. The unit tests hold both
blocks to the committed ``harness/results/scheduler.json``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import plot_metadata

#: The README block this module writes (``<!-- scheduler:begin -->``), and the block of
#: ``docs/bench-scheduler.md`` holding the extender's profile.
BLOCK = "scheduler"
PROFILE_BLOCK = "scheduler-profile"
#: The configurations, in the order every table and plot shows them (and the benchmark
#: runs them: the plugin right after the default, while the inventories are new).
CONFIGURATIONS = (
    "default",
    "plugin",
    "plugin-no-image-locality",
    "plugin-in-flight",
    "extender-node-names",
    "extender-noop",
    "extender-nodes",
)
LABELS = {
    "default": "default profile (ImageLocality included)",
    "plugin": "LayerLocality Score plugin beside ImageLocality (the install's profile "
    "until issue 43)",
    "plugin-no-image-locality": "LayerLocality Score plugin, ImageLocality disabled (the "
    "install's profile)",
    "plugin-in-flight": "LayerLocality Score plugin, in-flight strategy, ImageLocality "
    "disabled (the install's with strategy in-flight)",
    "extender-node-names": "+ layersched extender, `NodeNames` + live watch",
    "extender-noop": "+ no-op extender (zeros at once), `NodeNames`",
    "extender-nodes": "+ layersched extender, full `Nodes`",
}
#: The native Score plugin (issue 24), as kube-scheduler registers it.
PLUGIN_NAME = "LayerLocality"
MS_PER_S = 1000.0
MIB = 1024 * 1024
#: Frames shown per profile table, and kept per profile in the results.
PROFILE_TOP_FRAMES = 12
PROFILE_KEPT_FRAMES = 40
#: Packages under this share of the samples are left out of the profile's summary line.
PROFILE_MIN_PACKAGE_SHARE = 0.01


@dataclass(frozen=True)
class Target:
    """Issue 24's target for one configuration, as ratios to the default within one run."""

    config: str
    #: Drain throughput at least this share of the default's.
    throughput_ratio_min: float
    #: Steady-phase p99 at most this multiple of the default's.
    p99_ratio_max: float


#: Rounds a verdict or a cost needs (fewer: no spread to judge the effect against).
MIN_ROUNDS = 3
#: Issue 43: kube-scheduler's CPU per pod with the plugin within 10% of the default's,
#: round by round.
CPU_PER_POD_RATIO_MAX = 1.1
#: The configurations whose kube-scheduler carries LayerLocality.
PLUGIN_CONFIGURATIONS = ("plugin", "plugin-no-image-locality", "plugin-in-flight")

TARGETS = (
    # a native plugin runs in kube-scheduler's own Score workers: near the default (issue
    # 43: at least 0.97x per round, p99 at most 1.1x; issue 24 had 0.95x and 1.2x)
    Target("plugin", 0.97, 1.1),
    Target("plugin-no-image-locality", 0.97, 1.1),
    Target("plugin-in-flight", 0.97, 1.1),
    # an HTTP hop and JSON per pod, serial after the plugins (measured after profiling)
    Target("extender-node-names", 0.8, 2.0),
)


@dataclass(frozen=True)
class Histogram:
    """One Prometheus histogram series: cumulative bucket counts by upper bound."""

    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), ascending le
    sum_s: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """What was observed since ``earlier`` (a scrape of the same series)."""
        if earlier is None:
            return self
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
            self.sum_s - earlier.sum_s,
            self.count - earlier.count,
        )

    def quantile(self, q: float) -> float | None:
        """``histogram_quantile(q)``: linear within the bucket the rank falls in."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower_le, lower_n = 0.0, 0.0
        for le, n in self.buckets:
            if n >= rank:
                if math.isinf(le):
                    return lower_le  # beyond the last finite bound: its bound, as Prometheus
                width = n - lower_n
                return lower_le + (le - lower_le) * ((rank - lower_n) / width if width else 1.0)
            lower_le, lower_n = le, n
        return lower_le

    def summary_ms(self) -> dict[str, float | int | None]:
        """Count, mean and bucket-estimated p50/p99, in milliseconds."""

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * MS_PER_S, 3)

        return {
            "count": int(self.count),
            "mean_ms": ms(self.sum_s / self.count) if self.count else None,
            "p50_ms": ms(self.quantile(0.5)),
            "p99_ms": ms(self.quantile(0.99)),
        }


Series = dict[tuple[tuple[str, str], ...], Histogram]


def histograms(text: str, name: str) -> Series:
    """Every series of histogram ``name`` in Prometheus text, keyed by its labels."""
    raw: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            key = tuple(sorted(labels.items()))
            entry = raw.setdefault(key, {"buckets": [], "sum": 0.0, "count": 0.0})
            if sample.name.endswith("_bucket"):
                entry["buckets"].append((float(sample.labels["le"]), float(sample.value)))
            elif sample.name.endswith("_sum"):
                entry["sum"] = float(sample.value)
            elif sample.name.endswith("_count"):
                entry["count"] = float(sample.value)
    return {
        key: Histogram(tuple(sorted(e["buckets"])), e["sum"], e["count"]) for key, e in raw.items()
    }


def counters(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every series of counter ``name`` (without ``_total``) in Prometheus text."""
    values: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[tuple(sorted(sample.labels.items()))] = float(sample.value)
    return values


def series_delta(after: Series, before: Series) -> Series:
    """Per series, what was observed between two scrapes."""
    return {key: h.minus(before.get(key)) for key, h in after.items()}


def latency_stats(latencies_s: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/max of per-pod latencies, in milliseconds."""
    if not latencies_s:
        return {"pods": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    ms = np.asarray(latencies_s) * MS_PER_S
    return {
        "pods": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p90_ms": round(float(np.percentile(ms, 90)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "max_ms": round(float(ms.max()), 1),
    }


# ---------------------------------------------------------------- the drain


#: The event kube-scheduler records once a binding succeeded (``finishBinding``).
SCHEDULED_REASON = "Scheduled"


def event_time_s(text: str) -> float:
    """An API ``MicroTime`` (``2026-11-24T00:10:00.123456Z``) in seconds since the epoch."""
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        raise ValueError(f"event time {text!r} has no time zone (MicroTime is UTC, ending in Z)")
    return stamp.timestamp()


def binding_times_s(
    events: Iterable[Mapping[str, Any]], names: Collection[str]
) -> dict[str, float]:
    """When kube-scheduler bound each pod of ``names``, from its ``Scheduled`` events
    (``events.k8s.io/v1``): ``eventTime`` is taken on the scheduler's own clock, in
    microseconds, right after the binding call returned. The earliest event of a pod wins
    (a pod is bound once; a second event would be a later series update)."""
    wanted = set(names)
    times: dict[str, float] = {}
    for event in events:
        regarding = event.get("regarding") or {}
        name = regarding.get("name")
        stamp = event.get("eventTime")
        if (
            event.get("reason") != SCHEDULED_REASON
            or regarding.get("kind") != "Pod"
            or name not in wanted
            or not stamp
        ):
            continue
        at_s = event_time_s(stamp)
        times[name] = min(at_s, times.get(name, at_s))
    return times


def drain_rate(times_s: Iterable[float]) -> float | None:
    """Pods bound per second between the first and the last binding.

    ``n`` bindings span ``n - 1`` intervals, so the rate is ``(n - 1) / (last - first)``;
    the scheduler's start-up (informer sync before the first binding) and the client that
    created the pods (all of them before the scheduler started) are outside that span.
    None with fewer than two bindings or no time between them."""
    ordered = sorted(times_s)
    if len(ordered) < 2 or ordered[-1] <= ordered[0]:
        return None
    return (len(ordered) - 1) / (ordered[-1] - ordered[0])


def per_pod_ms(pods_per_s: float | None) -> float | None:
    """What one pod costs the drain, in milliseconds (``1000 / rate``)."""
    return MS_PER_S / pods_per_s if pods_per_s else None


def _round_values(row: Mapping[str, Any] | None, key: str) -> list[float | None]:
    """A row's ``key`` (``pods_per_s``, ``p99_ms``) in each round, in round order."""
    if not row or row.get("skipped"):
        return []
    rounds = row.get("rounds")
    if rounds is None:  # a single measurement, before rounds
        return [row.get(key)]
    return [r.get(key) for r in rounds]


def cost_ms(row: Mapping[str, Any] | None, base: Mapping[str, Any] | None) -> dict[str, Any]:
    """What ``row`` adds to each pod's drain cost over ``base`` (``1000 / rate``), round by
    round (the rounds alternate, so round ``r`` of both ran side by side).

    The noise is ``base``'s own spread: how far its cost per pod moved from round to round
    (``noise_ms``, its highest less its lowest). A cost is *resolved* when every one of at
    least :data:`MIN_ROUNDS` rounds shows more than that noise: then its median is given.
    Otherwise the difference is within the noise and no median is given, only the
    rounds' range. A negative cost is never reported: a configuration that does strictly
    more work cannot be faster, so a negative difference is noise."""
    diffs = []
    base_ms = [per_pod_ms(v) for v in _round_values(base, "pods_per_s")]
    for mine, theirs in zip(_round_values(row, "pods_per_s"), base_ms, strict=False):
        a = per_pod_ms(mine)
        if a is not None and theirs is not None:
            diffs.append(a - theirs)
    known = [v for v in base_ms if v is not None]
    noise = round(max(known) - min(known), 2) if known else 0.0
    if not diffs:
        return {"resolved": False, "rounds": 0}
    spread = {
        "rounds": len(diffs),
        "range_ms": [round(min(diffs), 2), round(max(diffs), 2)],
        "noise_ms": noise,
    }
    if len(diffs) < MIN_ROUNDS or min(diffs) <= max(noise, 0.0):
        return {"resolved": False, **spread}
    return {"resolved": True, "median_ms": round(float(np.median(diffs)), 2), **spread}


def hop_split_ms(rows: Mapping[str, Any]) -> dict[str, Any] | None:
    """The extender's cost per pod, split by the no-op extender's drain rate.

    ``hop``: what the HTTP hop alone adds over the default (kube-scheduler encoding the
    request, the call, an answer of zeros); ``layersched``: what layersched's answer adds
    on top (its decoding, resolving and scoring); each a :func:`cost_ms`.
    ``default_ms``: the default's cost per pod at its median rate. None when a row is
    missing."""
    base, noop, names = (rows.get(c) for c in ("default", "extender-noop", "extender-node-names"))
    if base is None or noop is None or names is None:
        return None
    if any(r.get("skipped") or not r.get("pods_per_s") for r in (base, noop, names)):
        return None
    return {
        "default_ms": round(MS_PER_S / base["pods_per_s"], 2),
        "hop": cost_ms(noop, base),
        "layersched": cost_ms(names, noop),
    }


def summarise_rounds(measured: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One configuration's rounds as one row: the median of the drain rate and of the
    steady p50 and p99, their ranges, and every round's figures; the other details
    (resources, metrics, decisions) are the median round's (by drain rate). A round that
    failed is listed with its reason; a configuration none of whose rounds ran is
    skipped with the first reason."""
    ran = [r for r in measured if not r.get("skipped")]
    if not ran:
        return {"skipped": measured[0]["skipped"] if measured else "no round ran"}
    rates = [r["pods_per_s"] for r in ran if r.get("pods_per_s") is not None]
    ordered = sorted(ran, key=lambda r: r.get("pods_per_s") or 0.0)
    summary = dict(ordered[len(ordered) // 2])

    def median(key: str, digits: int = 1) -> float | None:
        values = [r[key] for r in ran if r.get(key) is not None]
        return round(float(np.median(values)), digits) if values else None

    def spread(key: str) -> list[float] | None:
        values = [r[key] for r in ran if r.get(key) is not None]
        return [min(values), max(values)] if values else None

    summary |= {
        "pods_per_s": median("pods_per_s") if rates else None,
        "p50_ms": median("p50_ms"),
        "p99_ms": median("p99_ms"),
        "pods_per_s_range": spread("pods_per_s"),
        "p99_ms_range": spread("p99_ms"),
        "scheduler_cpu_ms_per_pod": median("scheduler_cpu_ms_per_pod", digits=3),
        "scheduler_cpu_ms_per_pod_range": spread("scheduler_cpu_ms_per_pod"),
        "rounds": [
            {
                key: r.get(key)
                for key in (
                    "round",
                    "pods_per_s",
                    "p50_ms",
                    "p99_ms",
                    "scheduler_cpu_ms_per_pod",
                    "load_average_1m",
                    "start_up",
                    "rejected_429",
                    "skipped",
                )
                if key in r
            }
            for r in measured
        ],
    }
    return summary


def _ratios(row: Mapping[str, Any], base: Mapping[str, Any], key: str) -> list[float]:
    """``row``'s ``key`` over the default's, round by round (rounds both ran)."""
    return [
        mine / theirs
        for mine, theirs in zip(_round_values(row, key), _round_values(base, key), strict=False)
        if mine is not None and theirs
    ]


def judge(
    throughput: Sequence[float],
    p99: Sequence[float],
    target: Target,
    overloaded_by: str | None = None,
) -> dict[str, Any]:
    """One target's verdict from per-round ratios to the base of the same round.

    ``met``: every round's ratio is on the target's side; ``missed``: every round's is
    past it; ``inconclusive`` otherwise (the spread straddles the target: the effect is
    within the noise), with fewer than :data:`MIN_ROUNDS` rounds, or when
    ``overloaded_by`` says why the machine was too busy for any verdict."""
    entry: dict[str, Any] = {
        "throughput_ratio_min": target.throughput_ratio_min,
        "p99_ratio_max": target.p99_ratio_max,
        "rounds": min(len(throughput), len(p99)),
    }
    for name, values in (("throughput_ratio", throughput), ("p99_ratio", p99)):
        if values:
            entry[name] = round(float(np.median(values)), 2)
            entry[f"{name}_range"] = [round(min(values), 2), round(max(values), 2)]
    why = []
    if overloaded_by:
        why.append(overloaded_by)
    if entry["rounds"] < MIN_ROUNDS:
        why.append(f"{entry['rounds']} round(s) of both, fewer than {MIN_ROUNDS}")
    if not why:
        met_rate = min(throughput) >= target.throughput_ratio_min
        missed_rate = max(throughput) < target.throughput_ratio_min
        met_p99 = max(p99) <= target.p99_ratio_max
        missed_p99 = min(p99) > target.p99_ratio_max
        if missed_rate or missed_p99:
            entry["verdict"] = "missed"
        elif met_rate and met_p99:
            entry["verdict"] = "met"
        else:
            why.append("the rounds' spread straddles a target: the effect is within the noise")
    if why:
        entry["verdict"] = "inconclusive"
        entry["why"] = "; ".join(why)
    return entry


def target_verdicts(
    rows: Mapping[str, Any], overloaded_by: str | None = None
) -> dict[str, dict[str, Any]]:
    """Whether each configuration with a target met it at one N (:func:`judge`), from its
    per-round ratios to the default (rows that did not run, or a run without the default,
    give none)."""
    base = rows.get("default")
    verdicts: dict[str, dict[str, Any]] = {}
    if not base or base.get("skipped"):
        return verdicts
    for target in TARGETS:
        row = rows.get(target.config)
        if not row or row.get("skipped") or row.get("plugin_name", PLUGIN_NAME) != PLUGIN_NAME:
            continue  # not run, or a stand-in plugin checking the row's machinery
        verdicts[target.config] = judge(
            _ratios(row, base, "pods_per_s"), _ratios(row, base, "p99_ms"), target, overloaded_by
        )
    return verdicts


def cpu_verdicts(
    rows: Mapping[str, Any], overloaded_by: str | None = None
) -> dict[str, dict[str, Any]]:
    """Issue 43's CPU target for each plugin row at one N: kube-scheduler's CPU per pod in
    the drain at most :data:`CPU_PER_POD_RATIO_MAX` x the default's, round by round (met
    when every round is, missed when none is, else within the noise)."""
    base = rows.get("default")
    out: dict[str, dict[str, Any]] = {}
    if not base or base.get("skipped"):
        return out
    for config in PLUGIN_CONFIGURATIONS:
        row = rows.get(config)
        if not row or row.get("skipped") or row.get("plugin_name", PLUGIN_NAME) != PLUGIN_NAME:
            continue
        ratios = _ratios(row, base, "scheduler_cpu_ms_per_pod")
        if not ratios:
            continue  # results from before the CPU was measured per pod
        entry: dict[str, Any] = {
            "ratio_max": CPU_PER_POD_RATIO_MAX,
            "rounds": len(ratios),
            "ratio": round(float(np.median(ratios)), 2),
            "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
        }
        why = [overloaded_by] if overloaded_by else []
        if len(ratios) < MIN_ROUNDS:
            why.append(f"{len(ratios)} round(s), fewer than {MIN_ROUNDS}")
        elif not why and max(ratios) <= CPU_PER_POD_RATIO_MAX:
            entry["verdict"] = "met"
        elif not why and min(ratios) > CPU_PER_POD_RATIO_MAX:
            entry["verdict"] = "missed"
        elif not why:
            why.append("the rounds' spread straddles the target: the effect is within the noise")
        if why:
            entry["verdict"] = "inconclusive"
            entry["why"] = "; ".join(why)
        out[config] = entry
    return out


def cpu_verdict_text(verdict: Mapping[str, Any]) -> str:
    """One line of the README: the CPU per pod's per-round ratio, then the verdict."""
    low, high = verdict["ratio_range"]
    spread = f" (rounds {low:g}-{high:g}x)" if low != high else ""
    text = (
        f"kube-scheduler's CPU per pod in the drain {verdict['ratio']:g}x{spread} the "
        f"default's, per round (target <= {verdict['ratio_max']:g}x), {verdict['rounds']} "
        "rounds: "
    )
    if verdict["verdict"] == "inconclusive":
        return text + f"**inconclusive** ({verdict['why']}); no verdict."
    return text + f"**{verdict['verdict']}**."


def verdict_text(config: str, verdict: Mapping[str, Any]) -> str:
    """One line of the README: the ratios with their spread, then the verdict (none but
    *inconclusive* when there is no verdict to give)."""

    def ratio_text(name: str) -> str:
        if name not in verdict:
            return "-"
        low, high = verdict[f"{name}_range"]
        spread = f" (rounds {low:g}-{high:g}x)" if low != high else ""
        return f"{verdict[name]:g}x{spread}"

    text = (
        f"drain throughput {ratio_text('throughput_ratio')} of the default (target >= "
        f"{verdict['throughput_ratio_min']:g}x), steady p99 {ratio_text('p99_ratio')} "
        f"(target <= {verdict['p99_ratio_max']:g}x), {verdict['rounds']} rounds: "
    )
    if verdict["verdict"] == "inconclusive":
        return text + f"**inconclusive** ({verdict['why']}); no verdict."
    return text + f"**{verdict['verdict']}**."


# ---------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """A py-spy ``raw`` (collapsed stacks) profile: samples per frame and per thread."""

    samples: int
    #: Samples whose innermost frame is this one (the frame itself was running).
    self_samples: Mapping[str, int]
    #: Samples with this frame anywhere on the stack (counted once per stack).
    total_samples: Mapping[str, int]
    threads: Mapping[str, int]


_PY_SPY_COUNTS = re.compile(r"Samples: (?P<samples>\d+) Errors: (?P<errors>\d+)")


def py_spy_counts(log: str) -> tuple[int, int] | None:
    """``(samples, errors)`` from py-spy's last ``Samples: N Errors: M`` line, if any."""
    found = list(_PY_SPY_COUNTS.finditer(log))
    if not found:
        return None
    return int(found[-1]["samples"]), int(found[-1]["errors"])


def _thread_name(frame: str) -> str:
    """``thread (0x7f…): MainThread`` -> ``MainThread``; a pool's workers are one line
    (``ThreadPoolExecutor-0_3`` -> ``ThreadPoolExecutor-0``)."""
    name = frame.partition("): ")[2] or frame
    base, _, index = name.rpartition("_")
    return base if base and index.isdigit() else name


def collapsed_profile(text: str) -> Profile:
    """Read py-spy's ``--format raw`` output: one ``frame;frame;… count`` line per distinct
    stack, outermost frame first (with ``--threads``, a ``thread (…): name`` frame)."""
    self_samples: dict[str, int] = {}
    total_samples: dict[str, int] = {}
    threads: dict[str, int] = {}
    samples = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            raise ValueError(f"profile line {number}: expected 'frame;frame;... count': {line!r}")
        count = int(count_text)
        frames = stack.split(";")
        thread = "all"
        if frames[0].startswith("thread ("):
            thread = _thread_name(frames.pop(0))
        samples += count
        threads[thread] = threads.get(thread, 0) + count
        if not frames:
            continue
        self_samples[frames[-1]] = self_samples.get(frames[-1], 0) + count
        for frame in set(frames):
            total_samples[frame] = total_samples.get(frame, 0) + count
    return Profile(samples, self_samples, total_samples, threads)


def _top(
    counts: Mapping[str, int], samples: int, keep: int, totals: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """The ``keep`` frames with the most samples, with their share (and, given ``totals``,
    their total share too)."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:keep]
    top: list[dict[str, Any]] = []
    for frame, n in ranked:
        entry: dict[str, Any] = {"frame": frame, "samples": n, "share": round(n / samples, 4)}
        if totals is not None:
            entry["total_share"] = round(totals[frame] / samples, 4)
        top.append(entry)
    return top


def frame_package(frame: str) -> str:
    """Where a py-spy frame's code lives: ``f (aiohttp/web_protocol.py:438)`` -> ``aiohttp``;
    layersched's own code by subpackage (``layersched/core/layerindex.py`` ->
    ``layersched.core``); a top-level module by its name (``ssl.py`` -> ``ssl``)."""
    location = frame.rpartition(" (")[2].rstrip(")")
    path = location.rpartition(":")[0] or location
    parts = [part for part in path.split("/") if part]
    if not parts:
        return "?"
    if parts[0] == "layersched" and len(parts) > len(("layersched", "module.py")):
        return f"layersched.{parts[1]}"
    return parts[0].removesuffix(".py")


def package_shares(profile: Profile) -> dict[str, float]:
    """Self samples per package (:func:`frame_package`) as shares of all samples, largest
    first: what kind of work the process's time went to."""
    counts: dict[str, int] = {}
    for frame, n in profile.self_samples.items():
        package = frame_package(frame)
        counts[package] = counts.get(package, 0) + n
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return {package: round(n / profile.samples, 4) for package, n in ranked}


def profile_summary(profile: Profile, keep: int = PROFILE_KEPT_FRAMES) -> dict[str, Any]:
    """What the results keep of a profile: self time by package, and its top frames by
    self and by total samples."""
    if not profile.samples:
        return {"samples": 0, "threads": {}, "packages": {}, "self": [], "total": []}
    return {
        "samples": profile.samples,
        "threads": dict(sorted(profile.threads.items(), key=lambda item: -item[1])),
        "packages": package_shares(profile),
        "self": _top(profile.self_samples, profile.samples, keep, profile.total_samples),
        "total": _top(profile.total_samples, profile.samples, keep),
    }


#: One row of ``go tool pprof -top``: flat, flat%, sum%, cum, cum%, function.
_PPROF_ROW = re.compile(
    r"^\s*(?P<flat>[\d.]+)(?P<flat_unit>[a-z]*)\s+(?P<flat_pct>[\d.]+)%\s+[\d.]+%\s+"
    r"(?P<cum>[\d.]+)(?P<cum_unit>[a-z]*)\s+(?P<cum_pct>[\d.]+)%\s+(?P<function>\S.*)$"
)
_PPROF_TOTAL = re.compile(r"of (?P<total>[\d.]+)(?P<unit>[a-z]+) total")
_PPROF_UNITS_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}
#: Package paths shortened in Go function names (the vendor tree, the module).
_GO_PREFIXES = ("k8s.io/kubernetes/vendor/", "k8s.io/kubernetes/")


#: Where kube-scheduler 1.37's CPU goes, by stage: (stage, function as ``pprof_top`` names
#: it). Each function's cumulative share is its stage's share of the scheduler's CPU
#: (filter and score run in parallel workers, binding and events in goroutines of their
#: own: none of them is under ``ScheduleOne``).
GO_LANDMARKS = (
    ("scheduling cycle (serial part)", "pkg/scheduler.(*Scheduler).ScheduleOne"),
    ("filter plugins", "pkg/scheduler/framework/runtime.(*frameworkImpl).RunFilterPlugins"),
    ("score plugins", "pkg/scheduler/framework/runtime.(*frameworkImpl).runScorePlugin"),
    ("extender call", "pkg/scheduler.(*HTTPExtender).Prioritize"),
    (
        "LayerLocality PreScore",
        "layersched.io/kube-scheduler/pkg/layerlocality.(*LayerLocality).PreScore",
    ),
    (
        "LayerLocality Score",
        "layersched.io/kube-scheduler/pkg/layerlocality.(*LayerLocality).Score",
    ),
    ("ImageLocality Score", "pkg/scheduler/framework/plugins/imagelocality.(*ImageLocality).Score"),
    ("binding", "pkg/scheduler.(*Scheduler).bind"),
    ("informers' event handlers", "k8s.io/client-go/tools/cache.(*processorListener).run"),
    ("garbage collector", "runtime.gcBgMarkWorker"),
)
#: Functions kept from kube-scheduler's profile, by cumulative and by flat time.
GO_KEPT_FUNCTIONS = 25


def pprof_top(text: str) -> dict[str, Any]:
    """``go tool pprof -top`` text: the total CPU seconds sampled and each listed function's
    flat and cumulative shares of it, in the order pprof listed them."""
    total = _PPROF_TOTAL.search(text)
    functions = []
    for line in text.splitlines():
        row = _PPROF_ROW.match(line)
        if row is None:
            continue
        name = row["function"].strip()
        for prefix in _GO_PREFIXES:
            name = name.removeprefix(prefix)
        functions.append(
            {
                "function": name,
                "flat_share": round(float(row["flat_pct"]) / 100, 4),
                "cum_share": round(float(row["cum_pct"]) / 100, 4),
            }
        )
    return {
        "cpu_s": (
            round(float(total["total"]) * _PPROF_UNITS_S[total["unit"]], 3) if total else None
        ),
        "functions": functions,
    }


def go_profile_summary(top: Mapping[str, Any], keep: int = GO_KEPT_FUNCTIONS) -> dict[str, Any]:
    """What the results keep of kube-scheduler's profile (``pprof_top`` of every node pprof
    lists): the stages' shares, and the top functions by cumulative and by flat time."""
    functions = top["functions"]
    by_name = {entry["function"]: entry for entry in functions}
    return {
        "cpu_s": top["cpu_s"],
        "stages": [
            {
                "stage": stage,
                "function": function,
                "cum_share": (by_name.get(function) or {}).get("cum_share"),
            }
            for stage, function in GO_LANDMARKS
        ],
        "by_cum": sorted(functions, key=lambda e: -e["cum_share"])[:keep],
        "by_flat": sorted(functions, key=lambda e: -e["flat_share"])[:keep],
    }


# ---------------------------------------------------------------- verdicts and text


def pull_bytes(wanted: Mapping[str, int], held: Iterable[str] | set[str]) -> int:
    """Bytes of the pod's distinct layers (``digest -> size``) the node does not hold."""
    present = held if isinstance(held, set) else set(held)
    return sum(size for digest, size in wanted.items() if digest not in present)


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base`` rounded, or None when either is missing or the base is zero."""
    if value is None or not base:
        return None
    return round(value / base, 2)


def _fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def overloaded_by(record: Mapping[str, Any] | None) -> str | None:
    """Why a run is inconclusive by what else ran on the machine, or None."""
    return provenance.why_overloaded(record)


def _rounds_text(results: Mapping[str, Any], asked: int | Mapping[str, int]) -> str:
    """How many alternating rounds ran at each node count: all that were asked, or those a
    stopped run completed (its results file is written after every round). ``asked`` is
    one number for every node count (results before issue 43) or one per node count."""
    completed = results.get("rounds_completed") or {}
    if not isinstance(asked, Mapping):
        done = min(completed.values(), default=asked)
        if done >= asked:
            return f"{asked} alternating round(s)"
        return f"{done} of the {asked} alternating rounds asked (the run was stopped after it)"
    parts = []
    for n in results["node_counts"]:
        wanted = asked.get(str(n), 0)
        done = completed.get(str(n), wanted)
        text = f"{wanted} at {n:,} nodes"
        if done < wanted:
            text = f"{done} of the {wanted} asked at {n:,} nodes (the run was stopped)"
        parts.append(text)
    return "Alternating rounds: " + ", ".join(parts)


def _range(values: Sequence[float] | None, digits: int = 1) -> str:
    """`` (low-high)`` after a median, when there were rounds to span."""
    if not values or values[0] == values[1]:
        return ""
    return f" ({values[0]:,.{digits}f}-{values[1]:,.{digits}f})"


def _cost_text(cost: Mapping[str, Any], base: str) -> str:
    """A :func:`cost_ms` in words, with the rounds' spread: never a negative number, and
    no figure for a cost within the noise."""
    if not cost["resolved"]:
        if cost["rounds"] < MIN_ROUNDS:
            return f"is not resolved ({cost['rounds']} round(s): fewer than {MIN_ROUNDS})"
        high = cost["range_ms"][1]
        if high <= 0:
            return f"shows no cost in any of the {cost['rounds']} rounds (within the noise)"
        return (
            f"is within the noise (at most {high:g} ms in a round, against {base}'s own "
            f"spread of {cost['noise_ms']:g} ms from round to round)"
        )
    low, high = cost["range_ms"]
    return (
        f"adds {cost['median_ms']:g} ms (rounds {low:g}-{high:g} ms; {base}'s own spread "
        f"{cost['noise_ms']:g} ms)"
    )


def _per_round(row: Mapping[str, Any], base: Mapping[str, Any], key: str) -> str:
    """``row``'s ``key`` against the default's, round by round: the median of the rounds'
    ratios and their range (``0.88x (0.84-0.90)``), or ``-`` without rounds to compare."""
    ratios = _ratios(row, base, key) if base else []
    if not ratios:
        return "-"
    text = f"{float(np.median(ratios)):.2f}x"
    low, high = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
    return text if low == high else f"{text} ({low}-{high})"


def _algorithm_mean_ms(row: Mapping[str, Any]) -> float | None:
    """Mean of ``scheduler_scheduling_algorithm_duration_seconds`` over the drain (filter,
    score and the extender: the serial part of a scheduling cycle; binding runs aside)."""
    series = row["scheduler_metrics"]["drain"]["scheduling_algorithm"]
    return series[0]["mean_ms"] if series else None


def _answer_mean_ms(row: Mapping[str, Any]) -> float | None:
    """The extender's own mean time per ``prioritize`` over the drain (its histogram)."""
    requests = (row.get("extender_metrics") or {}).get("drain", {}).get("requests", {})
    return (requests.get("prioritize") or {}).get("mean_ms")


def start_text(start: str | None) -> str:
    """How the drain started (``bench_scheduler.py --start``); results from before the
    option started cold."""
    if start == "held":
        return (
            "The drain starts held: kube-scheduler starts while the benchmark holds its "
            "Lease, lists the nodes, the pods and (the plugin) the inventories, and binds "
            "nothing; once its CPU and the API server's have settled, the Lease is released, "
            "so the drain is the scheduling alone, as on a cluster whose scheduler has been up "
            "a while (its start-up is measured apart, below)."
        )
    return (
        "The drain starts cold: kube-scheduler schedules as soon as its informers have "
        "synced, so the after-effects of its start-up (the plugin's: listing every "
        "inventory) fall inside the drain."
    )


def etcd_place(filesystem: str | None) -> str | None:
    """Where a benchmark's etcd kept its data, from its recorded filesystem (both benches'
    blocks say it); None for results from before it was recorded."""
    if filesystem is None:
        return None
    return "in memory (tmpfs)" if filesystem == "tmpfs" else f"on disk ({filesystem})"


def etcd_text(filesystem: str | None) -> str:
    """The block's sentence on :func:`etcd_place` (every binding is a write to etcd)."""
    place = etcd_place(filesystem)
    if place is None:
        return ""
    if filesystem == "tmpfs":
        return f" etcd's data is {place}, so no binding waits on a disk's fsync."
    return f" etcd's data is {place}: a binding may wait on its fsync."


def rejections_text(n: int, rows: Mapping[str, Any]) -> str | None:
    """One line on the requests the API server rejected with 429 from each kube-scheduler's
    start to its drain's end, summed over the rounds (kube-scheduler is exempt from API
    Priority and Fairness in the benchmark, so none is expected); None for results from
    before they were counted."""
    counted = {
        config: [r["rejected_429"] for r in rows[config].get("rounds", []) if "rejected_429" in r]
        for config in CONFIGURATIONS
        if config in rows
    }
    counted = {config: values for config, values in counted.items() if values}
    if not counted:
        return None
    parts = [
        f"{LABELS[config]} {sum(values):,} in {len(values)} rounds"
        for config, values in counted.items()
    ]
    return (
        f"- **{n:,} nodes, requests the API server rejected with 429** (too many; "
        f"kube-scheduler is exempt from API Priority and Fairness here): " + "; ".join(parts) + "."
    )


def start_up_text(n: int, rows: Mapping[str, Any]) -> str | None:
    """One line on each configuration's start-up under a held start (medians of rounds):
    from the process's start until it and the API server settled, and kube-scheduler's and
    kube-apiserver's CPU seconds meanwhile; None when no row has one."""
    parts = []
    for config in CONFIGURATIONS:
        row = rows.get(config)
        ups = [
            r["start_up"]
            for r in (row or {}).get("rounds", [])
            if isinstance(r.get("start_up"), dict)
        ]
        if not ups:
            continue
        seconds = float(np.median([u["s"] for u in ups]))
        cpu = {
            proc: float(np.median([u["resources"].get(proc, {}).get("cpu_s", 0.0) for u in ups]))
            for proc in ("kube-scheduler", "kube-apiserver")
        }
        unsettled = sum(1 for u in ups if not u.get("settled"))
        parts.append(
            f"{LABELS[config]} {seconds:.1f} s (CPU: kube-scheduler {cpu['kube-scheduler']:.1f} s, "
            f"kube-apiserver {cpu['kube-apiserver']:.1f} s"
            + (f"; {unsettled} of {len(ups)} rounds had not settled" if unsettled else "")
            + ")"
        )
    if not parts:
        return None
    return (
        f"- **{n:,} nodes, start-up** (process start until it and the API server settled, "
        f"median of rounds; not in the drain): " + "; ".join(parts) + "."
    )


def markdown(results: Mapping[str, Any]) -> str:
    """The README block: one row per N and configuration, generated from the results."""
    settings = results["settings"]
    record = results.get("provenance")
    lines = []
    if settings.get("development"):
        note = settings["development"].rstrip(".")
        lines += [f"**Development run, not the final table:** {note}.", ""]
    busy = overloaded_by(record)
    if busy:
        lines += [
            f"**Inconclusive run:** {busy}. The figures are what was measured; no target "
            "verdict is given.",
            "",
        ]
    rounds = settings.get("rounds", 1)
    lines += [
        f"Generated by `make bench-scheduler` from `harness/results/scheduler.json`: the real "
        f"kube-scheduler {settings['kubernetes_version']} with etcd and kube-apiserver and no "
        f"kubelets, fake Ready nodes with {settings['images_per_node']} corpus images each. "
        f"Throughput: {settings['drain_pods']:,} pods queued before kube-scheduler starts, "
        f"drained (pods/s between the first and the last binding, from kube-scheduler's "
        f"`Scheduled` events). {start_text(settings.get('start'))}"
        f"{etcd_text(settings.get('etcd_filesystem'))} "
        f"Latency: {settings['steady_pods']:,} pods at "
        f"{settings['steady_rate_pods_per_s']:g} pods/s (creation to binding, seen by a "
        f"watch). {_rounds_text(results, rounds)} per configuration (every configuration "
        "once per round, the order rotated each round). Two kinds of figure: *median of "
        "rounds* columns give the rounds' median and range in brackets; *per-round ratio* "
        "columns divide each round's figure by the default's of the same round, then give "
        "those ratios' median and range (what the targets below judge). kube-scheduler's "
        "CPU per pod is its CPU seconds from the drain's first binding to its last, over the "
        "pods bound in that span. Run time "
        f"{results['run_time_s'] / 60:.1f} min. " + provenance.describe(record),
        "",
        "| nodes | configuration | drain pods/s (median of rounds) "
        "| drain: per-round ratio to default | p50 (steady) | p99 (steady, median of rounds) "
        "| p99: per-round ratio to default | scheduler CPU per pod (median of rounds) "
        "| scheduler CPU per pod: per-round ratio to default | algorithm mean "
        "| extender answer | pull per pod "
        "| CPU s in the drain: scheduler / extender / apiserver / etcd |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    notes: list[str] = []
    for n in results["node_counts"]:
        rows = results[str(n)]
        base = rows.get("default", {})
        for config in CONFIGURATIONS:
            row = rows.get(config)
            if row is None:
                continue
            if row.get("skipped"):
                lines.append(f"| {n:,} | {LABELS[config]} | not run: {row['skipped']} |||||||||||")
                continue
            cpu = row["resources"]["drain"]
            cpu_text = " / ".join(
                _fmt(cpu.get(proc, {}).get("cpu_s"), digits=1)
                for proc in ("kube-scheduler", "extender", "kube-apiserver", "etcd")
            )
            label = LABELS[config]
            if row.get("plugin_name", PLUGIN_NAME) != PLUGIN_NAME:
                label = (
                    f"stand-in Score plugin `{row['plugin_name']}` (checks the plugin row's "
                    f"machinery; not {PLUGIN_NAME})"
                )
            lines.append(
                f"| {n:,} | {label} | {_fmt(row['pods_per_s'])}"
                f"{_range(row.get('pods_per_s_range'))} "
                f"| {_per_round(row, base, 'pods_per_s')} "
                f"| {_fmt(row['p50_ms'], ' ms', 0)} | {_fmt(row['p99_ms'], ' ms', 0)}"
                f"{_range(row.get('p99_ms_range'), digits=0)} "
                f"| {_per_round(row, base, 'p99_ms')} "
                f"| {_fmt(row.get('scheduler_cpu_ms_per_pod'), ' ms', 2)}"
                f"{_range(row.get('scheduler_cpu_ms_per_pod_range'), digits=2)} "
                f"| {_per_round(row, base, 'scheduler_cpu_ms_per_pod')} "
                f"| {_fmt(_algorithm_mean_ms(row), ' ms')} "
                f"| {_fmt(_answer_mean_ms(row), ' ms', 2)} "
                f"| {_fmt(row['decision']['mean_pull_mib'], ' MiB')} | {cpu_text} |"
            )
            for kind in ("drain", "steady"):
                phase = row[kind]
                if not phase["complete"]:
                    notes.append(
                        f"- **{n:,} nodes, {config}:** {kind}: {phase['bound']} of "
                        f"{phase['pods']} pods bound within the phase timeout (the rate is "
                        "over the bound pods)."
                    )
            drain = row["drain"]
            if drain["binding_source"] != "events":
                notes.append(
                    f"- **{n:,} nodes, {config}:** the drain rate is the watch's "
                    f"({drain['events']} `Scheduled` events of {drain['bound']} bindings were "
                    "found)."
                )
    lines.append("")
    for n in results["node_counts"]:
        for config, verdict in target_verdicts(results[str(n)], busy).items():
            lines.append(f"- **{n:,} nodes, `{config}` targets:** {verdict_text(config, verdict)}")
        for config, verdict in cpu_verdicts(results[str(n)], busy).items():
            lines.append(f"- **{n:,} nodes, `{config}` CPU:** {cpu_verdict_text(verdict)}")
    for n in results["node_counts"]:
        rows = results[str(n)]
        base = rows.get("default") or {}
        for config in PLUGIN_CONFIGURATIONS:
            row = rows.get(config)
            if not row or row.get("skipped") or base.get("skipped") or not base.get("pods_per_s"):
                continue
            lines.append(
                f"- **{n:,} nodes, `{config}`, each pod's cost in the drain** (1,000 / pods/s, "
                f"round by round against the default's): default "
                f"{MS_PER_S / base['pods_per_s']:.2f} ms; the plugin "
                f"{_cost_text(cost_ms(row, base), 'the default')}."
            )
    for n in results["node_counts"]:
        for line in (start_up_text(n, results[str(n)]), rejections_text(n, results[str(n)])):
            if line:
                lines.append(line)
    for n in results["node_counts"]:
        split = hop_split_ms(results[str(n)])
        if split:
            lines.append(
                f"- **{n:,} nodes, each pod's cost in the drain** (1,000 / pods/s): default "
                f"{split['default_ms']:g} ms; the extender hop alone (no-op extender) "
                f"{_cost_text(split['hop'], 'the default')}; layersched's answer on top of "
                f"the hop {_cost_text(split['layersched'], 'the no-op extender')}."
            )
    lines.extend(notes)
    return "\n".join(lines)


def _frame_text(frame: str) -> str:
    """A frame for a Markdown table cell (pipes escaped, code-formatted)."""
    return "`" + frame.replace("|", "\\|").replace("`", "'") + "`"


def gil_share(samples: int, prof: Mapping[str, Any]) -> float:
    """Share of the drain the extender ran Python: ``--gil`` samples over the samples the
    rate gives in the drain's span (the extender idles before the first request and after
    the last, so samples outside the span are few)."""
    expected = prof["rate_hz"] * (prof["drain"]["span_s"] or prof["sampled_s"])
    return samples / expected if expected else 0.0


def profile_markdown(results: Mapping[str, Any]) -> str:
    """The docs block: each profiled configuration's top frames, from the results."""
    profiles = results.get("profiles") or {}
    if not any(profiles.values()):
        return "No profile was taken in this run (`--profile ''`)."
    settings = results["settings"]
    lines = [
        f"Generated by `make bench-scheduler` from `harness/results/scheduler.json`: one extra "
        f"drain of {settings['drain_pods']:,} pods per profiled configuration (not a measured "
        "row), with kube-scheduler's Go CPU profile and, where there is an extender, "
        f"`py-spy record --rate {settings['profile_rate_hz']} --function --threads --gil "
        f"--nonblocking` attached to it. `--gil` keeps the samples of "
        "the thread holding the GIL, i.e. running Python, so a thread waiting on a socket is "
        "never counted; shares are of those samples. *Self*: the frame itself was running; "
        "*total*: the frame was anywhere on the stack."
    ]
    if settings.get("development"):
        lines += ["", f"**Development run:** {settings['development'].rstrip('.')}."]
    for n in results["node_counts"]:
        for config, prof in (profiles.get(str(n)) or {}).items():
            lines += ["", f"#### {n:,} nodes, `{config}`", ""]
            if prof.get("skipped"):
                lines.append(f"Not profiled: {prof['skipped']}")
                continue
            if "extender" not in prof:  # no extender: kube-scheduler's profile alone
                lines += [
                    f"No extender: kube-scheduler's own profile, drain with the profile "
                    f"taken {_fmt(prof['drain']['pods_per_s'])} pods/s (unprofiled: "
                    f"{_fmt((results[str(n)].get(config) or {}).get('pods_per_s'))}).",
                    "",
                    *_go_profile_lines(prof.get("kube_scheduler") or {}),
                ]
                continue
            summary = prof["extender"]
            threads = ", ".join(
                f"{name} {count / summary['samples']:.0%}"
                for name, count in summary["threads"].items()
            )
            lines += [
                f"{summary['samples']:,} samples; the GIL was held "
                f"{gil_share(summary['samples'], prof):.0%} of the drain (first to last "
                f"binding, {prof['drain']['span_s']:g} s); drain with the profiler attached "
                f"{_fmt(prof['drain']['pods_per_s'])} pods/s (unprofiled: "
                f"{_fmt((results[str(n)].get(config) or {}).get('pods_per_s'))}); "
                f"{prof.get('sample_errors', '?')} samples lost. Threads: {threads}.",
                "",
                "Self time by package: "
                + ", ".join(
                    f"{package} {share:.0%}"
                    for package, share in summary["packages"].items()
                    if share >= PROFILE_MIN_PACKAGE_SHARE
                )
                + ".",
                "",
                "| frame (by self time) | self | total |",
                "|---|---:|---:|",
            ]
            for entry in summary["self"][:PROFILE_TOP_FRAMES]:
                lines.append(
                    f"| {_frame_text(entry['frame'])} | {entry['share']:.1%} "
                    f"| {entry['total_share']:.1%} |"
                )
            # frames on every sample's stack are the entry chain (runpy, main, the event
            # loop's run_forever): true of any program, so left out
            below_root = [e for e in summary["total"] if e["samples"] < summary["samples"]]
            lines += ["", "| frame (by total time, entry chain left out) | total |", "|---|---:|"]
            lines += [
                f"| {_frame_text(entry['frame'])} | {entry['share']:.1%} |"
                for entry in below_root[:PROFILE_TOP_FRAMES]
            ]
            lines += ["", *_go_profile_lines(prof.get("kube_scheduler") or {})]
    return "\n".join(lines)


def _go_profile_lines(go: Mapping[str, Any]) -> list[str]:
    """kube-scheduler's side of the same drain (Go's CPU profile): by stage, and its top
    functions by flat (self) time."""
    if go.get("skipped"):
        return [f"kube-scheduler's CPU profile: not taken ({go['skipped']})."]
    summary = go.get("summary")
    if not summary:
        return ["kube-scheduler's CPU profile: not taken."]
    lines = [
        f"kube-scheduler in the same drain (`/debug/pprof/profile` for {go['seconds']} s from "
        f"the first binding, {_fmt(summary['cpu_s'], digits=2)} CPU s sampled), by stage "
        "(cumulative share of its CPU; `-`: under pprof's cut-off):",
        "",
        "| stage | function | cum |",
        "|---|---|---:|",
    ]
    lines += [
        f"| {entry['stage']} | {_frame_text(entry['function'])} "
        f"| {'-' if entry['cum_share'] is None else format(entry['cum_share'], '.1%')} |"
        for entry in summary["stages"]
    ]
    lines += ["", "| function (by flat time) | flat | cum |", "|---|---:|---:|"]
    lines += [
        f"| {_frame_text(entry['function'])} | {entry['flat_share']:.1%} "
        f"| {entry['cum_share']:.1%} |"
        for entry in summary["by_flat"][:PROFILE_TOP_FRAMES]
    ]
    return lines


def plot(results: Mapping[str, Any], path: Path) -> None:
    """Drain throughput and steady-rate latency per configuration and N, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    node_counts = [str(n) for n in results["node_counts"]]
    fig, (ax_rate, ax_latency) = plt.subplots(1, 2, figsize=(12, 4.4))
    width = 0.8 / len(CONFIGURATIONS)
    positions = np.arange(len(node_counts))
    colors = plt.get_cmap("tab10")
    for i, config in enumerate(CONFIGURATIONS):
        rows = [results[n].get(config) or {} for n in node_counts]
        rates = [r.get("pods_per_s") or 0.0 for r in rows]
        p50 = [r.get("p50_ms") or 0.0 for r in rows]
        p99 = [r.get("p99_ms") or 0.0 for r in rows]
        x = positions + (i - (len(CONFIGURATIONS) - 1) / 2) * width
        color = colors(i)
        ax_rate.bar(x, rates, width, label=config, color=color)
        # one color per configuration: p99 wide and pale, p50 narrow and solid
        ax_latency.bar(x, p99, width, label=f"{config} p99", color=color, alpha=0.35)
        ax_latency.bar(x, p50, width * 0.5, label=f"{config} p50", color=color)
        for xi, row in zip(x, rows, strict=True):
            if not row.get("pods_per_s"):
                ax_rate.text(xi, 0, " not run", rotation=90, ha="center", va="bottom", fontsize=7)
    for ax in (ax_rate, ax_latency):
        ax.set_xticks(positions, [f"{int(n):,} nodes" for n in node_counts])
    ax_rate.set_ylabel("pods bound per second (queue drain)")
    ax_rate.set_title("Throughput")
    ax_rate.legend(fontsize=8)
    ax_latency.set_yscale("log")
    ax_latency.set_ylabel("creation -> bound, ms (steady rate)")
    ax_latency.set_title("Scheduling latency")
    ax_latency.legend(fontsize=6, ncol=2)
    title = (
        f"kube-scheduler {results['settings']['kubernetes_version']} with and without "
        f"layersched (no kubelets, "
        f"{(results.get('provenance') or {}).get('machine', {}).get('cpus', '?')}-core machine)"
    )
    if results["settings"].get("development"):
        title += " - DEVELOPMENT RUN"
    if overloaded_by(results.get("provenance")):
        title += " - INCONCLUSIVE (load over the cores)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=plot_metadata(results.get("provenance")))
    plt.close(fig)
