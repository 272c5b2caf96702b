"""The relay between the project's CRIClient and a REAL containerd pulling from a REAL registry.

Everything the kubelet would do through the relay is done here with the
project's own CRI client: pulls, image lists and statuses, the CRI v1alpha2
calls a 1.20 kubelet makes, and a call to a method containerd does not have.
The dump, the pull histogram and the layer annotations (from containerd's own
content store) are then checked against what containerd and the registry hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from layersched.agent import build_node
from layersched.containerd import ContainerdClient, ContentStoreReader
from layersched.core.errors import CRIError
from layersched.cri import CRIClient
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
from layersched.testbed.ociimage import build_image, push_image, random_layer
from tests.fixtures.containerd import ContainerdProcess
from tests.fixtures.registry import RegistryProcess
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
    dumper = Dumper(parse_selectors("reset,name:.*,full:PullImage"), DumpFile(dump_path))
    store = ContainerdClient(containerd.endpoint)
    annotator = Annotator(ContentStoreLayers(ContentStoreReader(store)), metrics)
    options = RelayOptions(dumper=dumper, annotator=annotator, log_pulls=True, node_name="n1")
    relay = Relay(tmp_path / "relay.sock", containerd.endpoint, options, metrics)
    try:
        with running(relay):
            yield Setup(relay, containerd, image, dump_path)
    finally:
        store.close()


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


def test_v1alpha2_and_unknown_methods(setup: Setup) -> None:
    paths = (
        "/runtime.v1alpha2.RuntimeService/Version",
        "/runtime.v1alpha2.ImageService/ImageFsInfo",
        "/runtime.v1alpha2.RuntimeService/NoSuchMethod",
    )
    with (
        grpc.insecure_channel(setup.relay.endpoint) as via,
        grpc.insecure_channel(setup.containerd.endpoint) as direct,
    ):
        for path in paths:
            outcomes = []
            for channel in (via, direct):
                try:
                    outcomes.append(channel.unary_unary(path)(b"", timeout=CALL_TIMEOUT_S))
                except grpc.RpcError as err:
                    outcomes.append((err.code(), err.details()))
            if path.endswith("ImageFsInfo"):
                # usage numbers move between two calls; both answer
                assert all(isinstance(outcome, bytes) for outcome in outcomes)
            else:
                assert outcomes[0] == outcomes[1], path
    assert outcomes[0][0] == grpc.StatusCode.UNIMPLEMENTED


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
