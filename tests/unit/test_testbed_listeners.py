"""The testbed's check that nobody else listens on its bridge address (``up``'s preflight).

A killed run leaves a testbed's daemons on their addresses; a second ``up`` there met the
other API server and failed late with an x509 error. Real sockets of this process stand
for the foreign daemons: the check reads the real ``/proc``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import TestbedSettings
from layersched_harness.testbed.local._ansible import _check_addresses_free, check_socket_paths
from layersched_harness.testbed.local._listeners import foreign_listeners


@pytest.fixture
def listening() -> Iterator[int]:
    """A TCP socket of this process listening on 127.0.0.1 (its port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_process_listening_on_the_address_is_found(listening: int, tmp_path: Path) -> None:
    found = {f.port: f for f in foreign_listeners("127.0.0.1", tmp_path)}
    assert found[listening].pid == os.getpid()
    assert Path(sys.executable).name in found[listening].command


def test_a_process_naming_the_state_dir_is_this_testbeds_own(listening: int) -> None:
    # a testbed's daemons name its state dir on their command lines (--data-dir=DIR/...,
    # --config=DIR/...); this process names the interpreter's path: as a "state dir",
    # that makes its socket ours, and up adopts it instead of refusing
    command = (Path("/proc") / str(os.getpid()) / "cmdline").read_bytes().split(b"\0")
    interpreter = Path(command[0].decode())
    assert listening not in {f.port for f in foreign_listeners("127.0.0.1", interpreter)}


def test_another_address_is_not_reported(listening: int, tmp_path: Path) -> None:
    assert listening not in {f.port for f in foreign_listeners("127.0.0.2", tmp_path)}


def test_up_refuses_an_address_in_use_and_names_the_holder(listening: int, tmp_path: Path) -> None:
    settings = TestbedSettings(state_dir=tmp_path, prefix="lsxx", net_base="127.0.0")
    with pytest.raises(TestbedError) as raised:
        _check_addresses_free(settings, tmp_path)
    message = str(raised.value)
    assert f"port {listening}: pid {os.getpid()}" in message
    assert "layersched testbed down --state-dir" in message
    assert "--net-base" in message


def test_a_state_dir_too_long_for_the_kubelets_socket_is_refused() -> None:
    # the kubelet's pod-resources socket sits under the state dir; past sun_path's 107
    # bytes the kubelet exits at start and the node never registers (the deploy e2e's
    # failure test, under pytest's long tmp_path, met exactly that)
    long_dir = Path("/tmp") / ("x" * 60) / "state"
    with pytest.raises(TestbedError, match="too long: the kubelet's socket"):
        check_socket_paths(TestbedSettings(state_dir=long_dir, prefix="lsxx"))
    check_socket_paths(TestbedSettings(state_dir=Path("/tmp/short/state"), prefix="lsxx"))
