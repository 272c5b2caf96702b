"""The seed's scenario on cloud nodes (``make testbed DRIVER=cloud``): AWS VMs from
``harness/infra/cloud``, made a cluster over SSH by ``harness/playbooks/testbed-cloud.yml``.

Without the pulumi CLI, AWS credentials or the stack's config this skips with the same
one-line message ``harness/infra/cloud/cloud.sh`` stops with (``harness/infra/cloud/cloud.sh
check``), so CI,
which has none of them, always skips it and says why.

With them, the scenario runs through the shared cluster driver and its SSH backend
(``layersched scenario --driver cloud``: the registry's access log and the schedulers'
logs read on the control-plane VM over SSH, node caches emptied through each node's
containerd socket forwarded over SSH, the images pushed through an SSH tunnel), from the
``remote-testbed.json`` that ``testbed-cloud.yml`` wrote to the stack's state dir, and
must meet exactly the local scenario's assertions (``tests/e2e/_checks.py``). The report
goes where the local e2e's goes (``$LAYERSCHED_E2E_REPORT_DIR``, else a temp dir).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from layersched_harness.testbed.remote import load_remote_testbed
from tests.e2e._checks import (
    check_image_locality_tie,
    check_layer_locality,
    check_pull_bytes,
    check_pull_times_against_the_link,
    check_real_cluster,
    check_report,
    trials_from_env,
)
from tests.fixtures import prereq

pytestmark = [pytest.mark.e2e, pytest.mark.cloud]

REPO = Path(__file__).resolve().parents[2]
CHECK_TIMEOUT_S = 120
#: harness/infra/cloud/cloud.sh sets these; the defaults are its own.
STACK_ENV = "LAYERSCHED_CLOUD_STACK"
STATE_DIR_ENV = "LAYERSCHED_CLOUD_STATE_DIR"
#: K trials x 2 strategies over a WAN-free VPC; each reset waits for a kubelet refresh.
SCENARIO_TIMEOUT_S = 60 * 60


def _precondition_message() -> str | None:
    """``harness/infra/cloud/cloud.sh check``'s one line when a precondition is missing, else
    None."""
    done = subprocess.run(
        ["bash", str(REPO / "harness" / "infra" / "cloud" / "cloud.sh"), "check"],
        capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False, cwd=REPO,
    )  # fmt: skip
    if done.returncode == 0:
        return None
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "check failed"


def _state_dir() -> Path:
    stack = os.environ.get(STACK_ENV, "dev")
    return Path(os.environ.get(STATE_DIR_ENV) or REPO / ".testbed" / "cloud" / stack)


def test_seed_scenario_on_cloud_nodes(
    scenario_report_dir: Path,
    record_scenario_report: Callable[[Path, Mapping[str, Any]], None],
) -> None:
    message = _precondition_message()
    if message is not None:
        prereq.unavailable(message)
    trials = trials_from_env()
    state_dir = _state_dir()
    testbed = load_remote_testbed(state_dir)  # names the file and the fix when absent
    report_path = scenario_report_dir / "scenario.json"
    cmd = [sys.executable, "-m", "layersched.cli.main", "scenario", "--driver=cloud"]
    cmd += [f"--state-dir={state_dir}", f"--trials={trials}", f"--report={report_path}"]
    done = subprocess.run(cmd, timeout=SCENARIO_TIMEOUT_S, check=False)
    assert done.returncode == 0, "layersched scenario --driver cloud failed (output above)"
    report: dict[str, Any] = json.loads(report_path.read_text())
    record_scenario_report(report_path, report)
    schedulers = {strategy: s.name for strategy, s in testbed.schedulers.items()}
    check_report(report, "cloud", trials, {n.name for n in testbed.nodes})
    check_real_cluster(report, schedulers, testbed.kubernetes_version)
    check_pull_times_against_the_link(report)
    check_layer_locality(report)
    check_image_locality_tie(report)
    check_pull_bytes(report)
