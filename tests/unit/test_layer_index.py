"""The one inventory type answers the same whether built in bulk (packed) or node by node.

The simulator and the extender's watch fill a LayerIndex node by node; a request's,
a ``--nodes`` file's and the scale simulation's are built in bulk by LayerIndexBuilder and
stay packed until their first change. This equivalence, for every strategy including
pull-time's bandwidth labels and annotations, before and after a packed inventory is
unpacked by a change, is what lets a simulated result stand for the extender's.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched.core.indexbuilder import LayerIndexBuilder, SlotCache, build_layer_index
from layersched.core.layerindex import COMPACT_SLACK, LayerIndex
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.pod import PodImages
from layersched.core.strategies import (
    LayerLocalityArgs,
    PullTimeArgs,
    StrategyArgs,
    get_strategy,
    resolve_pod_layers,
)
from layersched.core.strategies.pull_time import BANDWIDTH_KEY

MB = 1024 * 1024


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


L1, L2, L3, L4 = (Layer(_digest(f"l{i}"), i * 10 * MB) for i in range(1, 5))
SOURCE = StaticLayerSource({"img1:1": (L1, L2, L3), "img2:1": (L1, L2, L4)})


def _bandwidth_metadata(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """Node labels and annotations exercising every way pull-time reads a bandwidth."""
    bits = f"{10 ** rng.uniform(7, 10):.0f}"
    kind = rng.random()
    if kind < 0.3:  # label only
        return {BANDWIDTH_KEY: bits}, {}
    if kind < 0.5:  # annotation only (an agent that measures)
        return {}, {BANDWIDTH_KEY: bits}
    if kind < 0.6:  # both: the label wins
        return {BANDWIDTH_KEY: bits}, {BANDWIDTH_KEY: "1e6"}
    if kind < 0.7:  # an unreadable label: the annotation is used
        return {BANDWIDTH_KEY: "fast"}, {BANDWIDTH_KEY: bits}
    if kind < 0.75:  # scientific notation
        return {BANDWIDTH_KEY: f"{float(bits):e}"}, {}
    return {}, {}  # nothing: the strategy's default


def _random_cluster(seed: int) -> tuple[list[NodeInfo], StaticLayerSource, list[PodImages]]:
    """Nodes mixing the three layer sources, shared entries, unknown images and odd names."""
    rng = random.Random(seed)
    # a second generator, so that the clusters of the other cases stay what they were
    bandwidth_rng = random.Random(seed + 1000)
    base = [Layer(_digest(f"base{i}"), rng.randint(1, 80) * MB) for i in range(6)]
    catalogue: dict[str, tuple[Layer, ...]] = {}
    for i in range(40):
        private = tuple(
            Layer(_digest(f"s{seed}i{i}p{j}"), rng.randint(0, 50) * MB) for j in range(3)
        )
        catalogue[f"reg:5000/app{i}:v1"] = (*rng.sample(base, rng.randint(0, 3)), *private)
    names = list(catalogue)
    nodes = []
    for n in range(rng.randint(1, 30)):
        images = []
        for name in rng.sample(names, rng.randint(0, 12)):
            size = sum(layer.size_bytes for layer in catalogue[name])
            kind = rng.random()
            if kind < 0.1:  # (b): a patched kubelet's layers map, no resolution needed
                images.append(NodeImage((name,), size, catalogue[name][:2]))
            elif kind < 0.2:  # a digest name first that the source does not know
                images.append(NodeImage((f"{name}@sha256:{'f' * 64}", name), size))
            elif kind < 0.25:  # an image nobody can resolve
                images.append(NodeImage((f"unknown/{name}",), size))
            elif kind < 0.3:  # same name, another size: upstream keeps the first size seen
                images.append(NodeImage((name,), size + 1))
            else:
                images.append(NodeImage((name,), size))
        annotation = tuple(rng.sample(base, 1)) if rng.random() < 0.2 else ()
        labels, annotations = _bandwidth_metadata(bandwidth_rng)
        nodes.append(
            NodeInfo(
                f"n{n}",
                tuple(images),
                annotation_layers=annotation,
                labels=labels,
                annotations=annotations,
            )
        )
    pods = [
        PodImages(
            name=f"p{k}",
            init_containers=tuple(rng.sample(names, rng.randint(0, 1))),
            containers=tuple(rng.choice(names) for _ in range(rng.randint(1, 3))),
        )
        for k in range(5)
    ]
    return nodes, StaticLayerSource(catalogue), pods


def _snapshot(
    nodes: list[NodeInfo], source: StaticLayerSource, cache: SlotCache | None
) -> LayerIndex:
    builder = LayerIndexBuilder(source, cache)
    for node in nodes:
        builder.add_node_info(node)
    return builder.build()


def _node_by_node(nodes: list[NodeInfo], source: StaticLayerSource) -> LayerIndex:
    inventory = LayerIndex()
    for node in nodes:
        inventory.add_node(node, source)
    return inventory


STRATEGY_CASES: list[tuple[str, StrategyArgs | None]] = [
    ("image-locality", None),
    ("layer-locality", None),
    ("layer-locality", LayerLocalityArgs(spread=True)),
    # bandwidths from labels, annotations and the default (100 Mbit/s, 1 s overhead)
    ("pull-time", None),
    # another default for unlabelled nodes, and no overhead (zero estimates score 100)
    ("pull-time", PullTimeArgs(default_bandwidth_bits_per_s=1e9, overhead_s=0.0)),
]


def _assert_same(
    got: LayerIndex,
    want: LayerIndex,
    nodes: list[NodeInfo],
    source: StaticLayerSource,
    pods: list[PodImages],
    *,
    same_layer_sizes: bool = True,
) -> None:
    """Every query the strategies make, and every strategy's scores, match exactly."""
    assert got.node_count == want.node_count
    assert got.unresolved_images == want.unresolved_images
    assert got.warnings == want.warnings
    for digest in want._layer_id:
        assert got.layer_holders(digest).tolist() == want.layer_holders(digest).tolist()
        if same_layer_sizes:  # with a cache, a layer's size is the first the cache saw
            assert got.layer_size(digest) == want.layer_size(digest)
    for name in {n for node in nodes for image in node.images for n in image.names}:
        assert got.image_state(name) == want.image_state(name), name
        assert got.image_holders(name).tolist() == want.image_holders(name).tolist()
    for i in range(want.node_count):
        assert set(got.node_layer_digests(i)) == set(want.node_layer_digests(i))
        assert got.node_image_names(i) == want.node_image_names(i)
    names = [n.name for n in want.nodes] + ["absent"]
    assert got.indices_of(names)[0].tolist() == want.indices_of(names)[0].tolist()
    for i in range(want.node_count):  # what pull-time reads from each node is kept as-is
        assert got.nodes[i].labels == want.nodes[i].labels
        assert got.nodes[i].annotations == want.nodes[i].annotations
    candidates = want.indices_of([n.name for n in want.nodes])[0]
    for strategy, args in STRATEGY_CASES:
        scorer = get_strategy(strategy, args)
        for pod in pods:
            layers = resolve_pod_layers(pod, source) if scorer.needs_layers else ()
            wanted = scorer.score(pod, layers, want, candidates)
            result = scorer.score(pod, layers, got, candidates)
            assert result.scores.tolist() == wanted.scores.tolist(), (strategy, args, pod)
            assert result.present_bytes.tolist() == wanted.present_bytes.tolist()
            assert result.total_bytes == wanted.total_bytes


@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("indexed", [False, True], ids=["lazy", "indexed"])
@pytest.mark.parametrize(
    "cached", ["", "resolved", "offline"], ids=["fresh", "slot-cache", "slot-cache-offline"]
)
def test_packed_answers_as_node_by_node(seed: int, indexed: bool, cached: str) -> None:
    # also when a SlotCache warmed by other builds (other clusters, the same one) is used,
    # including one that keeps unresolved entries (an offline source's): their warnings and
    # count are still those of a fresh build
    nodes, source, pods = _random_cluster(seed)
    reference = _node_by_node(nodes, source)
    cache = SlotCache(max_entries=10_000, keep_unresolved=cached == "offline") if cached else None
    if cache is not None:
        _snapshot(_random_cluster(seed + 100)[0], source, cache)
        _snapshot(nodes[: len(nodes) // 2], source, cache)
    packed = _snapshot(nodes, source, cache)
    assert packed.packed
    if indexed:
        packed.index_layers()
    _assert_same(packed, reference, nodes, source, pods, same_layer_sizes=not cached)


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed{s}")
def test_a_change_unpacks_and_both_keep_answering_alike(seed: int) -> None:
    # the same changes on a packed inventory (which unpacks on the first) and on one built
    # node by node: a node replaced, one removed (the last moves into its index), one
    # added, layers added and evicted, image names added and removed
    nodes, source, pods = _random_cluster(seed)
    extra, _, _ = _random_cluster(seed + 50)
    packed = _snapshot(nodes, source, None)
    reference = _node_by_node(nodes, source)
    _assert_same(packed, reference, nodes, source, pods)
    resolved = [
        NodeInfo(
            f"x{i}",
            tuple(
                NodeImage(image.names, image.size_bytes, source.resolve(image.names[-1]))
                for image in node.images
                if image.names[-1] in source.images()
            ),
        )
        for i, node in enumerate(extra[:3])
    ]
    for inventory in (packed, reference):
        inventory.upsert_node(NodeInfo(nodes[0].name, resolved[0].images, labels={"a": "b"}))
        if len(nodes) > 1:
            inventory.remove_node(nodes[len(nodes) // 2].name)
        for node in resolved[1:]:
            inventory.upsert_node(node)
        inventory.add_layers(0, [L4])
        inventory.remove_layers(inventory.node_count - 1, [L1.digest])
        inventory.add_image_name(0, "added:1", MB)
        inventory.remove_image_name(0, "added:1")
    assert not packed.packed
    every = [*nodes, *resolved]
    _assert_same(packed, reference, every, source, pods)


@pytest.mark.parametrize(
    ("nodes", "expected_slots", "expected_holders"),
    [
        (
            # the same entry on three nodes is interned once: 1 slot, L1 on all three nodes
            [NodeInfo(f"n{i}", (NodeImage(("img1:1",), 60 * MB),)) for i in range(3)],
            1,
            {L1.digest: [0, 1, 2], L3.digest: [0, 1, 2], L4.digest: []},
        ),
        (
            # two images sharing L1+L2: L1 held by both nodes, L3 by n0 only, L4 by n1 only
            [
                NodeInfo("n0", (NodeImage(("img1:1",), 60 * MB),)),
                NodeInfo("n1", (NodeImage(("img2:1",), 70 * MB),)),
            ],
            2,
            {L1.digest: [0, 1], L3.digest: [0], L4.digest: [1]},
        ),
        (
            # annotations (c) are one more nameless entry: n1 holds L4 through them only
            [
                NodeInfo("n0", (NodeImage(("img1:1",), 60 * MB),)),
                NodeInfo("n1", (), annotation_layers=(L4,)),
            ],
            2,
            {L1.digest: [0], L4.digest: [1]},
        ),
        (
            # a published layers map (b) wins over the source: n0 claims only L3
            [NodeInfo("n0", (NodeImage(("img1:1",), 60 * MB, (L3,)),))],
            1,
            {L1.digest: [], L3.digest: [0]},
        ),
    ],
    ids=["shared-entry", "shared-base", "annotations", "layers-map"],
)
def test_interning_and_holders(
    nodes: list[NodeInfo], expected_slots: int, expected_holders: dict[str, list[int]]
) -> None:
    snapshot = build_layer_index(nodes, SOURCE)
    assert snapshot.packed
    assert snapshot.slot_count == expected_slots
    for digest, holders in expected_holders.items():
        assert snapshot.layer_holders(digest).tolist() == holders


def test_unresolvable_images_are_counted_not_fatal() -> None:
    # 'nope:1' is in no layer source: counted once, listed, and the node still scores 0
    snapshot = build_layer_index(
        [
            NodeInfo("n0", (NodeImage(("nope:1",), MB),)),
            NodeInfo("n1", (NodeImage(("nope:1",), MB),)),
        ],
        SOURCE,
    )
    assert snapshot.unresolved_images == 1
    assert "nope:1" in snapshot.warnings[0]
    assert snapshot.image_state("nope:1") == (MB, 2)


def test_slot_cache_remembers_resolved_entries_only() -> None:
    # img1:1 resolves and is kept; nope:1 does not and is retried by the next snapshot
    cache = SlotCache(max_entries=10)
    nodes = [NodeInfo("n0", (NodeImage(("img1:1",), MB), NodeImage(("nope:1",), MB)))]
    first = _snapshot(nodes, SOURCE, cache)
    assert (len(cache), first.unresolved_images) == (1, 1)
    later = StaticLayerSource({"img1:1": (L1, L2, L3), "nope:1": (L4,)})
    second = _snapshot(nodes, later, cache)
    assert (len(cache), second.unresolved_images) == (2, 0)
    assert second.layer_holders(L4.digest).tolist() == [0]
    # a layer the cache learnt after `first` was built is not in `first`
    assert first.layer_holders(L4.digest).tolist() == []


def test_offline_slot_cache_keeps_unresolved_entries_and_still_reports_them() -> None:
    # keep_unresolved (an offline source's answer cannot change): 'nope:1' is asked once,
    # yet every snapshot counts it and lists its warning, as a fresh build would
    calls: list[str] = []

    class Counting:
        def resolve(self, image: str) -> tuple[Layer, ...]:
            calls.append(image)
            return SOURCE.resolve(image)

    cache = SlotCache(max_entries=10, keep_unresolved=True)
    nodes = [
        NodeInfo("n0", (NodeImage(("img1:1",), MB), NodeImage(("nope:1",), MB))),
        NodeInfo("n1", (NodeImage(("nope:1",), MB),)),
    ]
    source = Counting()
    snapshots = [_snapshot(nodes, source, cache) for _ in range(3)]  # type: ignore[arg-type]
    assert calls == ["img1:1", "nope:1"]
    assert len(cache) == 2
    for snapshot in snapshots:
        assert snapshot.unresolved_images == 1
        assert len(snapshot.warnings) == 1 and "'nope:1'" in snapshot.warnings[0]
        assert snapshot.layer_holders(L1.digest).tolist() == [0]


class _NamesSource:
    """A NodeImageSource: resolves from all names at once; counts lookups of the method."""

    def __init__(self) -> None:
        self.lookups = 0
        self.asked: list[tuple[str, ...]] = []

    def resolve(self, image: str) -> tuple[Layer, ...]:
        raise AssertionError("a NodeImageSource is asked through resolve_names only")

    def _resolve_names(self, names: tuple[str, ...]) -> tuple[Layer, ...]:
        self.asked.append(tuple(names))
        return (L4,)

    @property
    def resolve_names(self) -> object:
        self.lookups += 1
        return self._resolve_names


def test_a_node_image_source_is_looked_up_once_per_builder() -> None:
    # three distinct images, each given with all its names in one call; whether the
    # source has resolve_names is found out once (per image it costs microseconds)
    source = _NamesSource()
    builder = LayerIndexBuilder(source)
    builder.add_node(
        "n0", (NodeImage(("a@sha256:" + "a" * 64, "a:1"), MB), NodeImage(("b:1",), MB))
    )
    builder.add_node("n1", (NodeImage(("c:1",), MB),))
    snapshot = builder.build()
    assert source.lookups == 1
    assert source.asked == [("a@sha256:" + "a" * 64, "a:1"), ("b:1",), ("c:1",)]
    assert snapshot.layer_holders(L4.digest).tolist() == [0, 1]


def _strict_describe(key: object) -> NodeImage:
    image: NodeImage = key  # type: ignore[assignment]
    if image.size_bytes < 0:
        raise InputError(f"image {image.names[0]!r}: negative size")
    return image


@pytest.mark.parametrize("cached", [False, True], ids=["fresh", "slot-cache"])
def test_skip_invalid_holds_refused_images_by_nobody_and_names_their_nodes(cached: bool) -> None:
    # 'bad:1' (size -1) is refused by describe. Interned once, it is on n0 and (twice) on n2:
    # each node names it once; it adds no name and no layer; n1 is clean. It is never
    # cached, so a second snapshot names its nodes again.
    bad = NodeImage(("bad:1",), -1, (L4,))
    nodes = [
        ("n0", (NodeImage(("img1:1",), MB), bad)),
        ("n1", (NodeImage(("img2:1",), MB),)),
        ("n2", (bad, bad)),
    ]
    cache = SlotCache(max_entries=10) if cached else None
    for _ in range(2):
        builder = LayerIndexBuilder(SOURCE, cache, skip_invalid=True)
        found = []
        for name, images in nodes:
            idx = builder.add_node(name, images, describe=_strict_describe)
            found.append(builder.invalid_images(idx))
        snapshot = builder.build()
        assert found == [["image 'bad:1': negative size"], [], ["image 'bad:1': negative size"]]
        assert snapshot.image_state("bad:1") is None
        assert snapshot.layer_holders(L4.digest).tolist() == [1]
    if cache is not None:
        assert len(cache) == 2  # img1:1 and img2:1


def test_without_skip_invalid_a_refused_image_is_an_error() -> None:
    builder = LayerIndexBuilder(SOURCE)
    with pytest.raises(InputError, match="negative size"):
        builder.add_node("n0", (NodeImage(("bad:1",), -1),), describe=_strict_describe)


def test_slot_cache_resets_when_full() -> None:
    # 2 resolved entries kept (the unresolved 'nope:1' is not); then the limit drops to 1:
    # the next builder finds the cache over its limit and starts from an empty one
    cache = SlotCache(max_entries=2)
    entries = tuple(NodeImage((name,), MB) for name in ("img1:1", "img2:1", "nope:1"))
    _snapshot([NodeInfo("n0", entries)], SOURCE, cache)
    assert len(cache) == 2
    cache.max_entries = 1
    LayerIndexBuilder(SOURCE, cache)
    assert len(cache) == 0


def test_duplicate_node_names_are_rejected() -> None:
    builder = LayerIndexBuilder(SOURCE)
    builder.add_node("n0")
    with pytest.raises(InputError, match="appears twice"):
        builder.add_node("n0")


def test_empty_snapshot() -> None:
    # no nodes: every query answers "nobody"
    snapshot = build_layer_index([], SOURCE)
    snapshot.index_layers()
    assert snapshot.node_count == 0
    assert snapshot.layer_holders(L1.digest).tolist() == []
    assert np.array_equal(snapshot.image_holders("img1:1"), np.empty(0, dtype=np.int64))


def test_a_live_inventory_reuses_the_ids_of_layers_no_node_holds() -> None:
    # a node republishing fresh digests 200 times, 50 layers each (issue 23: a node
    # republishing fresh digests raised the extender's memory without bound): the
    # per-layer tables hold the 50 current layers (plus the ids freed by the last round,
    # reused by the next), never one entry per digest ever seen (10,000 before)
    inventory = LayerIndex()
    inventory.add_node(NodeInfo("other", (NodeImage(("base:1",), MB, (L1,)),)))
    for round_ in range(200):
        layers = tuple(Layer(f"sha256:{round_ * 50 + i + 1000:064x}", MB) for i in range(50))
        inventory.upsert_node(NodeInfo("n1", (NodeImage(("app:1",), 50 * MB, layers),)))
        # every query still answers for the layers held now
        assert inventory.layer_holders(layers[0].digest).tolist() == [1]
        assert inventory.layer_size(layers[-1].digest) == MB
    assert len(inventory._layer_size) <= 1 + 50 + 50  # "other"'s, n1's, and freed ids
    assert inventory.layer_count == 1 + 50
    assert inventory.layer_holders(f"sha256:{1000:064x}").tolist() == []  # round 0's
    assert inventory.layer_size(f"sha256:{1000:064x}") is None
    # the node goes: only "other"'s layer is left, and its answers are intact
    inventory.remove_node("n1")
    assert inventory.layer_count == 1
    assert inventory.layer_holders(L1.digest).tolist() == [0]
    assert set(inventory.node_layer_digests(0)) == {L1.digest}


def test_a_live_inventory_compacts_its_tables_after_heavy_churn() -> None:
    # 30 nodes with layers of their own and one shared base; one node republishes 600
    # times 20 fresh layers, another drops and regains names: more than COMPACT_SLACK
    # ids and names are freed, the tables are renumbered, and every query still answers
    # exactly as an inventory built from the final nodes does
    rng = random.Random(23)

    def layer(n: int) -> Layer:
        return Layer(f"sha256:{n:064x}", 1_000 + n)

    base = layer(1)
    nodes = {
        f"n{i}": NodeInfo(
            f"n{i}",
            (
                NodeImage(
                    (f"app{i}:1", "base:1"),
                    MB,
                    (base, *(layer(100 + 10 * i + j) for j in range(5))),
                ),
            ),
        )
        for i in range(30)
    }
    live = LayerIndex()
    for node_info in nodes.values():
        live.add_node(node_info)
    for round_ in range(600):
        fresh = tuple(layer(10_000 + 20 * round_ + j) for j in range(20))
        names = (f"churn-{round_}:1",)
        nodes["n3"] = NodeInfo("n3", (NodeImage(names, MB, (base, *fresh)),))
        live.upsert_node(nodes["n3"])
        if round_ % 50 == 0:  # a node leaves and comes back (indices move)
            gone = f"n{rng.randrange(30)}"
            live.remove_node(gone)
            live.add_node(nodes[gone])
    assert len(live._layer_size) < 31 * 6 + 20 + COMPACT_SLACK + 1
    assert len(live._free_lids) <= len(live._layer_id) + COMPACT_SLACK
    reference = LayerIndex()
    for node_info in nodes.values():
        reference.add_node(node_info)
    for node_info in nodes.values():
        idx, ref = live.index_of(node_info.name), reference.index_of(node_info.name)
        assert idx is not None and ref is not None
        assert set(live.node_layer_digests(idx)) == set(reference.node_layer_digests(ref))
        assert live.node_image_names(idx) == reference.node_image_names(ref)
        for image in node_info.images:
            for held in image.layers or ():
                names = {live.nodes[int(i)].name for i in live.layer_holders(held.digest)}
                want = {reference.nodes[int(i)].name for i in reference.layer_holders(held.digest)}
                assert names == want
                assert live.layer_size(held.digest) == held.size_bytes
    assert live.layer_count == reference.layer_count
    assert live.image_state("base:1") == reference.image_state("base:1")
    assert live.image_state("churn-0:1") is None


def test_compaction_after_a_flood_moves_only_the_flood_survivors_ids() -> None:
    # 40 nodes hold 3 layers each of a cluster's 60 (ids 0..59, given first); 10 nodes
    # then take 1,000 fresh layers each (ids 60..10,059) and drop them again. The
    # tables are cut back to the 60 held layers, and a node that never held a fresh
    # layer keeps its very id array: a compaction reallocates nothing of what the
    # cluster held before the flood (small live arrays made amid the flood's freed
    # memory would keep its pages resident)
    def layer(n: int) -> Layer:
        return Layer(f"sha256:{n:064x}", 1_000 + n)

    def node(i: int, fresh: int | None = None) -> NodeInfo:
        own = tuple(layer(3 * (i % 20) + j) for j in range(3))
        extra = (
            () if fresh is None else tuple(layer(100_000 + 1_000 * fresh + j) for j in range(1_000))
        )
        return NodeInfo(f"n{i}", (NodeImage((f"app{i}:1",), MB, (*own, *extra)),))

    live = LayerIndex()
    for i in range(40):
        live.add_node(node(i))
    calm = {i: live._node_layers[i] for i in range(10, 40)}  # never flooded
    for i in range(10):
        live.upsert_node(node(i, fresh=i))
    assert live.layer_count == 60 + 10_000
    assert live.compactions == 0
    for i in range(10):
        live.upsert_node(node(i))
    # the compaction came once 8,000 ids were free (over 2,060 held + the slack):
    # the tables follow what is held (within the slack), not the flood's peak
    assert live.compactions == 1
    assert live.layer_count == 60
    assert len(live._layer_size) == len(live._layer_digest) == len(live._layer_holders)
    assert len(live._layer_size) == 60 + 2 * 1_000  # 2,060 then, 2,000 freed since
    assert len(live._free_lids) == 2_000 <= live.layer_count + COMPACT_SLACK
    assert all(live._node_layers[i] is ids for i, ids in calm.items())
    # and every answer is the one of an inventory built from the final nodes
    reference = LayerIndex()
    for i in range(40):
        reference.add_node(node(i))
    for i in range(40):
        assert set(live.node_layer_digests(i)) == set(reference.node_layer_digests(i))
        assert list(live._node_layers[i]) == sorted(live._node_layers[i])
    for n in range(60):
        assert live.layer_holders(layer(n).digest).tolist() == (
            reference.layer_holders(layer(n).digest).tolist()
        )
        assert live.layer_size(layer(n).digest) == 1_000 + n
    assert live.layer_holders(layer(100_000).digest).tolist() == []


def test_compaction_moves_a_surviving_fresh_layer_into_a_freed_id() -> None:
    # n0 holds base layers 0..4999 (ids 0..4999), n1 one fresh layer (id 5000); n0 then
    # drops all but one base layer: the compaction moves n1's layer to a freed id below
    # the held count, rewrites n1's array (and only it), and both answer as before
    def layer(n: int) -> Layer:
        return Layer(f"sha256:{n:064x}", 1_000 + n)

    live = LayerIndex()
    live.add_node(
        NodeInfo("n0", (NodeImage(("base:1",), MB, tuple(layer(n) for n in range(5_000))),))
    )
    live.add_node(NodeInfo("n1", (NodeImage(("fresh:1",), MB, (layer(9_999),)),)))
    live.upsert_node(NodeInfo("n0", (NodeImage(("base:1",), MB, (layer(4_321),)),)))
    assert live.compactions == 1
    assert len(live._layer_size) == live.layer_count == 2
    assert sorted(live._node_layers[0]) + sorted(live._node_layers[1]) != []
    assert {int(lid) for ids in live._node_layers for lid in ids} == {0, 1}
    assert set(live.node_layer_digests(0)) == {layer(4_321).digest}
    assert set(live.node_layer_digests(1)) == {layer(9_999).digest}
    assert live.layer_holders(layer(9_999).digest).tolist() == [1]
    assert live.layer_size(layer(9_999).digest) == 1_000 + 9_999
    assert live.node_holds_layer(1, layer(9_999).digest)
    assert not live.node_holds_layer(0, layer(9_999).digest)
