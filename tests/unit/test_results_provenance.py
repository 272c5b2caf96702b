"""Every results file under harness/results/ says where it comes from (issue 46).

A JSON results file holds a ``provenance`` record as ``layersched_harness.evidence.provenance``
writes it (the full commit of a clean tree, an ISO 8601 date, the machine, the loads and
other processes' cores: ``provenance.problems`` lists what is missing), its commit is in
this checkout's history (a commit of a branch rebased since, or typed by hand, is not),
and the commit is no younger than the measurement. A plot carries the commit and date of
the JSON it draws (``results.plot_metadata``), so a PNG from another run fails too.

A file measured before provenance existed, waiting for its quiet re-run, is listed in
:data:`AWAITING` with the command that writes it: its test is an expected failure, strict,
so the re-measured file passes only once it leaves the list. A file retired is deleted
with the blocks that cite it; none is exempt otherwise.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from layersched_harness.evidence import provenance, results

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIRS = provenance.RESULTS_DIRS

#: The files without usable provenance today, and the command (the lead's quiet run) that
#: writes each again with its record; ``RESULTS=commit`` writes the committed file.
AWAITING: dict[str, str] = {}


def results_files() -> list[str]:
    """Every file under the results directories that git tracks or would (not ignored)."""
    done = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *RESULTS_DIRS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted({line for line in done.stdout.splitlines() if (ROOT / line).is_file()})


def _param(path: str) -> Any:
    if path in AWAITING:
        reason = f"{path} records no usable provenance yet: {AWAITING[path]}"
        return pytest.param(path, marks=pytest.mark.xfail(strict=True, reason=reason), id=path)
    return pytest.param(path, id=path)


FILES = results_files()


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _commit_date(commit: str) -> datetime:
    done = subprocess.run(
        ["git", "show", "-s", "--format=%cI", commit],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return datetime.fromisoformat(done.stdout.strip())


def plotted_json(png: Path) -> Path:
    """The JSON a plot draws: the same name (``scenario.png``: ``scenario.json``), or the
    name before its last ``-`` part (``simulation-cdf-hotedge20.png``: ``simulation.json``)."""
    stem = png.stem
    while stem:
        candidate = png.with_name(f"{stem}.json")
        if candidate.is_file():
            return candidate
        stem = stem.rpartition("-")[0]
    raise AssertionError(f"{png}: no JSON results file beside it names the plot's data")


@pytest.mark.parametrize("path", [_param(p) for p in FILES])
def test_every_results_file_records_where_it_comes_from(path: str) -> None:
    file = ROOT / path
    if file.suffix == ".png":
        source = plotted_json(file)
        record = _json(source).get("provenance") or {}
        marked = results.png_provenance(file)
        assert marked == {"commit": record.get("commit"), "date": record.get("date")}, (
            f"{path}: the plot carries {marked}, not the provenance of {source.name} "
            "(plot it with results.plot_metadata(record), in the same run)"
        )
        return
    assert file.suffix == ".json", f"{path}: a results file is JSON, or a PNG plotted from one"
    record = _json(file).get("provenance")
    lacking = provenance.problems(record)
    assert not lacking, f"{path}: {'; '.join(lacking)}"
    assert record is not None
    commit = record["commit"]
    assert provenance.in_history(commit, ROOT), (
        f"{path}: commit {commit[:12]} is not in this checkout's history (a branch rebased "
        "after the run?): measure at a commit already on main"
    )
    measured = datetime.fromisoformat(record["date"])
    assert _commit_date(commit) <= measured, (
        f"{path}: commit {commit[:12]} is younger than the measurement ({record['date']})"
    )


def test_every_awaiting_file_exists() -> None:
    # a retired file leaves the list with its deletion; a re-measured one by its xfail
    gone = sorted(set(AWAITING) - set(FILES))
    assert not gone, f"AWAITING lists files that are not there: {gone}"


def test_a_plot_finds_the_json_it_draws(tmp_path: Path) -> None:
    # simulation-cdf-hotedge20.png draws simulation.json; scenario.png scenario.json
    (tmp_path / "simulation.json").write_text("{}")
    (tmp_path / "scenario.json").write_text("{}")
    assert plotted_json(tmp_path / "simulation-cdf-hotedge20.png").name == "simulation.json"
    assert plotted_json(tmp_path / "scenario.png").name == "scenario.json"
    with pytest.raises(AssertionError, match="no JSON results file"):
        plotted_json(tmp_path / "orphan.png")
