"""Pure parts of the scheduler benchmark (``bench/bench_scheduler.py``).

Nothing here talks to a process: Prometheus histograms read from ``/metrics`` text
(differences between two scrapes, quantiles the way ``histogram_quantile`` estimates
them), latency statistics, the bytes a pod would pull on a node, and what the results
become: the README block and the plot. The unit tests hold the README block to the
committed ``bench/results/scheduler.json``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

#: The README block this module writes (``<!-- scheduler:begin -->``).
BLOCK = "scheduler"
#: The configurations, in the order every table and plot shows them.
CONFIGURATIONS = ("default", "extender-nodes", "extender-node-names")
LABELS = {
    "default": "default profile (ImageLocality included)",
    "extender-nodes": "+ layersched extender, full `Nodes`",
    "extender-node-names": "+ layersched extender, `NodeNames` + live watch",
}
#: Targets from issue 12, as ratios to the default profile within one run.
TARGET_THROUGHPUT_RATIO = 0.8
TARGET_P99_RATIO = 1.5
MS_PER_S = 1000.0
#: A burst created in at least this share of its span was limited by the client.
CLIENT_BOUND_SHARE = 0.9
MIB = 1024 * 1024


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


def markdown(results: Mapping[str, Any]) -> str:
    """The README block: one row per N and configuration, generated from the results."""
    settings = results["settings"]
    lines = [
        f"Generated by `make bench-scheduler` from `bench/results/scheduler.json`: the real "
        f"kube-scheduler {settings['kubernetes_version']} with etcd and kube-apiserver and no "
        f"kubelets, fake Ready nodes with {settings['images_per_node']} corpus images each, "
        f"a burst of {settings['burst_pods']} pods for throughput and "
        f"{settings['steady_pods']} pods at {settings['steady_rate_pods_per_s']:g} pods/s "
        f"for latency (creation to binding, seen by a watch), on a shared "
        f"{results['machine']['cpus']}-core machine; run time "
        f"{results['run_time_s'] / 60:.1f} min.",
        "",
        "| nodes | configuration | pods/s (burst) | vs default | p50 (steady) | p99 (steady) "
        "| p99 vs default | algorithm mean | pull per pod "
        "| CPU s: scheduler / extender / apiserver / etcd |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
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
                lines.append(f"| {n:,} | {LABELS[config]} | not run: {row['skipped']} ||||||||")
                continue
            cpu = row["resources"]
            cpu_text = " / ".join(
                _fmt(cpu.get(proc, {}).get("cpu_s"), digits=1)
                for proc in ("kube-scheduler", "extender", "kube-apiserver", "etcd")
            )
            lines.append(
                f"| {n:,} | {LABELS[config]} | {_fmt(row['pods_per_s'])} "
                f"| {_fmt(ratio(row['pods_per_s'], base.get('pods_per_s')), 'x', 2)} "
                f"| {_fmt(row['p50_ms'], ' ms', 0)} | {_fmt(row['p99_ms'], ' ms', 0)} "
                f"| {_fmt(ratio(row['p99_ms'], base.get('p99_ms')), 'x', 2)} "
                f"| {_fmt(_algorithm_mean_ms(row), ' ms')} "
                f"| {_fmt(row['decision']['mean_pull_mib'], ' MiB')} | {cpu_text} |"
            )
            burst = row["burst"]
            if burst["created_in_s"] >= CLIENT_BOUND_SHARE * burst["span_s"]:
                notes.append(
                    f"- **{n:,} nodes, {config}:** the burst was bound as fast as the client "
                    f"created it ({burst['created_in_s']:g} s of {burst['span_s']:g} s): "
                    "its pods/s is the client's rate, a lower bound on the scheduler's; "
                    "the algorithm mean is the scheduler's own serial cost per pod."
                )
            partial = row.get("partial")
            if partial:
                notes.append(f"- **{n:,} nodes, {config}:** {partial}")
    lines.append("")
    targets = results.get("targets", {})
    for n in results["node_counts"]:
        verdict = targets.get(str(n))
        if verdict:
            lines.append(f"- **{n:,} nodes, `NodeNames` targets:** {verdict}")
    lines.extend(notes)
    return "\n".join(lines)


def _algorithm_mean_ms(row: Mapping[str, Any]) -> float | None:
    """Mean of ``scheduler_scheduling_algorithm_duration_seconds`` (filter, score and
    the extender: the serial part of a scheduling cycle; binding runs aside)."""
    series = row["scheduler_metrics"]["scheduling_algorithm"]
    return series[0]["mean_ms"] if series else None


def target_verdict(rows: Mapping[str, Any]) -> str | None:
    """Whether ``NodeNames`` met the issue's ratios at one N, in words."""
    base, names = rows.get("default"), rows.get("extender-node-names")
    if not base or not names or names.get("skipped"):
        return None
    throughput = ratio(names["pods_per_s"], base["pods_per_s"])
    p99 = ratio(names["p99_ms"], base["p99_ms"])
    throughput_ok = throughput is not None and throughput >= TARGET_THROUGHPUT_RATIO
    p99_ok = p99 is not None and p99 <= TARGET_P99_RATIO
    return (
        f"throughput {throughput}x default (target >= {TARGET_THROUGHPUT_RATIO}x: "
        f"{'met' if throughput_ok else 'MISSED'}), p99 {p99}x default "
        f"(target <= {TARGET_P99_RATIO}x: {'met' if p99_ok else 'MISSED'})"
    )


def plot(results: Mapping[str, Any], path: Path) -> None:
    """Throughput and steady-rate latency per configuration and N, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    node_counts = [str(n) for n in results["node_counts"]]
    fig, (ax_rate, ax_latency) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(CONFIGURATIONS)
    positions = np.arange(len(node_counts))
    for i, config in enumerate(CONFIGURATIONS):
        rows = [results[n].get(config) or {} for n in node_counts]
        rates = [r.get("pods_per_s") or 0.0 for r in rows]
        p50 = [r.get("p50_ms") or 0.0 for r in rows]
        p99 = [r.get("p99_ms") or 0.0 for r in rows]
        x = positions + (i - 1) * width
        ax_rate.bar(x, rates, width, label=config)
        ax_latency.bar(x, p99, width, label=f"{config} p99", alpha=0.45)
        ax_latency.bar(x, p50, width * 0.5, label=f"{config} p50")
    for ax in (ax_rate, ax_latency):
        ax.set_xticks(positions, [f"{int(n):,} nodes" for n in node_counts])
    ax_rate.set_ylabel("pods bound per second (burst)")
    ax_rate.set_title("Throughput")
    ax_rate.legend(fontsize=8)
    ax_latency.set_yscale("log")
    ax_latency.set_ylabel("creation -> bound, ms (steady rate)")
    ax_latency.set_title("Scheduling latency")
    ax_latency.legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"kube-scheduler {results['settings']['kubernetes_version']} with and without "
        "layersched (no kubelets, shared 2-core machine)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
