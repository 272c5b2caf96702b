"""The real extender process, hardened (issue 10): TLS and client certificates, graceful
shutdown with a request in flight, JSON logs, process/GC/build metrics, request limits.

The cluster is the seed scenario (CONTEXT §1) of test_extender_process: N1 holds Img1
(L1+L2+L3 = 90M), N2 holds Img2 (shares L1+L2 = 50M), N3 holds nothing.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import tenacity

from layersched import __version__
from tests.fixtures.extender import (
    LOOPBACK,
    Pki,
    assert_in_progress,
    extender_argv,
    free_port,
    make_pki,
    running_extender,
    slow_registry,
)
from tests.integration.test_extender_process import LAYERS, POD, files

__all__ = ["files"]  # the fixture, shared with test_extender_process

pytestmark = pytest.mark.integration

HTTP_TIMEOUT_S = 5.0
#: SIGTERM must end the process promptly once in-flight requests are done.
STOP_TIMEOUT_S = 10.0
#: The grace the shutdown tests give in-flight requests.
GRACE_S = 3.0
#: N1 10, N2 floor(100 * 50 / 90) = 55 -> 5, N3 0.
SEED_SCORES = [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 5}, {"Host": "N3", "Score": 0}]
NODE_NAMES_BODY = {"Pod": POD, "NodeNames": ["N1", "N2", "N3"]}


def _common(files: dict[str, Path]) -> tuple[str, ...]:
    # unscaled scores (floor(100 * present / total)): spread off, said here (issue 45)
    return ("--layers", str(files["layers"]), "--nodes", str(files["nodes"]), "--no-spread")


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


#: How a server refusing a client certificate shows to httpx: with TLS 1.3 the client's
#: handshake completes and the server hangs up before any HTTP answer
#: (RemoteProtocolError, or ReadError when the alert arrives first); with TLS 1.2 the
#: handshake itself fails (ConnectError caused by ssl.SSLError). A timeout or a refused
#: TCP connection is none of these: it would mean nothing listened, not a refusal.
TLS_REFUSALS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)


def _assert_tls_refusal(err: BaseException) -> None:
    if isinstance(err, httpx.ConnectError):
        assert isinstance(err.__context__, ssl.SSLError), f"not a TLS refusal: {err!r}"


def _client_context(pki: Pki, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    """What kube-scheduler's tlsConfig {caFile, certFile, keyFile} builds."""
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


# ------------------------------------------------------------------------------ TLS
def test_tls_serves_https_only(files: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    # --tls-cert-file/--tls-key-file: an HTTPS client trusting the CA is scored; a plain
    # HTTP client gets no answer (the TLS handshake is not HTTP)
    tls = ("--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key))
    context = _client_context(pki, None, None)
    with running_extender(
        tmp_path / "extender.log", *_common(files), *tls, scheme="https", verify=context
    ) as (url, proc):
        answer = httpx.post(
            f"{url}/prioritize", json=NODE_NAMES_BODY, verify=context, timeout=HTTP_TIMEOUT_S
        )
        assert (answer.status_code, answer.json()) == (200, SEED_SCORES)
        plain = url.replace("https://", "http://")
        # the TLS server hangs up on plain HTTP without an answer: not a timeout, not a
        # refused connection (either would mean nothing listened there)
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            httpx.post(f"{plain}/prioritize", json=NODE_NAMES_BODY, timeout=HTTP_TIMEOUT_S)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0


def test_client_certificates_are_verified(files: dict[str, Path], pki: Pki, tmp_path: Path) -> None:
    # --client-ca-file: only a client certificate signed by that CA gets in (kube-scheduler's
    # tlsConfig.certFile/keyFile); no certificate, or one of another CA, fails the handshake
    tls = (
        "--tls-cert-file", str(pki.server_cert),
        "--tls-key-file", str(pki.server_key),
        "--client-ca-file", str(pki.ca_cert),
    )  # fmt: skip
    good = _client_context(pki, pki.client_cert, pki.client_key)
    with running_extender(
        tmp_path / "extender.log", *_common(files), *tls, scheme="https", verify=good
    ) as (url, _):
        answer = httpx.post(
            f"{url}/prioritize", json=NODE_NAMES_BODY, verify=good, timeout=HTTP_TIMEOUT_S
        )
        assert (answer.status_code, answer.json()) == (200, SEED_SCORES)
        for cert, key in ((None, None), (pki.other_client_cert, pki.other_client_key)):
            context = _client_context(pki, cert, key)
            with pytest.raises(TLS_REFUSALS) as refused:
                httpx.post(
                    f"{url}/prioritize",
                    json=NODE_NAMES_BODY,
                    verify=context,
                    timeout=HTTP_TIMEOUT_S,
                )
            _assert_tls_refusal(refused.value)


def _one_line_failure(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        # a key without its certificate
        (("--tls-key-file", "k.pem"), "--tls-cert-file and --tls-key-file go together"),
        # client verification without TLS
        (("--client-ca-file", "ca.pem"), "--client-ca-file verifies clients over TLS"),
        # files that are not there
        (
            ("--tls-cert-file", "missing.pem", "--tls-key-file", "missing.key"),
            "loading the TLS certificate 'missing.pem'",
        ),
        # limits out of range
        (("--max-concurrent-requests", "0"), "--max-concurrent-requests 0: must be at least 1"),
        (("--max-request-bytes", "10"), "--max-request-bytes 10: must be at least 4096"),
        (("--shutdown-grace-s", "-1"), "--shutdown-grace-s -1.0: must be >= 0 seconds"),
        (("--request-read-timeout-s", "0"), "--request-read-timeout-s 0.0: must be > 0 seconds"),
        # the health port: a port, and not the verbs' one
        (("--health-port", "70000"), "--health-port 70000: choose a TCP port between 1 and"),
        (("--health-port", "{port}"), "is --port: choose another port"),
        # the watch's bounds
        (("--image-quorum", "0"), "--image-quorum 0: must be at least 1 node"),
        (("--inventory-max-age-s", "0"), "--inventory-max-age-s 0.0: must be > 0 seconds"),
        (("--max-inventory-bytes", "1000"), "--max-inventory-bytes 1000: must be at least"),
    ],
    ids=[
        "key-only",
        "ca-without-tls",
        "missing-files",
        "zero-concurrency",
        "tiny-body",
        "grace",
        "read-timeout",
        "health-port-range",
        "health-port-is-port",
        "quorum",
        "max-age",
        "inventory-bytes",
    ],
)
def test_bad_transport_flags_are_a_one_line_error(flags: tuple[str, ...], fragment: str) -> None:
    port = free_port()
    flags = tuple(flag.replace("{port}", str(port)) for flag in flags)
    assert fragment in _one_line_failure(extender_argv(port, *flags))


# ------------------------------------------------------------------- graceful shutdown
def _start_request(port: int, body: bytes, *, hold_back_bytes: int = 0) -> socket.socket:
    """Send a prioritize request, all but the last ``hold_back_bytes`` of its body."""
    sock = socket.create_connection((LOOPBACK, port), timeout=HTTP_TIMEOUT_S)
    head = (
        f"POST /prioritize HTTP/1.1\r\nHost: {LOOPBACK}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[: len(body) - hold_back_bytes])
    return sock


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
        data = b"".join(chunks)
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(rest) >= length:
                return int(head.split()[1]), rest[:length]
    raise AssertionError(f"connection closed before a full response: {b''.join(chunks)!r}")


@tenacity.retry(
    stop=tenacity.stop_after_delay(STOP_TIMEOUT_S), wait=tenacity.wait_fixed(0.05), reraise=True
)
def assert_refusing(port: int) -> None:
    """New connections are refused (the listening socket is closed)."""
    try:
        socket.create_connection((LOOPBACK, port), timeout=1.0).close()
    except ConnectionRefusedError:
        return
    raise AssertionError(f"port {port} still accepts connections")


def _slow_pod_body(registry: str) -> bytes:
    pod = {
        "metadata": {"name": "slow"},
        # another tag of the same manifest: not resolved while the inventory loaded
        "spec": {"containers": [{"name": "c", "image": f"{registry}/app:2"}]},
    }
    return json.dumps({"Pod": pod, "NodeNames": ["N1", "N2"]}).encode()


def _slow_nodes(tmp_path: Path, registry: str) -> str:
    """N1 holds the slow registry's image (its layers resolve from there), N2 nothing."""
    nodes = tmp_path / "slow-nodes.json"
    items = [
        {
            "metadata": {"name": "N1"},
            "status": {"images": [{"names": [f"{registry}/app:1"], "sizeBytes": 90 * 2**20}]},
        },
        {"metadata": {"name": "N2"}},
    ]
    nodes.write_text(json.dumps({"kind": "NodeList", "items": items}))
    return str(nodes)


#: The slow registry's image: L1+L2+L3 of the seed scenario (Img1), 90M.
SLOW_LAYERS = [{"digest": d["digest"], "size": d["size"]} for d in LAYERS["registry.test/img1:1"]]


def test_sigterm_finishes_the_request_in_flight(files: dict[str, Path], tmp_path: Path) -> None:
    # A prioritize request is in flight (its pod image takes 1 s at the registry) when
    # SIGTERM arrives: the server stops accepting connections at once, yet the request is
    # answered with real scores once its layers arrive, and only then does the process
    # exit 0.
    with slow_registry(1.0, SLOW_LAYERS) as registry:
        address = f"{LOOPBACK}:{registry.server_port}"
        extra = (
            "--nodes", _slow_nodes(tmp_path, address),
            "--no-spread",  # N1 alone holds the layers: unscaled, 10 (issue 45: said here)
            "--resolve-timeout-s", "5",
            "--shutdown-grace-s", str(GRACE_S),
        )  # fmt: skip
        with running_extender(tmp_path / "extender.log", *extra) as (url, proc):
            port = int(url.rsplit(":", 1)[1])
            registry.started.clear()  # set while the inventory loaded
            with _start_request(port, _slow_pod_body(address)) as sock:
                assert registry.started.wait(HTTP_TIMEOUT_S), "the pod image is not resolving"
                proc.send_signal(signal.SIGTERM)
                assert_refusing(port)
                assert proc.poll() is None, "exited with a request in flight"
                status, answer = _read_response(sock)
            # N1 holds the whole image: 100 -> 10; N2 nothing: 0
            assert (status, json.loads(answer)) == (
                200,
                [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 0}],
            )
            assert proc.wait(timeout=STOP_TIMEOUT_S) == 0


def test_sigterm_grace_is_bounded(files: dict[str, Path], tmp_path: Path) -> None:
    # A request stuck on a registry (60 s; N1's image too, so the inventory loads with
    # it unresolved after the 1 s registry timeout) does not hold the process past
    # --shutdown-grace-s 1 plus one registry timeout (1 s: the resolver's worker thread
    # is abandoned, and the interpreter joins it at exit).
    with slow_registry(60.0, SLOW_LAYERS) as registry:
        address = f"{LOOPBACK}:{registry.server_port}"
        extra = (
            "--resolve-timeout-s", "30",
            "--registry-timeout-s", "1",
            "--registry-retries", "0",
            "--shutdown-grace-s", "1",
        )  # fmt: skip
        with running_extender(tmp_path / "extender.log", *extra) as (url, proc):
            port = int(url.rsplit(":", 1)[1])
            registry.started.clear()
            with _start_request(port, _slow_pod_body(address)):
                assert registry.started.wait(HTTP_TIMEOUT_S), "the pod image is not resolving"
                started = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
                assert time.monotonic() - started < 2 * GRACE_S


# ----------------------------------------------------------------- logs and metrics
def test_json_logs_and_operational_metrics(files: dict[str, Path], tmp_path: Path) -> None:
    # --log-format json: every line is one object with an ISO-8601 time, level, logger and
    # message; the decision log (debug) stays one object, its per-node lines inside.
    # /metrics adds process, GC and platform metrics and layersched_build_info.
    log_path = tmp_path / "extender.log"
    extra = (*_common(files), "--log-format", "json", "--log-level", "debug")
    with running_extender(log_path, *extra) as (url, proc):
        answer = httpx.post(f"{url}/prioritize", json=NODE_NAMES_BODY, timeout=HTTP_TIMEOUT_S)
        assert answer.json() == SEED_SCORES
        metrics = httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    for name in ("process_resident_memory_bytes", "python_gc_collections_total", "python_info"):
        assert name in metrics
    assert 'layersched_build_info{python="' in metrics
    assert f'version="{__version__}"}} 1.0' in metrics
    lines = [line for line in log_path.read_text().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert records, log_path.read_text()
    for record in records:
        assert set(record) >= {"time", "level", "logger", "message"}
        assert record["time"].endswith("+00:00") and "T" in record["time"]
    decision = next(r for r in records if r["message"].startswith("pod p1 (layer-locality):"))
    assert decision["level"] == "DEBUG"
    assert f"  N2: present {50 * 2**20} / total {90 * 2**20} bytes -> 55/100 -> 5/10" in (
        decision["message"].splitlines()
    )


def test_text_logs_have_timestamps_and_keep_their_lines(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # -vv (still honoured): text lines gain an ISO-8601 timestamp in front of
    # "LEVEL logger: message"; the decision lines the testbed parses are unchanged
    log_path = tmp_path / "extender.log"
    with running_extender(log_path, *_common(files), global_args=("-vv",)) as (url, proc):
        httpx.post(f"{url}/prioritize", json=NODE_NAMES_BODY, timeout=HTTP_TIMEOUT_S)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    text = log_path.read_text()
    head = next(line for line in text.splitlines() if "pod p1 (layer-locality):" in line)
    stamp, rest = head.split(" ", 1)
    assert stamp[:4].isdigit() and "T" in stamp and stamp.endswith("+00:00")
    assert rest == "DEBUG layersched.extender: pod p1 (layer-locality):"
    assert f"\n  N2: present {50 * 2**20} / total {90 * 2**20} bytes -> 55/100 -> 5/10\n" in text


# ---------------------------------------------------------------------- request limits
def test_bodies_being_read_hold_no_place_and_a_read_flood_is_a_fast_503(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # --max-concurrent-requests 1 (so 2 bodies read at once): two requests whose bodies
    # are still arriving are being read, and hold no place to be worked on; a third finds
    # both read places taken and gets 503 with Retry-After at once, its body unread. The
    # held requests then complete and both are scored (200, the seed scores): neither was
    # shed because the other was slow to send (before issue 23 the first held the only
    # place while it trickled, and the second got neutral zeros).
    body = json.dumps(NODE_NAMES_BODY).encode()
    extra = (*_common(files), "--max-concurrent-requests", "1")
    with running_extender(tmp_path / "extender.log", *extra) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        with _start_request(port, body, hold_back_bytes=1) as first:
            assert_in_progress(url, reading=1, working=0)
            with _start_request(port, body, hold_back_bytes=1) as second:
                assert_in_progress(url, reading=2, working=0)
                flood = httpx.post(f"{url}/prioritize", content=body, timeout=HTTP_TIMEOUT_S)
                assert flood.status_code == 503
                assert flood.headers["Retry-After"] == "1"
                assert "overloaded" in flood.json()["Error"]
                second.sendall(body[-1:])
                status, answer = _read_response(second)
                assert (status, json.loads(answer)) == (200, SEED_SCORES)
            first.sendall(body[-1:])
            status, answer = _read_response(first)
            assert (status, json.loads(answer)) == (200, SEED_SCORES)
        metrics = httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text
    assert 'layersched_extender_overloaded_requests_total{verb="prioritize"} 1.0' in metrics
    assert "neutral_answers_total" not in metrics or 'reason="overloaded"' not in metrics


def test_past_the_limit_a_request_is_answered_neutrally_at_once(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # --max-concurrent-requests 1: a request being worked on (its pod image takes 3 s at
    # the registry) holds the only place; a second, complete request is answered at once
    # with neutral zeros (no resolution, no scoring), counted as overloaded
    with slow_registry(3.0, SLOW_LAYERS) as registry:
        address = f"{LOOPBACK}:{registry.server_port}"
        extra = (
            "--nodes", _slow_nodes(tmp_path, address),
            "--no-spread",  # N1 alone holds the layers: unscaled, 10 (issue 45: said here)
            "--resolve-timeout-s", "10",
            "--registry-timeout-s", "10",
            "--max-concurrent-requests", "1",
        )  # fmt: skip
        with running_extender(tmp_path / "extender.log", *extra) as (url, _):
            port = int(url.rsplit(":", 1)[1])
            registry.started.clear()
            with _start_request(port, _slow_pod_body(address)) as slow:
                assert registry.started.wait(HTTP_TIMEOUT_S), "the pod image is not resolving"
                assert_in_progress(url, working=1)
                started = time.monotonic()
                shed = httpx.post(
                    f"{url}/prioritize",
                    json={"Pod": POD, "NodeNames": ["N1", "N2"]},
                    timeout=HTTP_TIMEOUT_S,
                )
                assert time.monotonic() - started < 1.0
                assert shed.status_code == 200
                assert shed.json() == [{"Host": "N1", "Score": 0}, {"Host": "N2", "Score": 0}]
                status, answer = _read_response(slow)
                assert (status, json.loads(answer)) == (
                    200,
                    [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 0}],
                )
            metrics = httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text
    assert 'layersched_extender_overloaded_requests_total{verb="prioritize"} 1.0' in metrics
    assert 'layersched_extender_neutral_answers_total{reason="overloaded"} 1.0' in metrics
