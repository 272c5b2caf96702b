"""Image references: upstream's ``:latest`` rule and the canonical registry form."""

from __future__ import annotations

import pytest

from layersched.core.errors import ImageReferenceError
from layersched.core.reference import (
    ImageReference,
    is_pinned,
    normalized_image_name,
    parse_or_none,
)

D = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # no ':' at all -> tag added
        ("debian", "debian:latest"),
        # the last ':' is after the last '/' -> already tagged
        ("debian:12", "debian:12"),
        # the ':' belongs to the registry port, before the last '/' -> tag added
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("localhost:5000/app:v1", "localhost:5000/app:v1"),
        # digest refs contain ':' after the last '/' -> left alone (upstream quirk)
        (f"app@{D}", f"app@{D}"),
        # no docker.io/library prefixing: upstream doesn't do it
        ("gcr.io/40", "gcr.io/40:latest"),
    ],
    ids=["bare", "tagged", "port-untagged", "port-tagged", "digest", "no-prefixing"],
)
def test_normalized_image_name(name: str, expected: str) -> None:
    assert normalized_image_name(name) == expected


@pytest.mark.parametrize(
    ("text", "canonical", "reference"),
    [
        ("debian", "docker.io/library/debian:latest", "latest"),
        ("python:3", "docker.io/library/python:3", "3"),
        ("bitnami/redis:7", "docker.io/bitnami/redis:7", "7"),
        ("index.docker.io/library/debian", "docker.io/library/debian:latest", "latest"),
        ("127.0.0.1:5000/scenario/img1:v1", "127.0.0.1:5000/scenario/img1:v1", "v1"),
        ("localhost/app", "localhost/app:latest", "latest"),
        (f"quay.io/a/b:1@{D}", f"quay.io/a/b:1@{D}", D),
        (f"debian@{D}", f"docker.io/library/debian@{D}", D),
    ],
    ids=[
        "official",
        "tag",
        "user-repo",
        "legacy-host",
        "port",
        "localhost",
        "tag+digest",
        "digest",
    ],
)
def test_canonical(text: str, canonical: str, reference: str) -> None:
    ref = ImageReference.parse(text)
    assert ref.canonical() == canonical
    assert ref.reference == reference


@pytest.mark.parametrize(
    "text",
    ["", " debian", "Debian/App", "debian:", "app@sha256:zz", "repo//x", "a:b:c/d"],
    ids=["empty", "space", "uppercase-path", "empty-tag", "bad-digest", "empty-component", "junk"],
)
def test_invalid_references_name_the_input(text: str) -> None:
    with pytest.raises(ImageReferenceError, match="image reference"):
        ImageReference.parse(text)


@pytest.mark.parametrize(
    ("text", "identity"),
    [
        # no digest: the canonical form, tag and all
        ("nginx:1.25", "docker.io/library/nginx:1.25"),
        # no tag, no digest: 'latest', as canonical() says
        ("nginx", "docker.io/library/nginx:latest"),
        # a digest pins the content: the tag beside it is dropped (kubelet's repo digest form)
        (f"nginx:1.25@{D}", f"docker.io/library/nginx@{D}"),
        # a digest alone: unchanged
        (f"docker.io/library/nginx@{D}", f"docker.io/library/nginx@{D}"),
        # another registry keeps its host and port
        (f"reg.lan:5000/app:v1@{D}", f"reg.lan:5000/app@{D}"),
    ],
    ids=["tag", "untagged", "tag+digest", "digest", "port"],
)
def test_identity(text: str, identity: str) -> None:
    assert ImageReference.parse(text).identity() == identity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a reference parses as ImageReference.parse does
        ("debian:12", ImageReference("docker.io", "library/debian", "12", None)),
        # what kubelet lists for a dangling image is no reference: None, not an error
        ("<none>@<none>", None),
        ("", None),
    ],
    ids=["reference", "kubelet-none", "empty"],
)
def test_parse_or_none(text: str, expected: ImageReference | None) -> None:
    assert parse_or_none(text) == expected


@pytest.mark.parametrize(
    ("text", "repository", "pinned"),
    [
        # the tag goes; no docker.io/library/ is added
        ("debian:12", "debian", False),
        # a registry port is no tag
        ("reg.lan:5000/app:v1", "reg.lan:5000/app", False),
        ("reg.lan:5000/app", "reg.lan:5000/app", False),
        # a digest goes, and pins; with a tag beside it both go
        (f"reg.lan:5000/app@{D}", "reg.lan:5000/app", True),
        (f"nginx:1.25@{D}", "nginx", True),
    ],
    ids=["tag", "port-and-tag", "port", "digest", "tag+digest"],
)
def test_suffix_and_pinned(text: str, repository: str, pinned: bool) -> None:
    assert text.removesuffix(ImageReference.parse(text).suffix()) == repository
    assert is_pinned(text) is pinned


def test_a_name_that_is_no_reference_pins_nothing() -> None:
    # kubelet lists a dangling image as '<none>@<none>': an '@' is not a digest
    assert not is_pinned("<none>@<none>")
