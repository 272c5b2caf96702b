"""Plots from a simulation report (matplotlib, Agg backend: no display needed).

``simulation-cdf-<setting>.png``: CDF of each strategy's *pull wait* (startup
minus the fixed start overhead, i.e. queue + pull wait), one per setting, on a
symlog axis so that pods that pulled nothing (wait 0) and the seconds-long
tails are both visible;
``simulation-bytes.png``: bytes pulled per strategy and setting;
``simulation-scale.png``: per-decision scoring time at scale against the
budget, horizontal bars on a log axis with their values written on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

from layersched.core.errors import InputError
from layersched_harness.evidence.results import plot_metadata

GB = 1e9
#: Resolution of the written PNGs; enough to read tick labels in a README.
DPI = 120
#: Below this wait the symlog axis is linear: 10 ms is far under any real pull of a
#: layer, so "pulled nothing" (0) and the shortest pulls stay apart.
LINEAR_BELOW_S = 0.01
#: Value labels start this factor right of the p99 marker (log axis).
_LABEL_OFFSET = 1.25
#: Line styles cycled with the colours so overlapping curves stay distinguishable.
_STYLES = ("-", "--", "-.", ":", (0, (5, 1)))


def _save(fig: Any, path: Path, record: dict[str, Any] | None) -> Path:
    try:
        fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata=plot_metadata(record))
    except OSError as err:
        raise InputError(f"writing plot {path}: {err.strerror}") from err
    finally:
        plt.close(fig)
    return path


def _cdf(name: str, body: dict[str, Any], out_dir: Path, record: dict[str, Any] | None) -> Path:
    cdf = body["pull_cdf_s"]
    fractions = [p / 100 for p in cdf["percentiles"]]
    overhead_s = body["params"].get("cluster", {}).get("start_overhead_s", 0)
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for i, label in enumerate(body["mean_pull_s"]):
        values = [max(v, 0.0) for v in cdf[label]]
        # the highest percentile still at 0 s: the share of pods that pulled nothing
        zero = max((p for p, v in zip(fractions, values, strict=True) if v == 0.0), default=0.0)
        ax.step(
            values,
            fractions,
            where="post",
            linestyle=_STYLES[i % len(_STYLES)],
            linewidth=1.6,
            label=(f"{label}: mean {body['mean_pull_s'][label]:.3f} s, ~{zero:.0%} waited 0 s"),
        )
    ax.set_xscale("symlog", linthresh=LINEAR_BELOW_S)
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel(
        f"pull wait = startup - {overhead_s:g} s start overhead (s, symlog: linear below "
        f"{LINEAR_BELOW_S:g} s)"
    )
    ax.set_ylabel("fraction of pods")
    ax.set_title(f"Pull-wait CDF per strategy - {name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return _save(fig, out_dir / f"simulation-cdf-{name}.png", record)


def _bytes(settings: dict[str, Any], out_dir: Path, record: dict[str, Any] | None) -> Path:
    names = list(settings)
    labels = list(dict.fromkeys(k for body in settings.values() for k in body["bytes_pulled"]))
    height = 0.8 / max(len(labels), 1)
    fig, ax = plt.subplots(figsize=(7.2, 1.2 + 0.9 * len(names) * max(len(labels), 1) / 4))
    for j, label in enumerate(labels):
        rows = [i for i, n in enumerate(names) if label in settings[n]["bytes_pulled"]]
        ys = [i + (j - (len(labels) - 1) / 2) * height for i in rows]
        xs = [settings[names[i]]["bytes_pulled"][label] / GB for i in rows]
        bars = ax.barh(ys, xs, height, label=label)
        ax.bar_label(bars, labels=[f"{x:,.0f}" for x in xs], fontsize="x-small", padding=2)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("bytes pulled over the run (GB)")
    ax.set_title("Bytes pulled per strategy and setting")
    ax.margins(x=0.12)
    ax.legend(
        fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0)
    )  # outside: no bar hidden
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, out_dir / "simulation-bytes.png", record)


def _scale(scale: dict[str, Any], out_dir: Path, record: dict[str, Any] | None) -> Path:
    timings = scale["decision_time_ms"]
    labels = list(timings)
    ys = range(len(labels))
    fig, ax = plt.subplots(figsize=(7.2, 1.2 + 0.55 * len(labels)))
    means = [timings[k]["mean"] for k in labels]
    p99s = [timings[k]["p99"] for k in labels]
    ax.barh(ys, means, 0.6, label="mean")
    ax.scatter(p99s, ys, color="black", marker="|", s=200, zorder=3, label="p99")
    for y, mean, p99 in zip(ys, means, p99s, strict=True):
        ax.text(
            p99 * _LABEL_OFFSET,
            y,
            f"mean {mean:.3f} ms, p99 {p99:.3f} ms",
            va="center",
            fontsize="small",
        )
    ax.axvline(scale["budget_ms"], color="red", linestyle="--", label="budget")
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(means) / 3, scale["budget_ms"] * 2)
    ax.set_xlabel("ms per scoring decision (log scale)")
    ax.set_title(
        f"Scoring cost over {scale['params']['nodes']:,} nodes "
        f"(budget {scale['budget_ms']:g} ms per pod)"
    )
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return _save(fig, out_dir / "simulation-scale.png", record)


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write every plot of ``report`` into ``out_dir``, each marked with the report's
    provenance (commit and date); returns the paths."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"creating the plot directory {out_dir}: {err.strerror}") from err
    settings: dict[str, Any] = report["settings"]
    record = report.get("provenance")
    written = [_cdf(name, body, out_dir, record) for name, body in settings.items()]
    if settings:
        written.append(_bytes(settings, out_dir, record))
    if report.get("scale"):
        written.append(_scale(report["scale"], out_dir, record))
    return written
