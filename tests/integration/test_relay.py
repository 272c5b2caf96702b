"""The relay between the project's CRIClient and a REAL containerd pulling from a REAL registry.

Everything the kubelet would do through the relay is done here with the
project's own CRI client: pulls, image lists and statuses, the CRI v1alpha2
calls a 1.20 kubelet makes, and a call to a method containerd does not have.
The dump, the pull histogram and the layer annotations (from containerd's own
content store) are then checked against what containerd and the registry hold.
The CRI v1 calls (PullImage, ListImages, ImageStatus, with ``imageLayer.*``
injection) and the v1alpha2 ones run on containerd 1.6 and 2.x (``[1.6]``/``[2.1]``):
2.x answers v1 alike and refuses v1alpha2, through the relay as directly.
"""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import tenacity

from layersched.agent import build_node
from layersched.containerd import ContainerdClient, ContentStoreReader
from layersched.core.errors import CRIError
from layersched.cri import CRIClient
from layersched.images.oci import build_image, push_image, random_layer
from layersched.registry import RegistryClient
from layersched.relay import (
    Annotator,
    ContentStoreLayers,
    Dumper,
    DumpFile,
    Relay,
    RelayMetrics,
    RelayOptions,
    parse_selectors,
)
from tests.fixtures.containerd import RUNTIMES, ContainerdProcess
from tests.fixtures.registry import RegistryProcess, free_port
from tests.fixtures.relay import running

pytestmark = pytest.mark.integration

KIB = 1024
LAYERS = [random_layer(seed, size) for seed, size in ((201, 192 * KIB), (202, 64 * KIB))]
IMAGE = build_image(LAYERS, labels={"title": "relay"})
CALL_TIMEOUT_S = 10.0


@dataclass
class Setup:
    relay: Relay
    containerd: ContainerdProcess
    image: str
    dump_path: Path


@pytest.fixture
def setup(
    containerd: ContainerdProcess, registry: RegistryProcess, tmp_path: Path
) -> Iterator[Setup]:
    containerd.trust_plain_http(registry.host)
    image = f"{registry.host}/relay/app:v1"
    with RegistryClient(auth_files=()) as client:
        assert push_image(client, image, IMAGE) == IMAGE.digest
    metrics = RelayMetrics()
    dump_path = tmp_path / "cri.jsonl"
    dumper = Dumper(
        parse_selectors("reset,name:*,full:PullImage"), DumpFile(dump_path), allow_sensitive=True
    )
    store = ContainerdClient(containerd.endpoint)
    annotator = Annotator(ContentStoreLayers(ContentStoreReader(store)), metrics)
    options = RelayOptions(dumper=dumper, annotator=annotator, log_pulls=True, node_name="n1")
    relay = Relay(tmp_path / "relay.sock", containerd.endpoint, options, metrics)
    try:
        with running(relay):
            yield Setup(relay, containerd, image, dump_path)
    finally:
        store.close()


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_cri_client_through_the_relay(setup: Setup) -> None:
    with CRIClient(setup.relay.endpoint) as via, setup.containerd.client() as direct:
        assert via.version() == direct.version()
        assert via.pull_image(setup.image) == IMAGE.config_digest
        (image,) = via.list_images()
        (held,) = direct.list_images()
        # the same image, plus one annotation per compressed layer from the content store
        assert (image.id, image.repo_tags, image.size_bytes) == (
            held.id,
            held.repo_tags,
            held.size_bytes,
        )
        assert dict(held.annotations) == {}
        expected = {f"imageLayer.{layer.digest}": str(layer.size_bytes) for layer in IMAGE.layers}
        assert dict(image.annotations) == expected
        status = via.image_status(setup.image)
        assert status.image is not None and dict(status.image.annotations) == expected
        # containerd's own errors come back with containerd's codes
        with pytest.raises(CRIError, match=r"NOT_FOUND|UNKNOWN") as caught:
            via.pull_image(f"{setup.image.rsplit(':', 1)[0]}:no-such-tag")
        with pytest.raises(CRIError) as direct_caught:
            direct.pull_image(f"{setup.image.rsplit(':', 1)[0]}:no-such-tag")
        assert str(caught.value).split(": ")[1] == str(direct_caught.value).split(": ")[1]

    # the agent reads the annotations back as the patched kubelet's layers map
    with CRIClient(setup.relay.endpoint) as via:
        node = build_node("n1", via.list_images(), {"cpu": "2"})
    (entry,) = node["status"]["images"]
    assert entry["layers"] == {layer.digest: layer.size_bytes for layer in IMAGE.layers}


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_v1alpha2_and_unknown_methods(setup: Setup) -> None:
    paths = (
        "/runtime.v1alpha2.RuntimeService/Version",
        "/runtime.v1alpha2.ImageService/ImageFsInfo",
        "/runtime.v1alpha2.RuntimeService/NoSuchMethod",
    )
    # containerd 2.0 removed CRI v1alpha2 (what a 1.20 kubelet speaks): 1.6 answers it
    has_v1alpha2 = setup.containerd.version[0] < 2
    answers: dict[str, list[Any]] = {}
    with (
        grpc.insecure_channel(setup.relay.endpoint) as via,
        grpc.insecure_channel(setup.containerd.endpoint) as direct,
    ):
        for path in paths:
            outcomes = answers[path] = []
            for channel in (via, direct):
                try:
                    outcomes.append(channel.unary_unary(path)(b"", timeout=CALL_TIMEOUT_S))
                except grpc.RpcError as err:
                    outcomes.append((err.code(), err.details()))
            if path.endswith("ImageFsInfo") and has_v1alpha2:
                # usage numbers move between two calls; both answer
                assert all(isinstance(outcome, bytes) for outcome in outcomes)
            else:
                # the relay passes containerd's own answer (or refusal) through unchanged
                assert outcomes[0] == outcomes[1], path
    assert answers[paths[2]][0][0] == grpc.StatusCode.UNIMPLEMENTED
    version = answers[paths[0]][0]
    if has_v1alpha2:
        assert isinstance(version, bytes)
    else:
        assert version == (
            grpc.StatusCode.UNIMPLEMENTED,
            "unknown service runtime.v1alpha2.RuntimeService",
        )


def test_dump_and_pull_histogram(setup: Setup) -> None:
    with CRIClient(setup.relay.endpoint) as via:
        via.pull_image(setup.image)
        via.list_images()
    records = [json.loads(line) for line in setup.dump_path.read_text().splitlines()]
    pulls = [r for r in records if r["method"] == "/runtime.v1.ImageService/PullImage"]
    assert [r["event"] for r in pulls] == ["request", "response"]
    assert pulls[0]["request"]["image"]["image"] == setup.image
    assert pulls[1]["response"]["image_ref"] == IMAGE.config_digest
    listed = [r for r in records if r["method"].endswith("/ListImages")]
    assert listed and "response" not in listed[0]  # name level only
    registry = setup.relay.metrics.registry
    count = registry.get_sample_value(
        "layersched_relay_pull_duration_seconds_count", {"result": "ok"}
    )
    total_s = registry.get_sample_value(
        "layersched_relay_pull_duration_seconds_sum", {"result": "ok"}
    )
    assert count == 1
    assert total_s is not None
    # the histogram holds the same duration the dump recorded for the call
    assert total_s == pytest.approx(pulls[1]["duration_s"], abs=1e-3)


RELAY_START_TIMEOUT_S = 30.0
RELAY_STOP_TIMEOUT_S = 15.0


@tenacity.retry(
    stop=tenacity.stop_after_delay(RELAY_START_TIMEOUT_S),
    wait=tenacity.wait_fixed(0.1),
    reraise=True,
)
def _assert_listening(socket: Path, process: subprocess.Popen[str]) -> None:
    assert process.poll() is None, process.communicate()[1]
    assert socket.is_socket()


def test_relay_process(containerd: ContainerdProcess, tmp_path: Path) -> None:
    socket = tmp_path / "relay.sock"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "layersched.cli.main", "relay", "--listen", str(socket),
         "--runtime", containerd.endpoint, "--metrics-address", f"127.0.0.1:{port}",
         "--dump", "reset,name:*,full:PullImage", "--allow-sensitive-dumps",
         "--dump-file", str(tmp_path / "dumps" / "cri.jsonl")],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _assert_listening(socket, process)
        with CRIClient(f"unix://{socket}") as via:
            assert via.version().runtime_name == "containerd"
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert (
            'layersched_relay_calls_total{code="OK",method="RuntimeService/Version",'
            'version="v1"} 1.0'
        ) in metrics
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").text == "ok\n"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=RELAY_STOP_TIMEOUT_S)
    # a clean stop: exit 0, the socket file gone, the call in the dump
    assert process.returncode == 0, stderr
    assert not socket.exists()
    dump_path = tmp_path / "dumps" / "cri.jsonl"
    (line,) = dump_path.read_text().splitlines()
    assert json.loads(line)["method"] == "/runtime.v1.RuntimeService/Version"
    # private to its owner, in a directory of its own
    assert [stat.S_IMODE(p.stat().st_mode) for p in (dump_path, dump_path.parent)] == [
        0o600,
        0o700,
    ]


@pytest.mark.parametrize(
    ("dump", "message"),
    [
        # a dump with nowhere to go
        ("full:*", "--dump needs --dump-file FILE (where the JSON lines go)"),
        # seed 002's regular expression: refused with the glob to write instead
        ("reset,full:.*", "--dump: 'full:.*' looks like a regular expression ('.' is not "
         "allowed): selectors are method names or globs (letters, digits, _, /, and the "
         "wildcards * and ?), not regular expressions: write full:*"),
    ],
    ids=["no-dump-file", "regex"],
)  # fmt: skip
def test_relay_cli_errors_name_the_flag(tmp_path: Path, dump: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "layersched.cli.main", "relay", "--listen",
         str(tmp_path / "r.sock"), "--dump", dump],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == f"layersched: error: {message}"
