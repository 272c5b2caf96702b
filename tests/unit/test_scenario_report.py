"""The committed scenario report and the README block generated from it."""

from __future__ import annotations

import json
from pathlib import Path

from layersched import _generated as generated
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
    assert report["components"]["kubernetes"].startswith("v1.20.")
    for strategy, data in report["strategies"].items():
        for trial in data["trials"]:
            assert set(trial["scheduler"].values()) == {strategy}, trial
