"""Presenting ``reports/scenario.json``: a printed table and a comparison plot."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from layersched.testbed.scenario import P1_AGAIN, P2

BITS_PER_BYTE = 8
MIB = 1024 * 1024


def _again_pulls(trials: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for t in trials for p in t["pulls"] if p["pod"] == P1_AGAIN]


def link_optimum_s(report: Mapping[str, Any]) -> float:
    """Seconds to move only L3 over the link: the best ``P1-again`` can do."""
    l3_bytes = int(report["layers"]["L3"]["size"])
    return l3_bytes * BITS_PER_BYTE / float(report["link_rate_bits_per_s"])


def print_table(report: Mapping[str, Any], console: Console | None = None) -> None:
    """One row per strategy: placements, t3 scores, P1-again pull time and bytes."""
    table = Table(title=f"seed scenario on the {report['driver']} testbed")
    for column in ("strategy", "P1-again on P2's node", "t3 scores (trial 1)",
                   "P1-again s (mean)", "P1-again MiB (mean)", "trials"):  # fmt: skip
        left = column in ("strategy", "t3 scores (trial 1)")
        table.add_column(column, justify="left" if left else "right", no_wrap=left)
    for strategy, data in report["strategies"].items():
        trials = data["trials"]
        pulls = _again_pulls(trials)
        same = sum(t["placements"][P1_AGAIN] == t["placements"][P2] for t in trials)
        scores = ", ".join(f"{n}={s}" for n, s in sorted(trials[0]["scores_t3"].items()))
        table.add_row(
            strategy,
            f"{same}/{len(trials)}",
            scores,
            f"{statistics.fmean(p['seconds'] for p in pulls):.2f}" if pulls else "-",
            f"{statistics.fmean(p['bytes'] for p in pulls) / MIB:.2f}" if pulls else "-",
            str(len(trials)),
        )
    console = console or Console()
    console.print(table)
    console.print(
        f"link-limited optimum for P1-again (L3 only at "
        f"{report['link_rate_bits_per_s'] / 1e6:g} Mbit/s): {link_optimum_s(report):.2f} s, "
        f"{report['layers']['L3']['size'] / MIB:.2f} MiB"
    )


def plot(report: Mapping[str, Any], path: Path) -> None:
    """Bar charts of P1-again pull time and bytes per strategy, optimum marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = list(report["strategies"])
    pulls = {s: _again_pulls(report["strategies"][s]["trials"]) for s in strategies}
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, scale, label, optimum in (
        (ax_t, "seconds", 1.0, "P1-again pull time (s)", link_optimum_s(report)),
        (
            ax_b,
            "bytes",
            1 / MIB,
            "P1-again bytes pulled (MiB)",
            report["layers"]["L3"]["size"] / MIB,
        ),
    ):
        for i, s in enumerate(strategies):
            values = [p[key] * scale for p in pulls[s]]
            ax.bar(i, statistics.fmean(values) if values else 0, color=f"C{i}", alpha=0.6)
            ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
        ax.axhline(optimum, color="red", linestyle="--", label="link-limited optimum (L3 only)")
        ax.set_xticks(range(len(strategies)), strategies)
        ax.set_ylabel(label)
        ax.legend(loc="best", fontsize="small", framealpha=0.9)
    fig.suptitle(
        f"seed scenario, {report['driver']} testbed, "
        f"{report['link_rate_bits_per_s'] / 1e6:g} Mbit/s links"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
