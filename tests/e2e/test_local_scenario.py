"""The seed's two-image, three-node scenario on the real local testbed.

Real registry, real containerd nodes behind rate-limited links, the real extender
over HTTP and CRI over gRPC; nothing is simulated. Needs root on Linux, else it
skips with the reason. ``LAYERSCHED_E2E_TRIALS`` sets the trials per strategy
(default 5). The report and plot go to a temp dir (see conftest.py), never over the
committed ``reports/``; the table is printed at the end of the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import TestbedError
from layersched.testbed.local import (
    TestbedSettings,
    default_state_dir,
    down,
    inventory_path,
    load_inventory,
    require_root,
    up,
)
from tests.e2e._checks import (
    check_image_locality_tie,
    check_layer_locality,
    check_pull_bytes,
    check_report,
    trials_from_env,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: The scenario runs K trials x 2 strategies, each pulling ~100 MiB at 20 Mbit/s.
SCENARIO_TIMEOUT_S = 40 * 60


@pytest.fixture(scope="module")
def scenario_run(
    scenario_report_dir: Path,
    record_scenario_report: Callable[[Path, Mapping[str, Any]], None],
) -> Iterator[tuple[dict[str, Any], set[str], int]]:
    """(report, the testbed's node names, trials per strategy) of one scenario run."""
    try:
        require_root()
    except TestbedError as err:
        pytest.skip(f"local testbed unavailable: {err}")
    trials = trials_from_env()
    state_dir = default_state_dir()
    was_up = inventory_path(state_dir).exists()
    result = up(TestbedSettings(state_dir=state_dir))
    assert result.ok, f"testbed up failed: see {result.log_path}"
    report_path = scenario_report_dir / "scenario.json"
    try:
        nodes = {node.name for node in load_inventory(state_dir).nodes}
        cmd = [sys.executable, "-m", "layersched.cli.main", "scenario"]
        cmd += ["--trials", str(trials), "--report", str(report_path)]
        done = subprocess.run(cmd, timeout=SCENARIO_TIMEOUT_S, check=False)
        assert done.returncode == 0, "layersched scenario failed (its output is above)"
        report = json.loads(report_path.read_text())
        record_scenario_report(report_path, report)
        yield report, nodes, trials
    finally:
        if not was_up:
            down(state_dir)


def test_report_has_every_trial(scenario_run: tuple[dict[str, Any], set[str], int]) -> None:
    report, nodes, trials = scenario_run
    check_report(report, "local", trials, nodes)


def test_layer_locality_reuses_p2s_node_every_trial(
    scenario_run: tuple[dict[str, Any], set[str], int],
) -> None:
    check_layer_locality(scenario_run[0])


def test_image_locality_ties_p2s_node_and_the_empty_one(
    scenario_run: tuple[dict[str, Any], set[str], int],
) -> None:
    check_image_locality_tie(scenario_run[0])


def test_pulls_transfer_exactly_the_missing_layers(
    scenario_run: tuple[dict[str, Any], set[str], int],
) -> None:
    check_pull_bytes(scenario_run[0])
