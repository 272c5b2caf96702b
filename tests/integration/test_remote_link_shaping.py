"""The cloud registry's link shaping (``harness/playbooks/tools/remote_link_shaping.py``) on a real
interface: a veth pair whose far end is in a network namespace of its own stands in for
the registry VM's NIC and one worker. The tool finds the interface by the worker's
address, builds the htb, leaves it alone on a second run, really slows traffic to the
worker to the link rate, and removes it at rate 0.
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

import pytest

from tests.fixtures import prereq

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "harness" / "playbooks" / "tools" / "remote_link_shaping.py"
NETNS = "lsrls-w1"
HOST_LINK, NODE_LINK = "lsrls0", "lsrls1"
HOST_ADDRESS, NODE_ADDRESS = "10.250.66.1", "10.250.66.2"
#: Another address behind the same link, not a node's: its traffic stays unshaped.
OTHER_ADDRESS = "10.250.66.3"
RATE_BITS_PER_S = 8_000_000
PAYLOAD_BYTES = 2_000_000
PORT = 18766
#: The transfer must take at least this share of its time at the link rate (tcp and
#: htb bursts let the first few packets through at line rate).
MIN_SHARE_OF_LINK_TIME = 0.7
RECEIVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
print(n, flush=True)
"""


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


@pytest.fixture
def link() -> Iterator[None]:
    if os.geteuid() != 0:
        prereq.missing("shaping a real interface needs root (CI runs as root)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            prereq.missing(f"{tool} not found (iproute2; .ci/run installs it)")
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", HOST_LINK], capture_output=True, check=False)
    _sh("ip", "netns", "add", NETNS)
    try:
        _sh("ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", NODE_LINK)
        _sh("ip", "link", "set", NODE_LINK, "netns", NETNS)
        _sh("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", HOST_LINK)
        _sh("ip", "link", "set", HOST_LINK, "up")
        inside = ["ip", "netns", "exec", NETNS, "ip"]
        _sh(*inside, "addr", "add", f"{NODE_ADDRESS}/24", "dev", NODE_LINK)
        _sh(*inside, "addr", "add", f"{OTHER_ADDRESS}/24", "dev", NODE_LINK)
        _sh(*inside, "link", "set", NODE_LINK, "up")
        _sh(*inside, "link", "set", "lo", "up")
        yield
    finally:
        subprocess.run(["ip", "link", "del", HOST_LINK], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)


def _shape(state: Path, rate_bits_per_s: int) -> dict[str, object]:
    argv = [sys.executable, str(TOOL), "--state", str(state)]
    argv += ["--rate-bits-per-s", str(rate_bits_per_s), "--dst", NODE_ADDRESS]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _send_seconds(address: str = NODE_ADDRESS) -> float:
    """Seconds to send PAYLOAD_BYTES from this host to a receiver at ``address`` in the
    worker's netns."""
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", NETNS, sys.executable, "-c", RECEIVER, address, str(PORT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().strip() == "ready"
        import socket

        started = time.monotonic()
        with socket.create_connection((address, PORT), timeout=60) as sender:
            sender.sendall(b"x" * PAYLOAD_BYTES)
        received = int(receiver.stdout.readline())
        elapsed_s = time.monotonic() - started
        assert received == PAYLOAD_BYTES
        return elapsed_s
    finally:
        receiver.kill()
        receiver.wait(timeout=10)


def test_shaping_is_built_kept_felt_and_removed(link: None, tmp_path: Path) -> None:
    state = tmp_path / "shaping.json"
    first = _shape(state, RATE_BITS_PER_S)
    # the interface was found by the worker's address
    assert first == {"changed": True, "device": HOST_LINK}
    # (iproute2 6.1 prints htb classes as text even with -j)
    classes = _sh("tc", "class", "show", "dev", HOST_LINK)
    rates = dict(re.findall(r"class htb (\S+) .*? rate (\S+) ", classes))
    # the worker's class runs at the link rate, the default class unshaped
    assert rates == {"1:1": f"{RATE_BITS_PER_S // 1_000_000}Mbit", "1:ffff": "10Gbit"}, classes
    filters = _sh("tc", "filter", "show", "dev", HOST_LINK)
    assert "flowid 1:1" in filters
    # a second run with the same settings changes nothing
    assert _shape(state, RATE_BITS_PER_S)["changed"] is False
    # and the worker really gets the link rate, not the veth's
    link_time_s = PAYLOAD_BYTES * 8 / RATE_BITS_PER_S
    elapsed_s = _send_seconds()
    assert elapsed_s >= MIN_SHARE_OF_LINK_TIME * link_time_s, (elapsed_s, link_time_s)
    # while traffic to any other address is not slowed
    assert _send_seconds(OTHER_ADDRESS) < MIN_SHARE_OF_LINK_TIME * link_time_s
    # rate 0: the shaping goes
    assert _shape(state, 0)["changed"] is True
    qdiscs = json.loads(_sh("tc", "-j", "qdisc", "show", "dev", HOST_LINK))
    assert not any(q.get("kind") == "htb" for q in qdiscs), qdiscs
    assert _send_seconds() < MIN_SHARE_OF_LINK_TIME * link_time_s


def test_bad_settings_are_one_line_errors(tmp_path: Path) -> None:
    argv = [sys.executable, str(TOOL), "--state", str(tmp_path / "s.json")]
    done = subprocess.run(
        [*argv, "--rate-bits-per-s", "1000", "--dst", "not-an-address"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "remote_link_shaping: --dst 'not-an-address': not an IPv4 address "
        "(Expected 4 octets in 'not-an-address')"
    ]
