"""The remote (cloud) testbed's description and the cluster backend's host seam.

``remote-testbed.json`` is what ``playbooks/testbed-cloud.yml`` writes for the SSH
backend; a missing, malformed or incomplete one stops with the file and the fix. The
local host reads files from an offset as the SSH host does with ``stat``/``tail``
(that one is exercised over real SSH in tests/integration/test_roles_over_ssh.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec
import pytest

from layersched.cli.scenario import _cloud
from layersched.core.errors import InputError, TestbedError
from layersched.testbed.hosts import LocalHost, SSHTarget
from layersched.testbed.remote import (
    REMOTE_TESTBED_VERSION,
    RemoteNode,
    RemoteScheduler,
    RemoteTestbed,
    load_remote_testbed,
    node_rates,
    remote_testbed_path,
)

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
