"""``harness/infra/kind/kind.sh`` really run, with stand-in ``pulumi``/``ansible-playbook`` that
log calls.

What is checked is the script's own decision: side-loading the patched (1.22)
kubelet into nodes of another Kubernetes minor is refused *before* ``pulumi up``
creates anything, with one message saying how to fix it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import prereq

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
SCRIPT_TIMEOUT_S = 30

#: pulumi: `config get kubernetesVersion` answers $FAKE_K8S_VERSION (unset: exit 1, as the
#: real CLI does for a missing key); `stack output` answers a placeholder; all calls logged.
FAKE_PULUMI = """\
#!/bin/sh
echo "pulumi $*" >> "$FAKE_LOG"
case "$*" in
  *"config get kubernetesVersion"*)
    [ -n "${FAKE_K8S_VERSION:-}" ] || { echo "error: configuration key not found" >&2; exit 1; }
    echo "$FAKE_K8S_VERSION" ;;
  *"stack output"*) echo "out" ;;
esac
exit 0
"""
FAKE_LOGGER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$FAKE_LOG"\n'


def _run(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], str]:
    bin_dir, venv_bin = tmp_path / "bin", tmp_path / "venv" / "bin"
    bin_dir.mkdir(exist_ok=True)
    venv_bin.mkdir(parents=True, exist_ok=True)
    for path, text in [
        (bin_dir / "pulumi", FAKE_PULUMI),
        (bin_dir / "docker", FAKE_LOGGER),
        (bin_dir / "kind", FAKE_LOGGER),
        (bin_dir / "kubectl", FAKE_LOGGER),
        (venv_bin / "ansible-playbook", FAKE_LOGGER),
    ]:
        path.write_text(text)
        path.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    done = subprocess.run(
        ["bash", str(REPO / "harness" / "infra" / "kind" / "kind.sh"), "provision"],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "VENV": str(tmp_path / "venv"),
            "FAKE_LOG": str(log),
            **env,
        },
        cwd=tmp_path,
        check=False,
    )
    return done, log.read_text()


@pytest.mark.parametrize(
    ("env", "refused", "sideloaded"),
    [
        # The default 1.30 node image with the 1.22 patched kubelet: refused before `up`.
        ({"LAYERSCHED_KIND_SIDELOAD": "1", "FAKE_K8S_VERSION": "v1.30.0"}, True, False),
        # kubernetesVersion unset means the default 1.30 image: refused too.
        ({"LAYERSCHED_KIND_SIDELOAD": "1"}, True, False),
        # Seed 001's 1.22.6 prebuilt node: the patched tree's minor, so it goes ahead.
        ({"LAYERSCHED_KIND_SIDELOAD": "1", "FAKE_K8S_VERSION": "v1.22.6"}, False, True),
        # A fork on another minor says so; then 1.24 nodes match.
        (
            {
                "LAYERSCHED_KIND_SIDELOAD": "1",
                "FAKE_K8S_VERSION": "v1.24.17",
                "LAYERSCHED_PATCHED_KUBERNETES_MINOR": "1.24",
            },
            False,
            True,
        ),
        # The explicit override side-loads into 1.30 nodes anyway.
        (
            {
                "LAYERSCHED_KIND_SIDELOAD": "1",
                "FAKE_K8S_VERSION": "v1.30.0",
                "LAYERSCHED_KIND_SIDELOAD_ANY_VERSION": "1",
            },
            False,
            True,
        ),
        # No side-loading: the version does not matter.
        ({"FAKE_K8S_VERSION": "v1.30.0"}, False, False),
    ],
    ids=["1.30-refused", "unset-refused", "1.22-ok", "fork-1.24-ok", "override", "no-sideload"],
)
def test_sideload_needs_the_patched_minor(
    env: dict[str, str], refused: bool, sideloaded: bool, tmp_path: Path
) -> None:
    done, calls = _run(tmp_path, env)
    ran_up = any(
        line.startswith("pulumi --cwd harness/infra/kind up") for line in calls.splitlines()
    )
    ran_sideload = "sideload.yml" in calls
    if refused:
        assert done.returncode == 1
        assert not ran_up and not ran_sideload  # refused before anything was created
        [line] = done.stderr.splitlines()
        assert line.startswith("LAYERSCHED_KIND_SIDELOAD=1: stack dev is set for Kubernetes")
        assert "config set kubernetesVersion v1.22.6" in line
        assert "LAYERSCHED_KIND_SIDELOAD_ANY_VERSION=1" in line
    else:
        assert done.returncode == 0, done.stderr
        assert ran_up and "deploy.yml" in calls
        assert ran_sideload is sideloaded


def test_missing_tools_are_named(tmp_path: Path) -> None:
    if Path("/usr/bin/pulumi").exists() or Path("/bin/pulumi").exists():
        prereq.unavailable("a pulumi CLI is installed system-wide: cannot show it missing")
    done = subprocess.run(
        ["bash", str(REPO / "harness" / "infra" / "kind" / "kind.sh"), "provision"],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        # System tools only: no pulumi CLI there (pip's pulumi package has none).
        env={**os.environ, "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1
    assert "DRIVER=kind needs" in done.stderr and "pulumi" in done.stderr
