"""The remote (cloud) testbed's description and the cluster backend's host seam.

``remote-testbed.json`` is what ``harness/playbooks/testbed-cloud.yml`` writes for the SSH
backend; a missing, malformed or incomplete one stops with the file and the fix. The
local host reads files from an offset as the SSH host does with ``stat``/``tail``
(that one is exercised over real SSH in tests/integration/test_roles_over_ssh.py).
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from layersched.core.errors import InputError
from layersched_harness.testbed.cli.scenario import _cloud
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.hosts import LocalHost, SSHHost, SSHTarget
from layersched_harness.testbed.remote import (
    REMOTE_TESTBED_VERSION,
    RemoteNode,
    RemoteScheduler,
    RemoteTestbed,
    load_remote_testbed,
    node_rates,
    remote_testbed_path,
)

CLOUD_PLAYBOOK = Path(__file__).resolve().parents[2] / "harness" / "playbooks" / "testbed-cloud.yml"
TARGET = SSHTarget(host="203.0.113.7", user="admin", key_file="/k", known_hosts="/kh", become=True)


def _testbed(**changes: object) -> RemoteTestbed:
    base = RemoteTestbed(
        version=REMOTE_TESTBED_VERSION,
        kubeconfig="/state/kubeconfig",
        kubernetes_version="v1.20.2",
        control_plane=TARGET,
        registry="10.61.1.10:5000",
        access_log="/var/lib/layersched/registry/access.log",
        extender_url="http://10.61.1.10:8888",
        extender_log="/var/lib/layersched/logs/extender-layer-locality.log",
        schedulers={
            "image-locality": RemoteScheduler(name="image-locality", log="/cp/il.log"),
            "layer-locality": RemoteScheduler(name="layer-locality", log="/cp/ll.log"),
        },
        nodes=(
            RemoteNode(name="n1", address="10.61.1.11", ssh=TARGET, cri_socket="/n1.sock",
                       link_rate_bits_per_s=20_000_000),
            RemoteNode(name="n2", address="10.61.1.12", ssh=TARGET, cri_socket="/n2.sock"),
        ),
    )  # fmt: skip
    return msgspec.structs.replace(base, **changes)


def _write(state: Path, document: object) -> None:
    remote_testbed_path(state).write_bytes(msgspec.json.encode(document))


def test_a_written_testbed_loads_back(tmp_path: Path) -> None:
    _write(tmp_path, _testbed())
    loaded = load_remote_testbed(tmp_path)
    assert loaded == _testbed()
    assert str(loaded.control_plane) == "admin@203.0.113.7:22"
    # only shaped nodes have a rate
    assert node_rates(loaded) == {"n1": 20_000_000}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        # nothing brought up yet: say how
        (None, r"no remote testbed: bring it up first \(make testbed DRIVER=cloud"),
        # a half-written file
        (b"{", "malformed remote testbed"),
        # a field of the wrong type names the field
        ({"version": 1, "nodes": "n1"}, "malformed remote testbed"),
        # an older layout
        (_testbed(version=REMOTE_TESTBED_VERSION + 1), "expected 1: re-run"),
        # the scenario compares two strategies
        (_testbed(schedulers={}), "schedulers lacks image-locality, layer-locality"),
        (_testbed(nodes=()), "nodes is empty"),
    ],
    ids=["absent", "truncated", "wrong-type", "version", "no-schedulers", "no-nodes"],
)
def test_a_bad_testbed_file_names_the_file_and_the_fix(
    tmp_path: Path, document: object, message: str
) -> None:
    if isinstance(document, bytes):
        remote_testbed_path(tmp_path).write_bytes(document)
    elif document is not None:
        _write(tmp_path, document)
    with pytest.raises(TestbedError, match=message) as caught:
        load_remote_testbed(tmp_path)
    assert str(remote_testbed_path(tmp_path)) in str(caught.value)


def test_the_cloud_scenario_needs_a_state_dir_and_every_node_rate(tmp_path: Path) -> None:
    args = argparse.Namespace(state_dir=None, spec=None)
    with pytest.raises(InputError, match="--driver cloud needs --state-dir"):
        _cloud(args, {}, None)  # type: ignore[arg-type]
    _write(tmp_path, _testbed())
    args.state_dir = tmp_path
    # n2 has no rate: the report's time checks could not be made
    with pytest.raises(InputError, match="nodes n2 have no link_rate_bits_per_s"):
        _cloud(args, {}, None)  # type: ignore[arg-type]


def test_the_local_host_reads_after_an_offset_and_treats_absent_files_as_empty(
    tmp_path: Path,
) -> None:
    log = tmp_path / "access.log"
    host = LocalHost()
    assert host.file_end(str(log)) == 0
    assert host.lines_since(str(log), 0) == []
    log.write_text("first\n")
    mark = host.file_end(str(log))
    # 6 bytes: "first\n"
    assert mark == 6
    with log.open("a") as f:
        f.write("second\nthird\n")
    assert host.lines_since(str(log), mark) == ["second", "third"]
    # nothing to forward on this machine
    assert host.unix_socket("/run/containerd.sock") == "/run/containerd.sock"
    assert host.tcp("10.0.0.1", 5000) == "10.0.0.1:5000"


def test_a_local_command_that_fails_says_what_and_why() -> None:
    with pytest.raises(TestbedError, match=r"asking for nothing: exit 1"):
        LocalHost().run(["false"], "asking for nothing")


def _cloud_play() -> dict[str, Any]:
    plays = yaml.safe_load(CLOUD_PLAYBOOK.read_text())
    play: dict[str, Any] = next(p for p in plays if p.get("hosts") == "control_plane")
    return play


def _task(play: dict[str, Any], prefix: str) -> dict[str, Any]:
    task: dict[str, Any] = next(t for t in play["post_tasks"] if t["name"].startswith(prefix))
    return task


def test_the_cloud_playbook_writes_every_field_the_backend_reads() -> None:
    # The VM side of testbed-cloud.yml has never run: at least its document must have
    # exactly RemoteTestbed's fields, its nodes RemoteNode's and its logins SSHTarget's.
    play = _cloud_play()
    document = _task(play, "Describe the remote testbed")["vars"]["testbed_remote"]
    assert set(document) == set(RemoteTestbed.__struct_fields__)
    assert document["version"] == REMOTE_TESTBED_VERSION
    assert set(document["schedulers"]) == {"image-locality", "layer-locality"}
    ssh = play["vars"]["testbed_remote_ssh"]
    assert set(ssh) | {"host"} == set(SSHTarget.__struct_fields__)
    nodes = _task(play, "Describe each node")["ansible.builtin.set_fact"]["testbed_remote_nodes"]
    written = set(re.findall(r"^\s*'(\w+)':", nodes, re.MULTILINE))
    assert written == set(RemoteNode.__struct_fields__)


class _FakeSSH:
    """Stands in for subprocess.run: records each ssh argv, answers as told."""

    def __init__(self, returncode: int, stdout: str = "", stderr: str = "") -> None:
        self.answer = (returncode, stdout, stderr)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if self.answer[0] < 0:
            raise subprocess.TimeoutExpired(argv, 30)
        return subprocess.CompletedProcess(argv, *self.answer)


@pytest.fixture
def ssh_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[SSHHost]:
    monkeypatch.setattr("shutil.which", lambda _: "/usr/bin/ssh")
    host = SSHHost(TARGET)
    yield host
    monkeypatch.setattr("subprocess.run", _FakeSSH(0))
    host.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        # ssh's own failure (255): the login, not the command
        ((255, "", "admin@203.0.113.7: Permission denied (publickey)."),
         r"ssh admin@203.0.113.7:22: cannot log in for the size of /log: .*Permission denied"),
        # the remote command's failure names the file
        ((1, "", "stat: cannot statx '/log': Permission denied"),
         r"ssh admin@203.0.113.7:22: the size of /log: stat: cannot statx"),
        # a hung host: the timeout and its constant
        ((-1, "", ""), r"timed out after 30 s \(SSH_COMMAND_TIMEOUT_S\)"),
        # stat printed something that is not a size
        ((0, "big\n", ""), r"printed 'big', not a size"),
    ],
    ids=["login-refused", "remote-error", "timeout", "garbage"],
)  # fmt: skip
def test_ssh_failures_name_the_host_and_what_failed(
    ssh_host: SSHHost, monkeypatch: pytest.MonkeyPatch, answer: tuple[int, str, str], message: str
) -> None:
    monkeypatch.setattr("subprocess.run", _FakeSSH(*answer))
    with pytest.raises(TestbedError, match=message):
        ssh_host.file_end("/log")


def test_ssh_reads_with_sudo_from_the_offset_and_absent_files_are_empty(
    ssh_host: SSHHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeSSH(0, "a\nb\n")
    monkeypatch.setattr("subprocess.run", fake)
    assert ssh_host.lines_since("/var/log/x.log", 10) == ["a", "b"]
    argv = fake.calls[-1]
    # never a prompt, the key, the port and the user; sudo for a non-root login; the
    # byte after offset 10 is byte 11 for tail
    assert argv[1:3] == ["-o", "BatchMode=yes"]
    assert argv[argv.index("-i") + 1] == "/k" and argv[argv.index("-p") + 1] == "22"
    assert argv[argv.index("-l") + 1] == "admin"
    assert argv[-1] == "sudo -n tail -c +11 -- /var/log/x.log"
    absent = "No such file or directory"
    monkeypatch.setattr("subprocess.run", _FakeSSH(1, "", f"tail: cannot open '/x': {absent}"))
    assert ssh_host.lines_since("/x", 0) == []
    monkeypatch.setattr("subprocess.run", _FakeSSH(1, "", f"stat: cannot statx '/x': {absent}"))
    assert ssh_host.file_end("/x") == 0
