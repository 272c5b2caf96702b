"""The NodeLayerInventory object: building it from a runtime's images, reading it back,
its size budget, and the incremental inventory updates the extender's watch makes."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.nodelayers import content_hash, parse_document
from layersched.core.nodelayersbuilder import build_document
from layersched.kube import node_layers_crd


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


BASE = Layer(digest(1), 30_000_000)
PY = Layer(digest(2), 20_000_000)
APP = Layer(digest(3), 1_000)
IMG_A = NodeImage.held(("reg/a:1",), digest(100), (BASE, PY))
IMG_B = NodeImage.held(("reg/b:1",), digest(101), (BASE, PY, APP))


def test_layers_are_listed_once_and_images_index_them() -> None:
    document = build_document(
        "n1", [IMG_A, IMG_B], runtime="containerd://1.6.20", source="content-store"
    )
    # b (50,001,000 bytes) is larger than a (50,000,000): it comes first, like status.images
    assert [i["names"] for i in document["images"]] == [["reg/b:1"], ["reg/a:1"]]
    # three distinct layers, though the images list five
    assert [layer["digest"] for layer in document["layers"]] == [digest(1), digest(2), digest(3)]
    assert document["images"][1]["layers"] == [0, 1]
    parsed = parse_document(document, "test")
    assert {i.digest: i.layers for i in parsed.images} == {
        IMG_A.digest: IMG_A.layers,
        IMG_B.digest: IMG_B.layers,
    }
    assert parsed.truncated is False


def test_a_layer_twice_in_a_manifest_is_listed_once() -> None:
    # one blob, pulled once: the object names it once (a repeated index is refused)
    twice = NodeImage.held(("reg/t:1",), digest(102), (BASE, PY, BASE))
    document = build_document("n1", [twice], runtime="x", source="content-store")
    assert document["images"][0]["layers"] == [0, 1]
    assert parse_document(document, "test").images[0].layers == (BASE, PY)


def test_records_of_one_manifest_merge() -> None:
    tag = NodeImage.held(("reg/a:1",), digest(100), (BASE,))
    by_digest = NodeImage.held((f"reg/a@{digest(100)}",), digest(100), (BASE,))
    document = build_document("n1", [tag, by_digest], runtime="x", source="content-store")
    assert document["images"] == [
        {"names": ["reg/a:1", f"reg/a@{digest(100)}"], "digest": digest(100), "layers": [0]}
    ]


def test_the_size_budget_drops_the_smallest_images() -> None:
    # 400 images of 20 own layers each: 8,000 distinct layers, ~800 KB of layer table
    images = [
        NodeImage.held(
            (f"reg/img{i}:1",),
            digest(10_000 + i),
            tuple(Layer(digest(100_000 + i * 20 + j), 1_000 * (i + 1)) for j in range(20)),
        )
        for i in range(400)
    ]
    full = build_document("n1", images, runtime="x", source="content-store", max_object_bytes=10**9)
    full_bytes = len(json.dumps(full, separators=(",", ":")))
    budget = full_bytes // 3
    cut = build_document("n1", images, runtime="x", source="content-store", max_object_bytes=budget)
    assert len(json.dumps(cut, separators=(",", ":"))) <= budget
    assert cut["truncated"] is True
    assert cut["omittedImages"] == 400 - len(cut["images"])
    # the largest images stay (img399 is the largest: its layers are 400,000 bytes each)
    assert cut["images"][0]["names"] == ["reg/img399:1"]


def test_the_hash_ignores_when_it_was_observed() -> None:
    first = build_document("n1", [IMG_A], runtime="x", source="content-store")
    again = dict(first, observedAt="2030-01-01T00:00:00Z")
    assert content_hash(first) == content_hash(again)
    changed = build_document("n1", [IMG_A, IMG_B], runtime="x", source="content-store")
    assert content_hash(changed) != content_hash(first)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        # an index past the layer table: the agent wrote a broken object
        (lambda d: d["images"][0]["layers"].append(7), "images[0].layers[2]"),
        (lambda d: d["layers"][0].update(digest="nope"), "layers[0].digest"),
        (lambda d: d["layers"][1].update(sizeBytes=-1), "layers[1].sizeBytes"),
        # past the CRD's 1 TiB cap (an object stored before the cap, or written around it)
        (lambda d: d["layers"][1].update(sizeBytes=2**40 + 1), "layers[1].sizeBytes"),
        # Go's $ is the end of the text: the API server refuses it, and so does the reader
        (
            lambda d: d["layers"][0].update(digest=d["layers"][0]["digest"] + "\n"),
            "layers[0].digest",
        ),
        (lambda d: d["images"][0].pop("digest"), "images[0].digest"),
        # issue 30: the hostile object listed index 0 a thousand times per image (at
        # 2de96fd accepted, and 308 MiB in the Go plugin's index)
        (lambda d: d["images"][0]["layers"].append(0), "images[0].layers[2] = 0 repeats"),
        (lambda d: d["images"][0].update(names=list("abcdefghi")), "images[0].names has 9"),
        (lambda d: d["images"][0].update(layers=[0] * 1001), "images[0].layers has 1001"),
    ],
    ids=[
        "index-out-of-range",
        "bad-digest",
        "negative-size",
        "size-past-cap",
        "digest-with-newline",
        "no-digest",
        "repeated-index",
        "names-over-cap",
        "layers-over-cap",
    ],
)
def test_malformed_objects_name_the_node_and_field(mutate, field) -> None:  # type: ignore[no-untyped-def]
    document = build_document("n7", [IMG_A], runtime="x", source="content-store")
    mutate(document)
    with pytest.raises(InputError, match=re.escape(f"NodeLayerInventory 'n7': {field}")):
        parse_document(document, "watch")


def test_the_crd_schema_bounds_what_it_accepts() -> None:
    schema = node_layers_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    layer = schema["properties"]["layers"]["items"]["properties"]
    assert layer["sizeBytes"]["minimum"] == 0
    assert layer["digest"]["pattern"].startswith("^")
    assert schema["properties"]["layers"]["maxItems"] > 0
    assert schema["properties"]["images"]["maxItems"] > 0


# ------------------------------------------------------------- incremental inventory
def _random_node(rng: random.Random, name: str) -> NodeInfo:
    images = []
    for _ in range(rng.randint(0, 4)):
        layers = tuple(Layer(digest(rng.randint(1, 12)), 1_000) for _ in range(rng.randint(1, 3)))
        images.append(NodeImage((f"img{rng.randint(1, 6)}",), 1_000 * len(layers), layers))
    return NodeInfo(name=name, images=tuple(images))


def _view(index: LayerIndex) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per layer and per image name, the names of the nodes holding it."""
    names = [n.name for n in index.nodes]
    layers = {
        digest(i): {names[j] for j in index.layer_holders(digest(i)).tolist()} for i in range(1, 13)
    }
    images = {
        f"img{i}": {names[j] for j in index.image_holders(f"img{i}").tolist()} for i in range(1, 7)
    }
    return layers, images


@pytest.mark.parametrize("seed", range(20))
def test_upserts_and_removals_equal_a_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    live = LayerIndex()
    nodes: dict[str, NodeInfo] = {}
    for _ in range(60):
        name = f"n{rng.randint(1, 8)}"
        if rng.random() < 0.3:
            live.remove_node(name)
            nodes.pop(name, None)
        else:
            node = _random_node(rng, name)
            live.upsert_node(node)
            nodes[name] = node
    rebuilt = build_layer_index(nodes.values())
    assert live.node_count == rebuilt.node_count
    assert sorted(n.name for n in live.nodes) == sorted(nodes)
    assert _view(live) == _view(rebuilt)
    for i in range(1, 13):
        holders = live.layer_holders(digest(i)).tolist()
        # sorted and unique, as scoring expects; and the per-node view agrees
        assert holders == sorted(set(holders))
        for idx in range(live.node_count):
            assert live.node_holds_layer(idx, digest(i)) == (idx in holders)
    for name in nodes:
        idx = live.index_of(name)
        assert idx is not None and live.nodes[idx].name == name
        assert set(live.node_layer_digests(idx)) == set(
            rebuilt.node_layer_digests(rebuilt.index_of(name) or 0)
        )
    # image states as upstream sees them: (size, number of nodes)
    for i in range(1, 7):
        state = live.image_state(f"img{i}")
        other = rebuilt.image_state(f"img{i}")
        assert (state and state[1]) == (other and other[1])


def test_removing_a_node_moves_the_last_into_its_index() -> None:
    inventory = build_layer_index(
        [
            NodeInfo("a", (NodeImage(("x",), 1, (BASE,)),)),
            NodeInfo("b", ()),
            NodeInfo("c", (NodeImage(("y",), 1, (PY,)),)),
        ]
    )
    membership = inventory.membership
    assert inventory.remove_node("a") is True
    assert inventory.remove_node("a") is False
    # c took a's index 0; its layer moved with it, a's went
    assert inventory.index_of("c") == 0
    assert inventory.layer_holders(PY.digest).tolist() == [0]
    assert inventory.layer_holders(BASE.digest).tolist() == []
    assert inventory.image_holders("x").tolist() == []
    assert inventory.membership > membership
    np.testing.assert_array_equal(inventory.image_holders("y"), np.array([0]))
