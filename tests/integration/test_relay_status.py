"""``layersched testbed status`` tells a kubelet on its relay from one on its runtime.

It reads the kubelet's ``--container-runtime-endpoint`` from ``/proc/PID/cmdline``, so
these tests start a real process with such a command line (a sleeping Python standing
in for the kubelet) rather than a testbed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tenacity

from layersched_harness.testbed.local._state import TestbedNode
from layersched_harness.testbed.local._status import kubelet_cri_path

pytestmark = pytest.mark.integration

STAND_IN_LIFETIME_S = 60
#: The stand-in's command line is visible once it has exec'd (milliseconds).
CMDLINE_TIMEOUT_S = 5.0
CMDLINE_POLL_S = 0.01


def _node(node_dir: Path) -> TestbedNode:
    return TestbedNode(
        name="n1", netns="x-n1", host_veth="x-n1", address="10.0.0.11",
        link_rate_bits_per_s=1, cri_socket=str(node_dir / "containerd.sock"),
        cri_endpoint=f"unix://{node_dir}/containerd.sock", dir=str(node_dir),
        config="", root_dir="", state_dir="", pidfile="", log="",
        kubelet_pidfile=str(node_dir / "kubelet.pid"), kubelet_log="", kubelet_root_dir="",
    )  # fmt: skip


@pytest.fixture
def kubelet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    endpoint = request.param.format(dir=tmp_path)
    code = f"import time; time.sleep({STAND_IN_LIFETIME_S})"
    flag = f"--container-runtime-endpoint={endpoint}"
    process = subprocess.Popen([sys.executable, "-c", code, flag])

    # /proc/PID/cmdline reads empty for a moment while the child execs: wait for the flag
    @tenacity.retry(
        stop=tenacity.stop_after_delay(CMDLINE_TIMEOUT_S),
        wait=tenacity.wait_fixed(CMDLINE_POLL_S),
        reraise=True,
    )
    def assert_started() -> None:
        assert flag.encode() in Path(f"/proc/{process.pid}/cmdline").read_bytes()

    try:
        assert_started()
        yield process.pid
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("kubelet", ["unix://{dir}/containerd.sock"], indirect=True)
def test_direct(kubelet: int, tmp_path: Path) -> None:
    assert kubelet_cri_path(_node(tmp_path), kubelet) == ("CRI direct", True)


@pytest.mark.parametrize("kubelet", ["unix://{dir}/relay.sock"], indirect=True)
def test_via_relay_up_and_down(kubelet: int, tmp_path: Path) -> None:
    node = _node(tmp_path)
    # no relay.pid: the kubelet talks to a relay that is not there, which is unhealthy
    assert kubelet_cri_path(node, kubelet) == ("CRI via relay (relay DOWN)", False)
    # a live process in relay.pid (this test's own) counts as the relay running
    (tmp_path / "relay.pid").write_text(f"{os.getpid()}\n")
    assert kubelet_cri_path(node, kubelet) == (f"CRI via relay (pid {os.getpid()})", True)


def test_no_kubelet(tmp_path: Path) -> None:
    assert kubelet_cri_path(_node(tmp_path), None) == ("CRI unknown (kubelet not running)", True)
