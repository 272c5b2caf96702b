"""The node roles over real SSH: what the cloud testbed does to its worker VMs, here.

A local testbed of our own (prefix ``lssh``, 10.250.61.0/24) brings up the registry, the
control plane and two nodes. Each node's network namespace then gets an sshd of its own,
listening only on the node's address; the nodes' local containerd and kubelet are
stopped, and ``playbooks/testbed-nodes.yml`` runs the node roles against ``n1`` and ``n2``
**over SSH** (ansible_connection ssh, key auth, ``ansible_host`` the node's address).

The playbook enters no namespace for a remote node (the host is the node), so a kubelet
that ends up in ``lssh-n1``'s namespace was started through that namespace's sshd. The
kubelet binary, the daemon helper, the CA and client certificate and the sandbox image
are copied over SSH to a node root of their own. A pod then runs on n1, and a second run
of the playbook changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tenacity
import yaml

from layersched.testbed.local import TestbedInventory, TestbedSettings, down, load_inventory, up
from layersched.testbed.scenario_images import build_and_push_scenario
from tests.fixtures import testbed as testbed_fixtures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "testbed-nodes.yml"
DAEMON = REPO / "playbooks" / "tools" / "local_testbed_daemon.py"
#: Our own prefix and /24 (the default testbed is lstb on 10.250.50.0/24).
PREFIX = "lssh"
NET_BASE = "10.250.61"
NODES = ("n1", "n2")
SSHD = Path("/usr/sbin/sshd")
KIB = 1024
#: Tiny scenario layers: the pod only has to run.
SIZES_BYTES = {"L1": 64 * KIB, "L2": 32 * KIB, "L3": 32 * KIB, "L4": 32 * KIB}
SSHD_READY_TIMEOUT_S = 10
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
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestbedInventory]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    state_dir = tmp_path_factory.mktemp("ssh-testbed") / "state"
    settings = TestbedSettings(
        state_dir=state_dir, node_count=len(NODES), prefix=PREFIX, net_base=NET_BASE
    )
    try:
        up(settings)
        yield load_inventory(state_dir)
    finally:
        for node in NODES:
            _daemon("stop", f"--name=sshd {node}", f"--pidfile={state_dir}/ssh/sshd-{node}.pid",
                    f"--match={state_dir}/ssh/sshd_config-{node}", "--executable=sshd")  # fmt: skip
        # Teardown stops every containerd and kubelet under the state dir, the remote
        # node root included.
        down(state_dir, PREFIX)


@pytest.fixture(scope="module")
def ssh_inventory(testbed: TestbedInventory) -> Path:
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
    for node in testbed.nodes:
        config = ssh_dir / f"sshd_config-{node.name}"
        config.write_text(
            f"ListenAddress {node.address}:22\nHostKey {ssh_dir}/host_key\n"
            f"PidFile none\nAuthorizedKeysFile {ssh_dir}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "Subsystem sftp internal-sftp\n"
        )
        _daemon(
            "start", f"--name=sshd {node.name}", f"--netns={node.netns}",
            f"--pidfile={ssh_dir}/sshd-{node.name}.pid", f"--log={ssh_dir}/sshd-{node.name}.log",
            f"--match={config}", f"--ready-tcp={node.address}:22",
            f"--ready-timeout-s={SSHD_READY_TIMEOUT_S}", "--",
            str(SSHD), "-D", "-e", "-f", str(config),
        )  # fmt: skip
        # The node's own daemons go: the playbook starts them again, over SSH.
        for name, match in (("kubelet", "kubelet/config.yaml"), ("containerd", "config.toml")):
            _daemon("stop", f"--name={name} {node.name}",
                    f"--pidfile={node.dir}/{name}.pid", f"--match={node.dir}/{match}",
                    f"--executable={name}")  # fmt: skip
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


def _run_playbook(testbed: TestbedInventory, inventory: Path) -> dict[str, int]:
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
def first_run(testbed: TestbedInventory, ssh_inventory: Path) -> dict[str, int]:
    return _run_playbook(testbed, ssh_inventory)


def _kubectl(testbed: TestbedInventory, *args: str) -> str:
    argv = [testbed.cluster.kubectl, f"--kubeconfig={testbed.cluster.kubeconfig}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kubelets_started_over_ssh_live_in_their_node_namespaces(
    testbed: TestbedInventory, first_run: dict[str, int]
) -> None:
    assert set(first_run) == {"n1", "n2"} and all(first_run.values())
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
    testbed: TestbedInventory, first_run: dict[str, int]
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
    testbed: TestbedInventory, ssh_inventory: Path, first_run: dict[str, int]
) -> None:
    assert _run_playbook(testbed, ssh_inventory) == {"n1": 0, "n2": 0}
