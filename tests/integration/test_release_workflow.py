"""The release workflow cannot run here (no GitHub runner, no registry credentials): its
syntax, expressions, action inputs and shell scripts are checked by actionlint, built from
its Go module by ``make tools``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures.go_tools import tool

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "release.yml"


def test_actionlint_accepts_the_release_workflow() -> None:
    actionlint = tool("actionlint")
    done = subprocess.run(
        [str(actionlint), "-no-color", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path: Path) -> None:
    # the check can fail: an undefined job in needs and a bad expression are reported
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    broken.parent.mkdir(parents=True)
    text = WORKFLOW.read_text().replace("needs: wheel\n", "needs: wheels\n", 1)
    broken.write_text(text.replace("${{ env.IMAGE }}", "${{ env.IMAGE ", 1))
    done = subprocess.run(
        [str(tool("actionlint")), "-no-color", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert '"wheels"' in done.stdout and "expression" in done.stdout, done.stdout
