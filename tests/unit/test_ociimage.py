"""Deterministic OCI image building: same inputs, same digests; well-formed tars and JSON."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from layersched.core.manifest import (
    OCI_INDEX,
    ImageIndex,
    ImageManifest,
    Platform,
    parse_manifest,
    select_platform,
    sha256_digest,
)
from layersched.testbed.ociimage import (
    REF_NAME_ANNOTATION,
    build_image,
    build_index,
    layer_bytes,
    make_layer,
    random_layer,
    write_oci_layout,
)

# Pinned: Mersenne Twister output and Python's USTAR writer do not change between
# versions, so the uncompressed tar (the diff_id) is the same everywhere. The gzip
# blob digest is not pinned: it depends on the zlib build.
SEED7_4096_DIFF_ID = "sha256:7772f157d0f8f5d2219500cecf281870642bcd6e6040d8eeea2cd146c2954c54"


@pytest.mark.parametrize(
    ("seed_a", "seed_b", "size_bytes", "same"),
    [
        # Same seed and size: identical bytes.
        (1, 1, 1000, True),
        # Another seed: different bytes.
        (1, 2, 1000, False),
        # Zero bytes are zero bytes whatever the seed.
        (1, 2, 0, True),
    ],
    ids=["same-seed", "other-seed", "empty"],
)
def test_layer_bytes_is_a_function_of_seed(
    seed_a: int, seed_b: int, size_bytes: int, same: bool
) -> None:
    a, b = layer_bytes(seed_a, size_bytes), layer_bytes(seed_b, size_bytes)
    assert len(a) == len(b) == size_bytes
    assert (a == b) is same


def test_layer_bytes_rejects_negative_size() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        layer_bytes(1, -1)


def test_random_layer_is_reproducible_and_pinned() -> None:
    # Two builds from scratch give the same blob; the tar digest matches the pinned value.
    first, second = random_layer(7, 4096), random_layer(7, 4096)
    assert first == second
    assert first.diff_id == SEED7_4096_DIFF_ID
    assert first.digest == sha256_digest(first.blob)


def test_layer_content_is_incompressible() -> None:
    # 64 KiB of random bytes: the gzipped tar is the content plus tar/gzip overhead
    # (512-byte header + padding + end blocks), never smaller than the content.
    content_bytes = 64 * 1024
    layer = random_layer(3, content_bytes)
    assert content_bytes <= layer.size_bytes <= content_bytes + 4096


def test_layer_tar_has_fixed_metadata() -> None:
    # One regular file, owned by 0:0, mode 0644, mtime 0, named after its content.
    content = b"hello"
    layer = make_layer(content)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer.blob))) as tar:
        members = tar.getmembers()
        assert len(members) == 1
        info = members[0]
        assert (info.uid, info.gid, info.mode, info.mtime) == (0, 0, 0o644, 0)
        assert info.name == "layer-" + sha256_digest(content)[7:23]
        extracted = tar.extractfile(info)
        assert extracted is not None
        assert extracted.read() == content
    # The gzip header's mtime field (bytes 4-7) is zero too.
    assert layer.blob[4:8] == b"\0\0\0\0"
    assert layer.diff_id == sha256_digest(gzip.decompress(layer.blob))


def test_build_image_round_trips_through_the_manifest_parser() -> None:
    # The manifest we write is one the core parses back to the same ordered layers.
    img = build_image([layer_bytes(1, 100), layer_bytes(2, 200)])
    parsed = parse_manifest(img.manifest_bytes, None)
    assert isinstance(parsed, ImageManifest)
    assert parsed.layers == img.layers
    assert parsed.config.digest == img.config_digest
    config = json.loads(img.config_bytes)
    assert config["os"] == "linux"
    assert config["architecture"] == "amd64"
    assert config["rootfs"]["diff_ids"] == [
        sha256_digest(gzip.decompress(img.blobs[layer.digest])) for layer in img.layers
    ]
    assert set(img.blobs) == {img.config_digest, *(layer.digest for layer in img.layers)}


def test_shared_layers_share_digests() -> None:
    # The seed scenario: Img1 = L1 L2 L3, Img2 = L1 L2 L4. L1 and L2 are the same blobs.
    l1, l2, l3, l4 = (layer_bytes(seed, 1000) for seed in (1, 2, 3, 4))
    img1, img2 = build_image([l1, l2, l3]), build_image([l1, l2, l4])
    assert img1.layers[:2] == img2.layers[:2]
    assert img1.layers[2] != img2.layers[2]
    assert img1.digest != img2.digest


def test_labels_tell_images_with_equal_layers_apart() -> None:
    # Same layers, different labels: different config, so a different manifest digest.
    content = [layer_bytes(1, 10)]
    a, b = build_image(content, labels={"name": "a"}), build_image(content, labels={"name": "b"})
    assert a.layers == b.layers
    assert a.digest != b.digest
    assert build_image(content, labels={"name": "a"}).digest == a.digest


def test_build_index_selects_like_a_runtime() -> None:
    # linux/amd64 and linux/arm/v7 images in one index: platform selection finds each.
    amd = build_image([layer_bytes(1, 10)])
    arm = build_image([layer_bytes(2, 10)], platform=Platform.parse("linux/arm/v7"))
    index = build_index([arm, amd])
    parsed = parse_manifest(index.index_bytes, OCI_INDEX)
    assert isinstance(parsed, ImageIndex)
    assert select_platform(parsed, Platform.parse("linux/amd64")).digest == amd.digest
    assert select_platform(parsed, Platform.parse("linux/arm/v7")).digest == arm.digest
    assert json.loads(arm.config_bytes)["variant"] == "v7"


def test_write_oci_layout(tmp_path: Path) -> None:
    # Two tags in one layout: every blob once, index.json names both, re-tagging replaces.
    img1 = build_image([layer_bytes(1, 10), layer_bytes(2, 10)])
    img2 = build_image([layer_bytes(1, 10), layer_bytes(3, 10)])
    write_oci_layout(tmp_path, img1, "img1")
    write_oci_layout(tmp_path, img2, "img2")
    write_oci_layout(tmp_path, img2, "img1")
    assert json.loads((tmp_path / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((tmp_path / "index.json").read_text())
    tags = {m["annotations"][REF_NAME_ANNOTATION]: m["digest"] for m in index["manifests"]}
    assert tags == {"img1": img2.digest, "img2": img2.digest}
    blob_names = {p.name for p in (tmp_path / "blobs" / "sha256").iterdir()}
    # 3 distinct layers + 2 configs + 2 manifests.
    assert len(blob_names) == 7
    manifest_path = tmp_path / "blobs" / "sha256" / img1.digest.removeprefix("sha256:")
    assert manifest_path.read_bytes() == img1.manifest_bytes
