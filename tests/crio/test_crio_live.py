"""CRI-O, live: a real CRI-O (``make crio``) pulling the seed's images from a real registry,
on every storage driver that works here (``[overlay]``, ``[vfs]``).

* the agent publishes what CRI-O's real containers/storage holds, and its layers match
  the pushed manifests byte for byte (digests and compressed sizes), through the library
  and through ``layersched agent --crio-storage``;
* CRI-O's verbose ``ImageStatus`` (the seed's own path) against the agent's inventory:
  what it reports and what it lacks;
* the relay in front of CRI-O, with its dump and its ``imageLayer.*`` annotations taken
  from CRI-O's storage, on real CRI traffic.

Run with ``make crio-live`` (root; skipped with the reason when CRI-O is not built).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from layersched.agent import CrioStorageReader, build_node
from layersched.cli.main import main as cli_main
from layersched.core.layers import Layer
from layersched.core.nodelayers import parse_document
from layersched.cri import CRIClient
from layersched.images.oci import BuiltImage
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
from layersched_harness.testbed.builds import crio_build
from tests.fixtures.crio import CrioProcess
from tests.fixtures.extender import make_pki
from tests.fixtures.inventory_api import InventoryApi
from tests.fixtures.kubeconfig import write_kubeconfig
from tests.fixtures.relay import running
from tests.integration.test_cri import IMG1, IMG2, Pushed

pytestmark = pytest.mark.crio


def manifest_layers(image: BuiltImage) -> tuple[Layer, ...]:
    """The layers the manifest pushed lists: its descriptors' digests and sizes."""
    manifest = json.loads(image.manifest_bytes)
    return tuple(Layer(entry["digest"], entry["size"]) for entry in manifest["layers"])


def test_version(crio: CrioProcess) -> None:
    with crio.client() as client:
        version = client.version()
    assert version.runtime_name == "cri-o"
    assert version.runtime_version == crio_build().version.lstrip("v")
    assert version.runtime_api_version == "v1"


def test_the_agent_publishes_crio_storage_byte_for_byte(
    crio: CrioProcess, pushed: Pushed, tmp_path: Path
) -> None:
    with crio.client() as client:
        client.pull_image(pushed.img1)
        client.pull_image(pushed.img2)
        cri_ids = {image.id for image in client.list_images()}
    # CRI-O names an image by its config digest, without the algorithm
    assert cri_ids == {IMG1.config_digest.split(":")[1], IMG2.config_digest.split(":")[1]}
    reader = CrioStorageReader(crio.storage_root)
    assert reader.driver() == crio.storage_driver
    held = reader.images()
    assert reader.problems == {}
    # every layer, base first, with the manifest's compressed digest and size
    for ref, image in ((pushed.img1, IMG1), (pushed.img2, IMG2)):
        (found,) = [h for h in held if ref in h.names]
        assert found.layers == manifest_layers(image), ref
        assert found.digest == image.digest
    # L1 and L2 are stored once, shared by both images' chains
    assert len({layer for h in held for layer in h.layers}) == 4

    # the agent process publishes the same, with CRI-O's storage named as the source
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    with InventoryApi(pki=pki, token="agent-token") as api:
        cluster = {"server": api.url, "certificate-authority": str(pki.ca_cert)}
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster, {"token": "agent-token"})
        argv = ["agent", "--publish", "--once", "--node-name", "n1"]
        argv += ["--kubeconfig", str(kubeconfig), "--crio-storage", str(crio.storage_root)]
        argv += ["--cri", crio.endpoint]
        assert cli_main(argv) == 0
        assert api.refused == []
        published = parse_document(api.objects["n1"], "n1")
    assert published.source == "crio-storage"
    assert published.runtime == f"cri-o://{crio_build().version.lstrip('v')}"
    for ref, image in ((pushed.img1, IMG1), (pushed.img2, IMG2)):
        (found,) = [h for h in published.images if ref in h.names]
        assert found.layers == manifest_layers(image), ref


def test_verbose_image_status_against_the_inventory(crio: CrioProcess, pushed: Pushed) -> None:
    with crio.client() as client:
        client.pull_image(pushed.img1)
        status = client.image_status(pushed.img1, verbose=True)
    assert status.image is not None
    info = {key: json.loads(value) for key, value in status.info.items()}
    (document,) = info.values()
    config = json.loads(IMG1.config_bytes)
    # CRI-O's verbose info: the image's labels and its OCI config, whose rootfs lists the
    # uncompressed diff IDs; no compressed digest and no size of any layer
    assert document["imageSpec"]["rootfs"]["diff_ids"] == config["rootfs"]["diff_ids"]
    compressed = {layer.digest for layer in manifest_layers(IMG1)}
    assert not compressed & set(json.dumps(document).split('"'))
    # CRI-O's Image.size is what containers/storage holds: the layers unpacked, the config
    # and the manifest (stored twice, by name and by digest); not the bytes a pull
    # downloads (seen on 2026-11-27 with 1.36.3: 472,810 = 471,040 + 336 + 2 x 717, where
    # the pull took 459,549 + 336)
    unpacked = sum(len(gzip.decompress(IMG1.blobs[layer.digest])) for layer in IMG1.layers)
    stored = unpacked + len(IMG1.config_bytes) + 2 * len(IMG1.manifest_bytes)
    assert status.image.size_bytes == stored
    pulled_bytes = sum(layer.size_bytes for layer in manifest_layers(IMG1))
    assert status.image.size_bytes != pulled_bytes + len(IMG1.config_bytes)


def test_the_relay_in_front_of_crio(crio: CrioProcess, pushed: Pushed, tmp_path: Path) -> None:
    metrics = RelayMetrics()
    dump_path = tmp_path / "cri.jsonl"
    dumper = Dumper(
        parse_selectors("reset,name:*,full:ListImages"), DumpFile(dump_path), allow_sensitive=False
    )
    annotator = Annotator(ContentStoreLayers(CrioStorageReader(crio.storage_root)), metrics)
    options = RelayOptions(dumper=dumper, annotator=annotator, log_pulls=True, node_name="n3")
    relay = Relay(tmp_path / "relay.sock", crio.endpoint, options, metrics)
    with running(relay), CRIClient(relay.endpoint) as via, crio.client() as direct:
        assert via.version() == direct.version()
        via.pull_image(pushed.img1)
        (image,) = via.list_images()
        (held,) = direct.list_images()
        assert (image.id, image.repo_tags, image.size_bytes) == (
            held.id,
            held.repo_tags,
            held.size_bytes,
        )
        # CRI-O itself annotates nothing; the relay adds one entry per compressed layer
        assert not any(key.startswith("imageLayer.") for key in held.annotations)
        expected = {f"imageLayer.{layer.digest}": str(layer.size_bytes) for layer in IMG1.layers}
        assert {k: v for k, v in image.annotations.items() if k.startswith("imageLayer.")} == (
            expected
        )
        node = build_node("n3", via.list_images(), {"cpu": "2"})
    (entry,) = node["status"]["images"]
    assert entry["layers"] == {layer.digest: layer.size_bytes for layer in IMG1.layers}
    dumped = [json.loads(line) for line in dump_path.read_text().splitlines()]
    methods = {record["method"].rsplit("/", 1)[-1] for record in dumped}
    assert {"Version", "PullImage", "ListImages"} <= methods
