"""Fuzz the real extender process: thousands of mutated and hostile requests, no 5xx.

A seeded mutator (reproducible: the seed is in the failure message) takes valid
prioritize/filter bodies (NodeNames and full Nodes, with Ryax ``layers`` maps,
``imageLayer.*`` annotations and init containers) and breaks them at every level:
wrong types, nulls, huge and negative numbers, deep nesting, long strings, lone
surrogates, missing and extra keys, both ``Nodes`` and ``NodeNames``; then at the
byte level: truncation, flipped bytes, invalid UTF-8. Raw sockets add wrong
``Content-Length`` headers, broken chunked encoding and garbage request lines.

Every answer must be below 500, the process must stay up, its resident memory
must stay bounded, and a valid request afterwards must still be scored right.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.extender import LOOPBACK, running_extender
from tests.integration.test_extender_process import L1, L2, L3, MB, NODES, POD, files

__all__ = ["files"]  # the fixture, shared with test_extender_process

pytestmark = pytest.mark.integration

SEED = 20261122
#: Mutated JSON documents sent over HTTP (keep-alive).
DOCUMENT_REQUESTS = 3000
#: Byte-level mutations of valid bodies.
BYTE_REQUESTS = 1500
#: Raw-socket requests with broken framing.
RAW_REQUESTS = 200
HTTP_TIMEOUT_S = 10.0
RAW_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 10.0
#: The server's resident memory may grow this much over the whole run (caches of
#: distinct bad node images and log-once memories are bounded well below it).
MAX_RSS_GROWTH_BYTES = 150 * MB
#: Nesting deep enough to overflow a naive recursive decoder.
DEEP = 100_000

HOSTILE_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**31,
    2**63,
    -(2**63) - 1,
    2**64,
    10**40,
    1.5,
    1e308,
    -1e308,
    True,
    "",
    "x" * 100_000,
    "\ud800",  # a lone surrogate: json.dumps escapes it, the decoder must refuse or cope
    "名前\u0000\u202e",
    "sha256:" + "0" * 64,
    "sha256:zz",
    [],
    {},
    [None],
    {"": None},
    [[[[[[[[[[]]]]]]]]]],
]


def _valid_bodies() -> list[dict[str, Any]]:
    """Valid requests touching every field the extender reads."""
    rich_node = {
        "kind": "Node",
        "metadata": {
            "name": "R1",
            "labels": {"layersched.io/bandwidth-bits-per-s": "1e8", "kubernetes.io/arch": "amd64"},
            "annotations": {f"imageLayer.{L1}": str(30 * MB), f"imageLayer.{L2}": "20971520"},
        },
        "status": {
            "images": [
                {"names": ["registry.test/img1:1"], "sizeBytes": 90 * MB},
                {"names": ["private:1"], "sizeBytes": MB, "layers": {L3: 40 * MB}},
                {"names": ["registry.test/img2:1", "registry.test/img2@sha256:" + "a" * 64]},
            ],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }
    init_pod = {
        "metadata": {"name": "p2", "namespace": "ns"},
        "spec": {
            "initContainers": [{"name": "i", "image": "registry.test/img2:1"}],
            "containers": [{"name": "c", "image": "registry.test/img1:1"}],
        },
    }
    return [
        {"Pod": POD, "NodeNames": ["N1", "N2", "N3"]},
        {"Pod": POD, "Nodes": NODES},
        {"Pod": init_pod, "Nodes": {"kind": "NodeList", "items": [rich_node, *NODES["items"]]}},
        {"Pod": init_pod, "NodeNames": ["N1", "ghost"], "Nodes": None},
    ]


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``doc`` (dict keys and list indices)."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _paths(value, (*prefix, index))
    return found


def _replace(doc: Any, path: tuple[Any, ...], make: Callable[[Any], Any]) -> Any:
    if not path:
        return make(doc)
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[path[0]] = _replace(doc[path[0]], path[1:], make)
    return copy


def _deep(depth: int, rng: random.Random) -> str:
    return (
        ("[" * depth + "]" * depth) if rng.random() < 0.5 else ('{"a":' * depth + "1" + "}" * depth)
    )


def _mutate_document(rng: random.Random, doc: Any) -> bytes:
    """A JSON body with one to three values replaced, removed or multiplied."""
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(doc))
        action = rng.random()
        if action < 0.6:
            value = rng.choice(HOSTILE_VALUES)
            doc = _replace(doc, path, lambda _old, v=value: v)
        elif action < 0.75 and path:
            parent, key = path[:-1], path[-1]

            def drop(container: Any, key: Any = key) -> Any:
                if isinstance(container, dict):
                    return {k: v for k, v in container.items() if k != key}
                return [v for i, v in enumerate(container) if i != key]

            doc = _replace(doc, parent, drop)
        elif action < 0.85:
            doc = _replace(doc, path, lambda old: [old] * rng.randint(2, 50))
        else:
            doc = _replace(doc, path, lambda old: {"Pod": old, "NodeNames": old, "Nodes": old})
    text = json.dumps(doc, allow_nan=True)
    if rng.random() < 0.05:  # deep nesting somewhere a value goes
        text = text.replace("null", _deep(DEEP, rng), 1) if "null" in text else _deep(DEEP, rng)
    return text.encode("utf-8", "surrogatepass")


def _mutate_bytes(rng: random.Random, body: bytes) -> bytes:
    """Truncated, flipped or invalid-UTF-8 bytes of a valid body."""
    data = bytearray(body)
    action = rng.random()
    if action < 0.3:
        return bytes(data[: rng.randrange(len(data))])
    if action < 0.6:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if action < 0.8:
        at = rng.randrange(len(data))
        return (
            bytes(data[:at])
            + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"])
            + bytes(data[at:])
        )
    if action < 0.9:
        return b"\xef\xbb\xbf" + bytes(data)  # a byte-order mark
    return bytes(data) * rng.randint(2, 4)  # concatenated documents


def _raw_request(rng: random.Random, port: int, body: bytes) -> int | None:
    """One request with broken framing on its own connection: the status, or None if the
    server (rightly) closed the connection without an answer."""
    path = rng.choice([b"/prioritize", b"/filter"])
    kind = rng.randrange(6)
    if kind == 0:  # declares more than it sends, then half-closes
        head = b"Content-Length: %d\r\n" % (len(body) + rng.randint(1, 1000))
    elif kind == 1:  # declares less: the rest is a garbage next request
        head = b"Content-Length: %d\r\n" % rng.randrange(len(body))
    elif kind == 2:  # a negative or absurd length
        head = rng.choice([b"Content-Length: -5\r\n", b"Content-Length: 99999999999999999999\r\n"])
    elif kind == 3:  # broken chunked encoding
        head = b"Transfer-Encoding: chunked\r\n"
        body = b"zz\r\n" + body[:10] + b"\r\n0\r\n"
    elif kind == 4:  # two lengths that disagree
        head = b"Content-Length: %d\r\nContent-Length: 3\r\n" % len(body)
    else:  # a garbage request line
        path = b"/prioritize\x00\xff HTTP/9.9 extra"
        head = b"Content-Length: %d\r\n" % len(body)
    request = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n" + body
    with socket.create_connection((LOOPBACK, port), timeout=RAW_TIMEOUT_S) as sock:
        sock.sendall(request)
        if kind == 0:  # the body never completes: hang up (the server must not wait forever)
            sock.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_fuzzed_requests_never_get_a_5xx(files: dict[str, Path], tmp_path: Path) -> None:
    rng = random.Random(SEED)
    bodies = _valid_bodies()
    encoded = [json.dumps(b).encode() for b in bodies]
    statuses: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    # unscaled scores (floor(100 * present / total)): spread off, said here (issue 45)
    extra = ("--layers", str(files["layers"]), "--nodes", str(files["nodes"]), "--no-spread")
    with running_extender(tmp_path / "extender.log", *extra) as (url, proc):
        port = int(url.rsplit(":", 1)[1])
        rss_before = _rss_bytes(proc.pid)
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
            for i in range(DOCUMENT_REQUESTS + BYTE_REQUESTS):
                verb = rng.choice(["/prioritize", "/filter"])
                if i < DOCUMENT_REQUESTS:
                    body = _mutate_document(rng, rng.choice(bodies))
                else:
                    body = _mutate_bytes(rng, rng.choice(encoded))
                answer = client.post(verb, content=body)
                statuses[str(answer.status_code)] += 1
                if answer.status_code >= 500:
                    failures.append(
                        f"{verb} {body[:300]!r} -> {answer.status_code} {answer.text[:300]}"
                    )
        for _ in range(RAW_REQUESTS):
            status = _raw_request(rng, port, rng.choice(encoded))
            statuses["closed" if status is None else str(status)] += 1
            if status is not None and status >= 500:
                failures.append(f"raw request -> {status}")
        assert proc.poll() is None, "the extender died"
        # still scoring right: N1 10, N2 floor(100 * 50 / 90) = 55 -> 5, N3 0
        answer = httpx.post(f"{url}/prioritize", content=encoded[0], timeout=HTTP_TIMEOUT_S)
        assert [e["Score"] for e in answer.json()] == [10, 5, 0]
        rss_after = _rss_bytes(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    total = DOCUMENT_REQUESTS + BYTE_REQUESTS + RAW_REQUESTS
    print(
        f"seed {SEED}: {total} requests, statuses {dict(sorted(statuses.items()))}, "
        f"RSS {rss_before / MB:.0f} -> {rss_after / MB:.0f} MiB"
    )
    assert not failures, f"seed {SEED}: {len(failures)} 5xx answers, e.g.\n" + "\n".join(
        failures[:10]
    )
    assert rss_after - rss_before < MAX_RSS_GROWTH_BYTES
    assert sum(statuses.values()) == total
