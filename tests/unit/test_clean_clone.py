"""A user's run leaves the clone as it found it (issue 46): after ``make testbed`` a fresh
clone's ``git status`` once showed README.md, docs/kube-scheduler-plugin.md and
harness/results/scenario.{json,png} modified. The scenario's report step (what ``make testbed``
runs after the trials) now writes under the run's directory, which git ignores, and no
document: ``make figures`` alone rewrites the blocks."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from layersched_harness.evidence import provenance, results
from layersched_harness.testbed.cli.scenario import write_report
from layersched_harness.testbed.report import DEFAULT_REPORT

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr  # check-ignore answers 1 for "not ignored"
    return done.stdout


def test_the_scenario_report_step_leaves_git_status_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(provenance.RESULTS_ENV, raising=False)
    monkeypatch.delenv(results.RUN_DIR_ENV, raising=False)
    monkeypatch.setattr(results, "_run_dir", None)
    assert results.ROOT == ROOT  # the code under test is this checkout's
    doc = json.loads((ROOT / DEFAULT_REPORT).read_text())
    doc["provenance"] = provenance.finish(provenance.start(None))
    before = _git("status", "--porcelain")
    try:
        report, png = write_report(doc)
        after = _git("status", "--porcelain")
        assert after == before, f"the report step changed git status:\n{after}"
        for path in (report, png):
            assert path.is_file() and path.is_relative_to(ROOT / results.RUNS)
            assert _git("check-ignore", str(path)).strip(), f"{path} is not ignored by git"
        assert json.loads(report.read_text())["provenance"] == doc["provenance"]
        assert results.png_provenance(png) == {
            "commit": doc["provenance"]["commit"],
            "date": doc["provenance"]["date"],
        }
    finally:
        shutil.rmtree(results.run_dir(), ignore_errors=True)
        if (ROOT / results.RUNS).is_dir() and not any((ROOT / results.RUNS).iterdir()):
            (ROOT / results.RUNS).rmdir()
