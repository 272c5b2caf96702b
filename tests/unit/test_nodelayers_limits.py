"""The NodeLayerInventory's limits: one set of numbers (``LIMITS``) that the CRD's schema
is generated from and the builder applies, so that what the agent builds from any
runtime contents, however hostile, is an object the API server accepts.

Hostile contents are generated here; every built object is validated against the CRD's
own ``openAPIV3Schema`` with PyPI's ``jsonschema`` (with the API server's Go semantics
for ``pattern`` and ``int64``: tests/fixtures/crd_schema.py). The same images built with
the limits lifted, as the builder did before it applied them (it only cut by bytes), are
shown to be refused: the 422 the agent used to retry forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pytest

from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayers import LIMITS, OMIT_REASONS, Limits
from layersched.core.nodelayersbuilder import build_document, build_inventory
from layersched.kube._crd import CRD_DIGEST_MAX_CHARS, CRD_DIGEST_PATTERN
from tests.fixtures.crd_schema import crd_errors, crd_schema

#: The builder before it applied the CRD's limits: names cut to 8, the byte budget, and
#: nothing else.
LIFTED = Limits(
    max_images=10**9,
    max_layers=10**9,
    max_layers_per_image=10**9,
    max_name_chars=10**9,
    max_layer_size_bytes=2**63 - 1,
    max_runtime_chars=10**9,
)
NO_BUDGET = 10**9


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


HONEST = NodeImage.held(("reg/honest:1",), digest(1), (Layer(digest(2), 30_000_000),))


def own_layers(n: int, count: int, size: int = 10) -> tuple[Layer, ...]:
    """``count`` layers no other image shares."""
    return tuple(Layer(digest(10**6 * (n + 1) + i), size) for i in range(count))


def test_the_crd_schema_is_generated_from_the_limits() -> None:
    def bounds(schema: dict[str, Any]) -> dict[str, Any]:
        root = schema["properties"]
        image = root["images"]["items"]["properties"]
        return {
            "max_images": root["images"]["maxItems"],
            "max_layers": root["layers"]["maxItems"],
            "max_layers_per_image": image["layers"]["maxItems"],
            "max_names_per_image": image["names"]["maxItems"],
            "max_name_chars": image["names"]["items"]["maxLength"],
            "max_layer_size_bytes": root["layers"]["items"]["properties"]["sizeBytes"]["maximum"],
            "max_runtime_chars": root["runtime"]["maxLength"],
        }

    # every field of Limits is a bound of the schema, and nothing else sets one
    assert bounds(crd_schema()) == {f.name: getattr(LIMITS, f.name) for f in fields(Limits)}
    other = Limits(max_images=7, max_layer_size_bytes=99)
    assert bounds(crd_schema(other))["max_images"] == 7
    assert bounds(crd_schema(other))["max_layer_size_bytes"] == 99
    root = crd_schema()["properties"]
    # an index points into the layer table, so it is below its length
    assert root["images"]["items"]["properties"]["layers"]["items"]["maximum"] == (
        LIMITS.max_layers - 1
    )
    assert root["layers"]["items"]["properties"]["digest"]["pattern"] == CRD_DIGEST_PATTERN
    assert root["images"]["items"]["properties"]["digest"]["maxLength"] == CRD_DIGEST_MAX_CHARS
    assert set(root["omittedByReason"]["properties"]) == set(OMIT_REASONS)


def test_the_size_cap_keeps_a_whole_object_inside_int64() -> None:
    # 20,000 layers of 1 TiB: 2^40 * 20,000 < 2^55, far from int64's 2^63 - 1
    assert LIMITS.max_layer_size_bytes * LIMITS.max_layers < 2**55


# Each case: hostile images (generated), what the builder leaves out and why, a field the
# API server refuses in the object built with the limits lifted, and the byte budget.
FLOOD_LAYER = Layer(digest(7), 10)
Case = tuple[Callable[[], list[NodeImage]], dict[str, int], str, int]
CASES: dict[str, Case] = {
    # one layer more than the 1,000 an image may have
    "1001-layers": (
        lambda: [HONEST, NodeImage.held(("reg/deep:1",), digest(3), own_layers(1, 1_001))],
        {"layerCount": 1},
        "images.1.layers: ",
        NO_BUDGET,
    ),
    # a name of 513 characters (a real reference is at most 455)
    "513-char-name": (
        lambda: [HONEST, NodeImage.held(("r/" + "x" * 511,), digest(8), own_layers(1, 1))],
        {"nameLength": 1},
        "images.1.names.0: ",
        NO_BUDGET,
    ),
    # a layer of 2^62 bytes: two of them wrap an int64 sum negative
    "2^62-byte-layer": (
        lambda: [HONEST, NodeImage.held(("reg/huge:1",), digest(9), (Layer(digest(4), 2**62),))],
        {"layerSize": 1},
        "layers.0.sizeBytes: ",
        NO_BUDGET,
    ),
    # 5,001 images (all sharing one layer, so the default byte budget keeps every one):
    # the smallest goes, here the one with the largest digest among equals
    "5001-images": (
        lambda: [
            NodeImage.held((f"r/i{n}:1",), digest(10 + n), (FLOOD_LAYER,)) for n in range(5_001)
        ],
        {"imageCount": 1},
        "images: ",
        1024 * 1024,
    ),
    # 21 images of 1,000 layers of their own: 21,000 distinct layers, 1,000 past the
    # table's cap; the 21st image would cross it (with a budget that holds them all)
    "21000-distinct-layers": (
        lambda: [
            NodeImage.held((f"r/i{n}:1",), digest(10 + n), own_layers(n, 1_000)) for n in range(21)
        ],
        {"layerTable": 1},
        "layers: ",
        NO_BUDGET,
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_hostile_contents_build_an_object_the_crd_accepts(case: str) -> None:
    images, omitted, refused_at, budget = CASES[case]
    built = build_inventory(
        "n1", images(), runtime="x", source="content-store", max_object_bytes=budget
    )
    document = built.document
    assert crd_errors(document) == []
    assert document["truncated"] is True
    assert document["omittedByReason"] == omitted
    assert document["omittedImages"] == sum(omitted.values()) == len(built.omitted)
    # without the limits the same images make an object the API server refuses (422)
    old = build_document(
        "n1", images(), runtime="x", source="content-store", max_object_bytes=budget, limits=LIFTED
    )
    errors = crd_errors(old)
    assert any(e.startswith(refused_at) for e in errors), errors


def test_a_hostile_runtime_name_is_cut_to_the_schemas_length() -> None:
    document = build_document("n1", [HONEST], runtime="r" * 300, source="content-store")
    assert crd_errors(document) == []
    assert len(document["runtime"]) == LIMITS.max_runtime_chars
    assert document["truncated"] is False  # no image was left out
    old = build_document("n1", [HONEST], runtime="r" * 300, source="content-store", limits=LIFTED)
    assert [e.split(":")[0] for e in crd_errors(old)] == ["runtime"]


@pytest.mark.parametrize(
    ("image", "detail"),
    [
        # Go's $ is the end of the text: a digest with a newline after it is refused
        (NodeImage.held(("reg/a:1",), digest(3) + "\n", ()), "is not a digest"),
        (NodeImage.held(("reg/a:1",), digest(3), (Layer("sha256:zz", 1),)), "layer 'sha256:zz'"),
        # a negative size cannot come from a reader, but the builder holds the line itself
        (NodeImage.held(("reg/a:1",), digest(3), (Layer(digest(4), -1),)), "-1 bytes"),
    ],
    ids=["digest-with-newline", "bad-layer-digest", "negative-size"],
)
def test_bad_digests_and_sizes_are_left_out(image: NodeImage, detail: str) -> None:
    built = build_inventory("n1", [HONEST, image], runtime="x", source="content-store")
    assert crd_errors(built.document) == []
    [omission] = built.omitted
    assert detail in omission.detail
    # the raw object with that image in it is what the API server would refuse
    raw = build_document("n1", [HONEST], runtime="x", source="content-store")
    raw["images"].append(
        {"names": list(image.names), "digest": image.digest, "layers": [0] * len(image.layers)}
    )
    raw["layers"] += [
        {"digest": layer.digest, "sizeBytes": layer.size_bytes} for layer in image.layers
    ]
    assert crd_errors(raw)


def test_everything_at_once_keeps_the_honest_images() -> None:
    # a node holding every hostile image above, plus two honest ones
    hostile = [image for make, *_ in CASES.values() for image in make() if image != HONEST]
    second = NodeImage.held(("reg/second:1",), digest(5), (Layer(digest(6), 20_000_000),))
    built = build_inventory("n1", [HONEST, second, *hostile], runtime="x", source="content-store")
    assert crd_errors(built.document) == []
    names = [image["names"][0] for image in built.document["images"]]
    # the largest first, as kubelet orders status.images: the honest images lead
    assert names[:2] == ["reg/honest:1", "reg/second:1"]
    assert built.document["omittedImages"] == len(built.omitted)
    long_names = [o.image for o in built.omitted if o.reason == "nameLength"]
    # a hostile name is shown cut, never in full
    assert long_names and all(len(name) < 120 for name in long_names)


@pytest.mark.parametrize(
    ("algorithm", "hex_digits", "accepted"),
    [
        ("sha256", "a" * 64, True),  # what containerd and CRI-O compute
        ("sha512", "b" * 128, True),
        # issue 44: no length bound: a digest of 10,000 hex digits was stored as is
        ("sha256", "c" * 10_000, False),
        ("sha256", "d" * 63, False),
        ("sha384", "e" * 96, False),  # no algorithm the runtimes use
        ("sha256", "F" * 64, False),  # the image spec writes lowercase hex
    ],
    ids=["sha256", "sha512", "10000-digits", "63-digits", "sha384", "uppercase"],
)
def test_the_crd_bounds_every_digest(algorithm: str, hex_digits: str, accepted: bool) -> None:
    value = f"{algorithm}:{hex_digits}"
    for where in ("layer", "image"):
        layer = Layer(value if where == "layer" else digest(1), 10)
        image = NodeImage.held(("reg/app:1",), value if where == "image" else digest(2), (layer,))
        document = build_document("n1", [image], runtime="x", source="content-store")
        errors = crd_errors(document)
        assert (errors == []) == accepted, (where, errors)
