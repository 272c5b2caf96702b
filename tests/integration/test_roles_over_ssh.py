"""The node roles over real SSH: what the cloud testbed does to its worker VMs, here.

A local testbed of our own (prefix ``lssh``, 10.250.61.0/24) brings up the registry, the
control plane and three nodes. Each node's network namespace then gets an sshd of its own,
listening only on the node's address; the nodes' local containerd, kubelet and agent are
stopped, and ``harness/playbooks/testbed-nodes.yml`` runs the node roles against ``n1``..``n3``
**over SSH** (ansible_connection ssh, key auth, ``ansible_host`` the node's address):
containerd, the kubelet, and layersched's agent from the controller's wheels in a venv.

The playbook enters no namespace for a remote node (the host is the node), so a kubelet
that ends up in ``lssh-n1``'s namespace was started through that namespace's sshd. The
kubelet binary, the daemon helper, the CA and client certificate and the sandbox image
are copied over SSH to a node root of their own. A pod then runs on n1, and a second run
of the playbook changes nothing.

Then the seed scenario runs as on cloud nodes (``layersched scenario --driver cloud``): the
cluster driver's SSH backend reads the registry's access log and the schedulers' logs
through an sshd in the host's namespace that stands in for the control-plane VM (bound to
the bridge's gateway address only, on a port other than 22), empties the nodes' caches
through their containerd sockets forwarded from the nodes' sshds, and pushes the images
through a tunnel. One trial per strategy, tiny layers; the local scenario's checks apply.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import tenacity
import yaml

from layersched_harness.testbed.hosts import SSHTarget
from layersched_harness.testbed.local import TestbedSettings, TestbedState, down, load_state, up
from layersched_harness.testbed.remote import (
    REMOTE_TESTBED_VERSION,
    RemoteNode,
    RemoteScheduler,
    RemoteTestbed,
    remote_testbed_path,
)
from layersched_harness.testbed.scenario_images import build_and_push_scenario
from tests.e2e._checks import (
    check_image_locality_tie,
    check_layer_locality,
    check_pull_bytes,
    check_pull_times_against_the_link,
    check_real_cluster,
    check_report,
)
from tests.fixtures import prereq
from tests.fixtures import testbed as testbed_fixtures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "harness" / "playbooks" / "testbed-nodes.yml"
DAEMON = REPO / "harness" / "playbooks" / "tools" / "local_testbed_daemon.py"
#: Our own prefix and /24 (the default testbed is lstb on 10.250.50.0/24).
PREFIX = "lssh"
NET_BASE = "10.250.61"
NODES = ("n1", "n2", "n3")
SSHD = Path("/usr/sbin/sshd")
KIB = 1024
#: Tiny scenario layers: the pod only has to run.
SIZES_BYTES = {"L1": 64 * KIB, "L2": 32 * KIB, "L3": 32 * KIB, "L4": 32 * KIB}
SSHD_READY_TIMEOUT_S = 10
#: The control-plane stand-in's sshd (host namespace, the bridge's gateway address only).
CONTROL_PLANE_SSH_PORT = 2261
#: One trial per strategy: each resets the nodes (up to a kubelet image-list refresh).
SCENARIO_TRIALS = 1
SCENARIO_TIMEOUT_S = 600
PLAYBOOK_TIMEOUT_S = 600
POD_RUNNING_TIMEOUT_S = 120.0
_RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)")


def _skip_reason() -> str | None:
    reason = testbed_fixtures.testbed_skip_reason()
    if reason:
        return reason
    if not SSHD.exists():
        return "sshd not found (apt-get install openssh-server; .ci/run installs it)"
    for program in ("ssh", "ssh-keygen"):
        if shutil.which(program) is None:
            return f"{program} not found on PATH (openssh-client)"
    return None


def _daemon(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(DAEMON), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestbedState]:
    prereq.require(_skip_reason())
    state_dir = tmp_path_factory.mktemp("ssh-testbed") / "state"
    settings = TestbedSettings(
        state_dir=state_dir, node_count=len(NODES), prefix=PREFIX, net_base=NET_BASE
    )
    try:
        up(settings)
        yield load_state(state_dir)
    finally:
        for node in (*NODES, "control-plane"):
            _daemon("stop", f"--name=sshd {node}", f"--pidfile={state_dir}/ssh/sshd-{node}.pid",
                    f"--match={state_dir}/ssh/sshd_config-{node}", "--executable=sshd")  # fmt: skip
        # Teardown stops every containerd and kubelet under the state dir, the remote
        # node root included.
        down(state_dir, PREFIX)


@pytest.fixture(scope="module")
def ssh_inventory(testbed: TestbedState) -> Path:
    """An sshd in each node's namespace, the local node daemons stopped, an inventory."""
    state = Path(testbed.state_dir)
    ssh_dir = state / "ssh"
    ssh_dir.mkdir()
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    for key in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh_dir / key)], check=True
        )
    (ssh_dir / "authorized_keys").write_text((ssh_dir / "client_key.pub").read_text())
    hosts = {}
    # The control-plane stand-in: the host's namespace, the gateway address only.
    _start_sshd(ssh_dir, "control-plane", "", testbed.network.gateway, CONTROL_PLANE_SSH_PORT)
    for node in testbed.nodes:
        _start_sshd(ssh_dir, node.name, node.netns, node.address, 22)
        # The node's own daemons go: the playbook starts them again, over SSH.
        for name, match in (("kubelet", "kubelet/config.yaml"), ("containerd", "config.toml")):
            _daemon("stop", f"--name={name} {node.name}",
                    f"--pidfile={node.dir}/{name}.pid", f"--match={node.dir}/{match}",
                    f"--executable={name}")  # fmt: skip
        # ...and its agent: the playbook starts one on the node, from the node's venv.
        _daemon("stop", f"--name=agent {node.name}", f"--pidfile={node.dir}/agent.pid",
                f"--match=agent --publish --node-name {node.name} --containerd {node.cri_socket}",
                f"--executable={Path(sys.executable).name}")  # fmt: skip
        # What it published goes too: the playbook waits until the node's new agent
        # has published it again.
        _kubectl(testbed, "delete", "nodelayerinventory", node.name, "--ignore-not-found")
        hosts[node.name] = {"ansible_host": node.address, "testbed_node_address": node.address}
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "ssh",
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(ssh_dir / "client_key"),
                "ansible_ssh_common_args": (
                    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
                ),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            "children": {"nodes": {"hosts": hosts}},
        }
    }
    path = ssh_dir / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def _start_sshd(ssh_dir: Path, name: str, netns: str, address: str, port: int) -> None:
    config = ssh_dir / f"sshd_config-{name}"
    config.write_text(
        f"ListenAddress {address}:{port}\nHostKey {ssh_dir}/host_key\n"
        f"PidFile none\nAuthorizedKeysFile {ssh_dir}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "Subsystem sftp internal-sftp\n"
    )
    _daemon(
        "start", f"--name=sshd {name}", f"--netns={netns}",
        f"--pidfile={ssh_dir}/sshd-{name}.pid", f"--log={ssh_dir}/sshd-{name}.log",
        f"--match={config}", f"--ready-tcp={address}:{port}",
        f"--ready-timeout-s={SSHD_READY_TIMEOUT_S}", "--",
        str(SSHD), "-D", "-e", "-f", str(config),
    )  # fmt: skip


def _run_playbook(testbed: TestbedState, inventory: Path) -> dict[str, int]:
    """Changed tasks per host of one run of testbed-nodes.yml over SSH."""
    state = Path(testbed.state_dir)
    extra = {
        "testbed_state_dir": str(state),
        "testbed_registry_address": testbed.network.gateway,
        "testbed_node_root": str(state / "remote"),
    }
    log = state / "ssh" / "ansible.log"  # timestamped, every run appended
    env = os.environ | {
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_STDOUT_CALLBACK": "default",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_LOG_PATH": str(log),
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
         "-e", json.dumps(extra), str(PLAYBOOK)],
        capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT_S, check=False, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, f"{log}: " + done.stdout[-4000:] + done.stderr[-2000:]
    return {
        m["host"]: int(m["changed"])
        for m in (_RECAP.match(line) for line in done.stdout.splitlines())
        if m
    }


@pytest.fixture(scope="module")
def first_run(testbed: TestbedState, ssh_inventory: Path) -> dict[str, int]:
    return _run_playbook(testbed, ssh_inventory)


def _kubectl(testbed: TestbedState, *args: str) -> str:
    argv = [testbed.cluster.kubectl, f"--kubeconfig={testbed.cluster.kubeconfig}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kubelets_started_over_ssh_live_in_their_node_namespaces(
    testbed: TestbedState, first_run: dict[str, int]
) -> None:
    assert set(first_run) == {*NODES, "localhost"}
    assert all(first_run[node] for node in NODES), first_run
    remote = Path(testbed.state_dir) / "remote"
    for node in NODES:
        pid = int((remote / "nodes" / node / "kubelet.pid").read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        # The kubelet copied over SSH, with the node's own configuration and certificates.
        assert argv[0].decode() == str(remote / "bin" / "kubelet")
        config = remote / "nodes" / node / "kubelet"
        assert f"--config={config}/config.yaml".encode() in argv
        assert f"{config}/client/node.crt" in (config / "kubeconfig").read_text()
        # No namespace was entered by the playbook: the sshd's namespace is the kubelet's.
        netns = os.stat(f"/run/netns/{PREFIX}-{node}").st_ino
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == netns
        log = (Path(testbed.state_dir) / "ssh" / f"sshd-{node}.log").read_text()
        assert "Accepted publickey for root" in log


def test_a_pod_runs_on_a_node_set_up_over_ssh(
    testbed: TestbedState, first_run: dict[str, int]
) -> None:
    images = build_and_push_scenario(testbed.registry.host, SIZES_BYTES)
    manifest = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ssh-pod", "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": "n1"},
            "containers": [{"name": "main", "image": images.img1}],
        },
    }  # fmt: skip
    path = Path(testbed.state_dir) / "ssh-pod.json"
    path.write_text(json.dumps(manifest))
    _kubectl(testbed, "create", "-f", str(path))

    @tenacity.retry(
        stop=tenacity.stop_after_delay(POD_RUNNING_TIMEOUT_S),
        wait=tenacity.wait_fixed(1.0),
        reraise=True,
    )
    def running() -> None:
        pod = json.loads(_kubectl(testbed, "get", "pod", "ssh-pod", "-o", "json"))
        assert pod["status"].get("phase") == "Running", pod["status"]

    running()
    # The image was pulled by the containerd the playbook started over SSH.
    remote_root = Path(testbed.state_dir) / "remote" / "nodes" / "n1" / "root"
    assert any(remote_root.rglob("*")), "the remote node's containerd root is empty"
    _kubectl(testbed, "delete", "pod", "ssh-pod", "--grace-period=0", "--force")


def test_second_run_over_ssh_changes_nothing(
    testbed: TestbedState, ssh_inventory: Path, first_run: dict[str, int]
) -> None:
    assert _run_playbook(testbed, ssh_inventory) == dict.fromkeys((*NODES, "localhost"), 0)


def test_each_node_runs_its_agent_from_its_own_venv(
    testbed: TestbedState, first_run: dict[str, int]
) -> None:
    remote = Path(testbed.state_dir) / "remote"
    published = json.loads(_kubectl(testbed, "get", "nodelayerinventories", "-o", "json"))
    by_node = {o["metadata"]["name"]: o for o in published["items"]}
    assert set(by_node) == set(NODES), sorted(by_node)
    assert {o["source"] for o in by_node.values()} == {"content-store"}
    for node in NODES:
        pid = int((remote / "nodes" / node / "agent.pid").read_text())
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        # The node's venv, installed over SSH from the controller's wheels, its own
        # identity, its own (remote) containerd, in its node's namespace.
        assert argv[0] == str(remote / "nodes" / node / "venv" / "bin" / "python"), argv
        assert f"--kubeconfig={remote}/nodes/{node}/agent/kubeconfig" in argv, argv
        assert str(remote / "nodes" / node / "containerd.sock") in argv, argv
        kubeconfig = (remote / "nodes" / node / "agent" / "kubeconfig").read_text()
        assert f"layersched:agent:{node}" in kubeconfig
        netns = os.stat(f"/run/netns/{PREFIX}-{node}").st_ino
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == netns


def _remote_testbed(testbed: TestbedState) -> RemoteTestbed:
    """What testbed-cloud.yml writes for cloud VMs, for this testbed reached over SSH."""
    ssh_dir = Path(testbed.state_dir) / "ssh"
    remote = Path(testbed.state_dir) / "remote"

    def target(host: str, port: int) -> SSHTarget:
        return SSHTarget(host=host, port=port, user="root", key_file=str(ssh_dir / "client_key"),
                         known_hosts=str(ssh_dir / "known_hosts"))  # fmt: skip

    cluster = testbed.cluster
    return RemoteTestbed(
        version=REMOTE_TESTBED_VERSION,
        kubeconfig=cluster.kubeconfig,
        kubernetes_version=cluster.kubernetes_version,
        control_plane=target(testbed.network.gateway, CONTROL_PLANE_SSH_PORT),
        registry=testbed.registry.host,
        access_log=testbed.registry.access_log,
        extender_url=cluster.extender.url,
        extender_log=cluster.extender.log,
        schedulers={
            strategy: RemoteScheduler(name=s.name, log=s.log)
            for strategy, s in cluster.schedulers.items()
        },
        nodes=tuple(
            RemoteNode(name=n.name, address=n.address, ssh=target(n.address, 22),
                       cri_socket=str(remote / "nodes" / n.name / "containerd.sock"),
                       link_rate_bits_per_s=n.link_rate_bits_per_s)
            for n in testbed.nodes
        ),
    )  # fmt: skip


def test_the_seed_scenario_runs_through_the_ssh_backend(
    testbed: TestbedState, ssh_inventory: Path, first_run: dict[str, int], tmp_path: Path
) -> None:
    state = tmp_path / "cloud-state"
    state.mkdir()
    remote_testbed_path(state).write_bytes(msgspec.json.encode(_remote_testbed(testbed)))
    report_path = tmp_path / "scenario.json"
    sizes = [f"--size={label}={size_bytes}" for label, size_bytes in SIZES_BYTES.items()]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "layersched.cli.main", "scenario", "--driver=cloud",
         f"--state-dir={state}", f"--trials={SCENARIO_TRIALS}", f"--report={report_path}",
         *sizes],
        timeout=SCENARIO_TIMEOUT_S, check=False,
    )  # fmt: skip
    print(f"scenario over SSH: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, "layersched scenario --driver cloud failed (output above)"
    report = json.loads(report_path.read_text())
    cluster = testbed.cluster
    schedulers = {strategy: s.name for strategy, s in cluster.schedulers.items()}
    # every strategy the cluster runs (the local roles' cluster runs the plugin too)
    check_report(report, "cloud", SCENARIO_TRIALS, set(NODES), strategies=set(schedulers))
    check_real_cluster(report, schedulers, cluster.kubernetes_version)
    check_pull_times_against_the_link(report)
    check_layer_locality(report)
    check_image_locality_tie(report)
    check_pull_bytes(report)
    # The logs were read through the control-plane stand-in's sshd, and no ssh is left.
    log = (Path(testbed.state_dir) / "ssh" / "sshd-control-plane.log").read_text()
    assert "Accepted publickey for root" in log
    left = subprocess.run(["pgrep", "-f", "layersched-ssh-"], capture_output=True, check=False)
    assert left.returncode == 1, f"ssh processes left: {left.stdout!r}"
