"""The simulator's kube-scheduler (``layersched_harness.sim.kube``: the default profile's scores,
extender scaling, the heap's tie-break) and the kubelet's pull queue in the engine,
worked by hand from the v1.37.2 sources they port."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from layersched.core.errors import InputError
from layersched.core.layers import Layer
from layersched.core.reference import ImageName
from layersched.core.strategies.base import InFlightAware
from layersched_harness.sim import kube
from layersched_harness.sim.corpus import Corpus, CorpusImage, CorpusParams
from layersched_harness.sim.engine import ClusterParams, RunResult, simulate
from layersched_harness.sim.settings import build_strategy
from layersched_harness.sim.trace import BurstParams, burst_image, generate_trace, simulate_burst
from layersched_harness.sim.workload import Workload, WorkloadParams

MB = 1_000_000


@pytest.mark.parametrize(
    ("requested", "allocatable", "score"),
    [
        # (4000 - 1000) * 100 // 4000 = 75 for each resource; mean 75
        ([1000, 1000], [4000, 4000], 75),
        # cpu 50, memory 25: (50 + 25) // 2 = 37
        ([2000, 3000], [4000, 4000], 37),
        # over the allocatable: 0 for that resource, (0 + 100 * 3000 // 4000) // 2 = 37
        ([5000, 1000], [4000, 4000], 37),
        # the testbed's: 500m of 2 cpus and a quarter of 24,581,684 KiB, two pods bound
        # beside it: (2000 - 1500) * 100 // 2000 = 25 for both
        ([1500, 3 * 6292911104], [2000, 4 * 6292911104], 25),
    ],
    ids=["a-quarter", "unequal", "over", "testbed-third-pod"],
)
def test_least_allocated(requested: list[int], allocatable: list[int], score: int) -> None:
    assert kube.least_allocated(requested, allocatable) == score


@pytest.mark.parametrize(
    ("requested", "allocated", "score"),
    [
        # a pod asking cpu and memory in the node's proportion changes no balance: 75
        ([2000, 2000], [1000, 1000], 75),
        # with: fractions .75 and .25, std .25 -> 75; without: .25 .25 -> 100;
        # 50 + (50 + 75 - 100) // 2 = 62
        ([3000, 1000], [1000, 1000], 62),
        # the pod restores the balance: without .5 and 0 (75), with .5 .5 (100): 50 + 75 // 2
        ([2000, 2000], [2000, 0], 87),
    ],
    ids=["proportional", "worse", "better"],
)
def test_balanced_allocation(requested: list[int], allocated: list[int], score: int) -> None:
    assert kube.balanced_allocation(requested, allocated, [4000, 4000]) == score


@pytest.mark.parametrize(
    ("matching", "scores"),
    [
        # nothing of the owner anywhere: raw 2 everywhere, 100 * (2 + 2 - 2) // 2 = 100
        ([0, 0, 0, 0], [100, 100, 100, 100]),
        # 6 candidates, ln 8 = 2.079: raw round(5 * 2.079 + 2) = 12 and 2;
        # 100 * (12 + 2 - 12) // 12 = 16, 100 * 12 // 12 = 100
        ([5, 0, 0, 0, 0, 0], [16, 100, 100, 100, 100, 100]),
        # 2 candidates, ln 4 = 1.386: raw round(2.386 + 2) = 3 (1 pod), 2; 100*2//3, 100*3//3
        ([1, 0], [66, 100]),
    ],
    ids=["none", "one-heavy-node", "two-nodes"],
)
def test_topology_spread(matching: list[int], scores: list[int]) -> None:
    assert kube.topology_spread(matching) == scores


@pytest.mark.parametrize(
    ("score", "weight", "points"),
    [(0, 1, 0), (9, 1, 0), (10, 1, 10), (87, 1, 80), (100, 1, 100), (87, 2, 160)],
)
def test_extender_points(score: int, weight: int, points: int) -> None:
    # layersched answers score // 10 (0..10); kube-scheduler multiplies by weight and 10
    assert kube.extender_points(score, weight) == points


@pytest.mark.parametrize(
    ("totals", "randomizers", "top"),
    [
        # all tied, no randomizer: Init moves nothing, the first node is the root
        ([5, 5, 5, 5, 5, 5], [0] * 6, 0),
        # the best is the best wherever it is
        ([1, 2, 9, 3], [0] * 4, 2),
        # two tied best: Init sifts node 3 (child of 1) up past node 1's 3, then compares
        # the root's children 3 and 2 (7 vs 7: left kept) and moves node 3 to the root
        ([5, 3, 7, 7], [0] * 4, 3),
        # tied best among a heap where the earlier one is already higher: the first
        ([5, 7, 7], [0] * 3, 1),
        # randomizers (an extender scored every node) decide between equal totals
        ([5, 5, 5], [1, 9, 4], 1),
    ],
    ids=["all-tied", "unique-best", "heap-order-not-first", "first-of-two", "randomizer"],
)
def test_heap_top(totals: list[int], randomizers: list[int], top: int) -> None:
    assert kube.heap_top(totals, randomizers) == top


# ------------------------------------------------------------------------ the engine


def _profile(name: str, **fields: Any) -> kube.Profile:
    """A profile taking the nodes from n1 on (the node order's start not drawn)."""
    return kube.Profile(name, **({"rotate_node_order": False} | fields))


BASE = Layer("sha256:" + "b" * 64, 8 * MB)
A_TOP = Layer("sha256:" + "a" * 64, 1 * MB)
B_TOP = Layer("sha256:" + "c" * 64, 1 * MB)
A_TOP_9 = Layer("sha256:" + "d" * 64, 9 * MB)
B_TOP_9 = Layer("sha256:" + "e" * 64, 9 * MB)


def _corpus(*images: tuple[Layer, ...]) -> Corpus:
    items = tuple(CorpusImage(ImageName(f"img{i}:1"), layers) for i, layers in enumerate(images))
    popularity = np.full(len(items), 1.0 / len(items))
    return Corpus(items, popularity, CorpusParams(), seed=0)


def _workload(
    arrivals: list[float], images: list[int], lifetime_s: float = 100.0, owner: bool = False
) -> Workload:
    return Workload(
        np.asarray(arrivals, dtype=np.float64),
        np.asarray(images, dtype=np.int64),
        np.full(len(arrivals), lifetime_s),
        WorkloadParams(),
        owner=np.zeros(len(arrivals), dtype=np.int64) if owner else None,
    )


def _cluster(nodes: int, rate: float, slots: int = 4, parallel: int = 1) -> ClusterParams:
    return ClusterParams(
        nodes=nodes,
        containers_per_node=slots,
        node_bandwidth_bits_per_s=(rate,) * nodes,
        start_overhead_s=0.0,
        max_parallel_pulls=parallel,
    )


@pytest.mark.parametrize(
    ("parallel", "startup", "queued"),
    [
        # one node at 8 Mbit/s, three pods at t=0: a (9 MB), b (9 MB, sharing a's 8 MB
        # base), a again. Serial: a pulls 0..9 s; b fetches its 1 MB top 9..10; the second
        # a waited behind both and finds its image present at 10
        (1, [9.0, 10.0, 10.0], [0.0, 9.0, 10.0]),
        # three at once: a's job (9 MB) and b's (its top, 1 MB: the base is arriving) share
        # the link: b's top lands at 2 s, a's at 10 s; b waits for the base too (10 s), the
        # second a for a's layers in flight (10 s): nobody queued
        (3, [10.0, 10.0, 10.0], [0.0, 0.0, 0.0]),
        # two at once: the second a queues until a's pull ends at 10 s and finds it present
        (2, [10.0, 10.0, 10.0], [0.0, 0.0, 10.0]),
    ],
    ids=["serial", "three-at-once", "two-at-once"],
)
def test_the_kubelets_pull_queue(parallel: int, startup: list[float], queued: list[float]) -> None:
    corpus = _corpus((BASE, A_TOP), (BASE, B_TOP))
    result = simulate(
        corpus,
        _workload([0.0, 0.0, 0.0], [0, 1, 0]),
        _cluster(1, 8e6, parallel=parallel),
        build_strategy("random"),
    )
    assert list(result.pod_startup_s) == pytest.approx(startup)
    assert list(result.pod_queue_s) == pytest.approx(queued)
    # the base crossed the link once, each top once
    assert result.bytes_pulled == 10 * MB


@pytest.mark.parametrize(("release_s", "second_startup"), [(0.0, 18.0), (2.5, 20.5)])
def test_a_slot_is_free_again_only_after_the_release_delay(
    release_s: float, second_startup: float
) -> None:
    # one node, one slot: a pulls 9 MB at 8 Mbit/s (0..9 s) and runs 10 s, to 19 s; b
    # (same image, 1 s) waits for the slot: bound at 19 s, or 2.5 s later when the
    # kubelet and kube-scheduler take that long to free it, and starts at once (present)
    cluster = replace(_cluster(1, 8e6, slots=1), slot_release_delay_s=release_s)
    result = simulate(
        _corpus((BASE, A_TOP)),
        _workload([0.0, 1.0], [0, 0], lifetime_s=10.0),
        cluster,
        build_strategy("random"),
    )
    assert list(result.pod_startup_s) == pytest.approx([9.0, second_startup])
    # the second pod pulled nothing: the delay is the slot's, not a pull's
    assert result.pod_bytes.tolist() == [9 * MB, 0]


def test_each_pods_release_is_drawn_from_the_measured_ones() -> None:
    # as above, b waits for a's slot: released 0 s or 10 s after a's end, a draw per pod
    cluster = replace(_cluster(1, 8e6, slots=1), slot_release_delays_s=(0.0, 10.0))
    corpus, workload = _corpus((BASE, A_TOP)), _workload([0.0, 1.0], [0, 0], lifetime_s=10.0)
    seen = set()
    for seed in range(12):
        once = simulate(corpus, workload, cluster, build_strategy("random"), seed=seed)
        again = simulate(corpus, workload, cluster, build_strategy("random"), seed=seed)
        assert once.pod_startup_s.tolist() == again.pod_startup_s.tolist()  # seeded
        seen.add(float(once.pod_startup_s[1]))
    assert seen == {18.0, 28.0}


def test_the_release_draws_leave_the_tie_breaks_alone() -> None:
    # an extender's random ties draw from the seed's own stream: drawing a release when
    # the first pod starts (no pod waits for a slot here) leaves the second pod's tie (an
    # image sharing no layer with the first's, between the two empty nodes) as it was
    profile = _profile("ext", strategy="layer-locality", via="extender")
    corpus, workload = _corpus((BASE, A_TOP), (B_TOP,)), _workload([0.0, 5.0], [0, 1])
    for seed in range(6):
        plain = simulate(corpus, workload, _cluster(3, 80e6), None, seed=seed, profile=profile)
        drawn = replace(_cluster(3, 80e6), slot_release_delays_s=(1.0, 3.0))
        placed = simulate(corpus, workload, drawn, None, seed=seed, profile=profile)
        assert placed.pod_node.tolist() == plain.pod_node.tolist()


def test_a_negative_release_delay_is_refused() -> None:
    for cluster in (
        replace(_cluster(1, 8e6), slot_release_delay_s=-1.0),
        replace(_cluster(1, 8e6), slot_release_delays_s=(1.0, -1.0)),
    ):
        with pytest.raises(InputError, match="slot_release_delay"):
            simulate(_corpus((BASE,)), _workload([0.0], [0]), cluster, build_strategy("random"))


def test_in_flight_scoring_reads_the_bind_time_in_whole_seconds() -> None:
    # the extender and the Go plugin read PodScheduled's lastTransitionTime (seconds): a
    # pod bound at 2.7 s is pending since 2 s in what the strategy is told
    seen: list[float] = []
    strategy = build_strategy("in-flight")
    assert isinstance(strategy, InFlightAware)
    score = strategy.score

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.extend(
            p.bound_at_s for node in strategy.pending.nodes for p in strategy.pending.pulls(node)
        )
        return score(*args, **kwargs)

    strategy.score = recording  # type: ignore[method-assign]
    simulate(_corpus((BASE, A_TOP)), _workload([2.7, 3.1], [0, 0]), _cluster(2, 8e6), strategy)
    assert seen == [2.0]


def test_given_placements_are_followed_while_their_node_has_room() -> None:
    # three nodes of one slot: the real run put pods on n3, n3, n1; the second finds n3
    # full and goes where the default profile sends it (the emptiest, n1 first), which
    # leaves the third's n1 full too: it goes to n2
    cluster = _cluster(3, 80e6, slots=1)
    corpus, workload = _corpus((BASE, A_TOP)), _workload([0.0, 0.1, 0.2], [0, 0, 0])
    result = simulate(
        corpus, workload, cluster, None, profile=_profile("default"), follow=[2, 2, 0]
    )
    assert result.pod_node.tolist() == [2, 0, 1]
    assert result.unfollowed == 2
    with pytest.raises(InputError, match="one node index"):
        simulate(corpus, workload, cluster, None, profile=_profile("default"), follow=[0, 3, 0])


def _placed(
    profile: kube.Profile, arrivals: list[float], images: list[int], seed: int = 0
) -> RunResult:
    """Placed by ``profile`` from n1 on (the node order's start fixed, unless it says)."""
    corpus = _corpus((BASE, A_TOP), (BASE, B_TOP))
    strategy = build_strategy(profile.strategy) if profile.strategy else None
    return simulate(
        corpus,
        _workload(arrivals, images),
        _cluster(3, 80e6),
        strategy,
        seed=seed,
        profile=profile,
    )


def test_the_default_profile_spreads_in_node_order_and_imagelocality_alone_fills() -> None:
    # every image scores 0 with ImageLocality (9 MB is under its 23 MiB floor): the default
    # profile's LeastAllocated sends each pod to the emptiest node, ties to n1 first;
    # ImageLocality alone ties everywhere and fills n1 (4 slots) first
    arrivals, images = [0.0, 0.1, 0.2, 0.3, 0.4], [0, 0, 0, 0, 0]
    default = _placed(_profile("default"), arrivals, images)
    assert default.pod_node.tolist() == [0, 1, 2, 0, 1]
    alone = _profile("il", resource_plugins=False, topology_spread_weight=0)
    assert _placed(alone, arrivals, images).pod_node.tolist() == [0, 0, 0, 0, 1]


def test_only_extender_scored_nodes_tie_at_random() -> None:
    # layer-locality scores 0 everywhere for the first pod: through the extender its
    # node is a draw (seeds differ), through the plugin always n1
    extender = _profile("ext", strategy="layer-locality", via="extender")
    plugin = _profile("plugin", strategy="layer-locality")
    firsts = {int(_placed(extender, [0.0], [0], seed).pod_node[0]) for seed in range(12)}
    assert firsts == {0, 1, 2}
    assert {int(_placed(plugin, [0.0], [0], seed).pod_node[0]) for seed in range(12)} == {0}


@pytest.mark.parametrize(
    ("knowledge", "second_node"),
    [
        # the extender resolves b from the registry: n1 holds its 8 MB base, 8/9 of it:
        # 88 // 10 * 10 = 80 points beat LeastAllocated's 25 for the emptier n2
        ("registry", 0),
        # the plugin knows b's layers only once a node publishes b: none does, no layer
        # score, LeastAllocated sends it to n2
        ("published", 1),
        # background resolution answers for the next pod of an image, not its first
        ("resolved", 1),
    ],
)
def test_what_the_layer_score_knows_of_a_pods_image(knowledge: str, second_node: int) -> None:
    via = "extender" if knowledge == "registry" else "plugin"
    profile = _profile("p", strategy="layer-locality", via=via, knowledge=knowledge)  # type: ignore[arg-type]
    # a lands on n1 and is pulled by 1 s (9 MB at 80 Mbit/s); b arrives at 2 s
    result = _placed(profile, [0.0, 2.0], [0, 1])
    assert result.pod_node.tolist() == [0, second_node]


def test_background_resolution_scores_the_next_pod_of_an_image() -> None:
    # b's first pod (2 s) goes to n2 unscored and pulls there until 3 s; b's second pod
    # (2.5 s) finds b resolved: n1 holds 8 of its 9 MB (88) and n2 nothing yet (its pull
    # is in flight): 88 + 50 (n1: one pod) against 0 + 50 (n2: one pod) and 75 (n3, empty)
    resolved = _profile("p", strategy="layer-locality", knowledge="resolved")
    published = _profile("p", strategy="layer-locality", knowledge="published")
    arrivals, images = [0.0, 2.0, 2.5], [0, 1, 1]
    assert _placed(resolved, arrivals, images).pod_node.tolist() == [0, 1, 0]
    assert _placed(published, arrivals, images).pod_node.tolist() == [0, 1, 2]


def test_topology_spread_weighs_a_deployments_replicas() -> None:
    # six replicas of one owner on three nodes, 20 slots each: LeastAllocated differs by 5
    # a pod, PodTopologySpread (weight 2) by up to 200: two a node either way, in node order
    corpus = _corpus((BASE, A_TOP))
    cluster = _cluster(3, 80e6, slots=20)
    result = simulate(
        corpus,
        _workload([0.0] * 6, [0] * 6, owner=True),
        cluster,
        None,
        profile=_profile("default"),
    )
    assert result.pod_node.tolist() == [0, 1, 2, 0, 1, 2]


def test_the_burst_is_the_traces_largest_image_on_its_nodes() -> None:
    trace = generate_trace(36)
    name = burst_image(trace)
    assert trace.image_size_bytes(name) == max(trace.image_size_bytes(i.name) for i in trace.images)
    params = BurstParams(replicas=6, slots_per_node=20)
    default, alone = simulate_burst(
        trace,
        params,
        [
            _profile("default"),
            _profile("il", resource_plugins=False, topology_spread_weight=0),
        ],
        seeds=[0],
    )
    # the default profile spreads the replicas one a node (PodTopologySpread), so the
    # slowest link decides when all are Ready; ImageLocality alone keeps them on n1
    assert sorted(default.node) == [0, 1, 2, 3, 4, 5]
    assert set(alone.node) == {0}
    size_bits = trace.image_size_bytes(name) * 8
    slowest = min(trace.cluster.link_rates_bits_per_s)
    assert max(default.startup_s) == pytest.approx(
        size_bits / slowest + trace.cluster.start_overhead_s, rel=1e-3
    )


def test_plugin_ties_start_from_the_node_the_seed_names() -> None:
    # ImageLocality alone ties everywhere: every pod goes to the first node of the order,
    # which starts at the seed modulo the nodes (kube-scheduler's start index): one node a
    # run, each node for as many seeds as any other
    alone = kube.Profile("il", resource_plugins=False, topology_spread_weight=0)
    for seed in range(12):
        nodes = set(_placed(alone, [0.0, 0.1, 0.2], [0, 0, 0], seed).pod_node.tolist())
        assert nodes == {seed % 3}


def test_pulls_at_once_share_the_whole_link_a_lone_pull_does_not_fill() -> None:
    # a lone pull moves 80% of the link (its own round trips and unpacking): the node's
    # rate is 6.4 Mbit/s of an 8 Mbit/s link. a (9 MB) alone: 9 MB at 6.4 Mbit/s, 11.25 s.
    # a and b (9 MB of their own, no shared layer) at once share the whole 8 Mbit/s, each
    # 4 Mbit/s (under the lone rate): both end at 18 s, not at 22.5 s as two lone rates
    # halved would give
    corpus = _corpus((A_TOP_9,), (B_TOP_9,))
    cluster = replace(_cluster(1, 6.4e6, parallel=3), lone_pull_efficiency=0.8)
    alone = simulate(corpus, _workload([0.0], [0]), cluster, build_strategy("random"))
    assert list(alone.pod_startup_s) == pytest.approx([11.25])
    both = simulate(corpus, _workload([0.0, 0.0], [0, 1]), cluster, build_strategy("random"))
    assert list(both.pod_startup_s) == pytest.approx([18.0, 18.0])
    # serial pulls are never concurrent: the second waits, then pulls at the lone rate
    serial = simulate(
        corpus,
        _workload([0.0, 0.0], [0, 1]),
        replace(cluster, max_parallel_pulls=1),
        build_strategy("random"),
    )
    assert list(serial.pod_startup_s) == pytest.approx([11.25, 22.5])


def test_a_lone_pull_efficiency_outside_zero_to_one_is_refused() -> None:
    cluster = replace(_cluster(1, 8e6), lone_pull_efficiency=1.5)
    with pytest.raises(InputError, match="lone_pull_efficiency"):
        simulate(_corpus((BASE, A_TOP)), _workload([0.0], [0]), cluster, build_strategy("random"))
