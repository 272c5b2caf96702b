"""`make help` says what each target does, what it writes and how long it last took."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(REPO / "harness" / "scripts" / "help.py"), run_name="__main__")
    assert done.value.code == 0
    return capsys.readouterr().out


def test_every_target_is_listed_aligned_and_without_make_syntax(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _help(capsys)
    targets = re.findall(r"^([a-zA-Z0-9_-]+):[^#\n]*## ", (REPO / "Makefile").read_text(), re.M)
    # e2e has a digit in its name: a letters-only pattern once dropped it from both lists
    assert "e2e" in targets
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    assert [line.split()[0] for line in lines] == targets
    # one column for the texts, however long a target's name (bench-scheduler once broke it)
    starts = {len(line) - len(line.lstrip()[len(line.split()[0]) :].lstrip()) for line in lines}
    assert len(starts) == 1, out
    assert "$(" not in out and "{last:" not in out, out


def test_measured_durations_come_from_the_results_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _help(capsys)
    line = next(line for line in out.splitlines() if line.split()[:1] == ["bench-scheduler"])
    recorded = json.loads((REPO / "harness/results/scheduler.json").read_text()).get("run_time_s")
    if recorded is None:
        assert "no run recorded yet" in line
    else:
        minutes = round(float(recorded) / 60)
        assert f"harness/results/scheduler.json, last run {minutes} min" in line


#: The groups ``make help`` shows, in order: what a user builds, what CI runs, the harness.
GROUPS = ("The product:", "CI:", "The harness:")


def test_the_targets_are_grouped_product_ci_harness(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys)
    # help first, then one section per group: its heading, then its targets
    first, *sections = out.split("\n\n")
    assert first.split()[0] == "help"
    headings = [section.splitlines()[0] for section in sections]
    assert [next((g for g in GROUPS if h.startswith(g)), h) for h in headings] == list(GROUPS)
    product, ci, harness = ([line.split()[0] for line in s.splitlines()[1:]] for s in sections)
    assert {"venv", "kubernetes", "images"} <= set(product)
    assert {"lint", "unit", "integration", "infra", "e2e", "test", "ci-fresh"} <= set(ci)
    assert {"testbed", "bench-scheduler", "replay", "figures"} <= set(harness)
