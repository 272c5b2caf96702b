"""``layersched simulate`` in-process: re-rendering from a report, writing results blocks,
and one-line errors (never a traceback) for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from layersched.cli.main import main
from layersched_harness.sim.report import (
    BEGIN_MARKER,
    END_MARKER,
    markdown,
    read_report,
    write_report,
)
from layersched_harness.sim.runner import run_setting
from layersched_harness.sim.settings import SMOKE

#: EXIT_USAGE of layersched.cli.main: bad input.
EXIT_USAGE = 2


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (smoke) report on disk."""
    path = tmp_path_factory.mktemp("sim") / "simulation.json"
    write_report({"seed": 1, "settings": {"smoke": run_setting(SMOKE, seed=1)}}, path)
    return path


def _doc(tmp_path: Path) -> Path:
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Results\n{BEGIN_MARKER}\nstale\n{END_MARKER}\ntail\n", encoding="utf-8")
    return doc


def test_from_report_fills_the_block_and_prints_the_snippet(
    smoke_report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No simulation: the block becomes markdown(report) naming the --out path, the
    # same text goes to stdout with --markdown, and the plots go to --plots-dir.
    doc = _doc(tmp_path)
    code = main(
        [
            "simulate",
            "--from-report",
            "--out",
            str(smoke_report),
            "--plots-dir",
            str(tmp_path / "plots"),
            "--markdown",
            "--markdown-into",
            str(doc),
        ]
    )
    assert code == 0
    expected = markdown(read_report(smoke_report), source=str(smoke_report))
    assert doc.read_text(encoding="utf-8") == (
        f"# Results\n{BEGIN_MARKER}\n{expected}\n{END_MARKER}\ntail\n"
    )
    assert capsys.readouterr().out == expected + "\n"
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "simulation-bytes.png",
        "simulation-cdf-smoke.png",
    ]


@pytest.mark.parametrize(
    ("report_text", "message"),
    [
        # a truncated file
        ('{"settings": {', "not a simulation report (not JSON"),
        # valid JSON of something else
        ('{"Nodes": []}', "no 'settings' object"),
    ],
    ids=["truncated", "other-json"],
)
def test_bad_report_is_one_line_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], report_text: str, message: str
) -> None:
    report = tmp_path / "simulation.json"
    report.write_text(report_text, encoding="utf-8")
    code = main(["simulate", "--from-report", "--out", str(report), "--no-plots"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith("layersched: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_markers_fail_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The markers are checked first: no minutes of simulation lost, no report written.
    doc = tmp_path / "README.md"
    doc.write_text("# no markers here\n", encoding="utf-8")
    out = tmp_path / "simulation.json"
    code = main(["simulate", "--setting", "smoke", "--out", str(out), "--markdown-into", str(doc)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert f"{doc}: expected one '{BEGIN_MARKER}'" in err and err.count("\n") == 1
    assert not out.exists()
