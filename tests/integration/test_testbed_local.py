"""The local testbed for real: Ansible brings up docker-registry and containerd nodes in
network namespaces behind tbf-limited veths, a Kubernetes v1.20.2 cluster on them (etcd,
kube-apiserver, kube-controller-manager, two kube-schedulers, one kubelet per node), and
tears everything down again: processes, pod mounts, pod logs, cgroups, namespaces.

The test's testbed has its own state dir, name prefix and /24, so it coexists with a
testbed brought up by ``make testbed``. Its tests run in file order: bring-up checks,
then the idempotent second ``up``, then teardown (twice). The module fixture tears down
whatever happens.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity

from layersched.cri import CRIClient
from layersched_harness.testbed.local import (
    TestbedSettings,
    TestbedState,
    down,
    link_tx_bytes,
    load_state,
    probe,
    tbf_rate_bits_per_s,
    up,
)
from layersched_harness.testbed.scenario_images import build_and_push_scenario
from tests.fixtures import prereq
from tests.fixtures.testbed import NOTHING_LEFT, leftovers, live_processes, testbed_skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KIB = 1024
#: Our own prefix and /24, distinct from the default testbed (lstb, 10.250.50.0/24).
PREFIX = "lsit"
NET_BASE = "10.250.51"
#: Two nodes are enough to show a per-node rate: n1 at the default, n2 on a slow link.
NODE_COUNT = 2
FAST_BITS_PER_S = 20_000_000
SLOW_BITS_PER_S = 4_000_000
#: Small scenario layers: Img1 is 768 KiB of blobs, about 1.6 s through the slow link.
SIZES_BYTES = {"L1": 512 * KIB, "L2": 128 * KIB, "L3": 128 * KIB, "L4": 96 * KIB}
#: Protocol overhead on the link (TCP/IP headers, HTTP, manifests and config) on top of
#: the blob bytes: headers are ~3% at 1500-byte frames, the JSON documents a few KiB.
LINK_OVERHEAD_RATIO = 1.06
LINK_OVERHEAD_BYTES = 64 * KIB
#: A shaped transfer takes at least 90% of bits/rate (tbf's bucket lets a burst through
#: early) and at most 1.3x plus a second of CRI/unpack work.
MIN_TIME_RATIO = 0.9
MAX_TIME_RATIO = 1.3
MAX_EXTRA_S = 1.0
#: How long the access log may take to show the blobs a finished pull fetched.
ACCESS_LOG_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 5.0
#: An extender starts in well under a second, and exits at once on SIGTERM.
EXTENDER_START_TIMEOUT_S = 10.0
EXTENDER_STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
#: A pod on a real kubelet: sandbox, CNI, image pull and start take a few seconds.
POD_RUNNING_TIMEOUT_S = 120.0
#: The kubelet's default pod log directory (outside the state dir), which the testbed's
#: kubelets no longer use: each writes under its node's own (podLogsDir).
POD_LOGS = Path("/var/log/pods")
#: Where a testbed node's kubelet writes container logs, under the node's directory.
NODE_POD_LOGS = ("kubelet", "pod-logs")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _skip_reason() -> str | None:
    return testbed_skip_reason()


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> TestbedSettings:
    prereq.require(_skip_reason())
    return TestbedSettings(
        state_dir=tmp_path_factory.mktemp("testbed") / "state",
        node_count=NODE_COUNT,
        rate_bits_per_s=FAST_BITS_PER_S,
        node_rate_bits_per_s={"n2": SLOW_BITS_PER_S},
        prefix=PREFIX,
        net_base=NET_BASE,
    )


@pytest.fixture(scope="module")
def testbed(settings: TestbedSettings) -> Iterator[TestbedState]:
    try:
        up(settings)
        yield load_state(settings.state_dir)
    finally:
        down(settings.state_dir, PREFIX)


def test_inventory_describes_every_node(testbed: TestbedState) -> None:
    # n1 at the default rate, n2 at its override; addresses BASE.(10+K); one socket each.
    assert [n.name for n in testbed.nodes] == ["n1", "n2"]
    assert [n.address for n in testbed.nodes] == [f"{NET_BASE}.11", f"{NET_BASE}.12"]
    assert [n.link_rate_bits_per_s for n in testbed.nodes] == [FAST_BITS_PER_S, SLOW_BITS_PER_S]
    assert [n.netns for n in testbed.nodes] == [f"{PREFIX}-n1", f"{PREFIX}-n2"]
    assert testbed.registry.host == f"{NET_BASE}.1:5000"
    for node in testbed.nodes:
        assert Path(node.cri_socket).is_socket()


def _kubectl(testbed: TestbedState, *args: str) -> str:
    cluster = testbed.cluster
    argv = [cluster.kubectl, f"--kubeconfig={cluster.kubeconfig}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return done.stdout


def test_every_node_is_a_ready_kubelet_of_the_built_version(testbed: TestbedState) -> None:
    nodes = json.loads(_kubectl(testbed, "get", "nodes", "-o", "json"))["items"]
    seen = {}
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        info = node["status"]["nodeInfo"]
        seen[node["metadata"]["name"]] = (
            ready[0]["status"],
            info["kubeletVersion"],
            info["containerRuntimeVersion"].split("://")[0],
        )
    version = testbed.cluster.kubernetes_version
    assert seen == {n: ("True", version, "containerd") for n in ("n1", "n2")}


def test_status_reports_every_component_healthy(testbed: TestbedState) -> None:
    status = probe(testbed)
    names = [c.status.name for c in (*status.control_plane, *status.kubelets)]
    assert names == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "scheduler-image-locality",
        "scheduler-layer-locality",
        "scheduler-layer-locality-plugin",
        "layersched extender (layer-locality)",
        "kubelet n1",
        "kubelet n2",
    ]
    unhealthy = [c.status for c in (*status.control_plane, *status.kubelets) if not c.healthy]
    assert not unhealthy
    assert status.healthy


@pytest.fixture(scope="module")
def running_pod(testbed: TestbedState) -> dict[str, Any]:
    """A pod the default scheduler places on n1 and its real kubelet runs (the small Img1;
    n2's cache stays empty for the shaped-pull test)."""
    images = build_and_push_scenario(testbed.registry.host, SIZES_BYTES)
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "it-pod", "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": "n1"},
            "containers": [{"name": "main", "image": images.img1}],
        },
    }
    path = Path(testbed.state_dir) / "it-pod.json"
    path.write_text(json.dumps(manifest))
    _kubectl(testbed, "create", "-f", str(path))

    @tenacity.retry(
        stop=tenacity.stop_after_delay(POD_RUNNING_TIMEOUT_S),
        wait=tenacity.wait_fixed(1.0),
        reraise=True,
    )
    def running() -> dict[str, Any]:
        pod: dict[str, Any] = json.loads(_kubectl(testbed, "get", "pod", "it-pod", "-o", "json"))
        assert pod["status"].get("phase") == "Running", pod["status"]
        return pod

    return running()


def test_a_pod_runs_on_a_real_kubelet(testbed: TestbedState, running_pod: dict[str, Any]) -> None:
    # Bound by the default scheduler, given an address from its node's pod network
    # (10.244.K.0/24), and its logs in its node's own pod log directory, none in the
    # host's shared one (where the other nodes' kubelets would delete them)
    assert running_pod["spec"]["nodeName"] == "n1"
    assert running_pod["status"]["podIP"].startswith("10.244.1.")
    uid = running_pod["metadata"]["uid"]
    [n1] = [n for n in testbed.nodes if n.name == "n1"]
    node_logs = Path(n1.dir).joinpath(*NODE_POD_LOGS)
    assert [p.name for p in node_logs.glob(f"*_{uid}")] == [f"default_it-pod_{uid}"]
    assert list(POD_LOGS.glob(f"*_{uid}")) == []


def test_registry_answers_v2(testbed: TestbedState) -> None:
    response = httpx.get(f"{testbed.registry.url}/v2/", timeout=PROBE_TIMEOUT_S)
    assert response.status_code == httpx.codes.OK


def test_each_node_answers_cri_version(testbed: TestbedState) -> None:
    for node in testbed.nodes:
        with CRIClient(node.cri_endpoint, timeout_s=PROBE_TIMEOUT_S) as cri:
            assert cri.version().runtime_name == "containerd"


def test_each_link_has_its_tbf_rate(testbed: TestbedState) -> None:
    # tc reports bytes/s; 20 Mbit/s = 2,500,000 B/s, 4 Mbit/s = 500,000 B/s.
    rates = {n.name: tbf_rate_bits_per_s(n.host_veth) for n in testbed.nodes}
    assert rates == {"n1": FAST_BITS_PER_S, "n2": SLOW_BITS_PER_S}


def _timed_pull(cri: CRIClient, host_veth: str, image: str) -> tuple[int, float]:
    before = link_tx_bytes(host_veth)
    start = time.monotonic()
    cri.pull_image(image)
    return link_tx_bytes(host_veth) - before, time.monotonic() - start


@tenacity.retry(stop=tenacity.stop_after_delay(ACCESS_LOG_TIMEOUT_S), reraise=True)
def _assert_logged_blobs(access_log: Path, address: str, digests: set[str]) -> None:
    lines = [line for line in access_log.read_text().splitlines() if line.startswith(address)]
    fetched = {d for d in digests if any(f"/blobs/{d}" in line for line in lines)}
    assert fetched == digests


def test_pulls_cross_the_shaped_link(testbed: TestbedState) -> None:
    # The scenario images, small: push twice (same digests: deterministic), then pull on
    # n2 (4 Mbit/s) through CRI, so containerd inside the netns downloads.
    images = build_and_push_scenario(testbed.registry.host, SIZES_BYTES)
    again = build_and_push_scenario(testbed.registry.host, SIZES_BYTES)
    assert again.layers == images.layers
    node = testbed.node("n2")
    size = {label: size for label, (_, size) in images.layers.items()}
    with CRIClient(node.cri_endpoint) as cri:
        # Empty cache: Img1's three blobs (L1+L2+L3 = 768 KiB + gzip framing) cross the
        # link; 768 KiB * 8 / 4 Mbit/s = 1.57 s.
        sent, seconds = _timed_pull(cri, node.host_veth, images.img1)
        blob_bytes = size["L1"] + size["L2"] + size["L3"]
        _assert_shaped(sent, seconds, blob_bytes)
        # L1 and L2 cached: only L4 (96 KiB, 0.2 s) plus manifest and config.
        sent, seconds = _timed_pull(cri, node.host_veth, images.img2)
        _assert_shaped(sent, seconds, size["L4"])
    digests = {digest for digest, _ in images.layers.values()}
    _assert_logged_blobs(Path(testbed.registry.access_log), node.address, digests)


def _assert_shaped(sent_bytes: int, seconds: float, blob_bytes: int) -> None:
    assert blob_bytes <= sent_bytes <= blob_bytes * LINK_OVERHEAD_RATIO + LINK_OVERHEAD_BYTES
    link_s = sent_bytes * 8 / SLOW_BITS_PER_S
    assert MIN_TIME_RATIO * link_s <= seconds <= MAX_TIME_RATIO * link_s + MAX_EXTRA_S


def test_second_up_changes_nothing(testbed: TestbedState, settings: TestbedSettings) -> None:
    # n2's 4 Mbit/s link has a 16384 B bucket that tc reads back as 16383 B: still no change.
    assert up(settings).changed == 0


def _containerd_pids(config: str) -> list[int]:
    return [
        pid
        for pid, argv in live_processes()
        if Path(argv[0].decode()).name == "containerd" and config.encode() in argv
    ]


def test_up_with_a_lost_pidfile_adopts_the_running_node(
    testbed: TestbedState, settings: TestbedSettings
) -> None:
    node = testbed.node("n1")
    running = _containerd_pids(node.config)
    assert len(running) == 1, running
    Path(node.pidfile).unlink()
    # The daemon is still there: up records its pid again instead of starting a second
    # containerd on the same root (which would fight over its socket and metadata).
    assert up(settings).changed == 1
    assert _containerd_pids(node.config) == running
    assert int(Path(node.pidfile).read_text()) == running[0]


def _leftovers(
    state_dir: Path, pod_uid: str = "", containers: tuple[str, ...] = ()
) -> dict[str, list[str]]:
    cgroups = [str(p) for c in containers for p in CGROUP_ROOT.glob(f"*/*/{c}")]
    return {
        **leftovers(state_dir, PREFIX),
        "pod_logs": [str(p) for p in POD_LOGS.glob(f"*_{pod_uid}")] if pod_uid else [],
        "cgroups": cgroups,
    }


def test_down_removes_everything_and_is_repeatable(
    testbed: TestbedState, settings: TestbedSettings, running_pod: dict[str, Any]
) -> None:
    state_dir = settings.state_dir.resolve()
    uid = running_pod["metadata"]["uid"]
    node = testbed.node(running_pod["spec"]["nodeName"])
    listed = subprocess.run(
        ["ctr", "--address", node.cri_socket, "--namespace", "k8s.io", "containers", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    containers = tuple(listed.stdout.split())
    before = _leftovers(state_dir, uid, containers)
    assert before["processes"], "the testbed should be running before down"
    # The running pod: its containers' cgroups. (Its logs under /var/log/pods may already
    # be gone: every testbed kubelet shares that host directory, and another node's
    # kubelet garbage-collects log dirs of pods its own runtime does not run. Teardown
    # must leave none either way, checked below.)
    assert before["cgroups"], before
    # Stand-ins for snapshotter mounts a crashed containerd leaves, one inside the other.
    outer = Path(testbed.node("n1").root_dir) / "leftover"
    for mountpoint in (outer, outer / "inner"):
        mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mountpoint)], check=True)
    # (the running pod has mounts of its own: its rootfs overlay, netns, kubelet dirs)
    assert len(_leftovers(state_dir)["mounts"]) == len(before["mounts"]) + 2
    # An extender a killed `layersched scenario` left behind, recorded in its pidfile.
    extender = subprocess.Popen(
        [sys.executable, "-m", "layersched.cli.main", "extender", "--port", str(_free_port())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (state_dir / f"extender-{extender.pid}.pid").write_text(f"{extender.pid}\n")
    _assert_running(extender)
    down(state_dir, PREFIX)
    # SIGTERM from the teardown: it exits (the wait would time out otherwise).
    assert extender.wait(timeout=EXTENDER_STOP_TIMEOUT_S) is not None
    assert _leftovers(state_dir, uid, containers) == {
        **NOTHING_LEFT,
        "pod_logs": [],
        "cgroups": [],
    }
    # A second down finds nothing to do, and says so.
    assert down(state_dir, PREFIX).changed == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@tenacity.retry(
    stop=tenacity.stop_after_delay(EXTENDER_START_TIMEOUT_S),
    wait=tenacity.wait_fixed(POLL_S),
    reraise=True,
)
def _assert_running(proc: subprocess.Popen[bytes]) -> None:
    """The process has started far enough to show its command line (and not exited)."""
    assert proc.poll() is None, f"exited with {proc.returncode}"
    assert b"extender" in Path(f"/proc/{proc.pid}/cmdline").read_bytes()


def test_down_tolerates_a_corrupt_settings_record(tmp_path: Path) -> None:
    # An interrupted bring-up left half a settings.json: down still removes the state dir
    # (the prefix given, which names nothing here, stands in for the unreadable record).
    prereq.require(_skip_reason())
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "settings.json").write_text('{"prefix": ')
    down(state_dir, "lsiz")
    assert not state_dir.exists()
