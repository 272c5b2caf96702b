"""The simulation report: JSON round trip, shape checks, the Markdown snippet, and the
marked blocks of README.md / docs/simulator.md that must equal it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import InputError
from layersched_harness.sim.report import (
    BEGIN_MARKER,
    END_MARKER,
    markdown,
    read_block,
    read_report,
    summary_markdown,
    write_block,
    write_report,
)

ROOT = Path(__file__).resolve().parents[2]
GB = 10**9


def _setting(**overrides: Any) -> dict[str, Any]:
    """Two strategies; image-locality 2.0 s startup (1.0 s pull wait), layer-locality
    1.25 s (0.25 s): with the 1 s overhead, startup speedup 2.0 / 1.25 = 1.60x,
    pull-wait speedup 1.0 / 0.25 = 4.00x."""
    body: dict[str, Any] = {
        "description": "tiny",
        "params": {"pods": 1234, "cluster": {"start_overhead_s": 1.0}},
        "mean_startup_s": {"image-locality": 2.0, "layer-locality": 1.25},
        "p95_startup_s": {"image-locality": 5.0, "layer-locality": 1.0},
        "mean_pull_s": {"image-locality": 1.0, "layer-locality": 0.25},
        "bytes_pulled": {"image-locality": 300 * GB, "layer-locality": 30 * GB},
        "load_imbalance": {"image-locality": 2.5, "layer-locality": 3.9},
        "queued_pods": {"image-locality": 0, "layer-locality": 0},
        "speedup_vs_image-locality": {"image-locality": 1.0, "layer-locality": 1.6},
        "pull_speedup_vs_image-locality": {"image-locality": 1.0, "layer-locality": 4.0},
        "decision_time_us": {
            "image-locality": {"mean": 20.0, "p99": 50.0},
            "layer-locality": {"mean": 30.4, "p99": 70.0},
        },
        "pull_cdf_s": {
            "percentiles": [0.0, 100.0],
            "image-locality": [0, 3],
            "layer-locality": [0, 1],
        },
    }
    body.update(overrides)
    return body


def _report(**overrides: Any) -> dict[str, Any]:
    return {"seed": 3, "settings": {"tiny": _setting(**overrides)}}


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    # write_report creates the directory; read_report returns the same document
    path = tmp_path / "nested" / "simulation.json"
    write_report(_report(), path)
    assert read_report(path) == _report()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # not JSON at all
        ("{not json", "not JSON"),
        # JSON, but no settings object
        ('{"seed": 1}', "no 'settings' object"),
        # a setting without the pull-wait metric (a report from before mean_pull_s)
        (json.dumps({"settings": {"tiny": _setting(mean_pull_s=None)}}), "tiny.mean_pull_s"),
        # a per-strategy map lacking a strategy the others have
        (
            json.dumps({"settings": {"tiny": _setting(p95_startup_s={"image-locality": 1.0})}}),
            "p95_startup_s lacks layer-locality",
        ),
        # a scale section without its timings
        (json.dumps({"settings": {}, "scale": {"params": {}}}), "scale lacks budget_ms"),
    ],
    ids=["not-json", "no-settings", "missing-metric", "missing-strategy", "bad-scale"],
)
def test_bad_reports_are_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "simulation.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message) as info:
        read_report(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_report_says_to_run_make_simulate(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="run 'make simulate' first"):
        read_report(tmp_path / "absent.json")


def test_markdown_shows_both_metrics_and_the_source() -> None:
    text = markdown(_report(), source="out/x.json")
    # the header names the report it was generated from, not a fixed path
    assert "from `out/x.json` (seed 3)" in text
    # headline: 2.0 / 1.25 = 1.60x on startup, 1.0 / 0.25 = 4.00x on pull wait
    assert "1.60x on mean startup (2.00 s -> 1.25 s" in text
    assert "4.00x on mean pull wait (1.000 s -> 0.250 s)" in text
    # table row: 30 GB pulled, no queue, both speedups
    assert "| layer-locality | 1.25 | 1.00 | 0.250 | 30 | 3.90 | 0 | 1.60x | 4.00x |" in text
    assert "(1,234 pods; start overhead 1 s)" in text
    # scoring cost quoted from the report: means 20 and 30.4 us, worst p99 70 us
    assert "20-30 µs per decision on average, p99 at most 70 µs" in text
    # no random or pull-time in this report: no comparison with them
    assert "random" not in text and "pull-time" not in text


def test_summary_is_one_table_of_startup_and_pull_wait() -> None:
    # One row per setting, one column per strategy; each cell "startup (pull wait)":
    # image-locality 2.00 (1.000), layer-locality 1.25 (0.250); the headline carries
    # the 1.60x / 4.00x ratios worked out in _setting().
    report = {"seed": 3, "settings": {"tiny": _setting()}}
    text = summary_markdown(report, source="out/x.json")
    assert "`out/x.json` (seed 3)" in text
    assert "| setting | image-locality | layer-locality |" in text
    assert "| tiny | 2.00 (1.000) | 1.25 (0.250) |" in text
    assert "1.60x on mean startup" in text
    assert "4.00x on mean pull wait" in text
    assert "pulled (GB)" not in text  # the full tables stay in docs/simulator.md


def test_markdown_flags_an_unstable_baseline() -> None:
    # image-locality queued pods: the ratio depends on run length and the text says so
    text = markdown(_report(queued_pods={"image-locality": 5000, "layer-locality": 0}))
    assert "image-locality queued 5,000 pods" in text
    assert "its links saturate, so this ratio measures queueing" in text


def test_markdown_scale_table() -> None:
    report = {
        "settings": {},
        "scale": {
            "params": {"nodes": 5000},
            "inventory": "NodeSnapshot (indexed), as the extender's --nodes provider",
            "budget_ms": 10.0,
            "decision_time_ms": {
                "pull-time": {"mean": 0.1, "p50": 0.09, "p99": 0.2, "within_budget": True},
            },
        },
    }
    text = markdown(report)
    assert "over 5,000 warm nodes on a NodeSnapshot (budget 10 ms)" in text
    assert "| pull-time | 0.100 | 0.090 | 0.200 | yes |" in text


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        # the block is replaced, what surrounds it kept
        (
            f"a\n{BEGIN_MARKER}\nold\nlines\n{END_MARKER}\nb\n",
            f"a\n{BEGIN_MARKER}\nNEW\n{END_MARKER}\nb\n",
        ),
        # an empty block (markers on adjacent lines) is filled
        (f"{BEGIN_MARKER}\n{END_MARKER}", f"{BEGIN_MARKER}\nNEW\n{END_MARKER}"),
    ],
    ids=["replace", "fill-empty"],
)
def test_write_block(tmp_path: Path, document: str, expected: str) -> None:
    path = tmp_path / "doc.md"
    path.write_text(document, encoding="utf-8")
    write_block(path, "NEW")
    assert path.read_text(encoding="utf-8") == expected
    assert read_block(path) == "NEW"


@pytest.mark.parametrize(
    "document",
    [
        "no markers at all\n",
        f"{BEGIN_MARKER}\nonly the start\n",
        f"{END_MARKER}\nreversed\n{BEGIN_MARKER}\n",
        f"{BEGIN_MARKER}\n{END_MARKER}\n{BEGIN_MARKER}\n{END_MARKER}\n",
    ],
    ids=["none", "no-end", "reversed", "twice"],
)
def test_missing_or_broken_markers_are_an_error(tmp_path: Path, document: str) -> None:
    path = tmp_path / "doc.md"
    path.write_text(document, encoding="utf-8")
    with pytest.raises(InputError, match="add the pair where the simulation results belong"):
        write_block(path, "NEW")
    assert path.read_text(encoding="utf-8") == document  # untouched
