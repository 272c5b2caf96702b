"""The kind testbed's playbooks: syntax, and a real run of build-patched's clone/build logic.

``ansible-playbook`` really runs here (local connection, the venv's python). The
sources are git repositories the test creates, with Makefiles standing in for
CRI-O's and Kubernetes' (same targets and output paths), so the role's clone,
up-to-date and stamp logic runs for real; only the compilers are absent. The
image build (tag ``images``) needs Docker and is left out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import prereq

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "harness" / "playbooks"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
#: A playbook run here takes a few seconds; a minute means something hangs.
PLAYBOOK_TIMEOUT_S = 120
K8S_BINARIES = ("kubelet", "kube-scheduler", "kube-apiserver", "kube-controller-manager")
_RECAP = re.compile(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0")

# Phony targets: the real Makefiles rebuild when Go sources change; these have no sources.
CRIO_MAKEFILE = """\
.PHONY: bin/crio
bin/crio:
\tmkdir -p bin && echo "crio $(shell git rev-parse --short HEAD) cgo=$$CGO_ENABLED" > bin/crio
"""
K8S_MAKEFILE = """\
all:
\tmkdir -p _output/local/bin/linux/amd64
\tfor b in $(WHAT); do n=$$(basename $$b); \\
\t  echo "$$n cgo=$$CGO_ENABLED" > _output/local/bin/linux/amd64/$$n; done
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "true",
    }


def _play(tmp_path: Path, playbook: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(PLAYBOOKS / playbook), *args],
        capture_output=True,
        text=True,
        timeout=PLAYBOOK_TIMEOUT_S,
        env=_env(tmp_path),
        cwd=REPO,
        check=False,
    )


@pytest.mark.parametrize("playbook", ["build-patched.yml", "sideload.yml", "deploy.yml"])
def test_syntax(playbook: str, tmp_path: Path) -> None:
    done = _play(tmp_path, playbook, "--syntax-check")
    assert done.returncode == 0, done.stdout + done.stderr


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        check=True,
        capture_output=True,
    )


def _source(root: Path, name: str, makefile: str, ignore: str) -> Path:
    repo = root / name
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "layers")
    (repo / "Makefile").write_text(makefile)
    (repo / ".gitignore").write_text(ignore)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    return repo


@pytest.fixture
def sources(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("git") is None or shutil.which("make") is None:
        prereq.missing("git or make not found on PATH")
    crio = _source(tmp_path / "upstream", "cri-o", CRIO_MAKEFILE, "bin/\n")
    k8s = _source(tmp_path / "upstream", "kubernetes", K8S_MAKEFILE, "_output/\n")
    return crio, k8s


def _build(tmp_path: Path, crio: Path, k8s: Path) -> tuple[int, str]:
    done = _play(
        tmp_path,
        "build-patched.yml",
        "--tags", "clone,build",
        "-e", f"patched_work_dir={tmp_path / 'work'}",
        "-e", f"patched_crio_repo=file://{crio}",
        "-e", "patched_crio_ref=layers",
        "-e", f"patched_kubernetes_repo=file://{k8s}",
        "-e", "patched_kubernetes_ref=layers",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    match = _RECAP.search(done.stdout)
    assert match, done.stdout[-2000:]
    return int(match[2]), done.stdout


@pytest.mark.slow
def test_build_patched_is_idempotent_and_rebuilds_only_what_changed(
    tmp_path: Path, sources: tuple[Path, Path]
) -> None:
    crio, k8s = sources
    bin_dir = tmp_path / "work" / "bin"

    # First run: both clones, both builds, every binary copied, both stamps written.
    changed, _ = _build(tmp_path, crio, k8s)
    assert changed > 0
    assert (bin_dir / "crio").read_text().endswith("cgo=0\n")  # built statically
    for binary in K8S_BINARIES:
        assert (bin_dir / binary).read_text() == f"{binary} cgo=0\n"

    # Second run, nothing new upstream: every step is up to date.
    changed, out = _build(tmp_path, crio, k8s)
    assert changed == 0, out[-3000:]

    # A new commit on the CRI-O branch: CRI-O is fetched and rebuilt, Kubernetes is not.
    kubelet_mtime = (bin_dir / "kubelet").stat().st_mtime_ns
    (crio / "layers.go").write_text("package server // imageLayer annotations\n")
    _git(crio, "add", "-A")
    _git(crio, "commit", "-q", "-m", "annotate layers")
    changed, out = _build(tmp_path, crio, k8s)
    assert changed > 0
    assert "Build the component: cri-o" in out
    assert re.search(
        r"TASK \[patched_build : Build the component: kubernetes\][^\n]*\nskipping", out
    )
    head = subprocess.run(
        ["git", "-C", str(crio), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert (bin_dir / "crio").read_text().startswith(f"crio {head} ")
    assert (bin_dir / "kubelet").stat().st_mtime_ns == kubelet_mtime

    # Someone ran `make clean` in the Kubernetes clone: the stamp alone is not trusted.
    shutil.rmtree(tmp_path / "work" / "src" / "kubernetes" / "_output")
    changed, out = _build(tmp_path, crio, k8s)
    assert changed > 0
    assert "Build the component: kubernetes" in out
    assert re.search(r"TASK \[patched_build : Build the component: cri-o\][^\n]*\nskipping", out)

    # And that is again a fixed point.
    changed, out = _build(tmp_path, crio, k8s)
    assert changed == 0, out[-3000:]
