"""The CRI client and node agent against a REAL containerd and a REAL docker-registry.

The test builds the seed's two images (Img1 = L1+L2+L3, Img2 = L1+L2+L4)
deterministically, pushes them to its own registry, and has its own private
containerd pull them through CRI. The registry's access log is the witness of
which blobs (and how many bytes) really crossed the wire.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tenacity

from layersched.agent import build_node
from layersched.cli.main import main as cli_main
from layersched.core.indexbuilder import build_layer_index
from layersched.core.nodeindexing import node_info
from layersched.core.objects import decode_node
from layersched.cri import CRIClient
from layersched.images.oci import BuiltImage, build_image, push_image, random_layer
from layersched.registry import RegistryClient
from tests.fixtures.containerd import RUNTIMES, ContainerdProcess
from tests.fixtures.registry import RegistryProcess

pytestmark = pytest.mark.integration

KIB = 1024
# Small layers keep the test quick; different sizes make every layer recognisable.
LAYER_SIZES_BYTES = {"L1": 256 * KIB, "L2": 128 * KIB, "L3": 64 * KIB, "L4": 32 * KIB}
# Fixed seeds: the same layer digests on every run.
LAYER_SEEDS = {"L1": 101, "L2": 102, "L3": 103, "L4": 104}
LAYERS = {
    label: random_layer(LAYER_SEEDS[label], size) for label, size in LAYER_SIZES_BYTES.items()
}
IMG1 = build_image([LAYERS["L1"], LAYERS["L2"], LAYERS["L3"]], labels={"title": "Img1"})
IMG2 = build_image([LAYERS["L1"], LAYERS["L2"], LAYERS["L4"]], labels={"title": "Img2"})
# distribution writes its access-log line just after the response; allow for that.
ACCESS_LOG_TIMEOUT_S = 5.0
ACCESS_LOG_POLL_S = 0.05
# Combined Log Format: IP - user [time] "METHOD PATH PROTO" STATUS BYTES "referer" "agent"
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" (?P<status>\d{3}) (?P<bytes>\d+|-)')


@dataclass(frozen=True, slots=True)
class Pushed:
    """The two scenario images as pushed: references by tag and by digest."""

    host: str
    img1: str
    img2: str

    def digest_ref(self, tag_ref: str, image: BuiltImage) -> str:
        return f"{tag_ref.rsplit(':', 1)[0]}@{image.digest}"


@dataclass(frozen=True, slots=True)
class BlobGet:
    digest: str
    status: int
    size_bytes: int


def blob_gets(registry: RegistryProcess, skip_lines: int = 0) -> list[BlobGet]:
    """Blob downloads in the registry's access log, after the first ``skip_lines`` lines."""
    gets = []
    for line in registry.log_text().splitlines()[skip_lines:]:
        match = _ACCESS.search(line)
        if match and match["method"] == "GET" and "/blobs/" in match["path"]:
            size = 0 if match["bytes"] == "-" else int(match["bytes"])
            digest = match["path"].rsplit("/", 1)[1]
            gets.append(BlobGet(digest, int(match["status"]), size))
    return gets


@tenacity.retry(
    stop=tenacity.stop_after_delay(ACCESS_LOG_TIMEOUT_S),
    wait=tenacity.wait_fixed(ACCESS_LOG_POLL_S),
    reraise=True,
)
def assert_blobs_downloaded(registry: RegistryProcess, skip_lines: int, expected: set[str]) -> None:
    got = {get.digest for get in blob_gets(registry, skip_lines) if get.status == 200}
    assert got == expected


@pytest.fixture
def pushed(registry: RegistryProcess) -> Pushed:
    with RegistryClient(auth_files=()) as client:
        img1 = f"{registry.host}/scenario/img1:v1"
        img2 = f"{registry.host}/scenario/img2:v1"
        assert push_image(client, img1, IMG1) == IMG1.digest
        assert push_image(client, img2, IMG2) == IMG2.digest
    return Pushed(registry.host, img1, img2)


@pytest.fixture
def cri(containerd: ContainerdProcess, registry: RegistryProcess) -> Iterator[CRIClient]:
    """A CRI client on a containerd that may pull from the test registry over plain HTTP."""
    containerd.trust_plain_http(registry.host)
    with containerd.client() as client:
        yield client


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_version(containerd: ContainerdProcess) -> None:
    with containerd.client() as client:
        version = client.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_pull_list_status(cri: CRIClient, pushed: Pushed) -> None:
    image_ref = cri.pull_image(pushed.img1)
    # containerd answers with the image ID: the config digest
    assert image_ref == IMG1.config_digest
    (image,) = cri.list_images()
    assert image.id == IMG1.config_digest
    assert image.repo_tags == (pushed.img1,)
    assert image.repo_digests == (pushed.digest_ref(pushed.img1, IMG1),)
    # containerd's size is compressed: manifest + config + the three layer blobs
    layer_bytes = sum(layer.size_bytes for layer in IMG1.layers)
    assert image.size_bytes == len(IMG1.manifest_bytes) + len(IMG1.config_bytes) + layer_bytes

    status = cri.image_status(pushed.img1, verbose=True)
    assert status.image == image
    # containerd's verbose info: one JSON document with the chain ID and the OCI config
    info = json.loads(status.info["info"])
    assert (
        info["imageSpec"]["rootfs"]["diff_ids"]
        == json.loads(IMG1.config_bytes)["rootfs"]["diff_ids"]
    )
    assert info["chainID"].startswith("sha256:")
    # the short form of the status has no info; by digest reference it is the same image
    by_digest = cri.image_status(pushed.digest_ref(pushed.img1, IMG1))
    assert by_digest.image == image
    assert not by_digest.info


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_shared_layers_are_not_downloaded_again(
    cri: CRIClient, pushed: Pushed, registry: RegistryProcess, containerd: ContainerdProcess
) -> None:
    # Img1 from an empty cache: config + L1 + L2 + L3 cross the wire
    before = len(registry.log_text().splitlines())
    cri.pull_image(pushed.img1)
    first = {IMG1.config_digest, *(layer.digest for layer in IMG1.layers)}
    assert_blobs_downloaded(registry, before, first)

    # Img2 shares L1 and L2: only its config and L4 are downloaded
    before = len(registry.log_text().splitlines())
    cri.pull_image(pushed.img2)
    assert_blobs_downloaded(registry, before, {IMG2.config_digest, LAYERS["L4"].digest})
    gets = [get for get in blob_gets(registry, before) if get.status == 200]
    transferred_bytes = sum(get.size_bytes for get in gets)
    # 32 KiB of L4 content + tar/gzip overhead + a config of a few hundred bytes
    assert transferred_bytes == LAYERS["L4"].size_bytes + len(IMG2.config_bytes)
    # and the content store now holds each of the four layers exactly once
    held = containerd.content_digests()
    assert {layer.digest for layer in LAYERS.values()} <= held


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_remove_image(cri: CRIClient, pushed: Pushed) -> None:
    cri.pull_image(pushed.img1)
    cri.pull_image(pushed.img2)
    cri.remove_image(pushed.img2)
    assert [image.repo_tags for image in cri.list_images()] == [(pushed.img1,)]
    assert cri.image_status(pushed.img2).image is None
    # removing it again is not an error (CRI RemoveImage is idempotent)
    cri.remove_image(pushed.img2)


def test_agent_node_feeds_the_inventory(
    cri: CRIClient, pushed: Pushed, containerd: ContainerdProcess, tmp_path: Path
) -> None:
    cri.pull_image(pushed.img1)
    cri.pull_image(pushed.img2)
    # through the library ...
    document = build_node("n1", cri.list_images(), {"cpu": "2", "memory": "4Gi"})
    # ... and through the CLI, which must write the same images
    output = tmp_path / "n1.json"
    argv = ["agent", "--cri", containerd.endpoint, "--node-name", "n1", "--once"]
    argv += ["--allocatable", "cpu=2,memory=4Gi", "--output", str(output)]
    assert cli_main(argv) == 0
    from_cli = json.loads(output.read_text())
    assert from_cli["status"]["images"] == document["status"]["images"]

    node = node_info(decode_node(from_cli, str(output)), str(output))
    # Img1 (L3 = 64 KiB) is bigger than Img2 (L4 = 32 KiB), so it comes first;
    # each is named by its repo digest, then its tag
    assert [image.names for image in node.images] == [
        (pushed.digest_ref(pushed.img1, IMG1), pushed.img1),
        (pushed.digest_ref(pushed.img2, IMG2), pushed.img2),
    ]
    inventory = build_layer_index([node])
    img1_size = node.images[0].size_bytes
    # upstream image states: every published name, with its size and 1 node holding it
    assert inventory.image_state(pushed.img1) == (img1_size, 1)
    assert inventory.image_state(pushed.digest_ref(pushed.img1, IMG1)) == (img1_size, 1)
    assert inventory.image_state(pushed.img2) == (node.images[1].size_bytes, 1)
    # containerd publishes no layer data: layers come from a layer source (not given here)
    assert node.images[0].layers is None
