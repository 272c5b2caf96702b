"""The testbed's pinns stand-in (``harness/playbooks/tools/pinns.py``), which CRI-O runs to make a
pod's namespaces: real namespaces, pinned by bind mounts, as root on Linux.

The refusals are checked in process (they happen before anything is unshared); the
pinning itself runs the program as CRI-O does, in a child process, and reads the pinned
namespaces back with ``nsenter``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.fixtures import prereq
from tests.fixtures.playbook_tools import TOOLS, load_tool

pytestmark = pytest.mark.integration

PINNS = TOOLS / "pinns.py"
#: The program starts Python and makes three mounts; a loaded 2-core machine is slow.
RUN_TIMEOUT_S = 30.0


def _pinns() -> ModuleType:
    return load_tool("pinns")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # a user namespace needs ID mappings and a second process: not pinned here
        (["--user"], "--user: this pinns stand-in pins only uts, ipc, net"),
        (["--net", "--uid-mapping=0-1000-1@"], "ID mappings need a user namespace"),
        # nothing asked: CRI-O never does this, and upstream refuses it too
        ([], "no namespace to pin"),
        (["--net=other"], "--net=other: the only value is host"),
        # a net sysctl with the host's network namespace would change the host
        (["--net=host", "-s", "net.ipv4.ip_forward=1"], "the net namespace, which is not new"),
        # kernel.panic lives in no namespace at all
        (
            ["--net", "--ipc", "-s", "kernel.panic=1"],
            "sysctl kernel.panic: it would change the host",
        ),
        (["--net", "-s", "net.ipv4.ip_forward"], "expected KEY=VALUE"),
        (["--net", "-s", "net.ipv4/../../x=1"], "expected KEY=VALUE"),
    ],
    ids=[
        "user",
        "mappings",
        "none",
        "bad-value",
        "host-net-sysctl",
        "host-sysctl",
        "no-value",
        "path",
    ],
)
def test_what_would_touch_the_host_is_refused_before_anything_is_unshared(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pinns = _pinns()
    own_net = os.stat("/proc/self/ns/net").st_ino
    assert pinns.main(["-d", str(tmp_path), "-f", "pod", *argv]) == 1
    assert message in capsys.readouterr().err
    # still in our own namespace, and nothing pinned
    assert os.stat("/proc/self/ns/net").st_ino == own_net
    assert not list(tmp_path.rglob("pod"))


@pytest.fixture
def pin_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory to pin into, every mount below it undone afterwards."""
    if not sys.platform.startswith("linux"):
        prereq.missing(f"pinns needs Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        prereq.missing("pinns needs root (run the integration tests as root)")
    yield tmp_path
    for path in sorted(tmp_path.glob("*ns/*"), reverse=True):
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _in_namespace(kind: str, path: Path, *argv: str) -> str:
    done = subprocess.run(
        ["nsenter", f"--{kind}={path}", *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=RUN_TIMEOUT_S,
    )
    return done.stdout.strip()


def test_pins_new_namespaces_with_their_sysctls(pin_dir: Path) -> None:
    argv = [sys.executable, str(PINNS), "-d", str(pin_dir), "-f", "pod-1"]
    argv += ["--ipc", "--uts", "--net", "-s", "net.ipv4.ip_forward=1", "-s", "kernel.shmmni=1234"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    pinned = {name: pin_dir / f"{name}ns" / "pod-1" for name in ("ipc", "uts", "net")}
    for name, path in pinned.items():
        # a bind-mounted namespace file: its inode is the namespace's, never ours
        assert os.stat(path).st_ino != os.stat(f"/proc/self/ns/{name}").st_ino, name
    # the sysctls went into the new namespaces, not the host's
    assert _in_namespace("net", pinned["net"], "cat", "/proc/sys/net/ipv4/ip_forward") == "1"
    assert _in_namespace("ipc", pinned["ipc"], "cat", "/proc/sys/kernel/shmmni") == "1234"
    assert Path("/proc/sys/kernel/shmmni").read_text().strip() != "1234"
    # a new network namespace has only its loopback
    links = _in_namespace("net", pinned["net"], "ip", "-o", "link")
    assert [line.split(":")[1].strip() for line in links.splitlines()] == ["lo"]


def test_host_pins_the_callers_namespace(pin_dir: Path) -> None:
    argv = [sys.executable, str(PINNS), "-d", str(pin_dir), "-f", "pod-2", "--uts=host"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert os.stat(pin_dir / "utsns" / "pod-2").st_ino == os.stat("/proc/self/ns/uts").st_ino
