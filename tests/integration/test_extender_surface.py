"""The extender's HTTP surface, over real sockets (issue 23).

* The verbs listen on loopback by default, and ``--health-port`` serves the probes and
  metrics on every address, so a pod's probes work while kube-scheduler's verbs stay on
  loopback.
* ``/debug/*`` answers clients in the extender's own network namespace only, unless
  ``--debug-endpoints``: a client in another network namespace (another pod, here a
  netns of the test's own behind a veth pair) is refused.
* The default body cap fits a ``NodeNames`` request of 5,000 names and the largest pod,
  and refuses more.
* A body that trickles in is cut off at ``--request-read-timeout-s`` and never holds a
  place meanwhile: kube-scheduler's requests are still scored.

The seed scenario's files come from test_extender_process (N1 holds Img1, N2 Img2).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures import prereq
from tests.fixtures.extender import LOOPBACK, assert_in_progress, free_port, running_extender
from tests.integration.test_extender_process import POD, files

__all__ = ["files"]  # the fixture, shared with test_extender_process

pytestmark = pytest.mark.integration

HTTP_TIMEOUT_S = 5.0
SEED_SCORES = [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 5}, {"Host": "N3", "Score": 0}]
#: The peer network namespace: a veth pair on a /24 of its own.
NETNS = "lsxg-peer"
HOST_LINK, PEER_LINK = "lsxg0", "lsxg1"
HOST_ADDRESS, PEER_ADDRESS = "10.250.94.1", "10.250.94.2"
#: Kubernetes' supported maximum of nodes, and the longest node name (a DNS subdomain).
MAX_NODES, MAX_NODE_NAME = 5_000, 253
#: etcd's default request limit bounds a Pod object (1.5 MiB).
MAX_POD_BYTES = 1_572_864


def _common(files: dict[str, Path]) -> tuple[str, ...]:
    # unscaled scores (floor(100 * present / total)): spread off, said here (issue 45)
    return ("--layers", str(files["layers"]), "--nodes", str(files["nodes"]), "--no-spread")


def _sh(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)


@pytest.fixture
def peer() -> Iterator[str]:
    """A network namespace of its own (another pod, as far as the extender can tell),
    reaching this one over a veth pair at HOST_ADDRESS; yields the namespace's name."""
    if os.geteuid() != 0:
        prereq.missing("a network namespace for the peer needs root (CI runs as root)")
    if shutil.which("ip") is None:
        prereq.missing("ip not found (iproute2; .ci/run installs it)")
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", HOST_LINK], capture_output=True, check=False)
    _sh("ip", "netns", "add", NETNS)
    try:
        _sh("ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", PEER_LINK)
        _sh("ip", "link", "set", PEER_LINK, "netns", NETNS)
        _sh("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", HOST_LINK)
        _sh("ip", "link", "set", HOST_LINK, "up")
        inside = ["ip", "netns", "exec", NETNS, "ip"]
        _sh(*inside, "addr", "add", f"{PEER_ADDRESS}/24", "dev", PEER_LINK)
        _sh(*inside, "link", "set", PEER_LINK, "up")
        _sh(*inside, "link", "set", "lo", "up")
        yield NETNS
    finally:
        subprocess.run(["ip", "link", "del", HOST_LINK], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)


_FROM_PEER = """
import json, sys, urllib.error, urllib.request
method, url, body = sys.argv[1], sys.argv[2], sys.argv[3].encode() or None
request = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=5) as response:
        print(json.dumps([response.status, response.read().decode()]))
except urllib.error.HTTPError as err:
    print(json.dumps([err.code, err.read().decode()]))
except OSError as err:
    print(json.dumps([0, type(err).__name__ + ": " + str(err)]))
"""


def from_peer(netns: str, method: str, url: str, body: str = "") -> tuple[int, str]:
    """``method url`` sent from the peer namespace: (status, body); status 0 and the
    error when the connection itself failed (refused, unreachable)."""
    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", _FROM_PEER, method, url, body]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    status, text = json.loads(done.stdout)
    return int(status), str(text)


def test_verbs_on_loopback_health_and_metrics_on_their_own_port(
    files: dict[str, Path], peer: str, tmp_path: Path
) -> None:
    # the default --host (loopback) and --health-port: another pod reaches the probes and
    # the metrics, never the verbs; kube-scheduler (same pod: loopback) reaches the verbs
    health_port = free_port()
    extra = (*_common(files), "--health-port", str(health_port))
    with running_extender(tmp_path / "extender.log", *extra) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        body = json.dumps({"Pod": POD, "NodeNames": ["N1", "N2", "N3"]})
        status, text = from_peer(peer, "POST", f"http://{HOST_ADDRESS}:{port}/prioritize", body)
        assert status == 0 and "Connection refused" in text
        health = f"http://{HOST_ADDRESS}:{health_port}"
        assert from_peer(peer, "GET", f"{health}/livez") == (200, "ok\n")
        assert from_peer(peer, "GET", f"{health}/readyz")[0] == 200
        status, text = from_peer(peer, "GET", f"{health}/metrics")
        assert status == 200 and "layersched_extender_requests_total" in text
        assert from_peer(peer, "POST", f"{health}/prioritize", body)[0] in (404, 405)
        answer = httpx.post(f"{url}/prioritize", content=body, timeout=HTTP_TIMEOUT_S)
        assert answer.json() == SEED_SCORES


@pytest.mark.parametrize(
    ("flag", "peer_status"),
    [
        # by default: the peer is refused (403), loopback is served
        ((), 403),
        # --debug-endpoints: everyone who reaches the port is served
        (("--debug-endpoints",), 200),
    ],
    ids=["local-only", "debug-endpoints"],
)
def test_debug_endpoints_answer_local_clients_only(
    files: dict[str, Path], peer: str, tmp_path: Path, flag: tuple[str, ...], peer_status: int
) -> None:
    # the extender listens on every address (as install/kustomize/ had it before issue 23): the
    # peer reaches the verbs, and /debug/* only with --debug-endpoints
    health_port = free_port()
    extra = (*_common(files), "--host", "0.0.0.0", "--health-port", str(health_port), *flag)
    with running_extender(tmp_path / "extender.log", *extra) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        body = json.dumps({"Pod": POD, "NodeNames": ["N1", "N2", "N3"]})
        status, text = from_peer(peer, "POST", f"http://{HOST_ADDRESS}:{port}/prioritize", body)
        assert (status, json.loads(text)) == (200, SEED_SCORES)
        for listener in (port, health_port):
            base = f"http://{HOST_ADDRESS}:{listener}"
            for path in ("/debug/inventory?node=N1", "/debug/decisions"):
                status, text = from_peer(peer, "GET", base + path)
                assert status == peer_status, (listener, path, text)
                if status == 403:
                    assert "--debug-endpoints" in json.loads(text)["Error"]
        # loopback (kubectl port-forward, a sidecar) is always served
        local = httpx.get(f"{url}/debug/inventory", params={"node": "N1"}, timeout=HTTP_TIMEOUT_S)
        assert local.status_code == 200 and local.json()["images"] == ["registry.test/img1:1"]
        # and so is this network namespace's own address (the host, a port-forward's sshd)
        own = httpx.get(f"http://{HOST_ADDRESS}:{port}/debug/decisions", timeout=HTTP_TIMEOUT_S)
        assert own.status_code == 200


def _node_names_body(pod_bytes: int, names: int, name_length: int) -> bytes:
    """A NodeNames request: the seed pod padded (an annotation) to ``pod_bytes``, and
    ``names`` node names of ``name_length`` characters (N1..N3 first)."""
    pod = json.loads(json.dumps(POD))
    pod["metadata"]["annotations"] = {"pad": ""}
    pod["metadata"]["annotations"]["pad"] = "x" * max(0, pod_bytes - len(json.dumps(pod)))
    node_names = ["N1", "N2", "N3"] + [
        f"n{i:05d}".ljust(name_length, "x") for i in range(names - 3)
    ]
    return json.dumps({"Pod": pod, "NodeNames": node_names}).encode()


def test_the_default_body_cap_fits_node_names_requests_and_refuses_more(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # the largest NodeNames request there can be: a 1.5 MiB pod and 5,000 names of 253
    # characters (2.8 MB) is served; a 5 MiB body is not (before: 64 MiB was the default)
    largest = _node_names_body(MAX_POD_BYTES, MAX_NODES, MAX_NODE_NAME)
    assert 2_500_000 < len(largest) < 4 * 1024 * 1024
    over = _node_names_body(1_000, 21_000, MAX_NODE_NAME)
    assert len(over) > 5 * 1024 * 1024
    with running_extender(tmp_path / "extender.log", *_common(files)) as (url, _):
        served = httpx.post(f"{url}/prioritize", content=largest, timeout=HTTP_TIMEOUT_S)
        assert served.status_code == 200
        assert served.json()[:3] == SEED_SCORES
        assert len(served.json()) == MAX_NODES
        refused = httpx.post(f"{url}/prioritize", content=over, timeout=HTTP_TIMEOUT_S)
        assert refused.status_code == 413
        assert "--max-request-bytes" in refused.json()["Error"]


def _trickle(port: int, body: bytes) -> socket.socket:
    """A slow-loris: the headers and a first byte of the body, the rest never (yet)."""
    sock = socket.create_connection((LOOPBACK, port), timeout=HTTP_TIMEOUT_S)
    head = (
        f"POST /prioritize HTTP/1.1\r\nHost: {LOOPBACK}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[:1])
    return sock


#: What :func:`_cut_off_within` heard when the connection was reset before any answer
#: could be read (CI once lost the 408 that way: ConnectionResetError on a loaded machine).
RESET = b"<connection reset>"


def _cut_off_within(sock: socket.socket, body: bytes, deadline_s: float) -> tuple[float, bytes]:
    """Keep trickling a byte every 0.2 s until the server answers or closes; how long it
    took, and what it said."""
    started = time.monotonic()
    received = b""
    sock.settimeout(0.2)
    for byte in body[1:]:
        if time.monotonic() - started > deadline_s:
            raise AssertionError(f"still connected after {deadline_s} s: {received!r}")
        try:
            chunk = sock.recv(65536)
            if not chunk:
                return time.monotonic() - started, received
            received += chunk
        except TimeoutError:
            pass
        except ConnectionResetError:
            # cut off by a reset: the server closed with trickled bytes unread, and the
            # kernel may drop its 408 from our receive queue with the reset
            return time.monotonic() - started, received or RESET
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return time.monotonic() - started, received
    raise AssertionError("the whole body went through")


#: What the cut-off may take beyond the 1 s read deadline and the 1 s linger: what is held
#: here is that a trickling client is cut off at all (before: never, while it trickled), not
#: how fast, which a loaded machine stretches.
CUT_OFF_SLACK_S = 4.0


def test_a_trickling_body_is_cut_off_and_holds_no_place(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # --max-concurrent-requests 1 --request-read-timeout-s 1: a client sends its headers,
    # then its body a byte at a time. Meanwhile kube-scheduler's request is scored (before:
    # the slow client held the only place, and the pod got neutral zeros), and the slow
    # client is answered 408 and cut off within the deadline plus the 1 s linger (before:
    # never, as long as it kept trickling)
    body = json.dumps({"Pod": POD, "NodeNames": ["N1", "N2", "N3"]}).encode()
    extra = (*_common(files), "--max-concurrent-requests", "1", "--request-read-timeout-s", "1")
    with running_extender(tmp_path / "extender.log", *extra) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        with _trickle(port, body) as slow:
            assert_in_progress(url, reading=1)  # the server is reading it
            answer = httpx.post(f"{url}/prioritize", content=body, timeout=HTTP_TIMEOUT_S)
            assert answer.json() == SEED_SCORES
            took_s, said = _cut_off_within(slow, body, deadline_s=10.0)
        assert took_s < 1.0 + 1.0 + CUT_OFF_SLACK_S, took_s
        if said != RESET:  # a reset loses what was said; the cut-off is what is held then
            assert said.startswith(b"HTTP/1.1 408"), said[:200]
            assert b"--request-read-timeout-s" in said
        # a client that sends headers and then nothing at all is cut off too
        with _trickle(port, body) as silent:
            silent.settimeout(5.0)
            started = time.monotonic()
            said = b""
            while chunk := silent.recv(65536):
                said += chunk
            assert time.monotonic() - started < 1.0 + 1.0 + CUT_OFF_SLACK_S
            assert said.startswith(b"HTTP/1.1 408")


def test_the_allocator_is_pymalloc_unless_glibc_is_asked_for(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # by default the extender stays on CPython's pymalloc (the fastest requests); with
    # --allocator glibc it re-executes itself (same PID, same arguments) with
    # PYTHONMALLOC=malloc and MALLOC_ARENA_MAX=2, so that memory freed after a flood goes
    # back to the system (extender/_memory.py); a PYTHONMALLOC set by the operator is kept
    def environment(pid: int) -> dict[str, str]:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(item.decode().partition("=")[::2] for item in raw if item)

    with running_extender(tmp_path / "default.log", *_common(files)) as (_, proc):
        env = environment(proc.pid)
        assert "PYTHONMALLOC" not in env and "MALLOC_ARENA_MAX" not in env
    glibc = (*_common(files), "--allocator", "glibc")
    with running_extender(tmp_path / "glibc.log", *glibc) as (url, proc):
        env = environment(proc.pid)
        assert (env.get("PYTHONMALLOC"), env.get("MALLOC_ARENA_MAX")) == ("malloc", "2")
        answer = httpx.post(
            f"{url}/prioritize",
            json={"Pod": POD, "NodeNames": ["N1", "N2", "N3"]},
            timeout=HTTP_TIMEOUT_S,
        )
        assert answer.json() == SEED_SCORES
    os.environ["PYTHONMALLOC"] = "pymalloc"
    try:
        with running_extender(tmp_path / "chosen.log", *glibc) as (_, proc):
            env = environment(proc.pid)
            assert env.get("PYTHONMALLOC") == "pymalloc" and "MALLOC_ARENA_MAX" not in env
    finally:
        del os.environ["PYTHONMALLOC"]
