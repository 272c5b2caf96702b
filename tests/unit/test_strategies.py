"""Worked tables for the two core strategies."""

from __future__ import annotations

import re

import pytest

from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.pod import PodImages
from layersched.core.strategies import (
    STRATEGY_NAMES,
    get_strategy,
    resolve_pod_layers,
    strategy_args,
)
from layersched.core.strategies.args import NEWEST_KUBERNETES_MINOR, parse_kubernetes_minor
from layersched.core.strategies.image_locality import _scaled_image_score
from tests.fixtures.strategies import without_spread

MB = 1024 * 1024


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


def node(name: str, *images: tuple[str, int]) -> NodeInfo:
    return NodeInfo(name, tuple(NodeImage((n,), size) for n, size in images))


def scores(strategy: str, pod: PodImages, nodes: list[NodeInfo], source=None, **opts) -> dict:
    inventory = build_layer_index(nodes, source)
    candidates = inventory.indices_of([n.name for n in nodes])[0]
    scorer = get_strategy(strategy, strategy_args(strategy, **opts))
    layers = resolve_pod_layers(pod, source) if scorer.needs_layers else ()
    result = scorer.score(pod, layers, inventory, candidates)
    return result.as_dict(inventory)


# ------------------------------------------------------------------ image-locality
@pytest.mark.parametrize(
    ("pod", "nodes", "expected"),
    [
        (
            # upstream's own example, 2 nodes:
            # node1: 40M * 1/2 = 20M < 23M threshold -> 0
            # node2: 250M * 1/2 = 125M -> 100 * (125M - 23M) / (2000M - 23M) = 5
            PodImages.of("gcr.io/40", "gcr.io/250"),
            [
                node("node1", ("gcr.io/40:latest", 40 * MB)),
                node("node2", ("gcr.io/250:latest", 250 * MB)),
            ],
            {"node1": 0, "node2": 5},
        ),
        (
            # image on both nodes: 250M * 2/2 = 250M -> 100 * (250M - 23M) / (1000M - 23M) = 23
            PodImages.of("gcr.io/250"),
            [
                node("a", ("gcr.io/250:latest", 250 * MB)),
                node("b", ("gcr.io/250:latest", 250 * MB)),
            ],
            {"a": 23, "b": 23},
        ),
        (
            # same image under another name counts for nothing: 'debian' -> 'debian:latest'
            # is not 'docker.io/library/debian:latest' (upstream adds no registry prefix)
            PodImages.of("debian"),
            [node("a", ("docker.io/library/debian:latest", 500 * MB)), node("b")],
            {"a": 0, "b": 0},
        ),
        (
            # repeats are not de-duplicated: 2 * (250M * 1/2) = 250M, max = 2 * 1000M
            # -> 100 * (250M - 23M) / (2000M - 23M) = 11
            PodImages.of("gcr.io/250", "gcr.io/250"),
            [node("a"), node("b", ("gcr.io/250:latest", 250 * MB))],
            {"a": 0, "b": 11},
        ),
        (
            # init containers count: init gcr.io/250 (125M) + container gcr.io/40 (absent);
            # 2 containers -> 100 * (125M - 23M) / (2000M - 23M) = 5
            PodImages("p", ("gcr.io/250",), ("gcr.io/40",)),
            [node("a"), node("b", ("gcr.io/250:latest", 250 * MB))],
            {"a": 0, "b": 5},
        ),
        (
            # clamp at the top: 3000M * 1/1 > 1000M -> 100
            PodImages.of("big:1"),
            [node("a", ("big:1", 3000 * MB))],
            {"a": 100},
        ),
        (
            # size comes from the first node reporting the name (100M, not 900M);
            # 100M * 2/2 = 100M -> 100 * (100M - 23M) / (1000M - 23M) = 7 on both
            PodImages.of("x:1"),
            [node("a", ("x:1", 100 * MB)), node("b", ("x:1", 900 * MB))],
            {"a": 7, "b": 7},
        ),
    ],
    ids=[
        "upstream-example",
        "spread-full",
        "name-mismatch",
        "repeats",
        "init",
        "clamp",
        "first-size",
    ],
)
def test_image_locality(pod: PodImages, nodes: list[NodeInfo], expected: dict) -> None:
    assert scores("image-locality", pod, nodes) == expected


#: An image whose spread-scaled size lands on a score boundary: 3 of 11 nodes hold it.
BOUNDARY_SIZE_BYTES = 238_683_863
INIT_POD = PodImages("p", ("gcr.io/250",), ("gcr.io/500",))
INIT_NODES = [
    node("a"),
    node("b", ("gcr.io/250:latest", 250 * MB), ("gcr.io/500:latest", 500 * MB)),
]


@pytest.mark.parametrize(
    ("minor", "pod", "nodes", "expected"),
    [
        (
            # 1.20 counts containers only: gcr.io/500 at 500M * 1/2 = 250M, 1 container
            # -> 100 * (250M - 23M) / (1000M - 23M) = 23
            (1, 20),
            INIT_POD,
            INIT_NODES,
            {"a": 0, "b": 23},
        ),
        (
            # 1.29 still does (init containers count from 1.30, kubernetes#123366)
            (1, 29),
            INIT_POD,
            INIT_NODES,
            {"a": 0, "b": 23},
        ),
        (
            # 1.30 adds the init container: 125M + 250M = 375M over 2 containers
            # -> 100 * (375M - 23M) / (2000M - 23M) = 17
            (1, 30),
            INIT_POD,
            INIT_NODES,
            {"a": 0, "b": 17},
        ),
        (
            # later minors behave as 1.30: 17 again
            (1, 33),
            INIT_POD,
            INIT_NODES,
            {"a": 0, "b": 17},
        ),
        (
            # the quotient first, as Go computes it: spread = 3/11 = 0.2727272727272727 and
            # int64(238683863 * spread) = int64(65095598.99999999) = 65095598
            # -> 100 * (65095598 - 24117248) / 1024458752 = 4097835000 / 1024458752 = 3.
            # size * 3 / 11 would give 65095599 -> 4097835100 / 1024458752 = 4
            (1, 20),
            PodImages.of("x:1"),
            [node(f"h{i}", ("x:1", BOUNDARY_SIZE_BYTES)) for i in range(3)]
            + [node(f"e{i}") for i in range(8)],
            {"h0": 3, "h1": 3, "h2": 3} | {f"e{i}": 0 for i in range(8)},
        ),
    ],
    ids=["1.20-containers-only", "1.29-containers-only", "1.30-init-counts",
         "1.33-as-1.30", "spread-quotient-first"],
)  # fmt: skip
def test_image_locality_per_kubernetes_minor(
    minor: tuple[int, int], pod: PodImages, nodes: list[NodeInfo], expected: dict
) -> None:
    assert scores("image-locality", pod, nodes, kubernetes_minor=minor) == expected


def test_image_locality_defaults_to_the_newest_release() -> None:
    # no minor given: 1.37, where init containers count, as from 1.30 (17, not 1.20's 23)
    assert scores("image-locality", INIT_POD, INIT_NODES) == {"a": 0, "b": 17}
    assert get_strategy("image-locality").kubernetes_minor == (1, 37) == NEWEST_KUBERNETES_MINOR


#: A container image and an image volume (KEP-4639), both on node b of two.
VOLUME_POD = PodImages("p", (), ("gcr.io/250",), image_volumes=("gcr.io/500",))
#: The same image as a container and as an image volume: nothing is de-duplicated.
SAME_IMAGE_POD = PodImages("p", (), ("gcr.io/250",), image_volumes=("gcr.io/250",))


@pytest.mark.parametrize(
    ("minor", "pod", "expected"),
    [
        (
            # 1.35 ignores image volumes: 250M * 1/2 = 125M over 1 container
            # -> 100 * (125M - 23M) / (1000M - 23M) = 10
            (1, 35),
            VOLUME_POD,
            {"a": 0, "b": 10},
        ),
        (
            # 1.36 sums the volume's image too (kubernetes#130231) but keeps the threshold
            # at the containers' count: 125M + 500M * 1/2 = 375M
            # -> 100 * (375M - 23M) / (1000M - 23M) = 36
            (1, 36),
            VOLUME_POD,
            {"a": 0, "b": 36},
        ),
        (
            # 1.37 counts the volume in the threshold as well (kubernetes#138951): 375M
            # -> 100 * (375M - 23M) / (2000M - 23M) = 17
            (1, 37),
            VOLUME_POD,
            {"a": 0, "b": 17},
        ),
        (
            # 1.36, the same image twice (container + volume): 125M + 125M = 250M
            # -> 100 * (250M - 23M) / (1000M - 23M) = 23
            (1, 36),
            SAME_IMAGE_POD,
            {"a": 0, "b": 23},
        ),
        (
            # 1.37, the same again over two threshold slots
            # -> 100 * (250M - 23M) / (2000M - 23M) = 11
            (1, 37),
            SAME_IMAGE_POD,
            {"a": 0, "b": 11},
        ),
    ],
    ids=["1.35-volumes-ignored", "1.36-volumes-in-sum", "1.37-volumes-in-threshold",
         "1.36-no-dedupe", "1.37-no-dedupe"],
)  # fmt: skip
def test_image_locality_image_volumes(
    minor: tuple[int, int], pod: PodImages, expected: dict
) -> None:
    nodes = [node("a"), node("b", ("gcr.io/250:latest", 250 * MB), ("gcr.io/500:latest", 500 * MB))]
    assert scores("image-locality", pod, nodes, kubernetes_minor=minor) == expected


@pytest.mark.parametrize(
    ("size_bytes", "num_nodes", "total_num_nodes", "expected"),
    [
        # 40M * (1/2) = 20M exactly: both orders agree on exact binary fractions
        (40 * MB, 1, 2, 20 * MB),
        # 24117258 * (3/11) = 6577433.999999999 -> 6577433 (24117258 * 3 / 11 = 6577434.0)
        (24_117_258, 3, 11, 6_577_433),
        # 238683863 * (3/11) = 65095598.99999999 -> 65095598 (the score boundary above)
        (BOUNDARY_SIZE_BYTES, 3, 11, 65_095_598),
        # 1366249590 * (7/10) = 956374712.9999999 -> 956374712 (score 90, not 91)
        (1_366_249_590, 7, 10, 956_374_712),
    ],
    ids=["exact-half", "3-of-11", "boundary-3-of-11", "7-of-10"],
)
def test_spread_factor_is_the_quotient_first(
    size_bytes: int, num_nodes: int, total_num_nodes: int, expected: int
) -> None:
    assert _scaled_image_score(size_bytes, num_nodes, total_num_nodes) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # what `kubectl version` prints, with or without a patch and a v
        ("1.20", (1, 20)),
        ("v1.20.2", (1, 20)),
        ("1.30.0-rc.1", (1, 30)),
        # every minor from 1.20 to 1.37 is known; 1.37 is the newest
        ("v1.36.4", (1, 36)),
        ("1.37", (1, 37)),
    ],
    ids=["minor", "v-patch", "prerelease", "1.36", "1.37"],
)
def test_parse_kubernetes_minor(text: str, expected: tuple[int, int]) -> None:
    assert parse_kubernetes_minor(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # not a version at all
        ("twenty", "expected MAJOR.MINOR such as 1.20"),
        # before 1.20 the port is unchecked (fixed threshold, 0-10 buckets)
        ("1.19", "reproduces ImageLocality from 1.20 on"),
        ("2.0", "reproduces ImageLocality from 1.20 on"),
        # after 1.37 what upstream counts is not known yet
        ("1.38", "knows ImageLocality up to 1.37"),
    ],
    ids=["garbage", "too-old", "no-such-major", "too-new"],
)
def test_parse_kubernetes_minor_refuses(text: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_kubernetes_minor(text)


def test_image_locality_refuses_an_unreproduced_minor() -> None:
    with pytest.raises(InputError, match=re.escape("pass 1.20 or later")):
        get_strategy("image-locality", strategy_args("image-locality", kubernetes_minor=(1, 17)))


# ------------------------------------------------------------------ layer-locality
L1, L2, L3, L4 = (
    Layer(_digest(x), s * MB) for x, s in (("L1", 30), ("L2", 10), ("L3", 4), ("L4", 4))
)
SCENARIO = StaticLayerSource({"img1:v1": (L1, L2, L3), "img2:v1": (L1, L2, L4), "empty:v1": ()})
N1 = node("n1", ("img1:v1", 44 * MB))
N2 = node("n2", ("img2:v1", 44 * MB))
N3 = node("n3")


@pytest.mark.parametrize(
    ("pod", "opts", "expected"),
    [
        (
            # spread off: the seed's t3: n1 holds all 44M -> 100; n2 holds L1+L2 = 40M
            # of 44M -> floor(100 * 40 / 44) = 90; n3 holds nothing -> 0
            PodImages.of("img1:v1"),
            {"spread": False},
            {"n1": 100, "n2": 90, "n3": 0},
        ),
        (
            # spread off: distinct layers across init + containers: L1 L2 L3 L4 = 48M
            # n1 has 44M -> floor(4400/48) = 91; n2 has 44M -> 91
            PodImages("p", ("img2:v1",), ("img1:v1", "img1:v1")),
            {"spread": False},
            {"n1": 91, "n2": 91, "n3": 0},
        ),
        (
            # an image with no layers weighs nothing -> 0 everywhere
            PodImages.of("empty:v1"),
            {},
            {"n1": 0, "n2": 0, "n3": 0},
        ),
        (
            # the default, spread on (as installed): L1 and L2 are on 2 of 3 nodes -> count
            # 2/3 each; L3 on 1 of 3.
            # n1: (30 + 10) * 2/3 + 4 * 1/3 = 28M -> floor(100 * 28 / 44) = 63
            # n2: (30 + 10) * 2/3 = 26.67M -> floor(100 * 26.67 / 44) = 60
            PodImages.of("img1:v1"),
            {},
            {"n1": 63, "n2": 60, "n3": 0},
        ),
    ],
    ids=["seed-t3-no-spread", "dedup-init-no-spread", "zero-total", "spread-by-default"],
)
def test_layer_locality(pod: PodImages, opts: dict, expected: dict) -> None:
    assert scores("layer-locality", pod, [N1, N2, N3], SCENARIO, **opts) == expected


def test_spread_scales_the_score_but_reports_the_bytes_held() -> None:
    # spread weighs each layer by its holders (n1: 28M of 44M -> 63) but the node still
    # holds L1 + L2 + L3 = 44M and n2 L1 + L2 = 40M: explain's held and missing bytes are
    # these, whatever the weighting (the deployed extender runs with spread on)
    pod, nodes = PodImages.of("img1:v1"), [N1, N2, N3]
    inventory = build_layer_index(nodes, SCENARIO)
    candidates = inventory.indices_of([n.name for n in nodes])[0]
    scorer = get_strategy("layer-locality", strategy_args("layer-locality", spread=True))
    result = scorer.score(pod, resolve_pod_layers(pod, SCENARIO), inventory, candidates)
    assert result.as_dict(inventory) == {"n1": 63, "n2": 60, "n3": 0}
    assert [int(b) for b in result.present_bytes] == [44 * MB, 40 * MB, 0]
    assert result.total_bytes == 44 * MB


def test_layer_locality_uses_ryax_layers_and_annotations_without_a_source() -> None:
    # (b) kubelet-published layers map on n1, (c) imageLayer.* annotations on n2:
    # neither needs the layer source, which only knows the pod's image.
    n1 = NodeInfo("n1", (NodeImage(("other:1",), 0, (L1, L2)),))
    n2 = NodeInfo("n2", annotation_layers=(L1,))
    pod_source = StaticLayerSource({"img1:v1": (L1, L2, L3)})
    # spread off: n1: 40/44 -> 90; n2: 30/44 -> 68
    pod = PodImages.of("img1:v1")
    assert scores("layer-locality", pod, [n1, n2], pod_source, spread=False) == {
        "n1": 90,
        "n2": 68,
    }


def test_unresolvable_node_images_are_skipped_and_counted() -> None:
    inventory = build_layer_index([node("a", ("mystery:1", 1)), N2], SCENARIO)
    assert inventory.unresolved_images == 1
    assert "mystery:1" in inventory.warnings[0]
    assert inventory.node_holds_layer(inventory.index_of("n2") or 0, L4.digest)


def test_unresolvable_pod_image_names_the_image() -> None:
    with pytest.raises(LayerResolutionError, match="nope:1"):
        scores("layer-locality", PodImages.of("nope:1"), [N1], SCENARIO)


def test_unknown_strategy_lists_the_choices() -> None:
    with pytest.raises(InputError, match="choose one of"):
        get_strategy("best-fit")
    assert {"image-locality", "layer-locality"} <= set(STRATEGY_NAMES)


def test_candidates_subset_and_unknown_names() -> None:
    inventory = build_layer_index([N1, N2, N3], SCENARIO)
    idx, missing = inventory.indices_of(["n3", "ghost", "n2"])
    assert missing == ["ghost"]
    pod = PodImages.of("img1:v1")
    # spread off: n2 holds 40M of 44M -> 90
    result = without_spread("layer-locality").score(
        pod, resolve_pod_layers(pod, SCENARIO), inventory, idx
    )
    assert result.as_dict(inventory) == {"n3": 0, "n2": 90}


def test_mutation_invalidates_cached_holders() -> None:
    inventory = build_layer_index([N2, N3], SCENARIO)
    n3 = inventory.index_of("n3")
    assert n3 is not None
    assert list(inventory.layer_holders(L1.digest)) == [0]
    inventory.add_layers(n3, [L1])
    assert list(inventory.layer_holders(L1.digest)) == [0, 1]
    inventory.remove_layers(0, [L1.digest])
    assert list(inventory.layer_holders(L1.digest)) == [1]
    inventory.remove_image_name(0, "img2:v1")
    assert inventory.image_state("img2:v1") is None
