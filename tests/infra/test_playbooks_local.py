"""The local testbed's playbooks parse (``ansible-playbook --syntax-check``).

The full bring-up/teardown runs in tests/integration/test_testbed_local.py (root only);
this check runs anywhere ansible-core is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def _ansible_playbook() -> str:
    beside = Path(sys.executable).with_name("ansible-playbook")
    found = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if found is None:
        pytest.skip("ansible-playbook not found (install the infra extras)")
    return found


@pytest.mark.parametrize(
    "playbook",
    [
        # Bring-up: roles packages, network, registry, node; then the inventory file.
        "testbed-local.yml",
        # Teardown: one role, no dependency on a finished bring-up.
        "testbed-local-down.yml",
        # The CRI relay in front of every node's runtime, and out again (testbed_relay role).
        "testbed-relay.yml",
        "testbed-relay-remove.yml",
    ],
    ids=["up", "down", "relay", "relay-remove"],
)
def test_syntax_check(playbook: str) -> None:
    done = subprocess.run(
        [
            _ansible_playbook(),
            "--syntax-check",
            "-i",
            str(PLAYBOOKS / "inventory" / "local.yml"),
            str(PLAYBOOKS / playbook),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
