"""Worked tables for ``in-flight``: the pending pulls' backlog, a pod's estimated start, the
mapping to scores, the bounds, and the strategy in the simulator.

Every node has an 80 Mbit/s link (10 MB/s: a 10 MB layer takes 1 s), the overhead is
1 s and the weight on the pod's own new bytes 0.25, unless a case says otherwise. The
pod's image is L1 (40 MB) + L2 (40 MB) = 80 MB: 8 s on an idle node.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from layersched.cli.main import main
from layersched.core.errors import InputError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.inflight import (
    IDLE,
    MAX_LAYERS_PER_PENDING_POD,
    MAX_PENDING_PULLS_PER_NODE,
    PendingPull,
    PendingPulls,
    node_backlog,
    split_bytes,
    start_cost_s,
)
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeInfo
from layersched.core.pod import PodImages
from layersched.core.reference import ImageName
from layersched.core.strategies import (
    STRATEGY_NAMES,
    InFlightArgs,
    PlatformGroup,
    get_strategy,
    strategy_args,
)
from layersched.core.strategies.base import InFlightAware
from layersched.core.strategies.in_flight import InFlight, _holds
from layersched.core.strategies.pull_time import BANDWIDTH_KEY
from layersched_harness.sim.corpus import Corpus, CorpusImage, CorpusParams, zipf_weights
from layersched_harness.sim.engine import ClusterParams, RunResult, simulate
from layersched_harness.sim.settings import build_strategy
from layersched_harness.sim.workload import Workload, WorkloadParams

MB = 1_000_000
LINK = "80000000"  # bits per second: 10 MB/s
RATE = 10 * MB  # bytes per second
NOW = 1_000.0


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


L1 = Layer(_digest("l1"), 40 * MB)
L2 = Layer(_digest("l2"), 40 * MB)
Y = Layer(_digest("y"), 80 * MB)
SMALL = Layer(_digest("small"), 8 * MB)
POD = PodImages.of(ImageName("app:1"))
IMAGE = (L1, L2)


def _node(name: str, held: tuple[Layer, ...] = (), link: str = LINK) -> NodeInfo:
    return NodeInfo(name, annotation_layers=held, labels={BANDWIDTH_KEY: link})


def _strategy(pending: dict[str, list[PendingPull]], **options: object) -> InFlight:
    strategy = get_strategy("in-flight", strategy_args("in-flight", **options))
    assert isinstance(strategy, InFlight)
    strategy.clock = lambda: NOW
    for node, pulls in pending.items():
        for pull in pulls:
            strategy.pending.put(node, pull)
    return strategy


def _scores(
    nodes: list[NodeInfo],
    pending: dict[str, list[PendingPull]],
    layers: tuple[Layer, ...] = IMAGE,
    **options: object,
) -> tuple[dict[str, int], dict[str, float]]:
    inventory = build_layer_index(nodes)
    candidates = inventory.indices_of([n.name for n in nodes])[0]
    strategy = _strategy(pending, **options)
    result = strategy.score(POD, layers, inventory, candidates)
    costs = strategy.costs_s(layers, inventory, candidates)[0]
    return result.as_dict(inventory), {n.name: float(c) for n, c in zip(nodes, costs, strict=True)}


def _pull(key: str, ago_s: float, *layers: Layer) -> PendingPull:
    return PendingPull(key, NOW - ago_s, layers)


@pytest.mark.parametrize(
    ("nodes", "pending", "options", "costs", "expected"),
    [
        (
            # serial pulls. idle: 80 MB -> 8 s + 1 s, plus 0.25 x 8 s of its own bytes = 11 s
            # half: a replica bound 4 s ago has pulled 40 of 80 MB: W = 40 MB -> 4 + 1 = 5 s
            # fresh: a replica bound just now: W = 80 MB, nothing of its own -> 8 + 1 = 9 s
            # other: 80 MB of another image ahead of it, then its own 80: 16 + 1 + 2 = 19 s
            # scores: floor(100 * 5 / c): 45, 100, 55, 26
            [_node("idle"), _node("half"), _node("fresh"), _node("other")],
            {
                "half": [_pull("u1", 4.0, L1, L2)],
                "fresh": [_pull("u2", 0.0, L1, L2)],
                "other": [_pull("u3", 0.0, Y)],
            },
            {},
            {"idle": 11.0, "half": 5.0, "fresh": 9.0, "other": 19.0},
            {"idle": 45, "half": 100, "fresh": 55, "other": 26},
        ),
        (
            # the same without the weight on its own bytes: idle and fresh tie at 9 s (both
            # start the pod when the image is in), floor(100 * 5 / 9) = 55 each
            [_node("idle"), _node("half"), _node("fresh")],
            {"half": [_pull("u1", 4.0, L1, L2)], "fresh": [_pull("u2", 0.0, L1, L2)]},
            {"new_bytes_weight": 0.0},
            {"idle": 9.0, "half": 5.0, "fresh": 9.0},
            {"idle": 55, "half": 100, "fresh": 55},
        ),
        (
            # held layers: n1 holds L1, so 40 MB of its own: 4 + 1 + 1 = 6 s; a pending pod
            # whose layers n2 all holds brings no backlog: n2 holds L1+L2, 0 + 1 = 1 s
            # floor(100 * 1 / 6) = 16
            [_node("n1", (L1,)), _node("n2", (L1, L2))],
            {"n2": [_pull("u1", 0.0, L1, L2)]},
            {},
            {"n1": 6.0, "n2": 1.0},
            {"n1": 16, "n2": 100},
        ),
        (
            # a slow node already pulling loses to a fast idle one: slow (20 Mbit/s =
            # 2.5 MB/s) bound 0 s ago: 80 MB / 2.5 = 32 + 1 = 33 s; fast idle
            # (80 Mbit/s): 11 s; floor(100 * 11 / 33) = 33
            [_node("slow", link="20000000"), _node("fast")],
            {"slow": [_pull("u1", 0.0, L1, L2)]},
            {},
            {"slow": 33.0, "fast": 11.0},
            {"slow": 33, "fast": 100},
        ),
        (
            # parallel pulls: a small pod (8 MB) on a node pulling 80 MB of another image
            # shares the link: 8 + min(80, 1 x 8) = 16 MB -> 1.6 + 1 + 0.25 x 0.8 = 2.8 s;
            # idle: 0.8 + 1 + 0.2 = 2 s; floor(100 * 2 / 2.8) = 71
            [_node("busy"), _node("idle")],
            {"busy": [_pull("u1", 0.0, Y)]},
            {"pull_mode": "parallel"},
            {"busy": 2.8, "idle": 2.0},
            {"busy": 71, "idle": 100},
        ),
        (
            # the same with serial pulls: the pod waits for all 80 MB first:
            # 88 MB -> 8.8 + 1 + 0.2 = 10 s; floor(100 * 2 / 10) = 20
            [_node("busy"), _node("idle")],
            {"busy": [_pull("u1", 0.0, Y)]},
            {},
            {"busy": 10.0, "idle": 2.0},
            {"busy": 20, "idle": 100},
        ),
        (
            # parallel, the pod's image arriving a quarter done (bound 2 s ago: 20 of
            # 80 MB): N = 80, W = 60, E = 80 -> N_left = 80 x 60 / 80 = 60, own 0:
            # wait = 60 + min(0, 1 x 60) = 60 MB -> 6 + 1 = 7 s; idle 11 s -> 63
            [_node("pulling"), _node("idle")],
            {"pulling": [_pull("u1", 2.0, L1, L2)]},
            {"pull_mode": "parallel"},
            {"pulling": 7.0, "idle": 11.0},
            {"pulling": 100, "idle": 63},
        ),
        (
            # the queue drains between binds: p1 (40 MB of Y') bound 12 s ago is done after
            # 4 s; p2 (L1, 40 MB) bound 2 s ago has 20 MB left. The pod needs L1 (arriving)
            # and L2 (own, 40 MB): serial: 20 + 40 = 60 MB -> 6 + 1 + 0.25 x 4 = 8 s;
            # idle 11 s: floor(100 * 8 / 11) = 72
            [_node("queue"), _node("idle")],
            {"queue": [_pull("p1", 12.0, Layer(_digest("y2"), 40 * MB)), _pull("p2", 2.0, L1)]},
            {},
            {"queue": 8.0, "idle": 11.0},
            {"queue": 100, "idle": 72},
        ),
        (
            # a pending pull older than max_pending_age_s no longer counts: bound 601 s ago
            # (a failed pull, a pod that never starts): the node is idle again
            [_node("old"), _node("idle")],
            {"old": [_pull("u1", 601.0, L1, L2)]},
            {"max_pending_age_s": 600.0},
            {"old": 11.0, "idle": 11.0},
            {"old": 100, "idle": 100},
        ),
    ],
    ids=[
        "serial-idle-half-fresh-other",
        "no-weight-ties-idle-and-fresh",
        "held-layers-and-held-pending",
        "slow-pulling-loses-to-fast-idle",
        "parallel-shares-the-link",
        "serial-waits-for-the-queue",
        "parallel-arriving-quarter-done",
        "queue-drains-between-binds",
        "aged-out",
    ],
)
def test_worked_costs_and_scores(
    nodes: list[NodeInfo],
    pending: dict[str, list[PendingPull]],
    options: dict[str, object],
    costs: dict[str, float],
    expected: dict[str, int],
) -> None:
    layers = (SMALL,) if any(n.name == "busy" for n in nodes) else IMAGE
    got, got_costs = _scores(nodes, pending, layers, **options)
    assert got_costs == pytest.approx(costs)
    assert got == expected


def test_a_half_way_node_beats_an_idle_one_at_every_weight() -> None:
    # equal links, serial pulls: any progress at all puts the pulling node ahead
    for weight in (0.0, 0.25, 1.0):
        for ago_s in (0.5, 4.0, 7.9):
            got, _ = _scores(
                [_node("idle"), _node("pulling")],
                {"pulling": [_pull("u1", ago_s, L1, L2)]},
                new_bytes_weight=weight,
            )
            assert got["pulling"] == 100 > got["idle"], (weight, ago_s)


def test_a_pod_with_no_bytes_scores_zero_everywhere() -> None:
    got, _ = _scores([_node("a"), _node("b")], {"a": [_pull("u1", 0.0, L1)]}, layers=())
    assert got == {"a": 0, "b": 0}


def test_without_pending_pulls_it_ranks_as_pull_time() -> None:
    nodes = [_node("a", (L1,)), _node("b"), _node("c", link="20000000")]
    inventory = build_layer_index(nodes)
    candidates = inventory.indices_of(["a", "b", "c"])[0]
    ours = get_strategy("in-flight", InFlightArgs(new_bytes_weight=0.0))
    theirs = get_strategy("pull-time")
    assert np.array_equal(
        ours.score(POD, IMAGE, inventory, candidates).scores,
        theirs.score(POD, IMAGE, inventory, candidates).scores,
    )


# -------------------------------------------------------------- the scalar rule = the vector


def _random_layers(rng: random.Random, pool: list[Layer]) -> tuple[Layer, ...]:
    return tuple(dict.fromkeys(rng.sample(pool, rng.randint(0, 4))))


def test_the_strategy_computes_the_scalar_rule_bit_for_bit() -> None:
    # start_cost_s (what the Go port computes, node by node) and the strategy's arrays
    # give identical floats, op for op, on random clusters, both pull modes
    rng = random.Random(42)
    pool = [
        Layer(_digest(f"r{i}"), rng.randint(1, 50) * MB + rng.randint(0, 999)) for i in range(12)
    ]
    for case in range(300):
        names = [f"n{i}" for i in range(rng.randint(1, 6))]
        nodes = [
            _node(name, _random_layers(rng, pool), link=str(rng.choice([1e7, 2e7, 4e7, 3.3e7])))
            for name in names
        ]
        mode = rng.choice(["serial", "parallel"])
        weight = rng.choice([0.0, 0.25, 0.7])
        pending = {
            name: [
                _pull(f"{name}-p{j}", rng.uniform(0, 30), *_random_layers(rng, pool))
                for j in range(rng.randint(0, 3))
            ]
            for name in names
        }
        pod = _random_layers(rng, pool)
        inventory = build_layer_index(nodes)
        candidates = inventory.indices_of(names)[0]
        strategy = _strategy(pending, pull_mode=mode, new_bytes_weight=weight)
        costs = strategy.costs_s(pod, inventory, candidates)[0]
        for i, node in enumerate(nodes):
            idx = inventory.index_of(node.name)
            assert idx is not None
            holds = _holds(inventory, idx)
            rate = float(node.labels[BANDWIDTH_KEY]) / 8
            backlog = node_backlog(pending[node.name], holds, rate, NOW)
            held, arriving, total = split_bytes(pod, holds, backlog)
            want = start_cost_s(
                held,
                arriving,
                total,
                backlog.remaining_bytes(rate, NOW),
                backlog.enqueued_bytes,
                backlog.pulls,
                float(node.labels[BANDWIDTH_KEY]),
                mode,  # type: ignore[arg-type]
                1.0,
                weight,
            )
            assert float(costs[i]) == want, (case, node.name)


# ----------------------------------------------------------------------- the backlog


def test_each_digest_is_counted_once_per_node() -> None:
    # two replicas of the image pending: the second brings no new bytes (k = 1, E = 80 MB)
    backlog = node_backlog(
        [_pull("a", 0.0, L1, L2), _pull("b", 0.0, L2, L1)], lambda d: False, RATE, NOW
    )
    assert (backlog.enqueued_bytes, backlog.pulls, backlog.backlog_bytes) == (80 * MB, 1, 80e6)
    assert dict(backlog.arriving) == {L1.digest: L1.size_bytes, L2.digest: L2.size_bytes}


def test_bound_order_and_ties_by_key() -> None:
    # the earlier-bound pull owns a shared layer; equal bind times order by key
    first = node_backlog([_pull("b", 0.0, L1), _pull("a", 0.0, L1, L2)], lambda d: False, RATE, NOW)
    assert first.pulls == 1  # "a" (first by key) brought both layers, "b" nothing
    assert node_backlog([], lambda d: False, RATE, NOW) is IDLE


def test_a_bind_time_in_the_future_is_now() -> None:
    # a clock ahead of ours (the API server's) cannot make the backlog grow
    backlog = node_backlog([_pull("a", -5.0, L1)], lambda d: False, RATE, NOW)
    assert backlog.since_s == NOW
    assert backlog.remaining_bytes(RATE, NOW) == 40e6


def test_per_node_and_per_pod_bounds() -> None:
    many = [_pull(f"p{i:03}", 0.0, Layer(_digest(f"m{i}"), MB)) for i in range(100)]
    backlog = node_backlog(many, lambda d: False, RATE, NOW)
    assert backlog.pulls == MAX_PENDING_PULLS_PER_NODE
    wide = tuple(Layer(_digest(f"w{i}"), MB) for i in range(MAX_LAYERS_PER_PENDING_POD + 50))
    pulls = PendingPulls()
    pulls.put("n", PendingPull("wide", NOW, wide))
    assert len(pulls.pulls("n")[0].layers) == MAX_LAYERS_PER_PENDING_POD
    assert node_backlog([PendingPull("w", NOW, wide)], lambda d: False, RATE, NOW).pulls == 1


# ---------------------------------------------------------------- PendingPulls


def test_pending_pulls_follow_pods_and_stay_bounded() -> None:
    pulls = PendingPulls(max_pods=2)
    assert pulls.put("n1", _pull("a", 0.0, L1))
    assert pulls.put("n1", _pull("b", 0.0, L2))
    assert not pulls.put("n2", _pull("c", 0.0, L1))  # refused: the bound
    assert pulls.refused == 1 and len(pulls) == 2
    assert pulls.put("n2", _pull("a", 0.0, L1))  # moved: not a new pod
    assert sorted(pulls.nodes) == ["n1", "n2"]
    pulls.discard("a")
    pulls.discard("a")  # twice is nothing
    pulls.remove_node("n1")
    assert len(pulls) == 0 and pulls.nodes == []


def test_a_backlog_is_summed_again_after_a_change() -> None:
    pulls = PendingPulls()
    pulls.put("n", _pull("a", 0.0, L1, L2))
    held: set[str] = set()
    first = pulls.backlog("n", held.__contains__, RATE, NOW)
    assert first.enqueued_bytes == 80 * MB
    assert pulls.arriving_at(L1.digest) == {"n"}
    held.add(L1.digest)
    assert pulls.backlog("n", held.__contains__, RATE, NOW) is first  # not told yet
    pulls.node_changed("n")
    again = pulls.backlog("n", held.__contains__, RATE, NOW)
    assert again.enqueued_bytes == 40 * MB
    assert pulls.arriving_at(L1.digest) == set()
    # a new rate sums it again; so does a pull ageing out
    assert pulls.backlog("n", held.__contains__, RATE / 2, NOW) is not again
    late = pulls.backlog("n", held.__contains__, RATE / 2, NOW + 601.0)
    assert late.pulls == 0 and pulls.arriving_at(L2.digest) == set()


# ---------------------------------------------------------------- args, registry, groups


def test_it_is_a_registered_strategy_with_checked_args() -> None:
    assert "in-flight" in STRATEGY_NAMES
    assert isinstance(get_strategy("in-flight"), InFlightAware)
    assert not isinstance(get_strategy("pull-time"), InFlightAware)
    for bad, field in (
        ({"pull_mode": "lazy"}, "pull_mode"),
        ({"new_bytes_weight": -1.0}, "new_bytes_weight"),
        ({"max_pending_age_s": 0.0}, "max_pending_age_s"),
        ({"default_bandwidth_bits_per_s": 0.0}, "default_bandwidth_bits_per_s"),
        ({"overhead_s": float("nan")}, "overhead_s"),
    ):
        with pytest.raises(InputError, match=f"in-flight: {field}"):
            get_strategy("in-flight", strategy_args("in-flight", **bad))


def test_platform_groups_compare_costs_across_groups() -> None:
    # group A (n1, holds everything: 1 s) and group B (n2, idle: 11 s, another platform's
    # layers of the same size): the cheapest of all scores 100, the other floor(100/11) = 9
    other = (Layer(_digest("o1"), 40 * MB), Layer(_digest("o2"), 40 * MB))
    nodes = [_node("n1", IMAGE), _node("n2")]
    inventory = build_layer_index(nodes)
    candidates = inventory.indices_of(["n1", "n2"])[0]
    strategy = _strategy({})
    groups = [
        PlatformGroup(np.array([0]), IMAGE),
        PlatformGroup(np.array([1]), other),
    ]
    result, parts = strategy.score_groups(POD, groups, inventory, candidates)
    assert result.as_dict(inventory) == {"n1": 100, "n2": 9}
    assert [p.total_bytes for p in parts] == [80 * MB, 80 * MB]


# ------------------------------------------------------------------------ the simulator


def _burst(strategy: str, links: tuple[float, ...], serial: bool = True) -> RunResult:
    """Four replicas of one 80 MB image, 0.1 s apart, on idle nodes with ``links``."""
    corpus = Corpus(
        (CorpusImage(ImageName("burst:1"), IMAGE),), zipf_weights(1, 0.0), CorpusParams(), seed=0
    )
    workload = Workload(
        np.array([0.0, 0.1, 0.2, 0.3]),
        np.zeros(4, dtype=np.int64),
        np.full(4, 60.0),
        WorkloadParams(),
    )
    cluster = ClusterParams(
        nodes=len(links),
        containers_per_node=8,
        node_bandwidth_bits_per_s=links,
        start_overhead_s=1.0,
        max_parallel_pulls=1 if serial else 0,
    )
    return simulate(corpus, workload, cluster, build_strategy(strategy), seed=3)


def test_the_simulator_sends_a_burst_to_the_node_already_pulling() -> None:
    # equal links: the first replica's node is pulling the image when the next arrives
    # (8.9 s there against 11 s on an idle node), so all four go there and the image
    # crosses one link once; layer-locality sees no layer anywhere and spreads them
    ours = _burst("in-flight", (80e6, 80e6, 80e6))
    assert len(set(ours.pod_node.tolist())) == 1
    assert ours.bytes_pulled == 80 * MB
    theirs = _burst("layer-locality", (80e6, 80e6, 80e6))
    assert theirs.bytes_pulled > ours.bytes_pulled


def test_the_simulator_keeps_a_burst_on_the_fast_link() -> None:
    # one 80 Mbit/s node and two at 20: the image takes 8 s on the fast one, 32 s on a
    # slow one, so every replica waits for the fast node's pull: all start by ~9.3 s
    ours = _burst("in-flight+parallel", (20e6, 80e6, 20e6), serial=False)
    assert set(ours.pod_node.tolist()) == {1}
    assert float(ours.pod_startup_s.max()) == pytest.approx(9.0, abs=0.01)


def test_score_cli_runs_in_flight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `layersched score` has no pod watch: no pending pulls, the rule alone. n1 at
    # 10 Mbit/s holds L1 (40 MB): its own 40 MB -> 32 s + 1 + 2 x 32 (weight 2) = 97 s;
    # n2 unlabelled (--default-bandwidth-bits-per-s 80 Mbit/s): 80 MB -> 8 + 1 + 16 = 25 s
    # n1 = floor(100 * 25 / 97) = 25
    nodes = {
        "kind": "NodeList",
        "items": [
            {
                "metadata": {"name": "n1", "labels": {BANDWIDTH_KEY: "10000000"}},
                "status": {"images": [{"names": ["base:1"], "sizeBytes": 40 * MB}]},
            },
            {"metadata": {"name": "n2"}, "status": {}},
        ],
    }
    layers = {
        "app:1": [{"digest": x.digest, "size": x.size_bytes} for x in IMAGE],
        "base:1": [{"digest": L1.digest, "size": L1.size_bytes}],
    }
    files = {"nodes": nodes, "pod": {"kind": "Pod", "spec": {"containers": [{"image": "app:1"}]}}}
    files["layers"] = layers
    argv = ["score", "--strategy", "in-flight", "-o", "json", "--new-bytes-weight", "2"]
    argv += ["--pull-mode", "parallel", "--default-bandwidth-bits-per-s", "80e6"]
    for key, document in files.items():
        (tmp_path / f"{key}.json").write_text(json.dumps(document))
        argv += [f"--{key}", str(tmp_path / f"{key}.json")]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"n1": 25, "n2": 100}
