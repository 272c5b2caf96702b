"""Plots from a simulation report (matplotlib, Agg backend: no display needed).

``simulation-cdf-<setting>.png``: startup-time CDF per strategy, one per setting;
``simulation-bytes.png``: bytes pulled per strategy and setting;
``simulation-scale.png``: per-decision scoring time at scale, against the budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

from layersched.core.errors import InputError

GB = 1e9
#: Resolution of the written PNGs; enough to read tick labels in a README.
DPI = 120
#: Startup times are floored here on the log axis (every start costs the overhead anyway).
MIN_PLOTTED_S = 0.1


def _save(fig: Any, path: Path) -> Path:
    try:
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    except OSError as err:
        raise InputError(f"writing plot {path}: {err.strerror}") from err
    finally:
        plt.close(fig)
    return path


def _cdf(name: str, body: dict[str, Any], out_dir: Path) -> Path:
    cdf = body["startup_cdf_s"]
    fractions = [p / 100 for p in cdf["percentiles"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label in body["mean_startup_s"]:
        values = [max(v, MIN_PLOTTED_S) for v in cdf[label]]
        ax.plot(values, fractions, label=f"{label} (mean {body['mean_startup_s'][label]:.2f} s)")
    ax.set_xscale("log")
    ax.set_xlabel("pod startup time (s, log scale)")
    ax.set_ylabel("fraction of pods")
    ax.set_title(f"Startup latency CDF - {name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return _save(fig, out_dir / f"simulation-cdf-{name}.png")


def _bytes(settings: dict[str, Any], out_dir: Path) -> Path:
    names = list(settings)
    labels = list(next(iter(settings.values()))["bytes_pulled"])
    width = 0.8 / max(len(labels), 1)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for j, label in enumerate(labels):
        xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(names))]
        ys = [settings[n]["bytes_pulled"].get(label, 0) / GB for n in names]
        ax.bar(xs, ys, width, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("bytes pulled (GB)")
    ax.set_title("Bytes pulled per strategy")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, out_dir / "simulation-bytes.png")


def _scale(scale: dict[str, Any], out_dir: Path) -> Path:
    timings = scale["decision_time_ms"]
    labels = list(timings)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.bar(labels, [timings[k]["mean"] for k in labels], label="mean")
    ax.scatter(labels, [timings[k]["p99"] for k in labels], color="black", zorder=3, label="p99")
    ax.axhline(scale["budget_ms"], color="red", linestyle="--", label="budget")
    ax.set_ylabel("ms per decision")
    ax.set_title(f"Scoring cost over {scale['params']['nodes']:,} nodes")
    ax.legend(fontsize="small")
    return _save(fig, out_dir / "simulation-scale.png")


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write every plot of ``report`` into ``out_dir``; returns the paths."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"creating the plot directory {out_dir}: {err.strerror}") from err
    settings: dict[str, Any] = report["settings"]
    written = [_cdf(name, body, out_dir) for name, body in settings.items()]
    if settings:
        written.append(_bytes(settings, out_dir))
    if report.get("scale"):
        written.append(_scale(report["scale"], out_dir))
    return written
