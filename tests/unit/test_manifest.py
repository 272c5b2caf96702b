"""Manifests and indexes: parsing by Content-Type or mediaType, and platform selection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from layersched.core.errors import InputError, ManifestError
from layersched.core.layers import Layer
from layersched.core.manifest import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    DOCKER_SCHEMA1_SIGNED,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    ImageIndex,
    ImageManifest,
    Platform,
    parse_manifest,
    select_platform,
    sha256_digest,
)

A, B, C = ("sha256:" + ch * 64 for ch in "abc")
CFG = "sha256:" + "f" * 64


def manifest_doc(media_type: str | None = OCI_MANIFEST, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": CFG,
            "size": 7,
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": A, "size": 100},
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": B, "size": 20},
        ],
    }
    if media_type:
        doc["mediaType"] = media_type
    doc.update(extra)
    return doc


def entry(digest: str, os_name: str, arch: str, variant: str | None = None) -> dict[str, Any]:
    plat = {"os": os_name, "architecture": arch} | ({"variant": variant} if variant else {})
    return {"mediaType": OCI_MANIFEST, "digest": digest, "size": 500, "platform": plat}


def index_doc(*entries: dict[str, Any], media_type: str | None = OCI_INDEX) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 2, "manifests": list(entries)}
    if media_type:
        doc["mediaType"] = media_type
    return doc


def body(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("doc", "content_type", "kind", "media_type"),
    [
        # The header names the type: it wins.
        (manifest_doc(), OCI_MANIFEST, ImageManifest, OCI_MANIFEST),
        # Parameters after ';' are dropped before comparing.
        (manifest_doc(DOCKER_MANIFEST), f"{DOCKER_MANIFEST}; charset=utf-8", ImageManifest,
         DOCKER_MANIFEST),
        # A generic header falls back to the mediaType field.
        (manifest_doc(DOCKER_MANIFEST), "application/json", ImageManifest, DOCKER_MANIFEST),
        # No header and no mediaType: OCI allows that; the shape ("layers") decides.
        (manifest_doc(None), None, ImageManifest, OCI_MANIFEST),
        (index_doc(entry(A, "linux", "amd64")), OCI_INDEX, ImageIndex, OCI_INDEX),
        (index_doc(entry(A, "linux", "amd64"), media_type=DOCKER_MANIFEST_LIST), None,
         ImageIndex, DOCKER_MANIFEST_LIST),
        # "manifests" without any mediaType is an OCI index.
        (index_doc(entry(A, "linux", "amd64"), media_type=None), "", ImageIndex, OCI_INDEX),
    ],
    ids=["oci-header", "docker-header-params", "field-fallback", "shape-manifest", "oci-index",
         "manifest-list-field", "shape-index"],
)  # fmt: skip
def test_parse_kinds(
    doc: dict[str, Any], content_type: str | None, kind: type, media_type: str
) -> None:
    parsed = parse_manifest(body(doc), content_type)
    assert isinstance(parsed, kind)
    assert parsed.media_type == media_type


def test_manifest_layers_keep_order_and_sizes() -> None:
    # Layers come out base first, as (digest, compressed size); the config is not a layer.
    parsed = parse_manifest(body(manifest_doc()), OCI_MANIFEST)
    assert isinstance(parsed, ImageManifest)
    assert parsed.layers == (Layer(A, 100), Layer(B, 20))
    assert parsed.config.digest == CFG


@pytest.mark.parametrize(
    ("raw", "content_type", "message"),
    [
        # Schema 1 by header, by field and by schemaVersion: refused with a way out.
        (body({"schemaVersion": 1, "fsLayers": []}), DOCKER_SCHEMA1_SIGNED, "schema 1"),
        (body({"schemaVersion": 1, "name": "x", "fsLayers": []}), None, "schema 1"),
        (body({"schemaVersion": 2, "mediaType": DOCKER_SCHEMA1_SIGNED}), None, "schema 1"),
        (b"<html>", None, "not valid JSON"),
        (b"[]", None, "not a JSON object"),
        (body(manifest_doc(schemaVersion=3)), None, "schemaVersion is 3"),
        (body(manifest_doc()), "text/html", "Content-Type 'text/html' is not a manifest type"),
        (body(manifest_doc("application/vnd.oci.image.config.v1+json")), None,
         "is not an image manifest or index"),
        (body({"schemaVersion": 2}), None, "neither 'layers' nor 'manifests'"),
        (body(manifest_doc(layers="x")), None, "'layers' must be a list"),
        (body(manifest_doc(layers=[{"digest": "md5:zz", "size": 1}])), None,
         "layers[0].digest: 'md5:zz' is not a digest"),
        (body(manifest_doc(layers=[{"digest": A, "size": -1}])), None,
         "layers[0].size: size -1 must be a non-negative integer"),
        (body(manifest_doc(config=None)), None, "config: expected a descriptor"),
        (body(index_doc({"digest": A, "size": 1, "platform": {"os": "linux"}})), None,
         "manifests[0].platform: 'os' and 'architecture' must be strings"),
    ],
    ids=["schema1-header", "schema1-version", "schema1-field", "not-json", "not-object",
         "schema-version", "wrong-content-type", "config-media-type", "no-layers",
         "layers-not-list", "bad-digest", "negative-size", "no-config", "platform-no-arch"],
)  # fmt: skip
def test_parse_errors(raw: bytes, content_type: str | None, message: str) -> None:
    with pytest.raises(ManifestError, match=r"^reg/app:1: ") as info:
        parse_manifest(raw, content_type, source="reg/app:1")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("linux/amd64", Platform("linux", "amd64")),
        # Variant kept when it is not the architecture's default.
        ("linux/arm/v7", Platform("linux", "arm", "v7")),
        # arm64's default variant v8 is folded away, so it equals plain linux/arm64.
        ("linux/arm64/v8", Platform("linux", "arm64")),
        # Kernel spellings fold to Go's GOARCH names; case and spaces are forgiven.
        ("Linux/x86_64", Platform("linux", "amd64")),
        (" linux/aarch64 ", Platform("linux", "arm64")),
    ],
    ids=["plain", "variant", "arm64-v8", "x86_64", "aarch64"],
)
def test_platform_parse(text: str, expected: Platform) -> None:
    assert Platform.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    ["linux", "linux/amd64/v1/x", "", "linux//amd64", "linux/amd 64"],
    ids=["no-arch", "too-many", "empty", "empty-part", "space"],
)
def test_platform_parse_errors(text: str) -> None:
    with pytest.raises(InputError, match="write os/architecture"):
        Platform.parse(text)


def test_platform_str_round_trips() -> None:
    # str() gives the text parse() reads.
    assert str(Platform.parse("linux/arm/v6")) == "linux/arm/v6"
    assert str(Platform.parse("windows/amd64")) == "windows/amd64"


AMD = entry(A, "linux", "amd64")
ARM7 = entry(B, "linux", "arm", "v7")
ARM6 = entry(C, "linux", "arm", "v6")
ARM64 = entry(C, "linux", "arm64", "v8")
ATTEST = entry(B, "unknown", "unknown")


@pytest.mark.parametrize(
    ("entries", "wanted", "digest"),
    [
        # Exact os/arch.
        ((ARM7, AMD), "linux/amd64", A),
        # Attestation entries (unknown/unknown) are never picked.
        ((ATTEST, AMD), "linux/amd64", A),
        # A wanted variant must match: v6 skips the v7 entry.
        ((ARM7, ARM6), "linux/arm/v6", C),
        ((ARM7, ARM6), "linux/arm/v7", B),
        # No wanted variant: the first os/arch match (no variant-less entry exists).
        ((ARM7, ARM6), "linux/arm", B),
        # linux/arm64 matches an entry that says v8 explicitly.
        ((AMD, ARM64), "linux/arm64", C),
        ((AMD, ARM64), "linux/arm64/v8", C),
    ],
    ids=["exact", "skip-attestation", "variant-v6", "variant-v7", "any-variant", "arm64-plain",
         "arm64-v8"],
)  # fmt: skip
def test_select_platform(entries: tuple[dict[str, Any], ...], wanted: str, digest: str) -> None:
    index = parse_manifest(body(index_doc(*entries)), OCI_INDEX)
    assert isinstance(index, ImageIndex)
    assert select_platform(index, Platform.parse(wanted)).digest == digest


def test_select_platform_lists_what_is_available() -> None:
    # No linux/s390x: the message names every platform on offer so the user can choose.
    index = parse_manifest(body(index_doc(AMD, ARM7)), OCI_INDEX)
    assert isinstance(index, ImageIndex)
    with pytest.raises(ManifestError) as info:
        select_platform(index, Platform.parse("linux/s390x"), source="r/app:1")
    assert str(info.value) == (
        "r/app:1: the image index has no manifest for platform linux/s390x "
        "(available: linux/amd64, linux/arm/v7); pick one of those with --platform"
    )


def test_descriptor_json_matches_oci_field_names() -> None:
    # The OCI spelling: mediaType/digest/size, platform.architecture/os/variant.
    d = Descriptor(OCI_MANIFEST, A, 5, Platform("linux", "arm", "v7"))
    assert d.to_json() == {
        "mediaType": OCI_MANIFEST,
        "digest": A,
        "size": 5,
        "platform": {"architecture": "arm", "os": "linux", "variant": "v7"},
    }


def test_sha256_digest() -> None:
    # sha256("") is the well-known e3b0c442… value.
    assert sha256_digest(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
