"""The committed scenario report and the README block generated from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched import generated
from layersched.builds import kubernetes_build
from layersched.cli.main import main
from layersched.testbed.report import BLOCK, markdown

ROOT = Path(__file__).resolve().parents[2]


def test_readme_block_is_the_committed_report() -> None:
    # `make testbed` writes reports/scenario.json and this block together; editing either
    # by hand (or committing one without the other) fails here.
    report = json.loads((ROOT / "reports/scenario.json").read_text())
    assert generated.read_block(ROOT / "README.md", BLOCK) == markdown(report)


def test_the_committed_report_comes_from_the_real_cluster() -> None:
    # The README's claims are about real kube-schedulers and kubelets: the report says
    # which versions ran it and which scheduler bound every pod.
    report = json.loads((ROOT / "reports/scenario.json").read_text())
    assert report["driver"] == "local"
    # the build the testbed runs (plugin/kube-scheduler/go.mod pins it), on containerd 2.x
    assert report["components"]["kubernetes"] == kubernetes_build().version
    assert report["components"]["kubelet"] == kubernetes_build().version
    assert report["components"]["containerd"].startswith("2.")
    for strategy, data in report["strategies"].items():
        for trial in data["trials"]:
            assert set(trial["scheduler"].values()) == {strategy}, trial


def test_a_saved_report_prints_without_root_or_a_testbed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # `scenario --from-report` reads the file only: the committed report's table, its
    # P1-again row per strategy (layer-locality on P2's node in 5 of 5 trials)
    report = json.loads((ROOT / "reports/scenario.json").read_text())
    assert main(["scenario", "--from-report", str(ROOT / "reports/scenario.json")]) == 0
    out = capsys.readouterr().out
    runs = report["strategies"]["layer-locality"]["trials"]
    same = sum(t["placements"]["P1-again"] == t["placements"]["P2"] for t in runs)
    row = next(line for line in out.splitlines() if "layer-locality" in line)
    assert f"{same}/{len(runs)}" in row
    # a file that is no report is one line naming it
    other = tmp_path / "nodes.json"
    other.write_text('{"kind": "NodeList", "items": []}')
    assert main(["scenario", "--from-report", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{other}: not a scenario report" in err and len(err.strip().splitlines()) == 1
