"""The committed scenario report (its README block is held to it by tests/unit/test_figures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched.cli.main import main
from layersched_harness.testbed.builds import kubernetes_build
from layersched_harness.testbed.report import markdown, nodes_markdown, per_node

MIB = 1 << 20

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_report_comes_from_the_real_cluster() -> None:
    # The README's claims are about real kube-schedulers and kubelets: the report says
    # which versions ran it and which scheduler bound every pod.
    report = json.loads((ROOT / "harness/results/scenario.json").read_text())
    assert report["driver"] == "local"
    # the build the testbed runs (src/kube-scheduler/go.mod pins it), on containerd 2.x
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
    report = json.loads((ROOT / "harness/results/scenario.json").read_text())
    assert main(["scenario", "--from-report", str(ROOT / "harness/results/scenario.json")]) == 0
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


def test_a_mixed_cluster_is_reported_per_node_and_runtime() -> None:
    # two trials on n1, n2 (containerd) and n3 (CRI-O): P1 on n1, P2 and P1-again on n3
    def trial(again_s: float) -> dict[str, object]:
        return {
            "placements": {"P1": "n1", "P2": "n3", "P1-again": "n3"},
            "pulls": [
                {"pod": "P1", "node": "n1", "bytes": 40 * MIB, "seconds": 18.0},
                {"pod": "P2", "node": "n3", "bytes": 40 * MIB, "seconds": 20.0},
                {"pod": "P1-again", "node": "n3", "bytes": 4 * MIB, "seconds": again_s},
            ],
        }

    report = {
        "node_runtimes": {"n1": "containerd://2.1.9", "n2": "containerd://2.1.9"}
        | {"n3": "cri-o://1.36.3"},
        "strategies": {"layer-locality": {"trials": [trial(2.0), trial(3.0)]}},
    }
    rows = {row["node"]: row for row in per_node(report)}
    assert rows["n3"] == {
        "node": "n3",
        "runtime": "cri-o://1.36.3",
        "placements": {"P2": 2, "P1-again": 2},
        "pulls": 4,
        # (20 + 2 + 20 + 3) / 4 = 11.25 s; (40 + 4 + 40 + 4) / 4 = 22 MiB
        "pull_s_mean": 11.25,
        "pull_bytes_mean": 22 * MIB,
    }
    # n2 ran nothing: its runtime is still listed
    assert rows["n2"]["pulls"] == 0 and rows["n2"]["pull_s_mean"] is None
    assert rows["n1"]["placements"] == {"P1": 2}
    table = nodes_markdown(report).splitlines()
    assert table[2:] == [
        "| n1 | containerd://2.1.9 | P1 x2 | 2 | 18.00 | 40.00 |",
        "| n2 | containerd://2.1.9 | - | 0 | - | - |",
        "| n3 | cri-o://1.36.3 | P1-again x2, P2 x2 | 4 | 11.25 | 22.00 |",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pin", "P1-again=n3"], "P1-again is what the scenario measures, never pinned"),
        (["--pin", "P2"], "expected POD=NODE"),
        (["--pin", "P2="], "expected POD=NODE"),
        (["--pin", "P3=n1"], "POD one of P1, P2"),
    ],
    ids=["p1-again", "no-node-part", "empty-node", "unknown-pod"],
)
def test_a_bad_pin_is_refused_before_anything_runs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["scenario", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_pins_are_said_in_the_block() -> None:
    # a report of a run with --pin P1=n1 --pin P2=n3 says so under the table
    report = json.loads((ROOT / "harness/results/scenario.json").read_text())
    assert "Pinned" not in markdown(report)
    pinned = markdown(report | {"pins": {"P1": "n1", "P2": "n3"}})
    assert "- Pinned (`layersched scenario --pin`" in pinned
    assert ": P1 on n1, P2 on n3. `P1-again` is never pinned." in pinned
