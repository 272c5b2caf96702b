"""``harness/results/simulation.json``: writing, reading, the Markdown results snippet, and
putting that snippet into documents between markers.

The README and ``docs/simulator.md`` carry the snippet between
:data:`BEGIN_MARKER` and :data:`END_MARKER`; ``layersched simulate
--markdown-into FILE`` (the full tables) and ``--summary-into FILE`` (the README's
short block) rewrite what lies between them, so the committed text is always
``markdown``/``summary_markdown`` of ``read_report(...)`` (a unit test holds both files to it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from layersched import generated
from layersched.core.errors import InputError
from layersched_harness.sim.settings import BASELINE, LAYER_LOCALITY, PULL_TIME, RANDOM

GB = 1e9
BLOCK = "simulation"
BEGIN_MARKER, END_MARKER = generated.markers(BLOCK)
#: The report path the committed documents are generated from.
DEFAULT_REPORT = "harness/results/simulation.json"

#: Per-strategy maps every simulated setting carries (what :func:`markdown` reads).
_SETTING_MAPS = (
    "mean_startup_s",
    "p95_startup_s",
    "mean_pull_s",
    "bytes_pulled",
    "load_imbalance",
    "queued_pods",
    "pull_cdf_s",
)
_SCALE_KEYS = ("params", "budget_ms", "decision_time_ms")


def write_report(report: dict[str, Any], path: Path) -> None:
    """Write the report as indented JSON, creating the directory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    except OSError as err:
        raise InputError(f"writing the simulation report to {path}: {err.strerror}") from err


def _check_report(document: Any, path: Path) -> dict[str, Any]:
    rerun = "rerun 'make simulate' (or 'layersched simulate --out ...') to rewrite it"
    if not isinstance(document, dict) or not isinstance(document.get("settings"), dict):
        raise InputError(f"{path}: no 'settings' object: not a simulation report; {rerun}")
    for name, body in document["settings"].items():
        if not isinstance(body, dict):
            raise InputError(f"{path}: settings.{name} is not an object; {rerun}")
        for key in ("params", *_SETTING_MAPS):
            if not isinstance(body.get(key), dict):
                raise InputError(
                    f"{path}: settings.{name}.{key} is missing or of the wrong type "
                    f"(a report from an older layersched?); {rerun}"
                )
        strategies = set(body["mean_startup_s"])
        for key in _SETTING_MAPS:
            lacking = strategies - set(body[key])
            if lacking:
                raise InputError(
                    f"{path}: settings.{name}.{key} lacks {', '.join(sorted(lacking))}; {rerun}"
                )
    scale = document.get("scale")
    if scale is not None:
        missing = [k for k in _SCALE_KEYS if not isinstance(scale, dict) or k not in scale]
        if missing:
            raise InputError(f"{path}: scale lacks {', '.join(missing)}; {rerun}")
    return document


def read_report(path: Path) -> dict[str, Any]:
    """Read and shape-check a report written by :func:`write_report`."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(
            f"reading the simulation report {path}: {err.strerror}: run 'make simulate' first"
        ) from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not a simulation report (not JSON: {err}): rerun it") from err
    return _check_report(document, path)


def _ratio(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def _setting_table(name: str, body: dict[str, Any]) -> list[str]:
    startup_speedup = body.get(f"speedup_vs_{BASELINE}", {})
    pull_speedup = body.get(f"pull_speedup_vs_{BASELINE}", {})
    params = body["params"]
    details = []
    if isinstance(params.get("pods"), int):
        details.append(f"{params['pods']:,} pods")
    overhead_s = params.get("cluster", {}).get("start_overhead_s")
    if isinstance(overhead_s, int | float):
        details.append(f"start overhead {overhead_s:g} s")
    header = f"**{name}** - {body.get('description', '')}"
    lines = [
        f"{header} ({'; '.join(details)})" if details else header,
        "",
        "| strategy | mean startup (s) | p95 startup (s) | mean pull wait (s) | pulled (GB) "
        "| load imbalance | queued pods | speedup vs image-locality: startup | pull wait |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, mean in body["mean_startup_s"].items():
        lines.append(
            f"| {label} | {mean:.2f} | {body['p95_startup_s'][label]:.2f} "
            f"| {body['mean_pull_s'][label]:.3f} "
            f"| {body['bytes_pulled'][label] / GB:,.0f} | {body['load_imbalance'][label]:.2f} "
            f"| {body['queued_pods'][label]:,} "
            f"| {_ratio(startup_speedup.get(label))} | {_ratio(pull_speedup.get(label))} |"
        )
    return [*lines, "", *_decision_line(body), ""]


def _decision_line(body: dict[str, Any]) -> list[str]:
    """In-simulation scoring cost, quoted from the report (random scores nothing: left out)."""
    timings = {k: t for k, t in body.get("decision_time_us", {}).items() if k != RANDOM}
    if not timings:
        return []
    means = [t["mean"] for t in timings.values()]
    nodes = body["params"].get("cluster", {}).get("nodes", "?")
    return [
        f"Scoring inside this run ({nodes} nodes, the simulator's LayerIndex): "
        f"{min(means):.0f}-{max(means):.0f} µs per decision on average, p99 at most "
        f"{max(t['p99'] for t in timings.values()):.0f} µs (wall-clock: varies run to run)."
    ]


def _headline(name: str, body: dict[str, Any]) -> str | None:
    start, pull = body["mean_startup_s"], body["mean_pull_s"]
    if LAYER_LOCALITY not in start or BASELINE not in start:
        return None
    parts = [
        f"- **{name}**: layer-locality over image-locality "
        f"{_ratio(start[BASELINE] / start[LAYER_LOCALITY])} on mean startup "
        f"({start[BASELINE]:.2f} s -> {start[LAYER_LOCALITY]:.2f} s, fixed overhead included)"
    ]
    if pull[LAYER_LOCALITY] > 0:
        parts.append(
            f", {_ratio(pull[BASELINE] / pull[LAYER_LOCALITY])} on mean pull wait "
            f"({pull[BASELINE]:.3f} s -> {pull[LAYER_LOCALITY]:.3f} s)"
        )
    if RANDOM in start:
        parts.append(f"; over random {_ratio(start[RANDOM] / start[LAYER_LOCALITY])} on startup")
    if PULL_TIME in start:
        parts.append(
            f"; pull-time vs layer-locality {_ratio(start[LAYER_LOCALITY] / start[PULL_TIME])}"
            " on startup"
        )
    queued = body["queued_pods"].get(BASELINE, 0)
    if queued:
        parts.append(
            f". image-locality queued {queued:,} pods: its links saturate, so this ratio "
            "measures queueing, not pulls alone"
        )
    return "".join(parts) + "."


def markdown(report: dict[str, Any], source: str = DEFAULT_REPORT) -> str:
    """The README/doc results snippet generated from a report read from ``source``."""
    settings: dict[str, Any] = report["settings"]
    headlines = [h for h in (_headline(n, b) for n, b in settings.items()) if h is not None]
    lines = [
        f"Generated by `layersched simulate` from `{source}` (seed {report.get('seed', '?')}). "
        "*Startup* = queue wait + pull wait + the fixed start overhead; *pull wait* = startup "
        "minus that overhead (the metric closest to depsched's).",
        "",
        *headlines,
        "",
    ]
    for name, body in settings.items():
        lines += _setting_table(name, body)
    scale = report.get("scale")
    if scale:
        params = scale["params"]
        inventory = scale.get("inventory", "LayerIndex")
        lines += [
            f"**scale** - one scoring decision over {params['nodes']:,} warm nodes on a "
            f"{inventory.split(',')[0].split(' (')[0]} (budget {scale['budget_ms']:.0f} ms):",
            "",
            "| strategy | mean (ms) | p50 (ms) | p99 (ms) | within budget |",
            "|---|---:|---:|---:|---|",
        ]
        for label, t in scale["decision_time_ms"].items():
            ok = "yes" if t["within_budget"] else "no"
            lines.append(f"| {label} | {t['mean']:.3f} | {t['p50']:.3f} | {t['p99']:.3f} | {ok} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def summary_markdown(report: dict[str, Any], source: str = DEFAULT_REPORT) -> str:
    """The README's short results block: headlines and one compact table.

    :func:`markdown` has the full per-setting tables (``docs/simulator.md``).
    """
    settings: dict[str, Any] = report["settings"]
    labels = list(dict.fromkeys(label for b in settings.values() for label in b["mean_startup_s"]))
    headlines = [h for h in (_headline(n, b) for n, b in settings.items()) if h is not None]
    lines = [
        f"Generated by `layersched simulate` from `{source}` (seed {report.get('seed', '?')}); "
        "full tables in [docs/simulator.md](docs/simulator.md). Each cell: mean startup in "
        "seconds (queue wait + pull wait + the fixed start overhead), then the mean pull wait "
        "alone in brackets.",
        "",
        "| setting | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for name, body in settings.items():
        start, pull = body["mean_startup_s"], body["mean_pull_s"]
        cells = [
            f"{start[label]:.2f} ({pull[label]:.3f})" if label in start else "-" for label in labels
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", *headlines]
    scale = report.get("scale")
    if scale:
        worst = max(t["p99"] for t in scale["decision_time_ms"].values())
        lines.append(
            f"- **scale**: one scoring decision over {scale['params']['nodes']:,} nodes takes at "
            f"most {worst:.2f} ms at p99 for any strategy (budget {scale['budget_ms']:.0f} ms)."
        )
    return "\n".join(lines).rstrip("\n")


def read_block(path: Path) -> str:
    """The simulation block of ``path`` (see :mod:`layersched.generated`)."""
    return generated.read_block(path, BLOCK)


def write_block(path: Path, snippet: str) -> None:
    """Replace the simulation block of ``path`` with ``snippet``."""
    generated.write_block(path, BLOCK, snippet)
