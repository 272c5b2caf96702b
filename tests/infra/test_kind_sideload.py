"""``sideload.yml`` really run, against stand-in ``docker``/``kind``/``kubectl`` CLIs.

No kind node can run here, but the role only reaches the cluster through those
three commands, so its own logic runs for real: which binaries are copied, the
restart order, the waits after a restart, the static-pod switch and idempotence.
The stand-ins (``tests/infra/_fake_kind_cli.py``) keep serving the *old* Ready
condition and the *old* static-pod image for a few reads after a restart, as
the API server does, so a wait that does not really wait is caught.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra import _fake_kind_cli as fake

pytestmark = [pytest.mark.infra, pytest.mark.slow]  # four playbook runs: about a minute

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
#: A run against the stand-ins takes seconds; two minutes means something hangs.
PLAYBOOK_TIMEOUT_S = 120
#: A control plane (static pods) and one worker: every path of the role, fewest calls.
NODES = ["layersched-control-plane", "layersched-worker"]
CONTROL_PLANE = NODES[0]
#: Reads of stale state the stand-ins serve after a restart or manifest switch.
STALE_READS = 2
#: Enough polls to get through the stale reads, few enough to fail fast.
RETRIES = 5
_RECAP = re.compile(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=(\d+)")
WANTED_IMAGE = "kind-registry:5000/patched/{}:latest"


def _cluster(tmp_path: Path, stale_reads: int = STALE_READS) -> Path:
    """Stock nodes (containerd-era binaries, stock control-plane images), CLIs on PATH."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for tool in ("docker", "kind", "kubectl"):
        wrapper = bin_dir / tool
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake.__file__}" "$0" "$@"\n')
        wrapper.chmod(0o755)
    patched = tmp_path / "patched" / "bin"
    patched.mkdir(parents=True)
    (patched / "crio").write_text("patched crio\n")
    (patched / "kubelet").write_text("patched kubelet\n")
    state = {
        "clock": 1_763_780_400,  # 2025-11-22T03:00:00Z
        "calls": [],
        "nodes": NODES,
        "files": {n: {"/usr/bin/crio": "stock", "/usr/bin/kubelet": "stock"} for n in NODES},
        "patched_crio": fake._sha256(str(patched / "crio")),
        "manifests": {
            f"{CONTROL_PLANE}/{c}": f"registry.k8s.io/{c}:v1.22.6"
            for c in ("kube-apiserver", "kube-controller-manager")
        },
        "mirror": {},
        "mirror_reads": {},
        "restarted_at": {},
        "stale_ready": {},
        "ready_reads": {},
        "stale_reads": stale_reads,
        "pushed": [],
        "intree": True,
        "rollout_restarts": 0,
    }
    state_file = tmp_path / "cluster.json"
    state_file.write_text(json.dumps(state))
    return state_file


def _state(tmp_path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((tmp_path / "cluster.json").read_text())
    return loaded


def _sideload(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], int, int]:
    """One run of sideload.yml; returns the process and the recap's changed and failed counts."""
    bin_dir = tmp_path / "fakebin"
    extra_vars = {
        "patched_work_dir": str(tmp_path / "patched"),
        "sideload_kubeconfig": str(tmp_path / "kubeconfig"),
        "kind_sideload_docker": str(bin_dir / "docker"),
        "kind_sideload_kind": str(bin_dir / "kind"),
        "kind_sideload_kubectl": str(bin_dir / "kubectl"),
        "kind_sideload_api_retries": RETRIES,
        "kind_sideload_api_delay_s": 0,
    }
    done = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            str(REPO / "harness" / "playbooks" / "sideload.yml"),
            "--extra-vars",
            json.dumps(extra_vars),
        ],
        capture_output=True,
        text=True,
        timeout=PLAYBOOK_TIMEOUT_S,
        env={
            **os.environ,
            "FAKE_KIND_STATE": str(tmp_path / "cluster.json"),
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "true",
            "ANSIBLE_PIPELINING": "true",
        },
        cwd=REPO,
        check=False,
    )
    recap = _RECAP.search(done.stdout)
    assert recap, done.stdout + done.stderr
    return done, int(recap[2]), int(recap[3])


def _restarts(state: dict[str, Any], node: str) -> list[str]:
    return [
        c[-1] for c in state["calls"] if c[:3] == ["docker", "exec", node] and c[3:5] == [
            "systemctl", "restart"
        ]
    ]  # fmt: skip


def test_sideload_waits_for_the_restarted_node_and_is_idempotent(tmp_path: Path) -> None:
    _cluster(tmp_path)
    done, changed, failed = _sideload(tmp_path)
    assert failed == 0, done.stdout
    assert changed > 0
    state = _state(tmp_path)
    for node in NODES:
        # Both binaries replaced; CRI-O restarted first, the kubelet last.
        assert state["files"][node] == {
            "/usr/bin/crio": state["patched_crio"],
            "/usr/bin/kubelet": fake._sha256(str(tmp_path / "patched" / "bin" / "kubelet")),
        }
        assert _restarts(state, node) == ["crio", "kubelet"]
        # The wait read Ready through the stale reads (old heartbeat) and once more:
        # a wait that accepted the old Ready condition would have read it once.
        assert state["ready_reads"][node] == STALE_READS + 1
    for component in ("kube-apiserver", "kube-controller-manager"):
        key = f"{CONTROL_PLANE}/{component}"
        assert state["manifests"][key] == WANTED_IMAGE.format(component)
        # Waited until the mirror pod showed the patched image (after the stale reads).
        assert state["mirror_reads"][key] == STALE_READS + 1
    # The patched scheduler was pushed, so its Deployment was restarted onto it.
    assert "localhost:5001/patched/kube-scheduler:latest" in state["pushed"]
    assert state["rollout_restarts"] == 1

    # Second run: nothing differs, nothing is copied, restarted or rolled out.
    calls_before = len(state["calls"])
    done, changed, failed = _sideload(tmp_path)
    assert (changed, failed) == (0, 0), done.stdout
    state = _state(tmp_path)
    later = state["calls"][calls_before:]
    assert not [c for c in later if c[:2] == ["docker", "cp"] or "restart" in c]

    # Third run after only CRI-O was rebuilt: CRI-O is copied, and the kubelet restarts
    # too (after CRI-O), so the node posts a fresh status the Ready wait can trust.
    (tmp_path / "patched" / "bin" / "crio").write_text("patched crio, rebuilt\n")
    state["patched_crio"] = fake._sha256(str(tmp_path / "patched" / "bin" / "crio"))
    calls_before = len(state["calls"])
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    done, changed, failed = _sideload(tmp_path)
    assert failed == 0 and changed > 0, done.stdout
    later = _state(tmp_path)["calls"][calls_before:]
    copies = [c[-1].split(":", 1)[1] for c in later if c[:2] == ["docker", "cp"]]
    assert copies == ["/usr/bin/crio"] * len(NODES)
    for node in NODES:
        assert _restarts({"calls": later}, node) == ["crio", "kubelet"]


def test_sideload_fails_when_the_new_kubelet_never_reports(tmp_path: Path) -> None:
    """The API keeps the old Ready condition for longer than the retries allow (the new
    kubelet never posts): the play fails at the wait instead of going on."""
    _cluster(tmp_path, stale_reads=RETRIES + 10)
    done, _, failed = _sideload(tmp_path)
    assert failed == 1
    assert "Wait until the new kubelet reports the node Ready" in done.stdout
    assert done.returncode != 0
