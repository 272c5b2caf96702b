"""Worked tables for the node agent: CRI images -> Node.status.images, as kubelet does it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from layersched.agent import build_node, node_status_images
from layersched.core.errors import InputError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.layers import Layer
from layersched.core.nodeindexing import node_info
from layersched.core.objects import decode_node
from layersched.cri import CRIImage

MIB = 1024 * 1024


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


def image(
    ident: str,
    size_bytes: int,
    tags: tuple[str, ...] = (),
    digests: tuple[str, ...] = (),
    annotations: dict[str, str] | None = None,
) -> CRIImage:
    return CRIImage(ident, tags, digests, size_bytes, annotations or {})


def many(count: int) -> list[CRIImage]:
    """``count`` images i0..i{count-1}, image i being i+1 MiB big, tagged ``app:i``."""
    return [image(f"sha256:{i:064x}", (i + 1) * MIB, tags=(f"app:{i}",)) for i in range(count)]


@pytest.mark.parametrize(
    ("images", "expected_names"),
    [
        (
            # digests come first, then tags, each in the runtime's order
            [image("i", 1, tags=("r/a:1", "r/a:latest"), digests=("r/a@sha256:aa",))],
            [["r/a@sha256:aa", "r/a:1", "r/a:latest"]],
        ),
        (
            # 3 digests + 4 tags = 7 names; kubelet keeps the first 5: 3 digests + 2 tags
            [
                image(
                    "i",
                    1,
                    tags=("t1", "t2", "t3", "t4"),
                    digests=("d1", "d2", "d3"),
                )
            ],
            [["d1", "d2", "d3", "t1", "t2"]],
        ),
        (
            # 6 digests: the cap cuts inside the digests, no tag survives
            [image("i", 1, tags=("t1",), digests=("d1", "d2", "d3", "d4", "d5", "d6"))],
            [["d1", "d2", "d3", "d4", "d5"]],
        ),
        (
            # an image with no names is still published (kubelet sends an empty list)
            [image("i", 1)],
            [[]],
        ),
    ],
    ids=["digests-then-tags", "five-names-cap", "cap-inside-digests", "no-names"],
)
def test_names(images: list[CRIImage], expected_names: list[list[str]]) -> None:
    assert [entry["names"] for entry in node_status_images(images)] == expected_names


@pytest.mark.parametrize(
    ("images", "max_images", "expected_sizes"),
    [
        (
            # sorted by size, largest first: 3, 1, 4, 2 -> 4, 3, 2, 1
            [image("a", 3), image("b", 1), image("c", 4), image("d", 2)],
            -1,
            [4, 3, 2, 1],
        ),
        (
            # nodeStatusMaxImages=2 keeps the 2 largest of 3: 30, 20 (10 is dropped)
            [image("a", 10), image("b", 30), image("c", 20)],
            2,
            [30, 20],
        ),
        (
            # the default cap is 50: 60 images of 1..60 MiB -> the 50 largest, 60..11 MiB
            many(60),
            50,
            [mib * MIB for mib in range(60, 10, -1)],
        ),
        (
            # -1 means no cap: all 60 images, 60..1 MiB
            many(60),
            -1,
            [mib * MIB for mib in range(60, 0, -1)],
        ),
        (
            # a cap of 0 publishes nothing (kubelet slices [0:0])
            [image("a", 10)],
            0,
            [],
        ),
    ],
    ids=["sort-descending", "cap-2", "default-cap-50", "no-cap", "cap-0"],
)
def test_sort_and_cap(images: list[CRIImage], max_images: int, expected_sizes: list[int]) -> None:
    entries = node_status_images(images, max_images=max_images)
    assert [entry["sizeBytes"] for entry in entries] == expected_sizes


def test_default_cap_is_50() -> None:
    # no max_images given: kubelet's default nodeStatusMaxImages = 50
    assert len(node_status_images(many(60))) == 50


def test_equal_sizes_order_by_id_descending() -> None:
    # kubelet's ByImageSize breaks size ties by image ID, descending: 'b' before 'a'
    entries = node_status_images([image("a", 5, tags=("a",)), image("b", 5, tags=("b",))])
    assert [entry["names"] for entry in entries] == [["b"], ["a"]]


@pytest.mark.parametrize(
    ("annotations", "expected_layers"),
    [
        (
            # Ryax-style annotations become the patched kubelet's layers map:
            # imageLayer.<L1> = "54917164" -> {L1: 54917164}
            {
                f"imageLayer.{_digest('L1')}": "54917164",
                f"imageLayer.{_digest('L2')}": "1024",
            },
            {_digest("L1"): 54917164, _digest("L2"): 1024},
        ),
        (
            # other annotations are ignored; only imageLayer.* count
            {"org.opencontainers.image.title": "x", f"imageLayer.{_digest('L3')}": "7"},
            {_digest("L3"): 7},
        ),
        (
            # no layer annotations: no 'layers' key at all (what an unpatched kubelet sends)
            {"org.opencontainers.image.title": "x"},
            None,
        ),
    ],
    ids=["ryax-layers", "ignore-other-annotations", "no-layers-key"],
)
def test_layers_map(annotations: dict[str, str], expected_layers: dict[str, int] | None) -> None:
    (entry,) = node_status_images([image("i", 1, tags=("t",), annotations=annotations)])
    assert entry.get("layers") == expected_layers


@pytest.mark.parametrize(
    ("images", "max_images", "message"),
    [
        # -2 is no valid nodeStatusMaxImages (kubelet accepts -1 or >= 0)
        ([image("a", 1)], -2, "use -1 for no cap"),
        # a layer size must be decimal bytes
        ([image("a", 1, annotations={f"imageLayer.{_digest('L1')}": "12MB"})], 50, "decimal"),
        # the key after 'imageLayer.' must be a digest
        ([image("a", 1, annotations={"imageLayer.nope": "12"})], 50, "not a digest"),
    ],
    ids=["max-images-below-minus-one", "layer-size-not-decimal", "layer-key-not-digest"],
)
def test_bad_input(images: list[CRIImage], max_images: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        node_status_images(images, max_images=max_images)


def test_build_node_round_trips_through_the_inventory() -> None:
    # two nodes' worth of images; the Node JSON parses back and fills the inventory
    l1, l2, l3 = _digest("L1"), _digest("L2"), _digest("L3")
    images = [
        image(
            "sha256:" + "1" * 64,
            30 * MIB,
            tags=("127.0.0.1:5000/img1:v1",),
            digests=("127.0.0.1:5000/img1@sha256:" + "a" * 64,),
            annotations={f"imageLayer.{l1}": str(20 * MIB), f"imageLayer.{l3}": str(10 * MIB)},
        ),
        image("sha256:" + "2" * 64, 2 * MIB, tags=("pause:3.9",)),
    ]
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    document = build_node(
        "n1",
        images,
        {"cpu": "2", "memory": "4Gi"},
        labels={"topology.kubernetes.io/zone": "edge-1"},
        annotations={"example.com/note": "x"},
        now=now,
    )
    assert document["status"]["conditions"][0]["type"] == "Ready"
    assert document["status"]["conditions"][0]["lastHeartbeatTime"] == "2026-01-02T03:04:05Z"
    assert document["status"]["capacity"] == {"cpu": "2", "memory": "4Gi"}
    node = node_info(decode_node(document, "agent"), "agent")
    assert node.name == "n1"
    assert node.allocatable == {"cpu": "2", "memory": "4Gi"}
    assert node.labels == {
        "kubernetes.io/hostname": "n1",
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": "edge-1",
    }
    assert node.annotations == {"example.com/note": "x"}
    # largest first, digest before tag
    assert [i.names for i in node.images] == [
        ("127.0.0.1:5000/img1@sha256:" + "a" * 64, "127.0.0.1:5000/img1:v1"),
        ("pause:3.9",),
    ]
    assert node.images[0].layers == (Layer(l1, 20 * MIB), Layer(l3, 10 * MIB))
    inventory = build_layer_index([node])
    # every published name is an upstream image state: (size, number of nodes)
    assert inventory.image_state("127.0.0.1:5000/img1:v1") == (30 * MIB, 1)
    assert inventory.image_state("pause:3.9") == (2 * MIB, 1)
    assert inventory.node_holds_layer(0, l1)
    assert not inventory.node_holds_layer(0, l2)


def test_build_node_needs_a_name() -> None:
    with pytest.raises(InputError, match="--node-name"):
        build_node("", [], {})
