"""Hostile layer sizes: capped where they are read, and no strategy's arithmetic can wrap.

Issue 23 reproduced it with two 2^62-byte layers: numpy's int64 sum wrapped negative,
and a larger total raised OverflowError (a 500 and a traceback per request). Every
reader now refuses a size over ``MAX_SIZE_BYTES`` (1 TiB) naming the field, and the
strategies count in units of ``2**shift`` bytes when a sum could pass 2^56, so even
sizes that bypass the readers (a caller building Layers itself) score within 0..100.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from layersched.core.errors import LayerschedError
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import MAX_SIZE_BYTES, Layer, StaticLayerSource, check_size
from layersched.core.manifest import parse_manifest
from layersched.core.nodeimages import NodeImage, NodeInfo, annotation_layers
from layersched.core.nodeindexing import node_info
from layersched.core.nodelayers import parse_document
from layersched.core.nodelayersbuilder import build_document
from layersched.core.objects import decode_node
from layersched.core.pod import PodImages
from layersched.core.strategies import STRATEGY_NAMES, Strategy, get_strategy
from layersched.core.strategies.base import MAX_EXACT_SUM_BYTES, MAX_NODE_SCORE
from tests.fixtures.strategies import without_spread

INT64_MAX = (1 << 63) - 1


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


# ------------------------------------------------------------------------ readers
OVER = MAX_SIZE_BYTES + 1


def _nodelayers(size: int) -> object:
    document = build_document(
        "n1", [NodeImage.held(("app:1",), digest(9), (Layer(digest(1), 1),))], runtime="r",
        source="content-store",
    )  # fmt: skip
    document["layers"][0]["sizeBytes"] = size
    return parse_document(document, "watch")


def _manifest(size: int) -> object:
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
                   "digest": digest(7)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(1), "size": size}],
    }  # fmt: skip
    return parse_manifest(json.dumps(manifest).encode(), source="reg/app:1")


def _status_image(size: int) -> object:
    node = decode_node(
        {"metadata": {"name": "n1"}, "status": {"images": [{"names": ["a:1"], "sizeBytes": size}]}},
        "watch",
    )
    return node_info(node, "watch")


def _ryax_layers(size: int) -> object:
    node = decode_node(
        {
            "metadata": {"name": "n1"},
            "status": {"images": [{"names": ["a:1"], "sizeBytes": 1, "layers": {digest(1): size}}]},
        },
        "watch",
    )
    return node_info(node, "watch")


def _annotation(size: int) -> object:
    return annotation_layers({f"imageLayer.{digest(1)}": str(size)}, "annotations")


def _layers_file(size: int) -> object:
    return StaticLayerSource.from_json({"app:1": [{"digest": digest(1), "size": size}]}, "l.json")


@pytest.mark.parametrize(
    ("read", "field"),
    [
        # the brief's reader: a NodeLayerInventory's layer table
        (_nodelayers, "layers[0].sizeBytes"),
        # a registry manifest's layer descriptor
        (_manifest, "layers[0].size"),
        # kubelet's status.images sizeBytes, and a patched kubelet's layers map
        (_status_image, "sizeBytes"),
        (_ryax_layers, "layers["),
        # Ryax CRI annotations, and the offline --layers file
        (_annotation, "imageLayer."),
        (_layers_file, "[0].size"),
    ],
    ids=["nodelayerinventory", "manifest", "status-images", "ryax-layers", "annotation", "file"],
)
@pytest.mark.parametrize(
    "size", [OVER, 2**62, 10**15 * 1000, 2**64 + 5], ids=["cap+1", "2^62", "1e18", "2^64+5"]
)
def test_every_reader_refuses_a_size_over_the_cap_naming_the_field(
    read: object, field: str, size: int
) -> None:
    with pytest.raises(LayerschedError) as caught:  # InputError, or ManifestError
        read(size)  # type: ignore[operator]
    message = str(caught.value)
    assert field in message
    assert "cap" in message and str(size) in message


def test_the_cap_itself_and_real_sizes_are_accepted() -> None:
    # 1 TiB exactly is allowed; a 40 GB layer (the largest real ones are tens of GB) too
    assert check_size(MAX_SIZE_BYTES, "x") == MAX_SIZE_BYTES
    assert _nodelayers(40 * 10**9).images[0].layers[0].size_bytes == 40 * 10**9  # type: ignore[attr-defined]


def test_capped_sizes_leave_room_for_every_sum() -> None:
    # the guarantee the cap is chosen for: 65,536 layers at the cap, times 100, fit in int64
    assert (1 << 16) * MAX_SIZE_BYTES == MAX_EXACT_SUM_BYTES
    assert MAX_EXACT_SUM_BYTES * MAX_NODE_SCORE <= INT64_MAX


# --------------------------------------------------------------------- arithmetic
def _hostile_layers(case: str, rng: random.Random) -> tuple[Layer, ...]:
    if case == "two-2^62":  # the reproduction: the int64 sum wraps negative
        return (Layer(digest(1), 2**62), Layer(digest(2), 2**62))
    if case == "int64-max":
        return (Layer(digest(1), INT64_MAX), Layer(digest(2), 1))
    if case == "past-int64":  # a Python int numpy cannot even hold: OverflowError before
        return (Layer(digest(1), 10**30), Layer(digest(2), 10**29))
    if case == "many-at-cap":  # 100,000 layers of 1 TiB: 2^56.6 in all (x 100 wraps int64)
        return tuple(Layer(digest(i), MAX_SIZE_BYTES) for i in range(1, 100_001))
    # random huge sizes, 1..64 bits, over 50 layers
    return tuple(Layer(digest(i), rng.getrandbits(rng.randint(1, 64))) for i in range(1, 51))


#: Every strategy as built by default, and layer-locality with its spread off too.
SCORERS = [*STRATEGY_NAMES, "layer-locality-no-spread"]


def _scorer(label: str) -> Strategy:
    if label == "layer-locality-no-spread":
        return without_spread("layer-locality")
    return get_strategy(label)


@pytest.mark.parametrize("strategy", SCORERS)
@pytest.mark.parametrize("case", ["two-2^62", "int64-max", "past-int64", "many-at-cap", "random"])
def test_no_strategy_wraps_or_raises_on_hostile_sizes(strategy: str, case: str) -> None:
    # three nodes: "all" holds every layer, "half" the first half, "none" nothing. Whatever
    # the sizes, scores stay in 0..100, the full holder scores at least as much as the
    # others, and a node holding nothing never outscores one holding something; without
    # spread, the full holder scores 100 (with it, its layers weigh 1/3 or 2/3)
    rng = random.Random(23)
    layers = _hostile_layers(case, rng)
    half = layers[: max(1, len(layers) // 2)]
    image = "reg/app:1"
    nodes = [
        NodeInfo("all", (NodeImage((image,), 10**12, layers),)),
        NodeInfo("half", (NodeImage(("reg/half:1",), 10**12, half),)),
        NodeInfo("none", ()),
    ]
    inventory = LayerIndex()
    for node in nodes:
        inventory.add_node(node)
    candidates = np.arange(3, dtype=np.int64)
    scorer = _scorer(strategy)
    pod = PodImages.of(image)
    result = scorer.score(pod, layers if scorer.needs_layers else (), inventory, candidates)
    scores = result.scores.tolist()
    assert all(0 <= s <= MAX_NODE_SCORE for s in scores), scores
    assert scores[0] >= scores[1] >= scores[2], scores
    if scorer.needs_layers:
        if strategy != "layer-locality":  # unscaled: holds all of it, the best there is
            assert scores[0] == MAX_NODE_SCORE
        assert (result.present_bytes >= 0).all()


@pytest.mark.parametrize("strategy", ["layer-locality", "pull-time"])
def test_scores_are_exact_below_the_guard(strategy: str) -> None:
    # sizes read through the readers never reach the guard, and then nothing is rounded.
    # Layers: 1 TiB, 1 TiB and 12.5 MB; "two" holds the two big ones.
    # layer-locality, spread off: floor(100 * 2^41 / (2^41 + 12.5e6)) = 99 (99.99943...)
    # pull-time: "two" pulls 12.5 MB at 100 Mbit/s = 1 s, + 1 s overhead = 2 s; the full
    # holder 0 + 1 s: floor(100 * 1 / 2) = 50
    layers = (Layer(digest(1), MAX_SIZE_BYTES), Layer(digest(2), MAX_SIZE_BYTES),
              Layer(digest(3), 12_500_000))  # fmt: skip
    inventory = LayerIndex()
    inventory.add_node(NodeInfo("all", (NodeImage(("a:1",), 1, layers),)))
    inventory.add_node(NodeInfo("two", (NodeImage(("b:1",), 1, layers[:2]),)))
    result = without_spread(strategy).score(
        PodImages.of("a:1"), layers, inventory, np.arange(2, dtype=np.int64)
    )
    expected = {"layer-locality": [100, 99], "pull-time": [100, 50]}[strategy]
    assert result.scores.tolist() == expected
    total = 2 * MAX_SIZE_BYTES + 12_500_000
    assert result.present_bytes.tolist() == [total, 2 * MAX_SIZE_BYTES]
    assert result.total_bytes == total


def test_image_locality_sums_are_clamped_as_they_grow() -> None:
    # 30,000 containers of one 2^40-byte image on every node: upstream's int64 sum would
    # be 2^54.9 (fine), but node image sizes computed from agent layers are not capped
    # at read (a 20,000-layer image at the cap is 2^54.3): the running clamp at the
    # upper threshold keeps every sum within 2 x threshold; the score is the maximum
    big = NodeImage(("reg/big:1",), (1 << 54) + 12345)
    inventory = LayerIndex()
    inventory.add_node(NodeInfo("n1", (big,)))
    pod = PodImages.of(*["reg/big:1"] * 30_000)
    result = get_strategy("image-locality").score(pod, (), inventory, np.arange(1, dtype=np.int64))
    assert result.scores.tolist() == [MAX_NODE_SCORE]
    assert 0 < int(result.present_bytes[0]) <= result.total_bytes
