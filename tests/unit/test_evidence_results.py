"""Where a run writes its results (layersched_harness.evidence.results): a run directory by
default, the committed file only when asked, and a plot that names the JSON's commit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from layersched.core.errors import InputError
from layersched_harness.evidence import provenance, results
from layersched_harness.testbed.report import DEFAULT_REPORT
from tests.fixtures import prereq

RECORD = {"commit": "a" * 40, "date": "2026-11-28T20:00:00+00:00"}


@pytest.fixture(autouse=True)
def _fresh_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "_run_dir", None)
    monkeypatch.delenv(results.RUN_DIR_ENV, raising=False)
    monkeypatch.delenv(provenance.RESULTS_ENV, raising=False)


def test_a_run_writes_under_its_own_directory_mirroring_the_committed_path(
    tmp_path: Path,
) -> None:
    # runs/<UTC time>/harness/results/scenario.json: the committed harness/results/ is left alone
    path = results.destination("harness/results/scenario.json", root=tmp_path)
    relative = path.relative_to(tmp_path).as_posix()
    assert re.fullmatch(r"runs/\d{8}T\d{6}Z/harness/results/scenario\.json", relative)
    assert path.parent.is_dir() and not (tmp_path / "harness").exists()
    # one run, one directory: the plot goes beside its JSON
    assert results.destination("harness/results/scenario.png", root=tmp_path).parent == path.parent


def test_commit_writes_the_committed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(provenance.RESULTS_ENV, provenance.COMMIT)
    assert results.destination("harness/results/x.json", root=tmp_path) == (
        tmp_path / "harness/results/x.json"
    )


def test_the_run_directory_can_be_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # make testbed's steps (bring-up, scenario) share the directory harness/scripts/testbed.sh names
    monkeypatch.setenv(results.RUN_DIR_ENV, str(tmp_path / "mine"))
    assert results.destination("harness/results/a.json") == tmp_path / "mine/harness/results/a.json"
    with pytest.raises(InputError, match="relative to the checkout"):
        results.destination(tmp_path / "harness/results/a.json")


def test_a_document_without_provenance_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"x\.json: the results document has no provenance"):
        results.write_json("harness/results/x.json", {"figures": 1}, root=tmp_path)


def test_the_writer_says_what_keeps_a_file_from_being_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = results.write_json(
        "harness/results/x.json", {"provenance": RECORD, "v": 1}, output=tmp_path / "x.json"
    )
    assert json.loads(path.read_text()) == {"provenance": RECORD, "v": 1}
    assert "not committable as results (dirty is None" in capsys.readouterr().err


def test_a_compact_file_holds_the_same_document_in_one_line(tmp_path: Path) -> None:
    pod = {"node": "n1", "startup_s": 1.5, "pull_s": 0.5, "bytes": 10, "pulled": True}
    document = {"provenance": RECORD, "runs": [{"round": 1, "pods": [pod] * 50}] * 4}
    wide = results.write_json("x.json", document, output=tmp_path / "wide.json")
    narrow = results.write_json("x.json", document, output=tmp_path / "narrow.json", compact=True)
    assert json.loads(narrow.read_text()) == json.loads(wide.read_text()) == document
    assert narrow.read_text().count("\n") == 1
    assert narrow.stat().st_size < wide.stat().st_size / 2


def test_a_plot_carries_the_commit_of_its_json(tmp_path: Path) -> None:
    matplotlib = prereq.module("matplotlib", "the plots need layersched[sim]")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2])
    fig.savefig(tmp_path / "p.png", metadata=results.plot_metadata(RECORD))
    plt.close(fig)
    assert results.png_provenance(tmp_path / "p.png") == RECORD
    fig, _ = plt.subplots()
    fig.savefig(tmp_path / "bare.png", metadata=results.plot_metadata(None))
    plt.close(fig)
    assert results.png_provenance(tmp_path / "bare.png") is None
    (tmp_path / "no.png").write_text("x")
    with pytest.raises(InputError, match="not a PNG"):
        results.png_provenance(tmp_path / "no.png")


@pytest.mark.parametrize("script", ["harness/infra/kind/kind.sh", "harness/infra/cloud/cloud.sh"])
def test_the_shell_drivers_write_the_scenario_where_the_testbed_does(script: str) -> None:
    # kind.sh and cloud.sh pick the report's directory themselves: the committed one with
    # RESULTS=commit, else the same relative path under a run directory (as destination())
    text = (Path(__file__).resolve().parents[2] / script).read_text()
    [committed] = re.findall(r"then report_dir=(\S+)", text)
    [run] = re.findall(r"else report_dir=runs/\$\(date[^)]*\)/(\S+?);", text)
    assert committed == run == Path(DEFAULT_REPORT).parent.as_posix(), script
