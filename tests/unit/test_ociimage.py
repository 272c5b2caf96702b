"""Deterministic OCI image building: same inputs, same digests; well-formed tars and JSON."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from layersched.core.errors import InputError
from layersched.core.manifest import (
    OCI_INDEX,
    ImageIndex,
    ImageManifest,
    Platform,
    parse_manifest,
    select_platform,
    sha256_digest,
)
from layersched.images.oci import (
    LayerFile,
    build_image,
    build_index,
    layer_bytes,
    make_layer,
    random_layer,
)
from layersched.images.oci_layout import (
    CONTAINERD_IMAGE_NAME_ANNOTATION,
    REF_NAME_ANNOTATION,
    archive_name,
    oci_archive,
    write_oci_archive,
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


def test_extra_files_come_first_with_their_modes() -> None:
    # A base layer with an executable: two members, the program (0755) first, then the
    # content file still named after its content; adding it changes the layer digest.
    content = b"hello"
    layer = make_layer(content, [LayerFile("bin-x", b"\x7fELF", 0o755)])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer.blob))) as tar:
        members = [(m.name, m.mode, m.uid, m.gid, m.mtime) for m in tar.getmembers()]
    assert members == [
        ("bin-x", 0o755, 0, 0, 0),
        ("layer-" + sha256_digest(content)[7:23], 0o644, 0, 0, 0),
    ]
    assert layer.digest != make_layer(content).digest
    assert layer == make_layer(content, [LayerFile("bin-x", b"\x7fELF", 0o755)])


@pytest.mark.parametrize(
    ("entrypoint", "working_dir", "expected"),
    [
        # Neither given: the config is as before (Labels only), so old digests hold.
        (None, None, {"Labels": {}}),
        # Both given: Entrypoint as a list, WorkingDir as a string.
        (("/idle",), "/", {"Labels": {}, "Entrypoint": ["/idle"], "WorkingDir": "/"}),
    ],
    ids=["plain", "runnable"],
)
def test_build_image_run_config(
    entrypoint: tuple[str, ...] | None, working_dir: str | None, expected: dict[str, object]
) -> None:
    img = build_image([layer_bytes(1, 10)], entrypoint=entrypoint, working_dir=working_dir)
    assert json.loads(img.config_bytes)["config"] == expected


def _archive_members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def _archive_file(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        extracted = tar.extractfile(name)
        assert extracted is not None
        return extracted.read()


def test_oci_archive_is_a_named_reproducible_layout() -> None:
    # oci-layout, index.json and the 4 blobs (2 layers, config, manifest) in sorted
    # order with fixed metadata; the index entry names the image for containerd.
    img = build_image([layer_bytes(1, 10), layer_bytes(2, 10)])
    data = oci_archive(img, "layersched.local/pause:3.2")
    assert data == oci_archive(img, "layersched.local/pause:3.2")
    members = _archive_members(data)
    blob_names = [n for n in members if n.startswith("blobs/sha256/")]
    assert list(members)[:4] == ["oci-layout", "index.json", "blobs", "blobs/sha256"]
    assert members["blobs"].isdir() and members["blobs/sha256"].isdir()
    assert blob_names == sorted(blob_names)
    assert {n.removeprefix("blobs/sha256/") for n in blob_names} == {
        d.removeprefix("sha256:") for d in (*img.blobs, img.digest)
    }
    assert all((m.uid, m.gid, m.mtime) == (0, 0, 0) for m in members.values())
    (entry,) = json.loads(_archive_file(data, "index.json"))["manifests"]
    assert entry["digest"] == img.digest
    assert entry["annotations"] == {
        CONTAINERD_IMAGE_NAME_ANNOTATION: "layersched.local/pause:3.2",
        REF_NAME_ANNOTATION: "3.2",
    }
    manifest = _archive_file(data, "blobs/sha256/" + img.digest.removeprefix("sha256:"))
    assert manifest == img.manifest_bytes


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        # The CRI would look for docker.io/library/pause:3.2: say so.
        ("pause:3.2", "docker.io/library/pause:3.2"),
        # No tag: the CRI would look for :latest.
        ("layersched.local/pause", "layersched.local/pause:latest"),
        # A digest cannot be an imported image's name.
        ("layersched.local/pause:3.2@sha256:" + "0" * 64, "layersched.local/pause:3.2"),
    ],
    ids=["short-name", "no-tag", "digest"],
)
def test_archive_name_must_be_full(name: str, suggestion: str) -> None:
    with pytest.raises(InputError, match=f"e.g. '{suggestion}'"):
        archive_name(name)


def test_write_oci_archive_reports_changes(tmp_path: Path) -> None:
    # First write: changed. Same archive again: unchanged, file untouched. Other name: changed.
    img = build_image([layer_bytes(1, 10)])
    path = tmp_path / "img.tar"
    assert write_oci_archive(path, img, "layersched.local/a:1") is True
    first = path.stat().st_mtime_ns
    assert write_oci_archive(path, img, "layersched.local/a:1") is False
    assert path.stat().st_mtime_ns == first
    assert write_oci_archive(path, img, "layersched.local/b:1") is True
    assert path.read_bytes() == oci_archive(img, "layersched.local/b:1")
    assert not (tmp_path / "img.tar.partial").exists()


def test_write_oci_archive_names_an_unwritable_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is its directory there and writable"):
        write_oci_archive(tmp_path / "missing" / "img.tar", build_image([b"x"]), "h.local/a:1")
