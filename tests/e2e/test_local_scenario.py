"""The seed's two-image, three-node scenario on the local testbed's real cluster.

Real registry, real containerd nodes behind rate-limited links, a real Kubernetes
v1.20.2 control plane (two kube-schedulers: upstream image-locality, and the default
plugins plus the layersched extender) and real kubelets; nothing is simulated. Needs
root on Linux, else it skips with the reason. ``LAYERSCHED_E2E_TRIALS`` sets the trials
per strategy (default 5). The report and plot go to a temp dir (see conftest.py), never
over the committed ``reports/``; the table is printed at the end of the run.
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
    TestbedInventory,
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
    check_pull_times_against_the_link,
    check_real_cluster,
    check_report,
    trials_from_env,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: (report, the testbed's node names, trials per strategy, inventory)
Run = tuple[dict[str, Any], set[str], int, TestbedInventory]

#: The scenario runs K trials x 2 strategies, each pulling ~100 MiB at 20 Mbit/s.
SCENARIO_TIMEOUT_S = 40 * 60


@pytest.fixture(scope="module")
def scenario_run(
    scenario_report_dir: Path,
    record_scenario_report: Callable[[Path, Mapping[str, Any]], None],
) -> Iterator[tuple[dict[str, Any], set[str], int, TestbedInventory]]:
    """(report, the testbed's node names, trials per strategy, inventory) of one run."""
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
        inventory = load_inventory(state_dir)
        nodes = {node.name for node in inventory.nodes}
        cmd = [sys.executable, "-m", "layersched.cli.main", "scenario"]
        cmd += ["--trials", str(trials), "--report", str(report_path)]
        done = subprocess.run(cmd, timeout=SCENARIO_TIMEOUT_S, check=False)
        assert done.returncode == 0, "layersched scenario failed (its output is above)"
        report = json.loads(report_path.read_text())
        record_scenario_report(report_path, report)
        yield report, nodes, trials, inventory
    finally:
        if not was_up:
            down(state_dir)


def test_report_has_every_trial(scenario_run: Run) -> None:
    report, nodes, trials, _ = scenario_run
    check_report(report, "local", trials, nodes)


def test_the_real_schedulers_and_kubelets_ran_it(scenario_run: Run) -> None:
    report, _, _, inventory = scenario_run
    cluster = inventory.cluster
    schedulers = {strategy: s.name for strategy, s in cluster.schedulers.items()}
    check_real_cluster(report, schedulers, cluster.kubernetes_version)


def test_pull_times_agree_with_the_registry_bytes(scenario_run: Run) -> None:
    check_pull_times_against_the_link(scenario_run[0])


def test_layer_locality_reuses_p2s_node_every_trial(
    scenario_run: Run,
) -> None:
    check_layer_locality(scenario_run[0])


def test_image_locality_ties_p2s_node_and_the_empty_one(
    scenario_run: Run,
) -> None:
    check_image_locality_tie(scenario_run[0])


def test_pulls_transfer_exactly_the_missing_layers(
    scenario_run: Run,
) -> None:
    check_pull_bytes(scenario_run[0])
