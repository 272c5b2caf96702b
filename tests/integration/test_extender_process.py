"""The real ``layersched extender`` process: start, score over HTTP, survive garbage, stop.

Files are the seed scenario (CONTEXT §1): Img1 = L1+L2+L3, Img2 = L1+L2+L4;
N1 holds Img1, N2 holds Img2, N3 holds nothing.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.extender import (
    READY_TIMEOUT_S,
    extender_argv,
    free_port,
    running_extender,
)

pytestmark = pytest.mark.integration

MB = 1024 * 1024
#: SIGTERM must end the process promptly.
STOP_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 5.0


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


L1, L2, L3, L4 = (_digest(x) for x in ("l1", "l2", "l3", "l4"))
LAYERS = {
    "registry.test/img1:1": [
        {"digest": L1, "size": 30 * MB},
        {"digest": L2, "size": 20 * MB},
        {"digest": L3, "size": 40 * MB},
    ],
    "registry.test/img2:1": [
        {"digest": L1, "size": 30 * MB},
        {"digest": L2, "size": 20 * MB},
        {"digest": L4, "size": 10 * MB},
    ],
}


def _node(name: str, *images: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {"images": [{"names": [i], "sizeBytes": 90 * MB} for i in images]},
    }


NODES = {
    "kind": "NodeList",
    "items": [
        _node("N1", "registry.test/img1:1"),
        _node("N2", "registry.test/img2:1"),
        _node("N3"),
    ],
}
POD = {
    "metadata": {"name": "p1"},
    "spec": {"containers": [{"name": "c", "image": "registry.test/img1:1"}]},
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    layers, nodes = tmp_path / "layers.json", tmp_path / "nodes.json"
    layers.write_text(json.dumps(LAYERS))
    nodes.write_text(json.dumps(NODES))
    return {"layers": layers, "nodes": nodes}


@pytest.fixture
def extender(
    files: dict[str, Path], tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    # unscaled scores (floor(100 * present / total)): spread off, said here (issue 45)
    extra = ("--layers", str(files["layers"]), "--nodes", str(files["nodes"]), "--no-spread")
    with running_extender(tmp_path / "extender.log", *extra) as (url, proc):
        yield url, proc


def test_extender_process(extender: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, proc = extender
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
        # NodeNames: N1 100 -> 10; N2 50M/90M = 55 -> 5; N3 0; unknown 0
        answer = client.post(
            "/prioritize", json={"Pod": POD, "NodeNames": ["N1", "N2", "N3", "N9"]}
        )
        assert answer.status_code == 200
        assert answer.json() == [
            {"Host": "N1", "Score": 10},
            {"Host": "N2", "Score": 5},
            {"Host": "N3", "Score": 0},
            {"Host": "N9", "Score": 0},
        ]
        # full Nodes: the same cluster, the same answer
        answer = client.post("/prioritize", json={"Pod": POD, "Nodes": NODES})
        assert [e["Score"] for e in answer.json()] == [10, 5, 0]
        # filter passes every node
        answer = client.post("/filter", json={"Pod": POD, "NodeNames": ["N1", "N2"]})
        assert answer.json()["NodeNames"] == ["N1", "N2"]
        assert answer.json()["FailedNodes"] == {}
        # garbage: 4xx with a JSON error, and the server keeps serving
        for garbage in (
            b"\x00\xff garbage",
            b'{"Pod": 1}',
            b"[]",
            b'{"Pod": {}, "Nodes": {"items": 3}}',
        ):
            answer = client.post("/prioritize", content=garbage)
            assert answer.status_code == 400
            assert answer.json()["Error"]
        assert client.get("/healthz").status_code == 200
        metrics = client.get("/metrics").text
        assert 'layersched_extender_requests_total{code="200",verb="prioritize"} 2.0' in metrics
        assert 'layersched_extender_requests_total{code="400",verb="prioritize"} 4.0' in metrics
        assert "layersched_extender_request_duration_seconds_bucket" in metrics
        assert "layersched_extender_unknown_nodes_total 1.0" in metrics
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=STOP_TIMEOUT_S) == 0


def test_sigint_stops_cleanly(extender: tuple[str, subprocess.Popen[bytes]]) -> None:
    _, proc = extender
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=STOP_TIMEOUT_S) == 0


def _one_line_failure(argv: list[str]) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=READY_TIMEOUT_S, check=False
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    return lines[-1]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "cannot read it"),  # the file does not exist
        ("{not json", "not a v1 NodeList"),  # not JSON
        ('{"items": [{"metadata": {"name": 3}}]}', "items[0]"),  # a wrongly shaped node
        # 'extender --nodes pod.json': a Pod is no NodeList
        (json.dumps(POD | {"kind": "Pod"}), "kind is 'Pod', expected 'NodeList'"),
        # 'kubectl get pods -o json': a List of Pods, its first item named
        (
            json.dumps({"kind": "List", "items": [POD | {"kind": "Pod"}]}),
            "items[0]: kind is 'Pod', expected 'Node'",
        ),
    ],
    ids=["missing", "not-json", "bad-node", "a-pod", "list-of-pods"],
)
def test_bad_nodes_file_is_a_one_line_error(
    files: dict[str, Path], tmp_path: Path, content: str | None, fragment: str
) -> None:
    nodes = tmp_path / "bad-nodes.json"
    if content is not None:
        nodes.write_text(content)
    line = _one_line_failure(
        extender_argv(free_port(), "--layers", str(files["layers"]), "--nodes", str(nodes))
    )
    assert fragment in line and "bad-nodes.json" in line


def test_port_in_use_is_a_one_line_error(files: dict[str, Path]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = _one_line_failure(extender_argv(port, "--layers", str(files["layers"])))
    assert f"cannot listen on 127.0.0.1:{port}" in line


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (("--strategy", "image-locality", "--spread"), "--spread applies to layer-locality only"),
        (
            ("--pull-overhead-s", "2"),
            "--pull-overhead-s applies to --strategy in-flight and pull-time only",
        ),
        (("--registry-retries", "-1"), "--registry-retries -1: must be 0 or more"),
    ],
    ids=["spread-image-locality", "pull-option-layer-locality", "negative-retries"],
)
def test_bad_flags_are_a_one_line_error(extra: tuple[str, ...], fragment: str) -> None:
    assert fragment in _one_line_failure(extender_argv(free_port(), *extra))


def test_image_locality_needs_no_layers(tmp_path: Path) -> None:
    # no --layers and no registry: image-locality reads names and sizes only, so the held
    # inventory loads without a single "layers unknown" warning, and the pod is scored
    # without resolving its image (registry.test does not exist: resolving it would
    # answer neutrally, all 0).
    # img1 is 600M on N1 and N2 of 3 nodes: 600M * 2 / 3 = 400M
    # -> 100 * (400M - 23M) / (1000M - 23M) = 38 -> 38 // 10 = 3; N3 holds nothing: 0
    nodes = tmp_path / "big-nodes.json"
    items = [_node("N1", "registry.test/img1:1"), _node("N2", "registry.test/img1:1"), _node("N3")]
    for item in items[:2]:
        item["status"] = {"images": [{"names": ["registry.test/img1:1"], "sizeBytes": 600 * MB}]}
    nodes.write_text(json.dumps({"kind": "NodeList", "items": items}))
    log_path = tmp_path / "extender.log"
    extra = ("--strategy", "image-locality", "--nodes", str(nodes))
    with running_extender(log_path, *extra) as (url, proc):
        answer = httpx.post(
            f"{url}/prioritize",
            json={"Pod": POD, "NodeNames": ["N1", "N2", "N3"]},
            timeout=HTTP_TIMEOUT_S,
        )
        assert answer.json() == [
            {"Host": "N1", "Score": 3},
            {"Host": "N2", "Score": 3},
            {"Host": "N3", "Score": 0},
        ]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    log_text = log_path.read_text()
    assert "WARNING" not in log_text, log_text
