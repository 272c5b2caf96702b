"""``make replay``'s fast core: the trace (generation from its seed, the file, its checks),
the simulator reading it pod by pod, the replay loop's pure parts and its pacing (on a
recording driver and a virtual clock: what it asks of a cluster, not a cluster), the
access log split by repository, and the results' aggregation, block and plot. The live
replay itself needs the local testbed: ``make replay``."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))

import replay as bench_replay  # noqa: E402
import replay_report as report  # noqa: E402

from layersched.core.errors import InputError  # noqa: E402
from layersched_harness.sim.engine import simulate  # noqa: E402
from layersched_harness.sim.settings import build_strategy  # noqa: E402
from layersched_harness.sim.trace import (  # noqa: E402
    DEFAULT_TRACE,
    TraceParams,
    generate_trace,
    parse_trace,
    read_trace,
    simulate_trace,
    simulator_inputs,
    trace_document,
    write_trace,
)
from layersched_harness.testbed.builds import kubernetes_build  # noqa: E402
from layersched_harness.testbed.cluster import pulled_bytes_by_repository  # noqa: E402
from layersched_harness.testbed.errors import TestbedError  # noqa: E402
from layersched_harness.testbed.replay import (  # noqa: E402
    Replay,
    TraceBuild,
    deadline_s,
    is_running,
    plan_runs,
    plan_steps,
    slot_requests,
)
from layersched_harness.testbed.scheduler_configs import (  # noqa: E402
    LAYER_LOCALITY_PLUGIN_SCHEDULER,
    REPLAY_PLUGIN_INFLIGHT_SCHEDULER,
    TestbedSchedulers,
)
from layersched_harness.testbed.scheduler_configs import (  # noqa: E402
    testbed_scheduler_configs as generate_testbed_configs,  # not test_-collected by name
)
from tests.fixtures import prereq  # noqa: E402

SMALL = TraceParams(
    pods=8,
    images=6,
    rate_per_s=2.0,
    nodes=2,
    containers_per_node=2,
    link_rates_bits_per_s=(20_000_000, 5_000_000),
)


# ------------------------------------------------------------------ the trace


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    first = trace_document(generate_trace(7, SMALL))
    again = trace_document(generate_trace(7, SMALL))
    other = trace_document(generate_trace(8, SMALL))
    assert first == again
    assert first["pods"] != other["pods"]


def test_the_committed_trace_is_the_one_its_seed_generates() -> None:
    path = ROOT / DEFAULT_TRACE
    committed = json.loads(path.read_text(encoding="utf-8"))
    regenerated = trace_document(generate_trace(committed["seed"], TraceParams()))
    assert committed == json.loads(json.dumps(regenerated)), (
        f"{DEFAULT_TRACE} is not what seed {committed['seed']} generates: "
        "python3 harness/bench/replay.py trace"
    )


def test_a_trace_keeps_only_used_images_shares_base_layers_and_orders_arrivals() -> None:
    trace = generate_trace(36)
    assert len(trace.pods) == 50
    used = {pod.image for pod in trace.pods}
    assert used == {image.name for image in trace.images}
    # bases are shared: fewer distinct first layers than images
    assert len({image.layers[0] for image in trace.images}) < len(trace.images)
    arrivals = [pod.arrival_s for pod in trace.pods]
    assert arrivals == sorted(arrivals)
    assert all(10.0 <= pod.lifetime_s <= 30.0 for pod in trace.pods)
    sizes = [trace.image_size_bytes(image.name) for image in trace.images]
    assert min(sizes) > 1024 * 1024 and max(sizes) < 400 * 1024 * 1024


def test_a_written_trace_reads_back_equal(tmp_path: Path) -> None:
    trace = generate_trace(3, SMALL)
    write_trace(trace, tmp_path / "t.json")
    assert trace_document(read_trace(tmp_path / "t.json")) == json.loads(
        json.dumps(trace_document(trace))
    )


def _broken(change: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(trace_document(generate_trace(3, SMALL))))
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="other"), "not a replay trace"),
        (lambda d: d["pods"][0].update(image="nope"), "pods[0].image 'nope'"),
        (lambda d: d["pods"][1].update(arrival_s=-1.0), "pods[1].arrival_s"),
        (lambda d: d["pods"][0].update(lifetime_s=0), "pods[0].lifetime_s"),
        (lambda d: d["pods"][0].pop("name"), "pods[0].name: expected str"),
        (lambda d: d["images"][0].update(layers=["L999"]), "images[0].layers"),
        (lambda d: d["cluster"].update(nodes="6"), "cluster.nodes: expected int"),
        (lambda d: d["layers"]["L001"].update(size_bytes=0), "layers.L001.size_bytes"),
        (lambda d: d["pods"].append(dict(d["pods"][0], arrival_s=1e9)), "share a name"),
        # two nodes, three rates: one per node or the trace is refused
        (
            lambda d: d["cluster"]["link_rates_bits_per_s"].append(1),
            "cluster.link_rates_bits_per_s: expected 2 positive",
        ),
        (
            lambda d: d["cluster"].update(link_rates_bits_per_s=[20_000_000, 0]),
            "cluster.link_rates_bits_per_s",
        ),
    ],
    ids=[
        "format",
        "unknown-image",
        "arrival-order",
        "lifetime",
        "missing-name",
        "undefined-layer",
        "string-count",
        "empty-layer",
        "duplicate-pod",
        "rate-per-node",
        "zero-rate",
    ],
)
def test_a_bad_trace_names_the_field(change: Any, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_trace(_broken(change), "t.json")


def test_a_trace_from_before_the_links_differed_gives_every_node_its_one_rate() -> None:
    doc = _broken(lambda d: d["cluster"].pop("link_rates_bits_per_s"))
    doc["cluster"]["link_rate_bits_per_s"] = 2_500_000
    trace = parse_trace(doc, "t.json")
    assert trace.cluster.link_rates_bits_per_s == (2_500_000, 2_500_000)
    assert trace.cluster.node_rates_bits_per_s() == {"n1": 2_500_000, "n2": 2_500_000}


def test_the_committed_trace_has_two_fast_two_medium_two_slow_unscaled() -> None:
    trace = read_trace(ROOT / DEFAULT_TRACE)
    assert trace.cluster.node_rates_bits_per_s() == {
        "n1": 40_000_000,
        "n2": 40_000_000,
        "n3": 20_000_000,
        "n4": 20_000_000,
        "n5": 10_000_000,
        "n6": 10_000_000,
    }
    assert trace.params["byte_scale"] == 1.0
    # unscaled: every image is the corpus's own size, MiB to tens of MiB
    sizes = [trace.image_size_bytes(image.name) for image in trace.images]
    assert min(sizes) > 10 * MIB and max(sizes) < 100 * MIB


def test_a_rate_per_node_is_asked_of_the_params() -> None:
    with pytest.raises(InputError, match="one positive rate per node"):
        generate_trace(3, TraceParams(nodes=2, link_rates_bits_per_s=(1, 1, 1)))


def test_an_unreadable_trace_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"harness/bench/replay\.py trace"):
        read_trace(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="not JSON"):
        read_trace(tmp_path / "bad.json")


# ------------------------------------------------------------------ the simulator


def test_the_simulator_reads_the_trace_pod_by_pod() -> None:
    trace = generate_trace(3, SMALL)
    runs = simulate_trace(trace, ["image-locality", "layer-locality"], seeds=[0, 1])
    assert [(r.strategy, r.seed) for r in runs] == [
        ("image-locality", 0),
        ("image-locality", 1),
        ("layer-locality", 0),
        ("layer-locality", 1),
    ]
    first = trace.pods[0]
    for run in runs:
        assert len(run.startup_s) == len(trace.pods) == len(run.node) == len(run.bytes_pulled)
        # every pod starts no sooner than the fixed start overhead
        assert min(run.startup_s) >= trace.cluster.start_overhead_s
        # the first pod finds an empty cluster: it pulls its whole image, taking at least
        # its bytes over the link plus the overhead (longer if a later pod shares the link)
        size = trace.image_size_bytes(first.image)
        assert run.bytes_pulled[0] == size
        rate = trace.cluster.link_rates_bits_per_s[run.node[0]]
        alone_s = size * 8 / rate + trace.cluster.start_overhead_s
        assert run.startup_s[0] >= alone_s - 1e-3


@pytest.mark.parametrize("strategy", ["layer-locality", "pull-time"])
def test_each_simulated_node_pulls_at_its_own_rate(strategy: str) -> None:
    # one pod, one 1 MB layer, no overhead: 8 Mbit take 1 s over n1's 8 Mbit/s and 0.5 s
    # over n2's 16; pull-time knows the rates and takes n2 on every seed, layer-locality
    # ties and draws, but each pull takes its own node's time
    doc = {
        "format": "layersched-replay-trace/1",
        "seed": 1,
        "cluster": {
            "nodes": 2,
            "containers_per_node": 1,
            "link_rates_bits_per_s": [8_000_000, 16_000_000],
            "start_overhead_s": 0.0,
        },
        "layers": {"L1": {"seed": 1, "size_bytes": 1_000_000}},
        "images": [{"name": "a", "layers": ["L1"]}],
        "pods": [{"name": "p1", "image": "a", "arrival_s": 0.0, "lifetime_s": 5.0}],
    }
    runs = simulate_trace(parse_trace(doc, "t.json"), [strategy], seeds=range(8))
    for run in runs:
        assert run.startup_s[0] == pytest.approx([1.0, 0.5][run.node[0]])
    if strategy == "pull-time":
        assert {run.node[0] for run in runs} == {1}


def test_the_engines_per_pod_bytes_sum_to_its_total() -> None:
    corpus, workload, cluster = simulator_inputs(generate_trace(5, SMALL))
    result = simulate(corpus, workload, cluster, build_strategy("layer-locality"), seed=0)
    assert int(result.pod_bytes.sum()) == result.bytes_pulled
    assert (result.pod_node >= 0).all()
    assert sorted(result.pod_startup_s) == pytest.approx(sorted(result.startup_s))


# ------------------------------------------------------------------ the replay's parts


@pytest.mark.parametrize(
    ("whole", "slots", "expected"),
    [
        # 2 cores and 8 GiB over 4 slots: 500m and 2 GiB each
        ({"cpu": "2", "memory": "8Gi"}, 4, {"cpu": "500m", "memory": str(2 * 1024**3)}),
        # 1999m / 4 = 499.75m, rounded down so 4 fit
        ({"cpu": "1999m", "memory": "10"}, 4, {"cpu": "499m", "memory": "2"}),
    ],
    ids=["even", "rounded-down"],
)
def test_a_slot_is_a_share_of_a_worker_rounded_down(
    whole: dict[str, str], slots: int, expected: dict[str, str]
) -> None:
    assert slot_requests(whole, slots) == expected


def test_a_worker_too_small_to_cut_is_refused() -> None:
    with pytest.raises(TestbedError, match="cannot be cut into 4 slots"):
        slot_requests({"cpu": "3m", "memory": "1Gi"}, 4)


@pytest.mark.parametrize(
    ("start", "now", "lifetime", "expected"),
    [
        (100.0, 112.4, 10.0, 23),  # 12.4 s since the kubelet took it + 10 s, rounded up
        (100.0, 100.0, 0.2, 1),  # at least a second
    ],
    ids=["after-a-pull", "at-least-one"],
)
def test_the_deadline_counts_from_the_pods_start_time(
    start: float, now: float, lifetime: float, expected: int
) -> None:
    assert deadline_s(start, now, lifetime) == expected


def test_runs_alternate_the_first_scheduler_every_round() -> None:
    plan = plan_runs(["a", "b", "c"], 3)
    assert [s for r, s in plan if r == 1] == ["a", "b", "c"]
    assert [s for r, s in plan if r == 2] == ["b", "c", "a"]
    assert [s for r, s in plan if r == 3] == ["c", "a", "b"]
    with pytest.raises(TestbedError):
        plan_runs(["a"], 0)


def test_running_means_every_container_runs() -> None:
    running = {"status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}}
    creating = {"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {}}}]}}
    assert is_running(running) and not is_running(creating) and not is_running({})


def test_the_access_log_splits_bytes_by_node_and_repository() -> None:
    when = "[27/Nov/2026:12:00:00 +0000]"

    def line(client: str, request: str, status: int, size: int) -> str:
        return f'{client} - - {when} "{request} HTTP/1.1" {status} {size} "" ""'

    log = [
        line("10.0.0.11", "GET /v2/replay/app-01/blobs/sha256:aa", 200, 1000),
        line("10.0.0.11", "GET /v2/replay/app-01/manifests/run-1", 200, 50),
        line("10.0.0.11", "HEAD /v2/replay/app-01/manifests/run-1", 200, 50),
        line("10.0.0.12", "GET /v2/replay/app-02/blobs/sha256:bb", 206, 7),
        line("10.0.0.12", "GET /v2/replay/app-02/blobs/sha256:cc", 404, 9),
        "garbage",
    ]
    # HEAD and 404 carry no image bytes; the two GETs of app-01 add up
    assert pulled_bytes_by_repository(log) == {
        ("10.0.0.11", "replay/app-01"): 1050,
        ("10.0.0.12", "replay/app-02"): 7,
    }


# ------------------------------------------------------------------ the replay loop


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


class _RecordingDriver:
    """Answers the replay as a cluster would if every pod were bound at once to a node of
    its own choosing, ran 2 s after creation and ended when its deadline passed: enough to
    test the loop's pacing and bookkeeping, which is all this is."""

    namespace = "layersched-replay"

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.created: dict[str, tuple[float, dict[str, Any]]] = {}
        self.deadlines: dict[str, int] = {}

    def scheduler_name(self, strategy: str) -> str:
        return f"sched-{strategy}"

    def free_requests(self) -> dict[str, str]:
        return {"cpu": "2", "memory": "8Gi"}

    def create_pod(self, document: Mapping[str, Any]) -> dict[str, Any]:
        name = document["metadata"]["name"]
        self.created[name] = (self.clock.now, copy.deepcopy(dict(document)))
        return {"metadata": {"name": name, "uid": f"uid-{name}"}}

    def _stamp(self, at: float) -> str:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(1_800_000_000 + at, UTC).isoformat()

    def pods(self) -> list[dict[str, Any]]:
        out = []
        for name, (at, _doc) in self.created.items():
            age = self.clock.now - at
            deadline = self.deadlines.get(name)
            phase = "Pending" if age < 2 else "Running"
            state: dict[str, Any] = (
                {"waiting": {}} if age < 2 else {"running": {"startedAt": self._stamp(at + 2)}}
            )
            if deadline is not None and age >= deadline:
                phase, state = (
                    "Failed",
                    {"terminated": {"startedAt": self._stamp(at + 2), "exitCode": 137}},
                )
            out.append(
                {
                    "metadata": {
                        "name": name,
                        "uid": f"uid-{name}",
                        "creationTimestamp": self._stamp(at),
                    },
                    "spec": {"nodeName": "n1"},
                    "status": {
                        "phase": phase,
                        "reason": "DeadlineExceeded" if phase == "Failed" else None,
                        "startTime": self._stamp(at),
                        "containerStatuses": [{"name": "main", "state": state}],
                    },
                }
            )
        return out

    def patch_pod(self, name: str, document: Mapping[str, Any]) -> dict[str, Any]:
        self.deadlines[name] = document["spec"]["activeDeadlineSeconds"]
        return {}

    def events(self, reason: str) -> list[dict[str, Any]]:
        return []

    def node_address(self, node: str) -> str:
        return "10.0.0.11"


def test_the_replay_creates_pods_on_time_ends_them_by_deadline_and_measures_them() -> None:
    trace = generate_trace(3, SMALL)
    clock = _Clock()
    driver = _RecordingDriver(clock)
    replay = Replay(
        driver,  # type: ignore[arg-type]
        trace,
        "10.0.0.1:5000",
        access_log=lambda offset: [],
        log_end=lambda: 0,
        build=TraceBuild({}, {}),
        clock=clock,
        wall=lambda: 1_800_000_000 + clock.now,
        sleep=clock.sleep,
    )
    run = replay.run("layer-locality", "run-1")
    for pod in trace.pods:
        at, document = driver.created[pod.name]
        # created at its arrival, within one pacing step
        assert pod.arrival_s <= at <= pod.arrival_s + 0.5
        container = document["spec"]["containers"][0]
        assert container["image"] == f"10.0.0.1:5000/replay/{pod.image}:run-1"
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert document["spec"]["schedulerName"] == "sched-layer-locality"
        # a slot: 2 cores over 2 slots
        assert container["resources"]["requests"]["cpu"] == "1000m"
        # its deadline: seen running within a poll of 2 s, then its lifetime, rounded up
        assert 2 + pod.lifetime_s <= driver.deadlines[pod.name] <= 2 + pod.lifetime_s + 1.6
    assert [p["name"] for p in run["pods"]] == [p.name for p in trace.pods]
    for measured in run["pods"]:
        assert measured["startup_s"] == pytest.approx(2.0)  # the API's timestamps
        assert 2.0 <= measured["observed_startup_s"] <= 2.6  # seen at the next poll
        assert measured["end_reason"] == "DeadlineExceeded"
        assert measured["bytes"] == 0 and measured["pull_s"] is None  # no Pulled event here


# ------------------------------------------------------------------ the results


def _pod(startup: float, size: int, **extra: Any) -> dict[str, Any]:
    return {
        "startup_s": startup,
        "observed_startup_s": startup + 0.2,
        "pull_s": startup - 1,
        "bytes": size,
        "pulled": size > 0,
    } | extra


def _run(
    arm: str, number: int, startups: list[float], sizes: list[int], mode: str = "serial"
) -> dict[str, Any]:
    return {
        "round": number,
        "mode": mode,
        "arm": arm,
        "pods": [_pod(s, b) for s, b in zip(startups, sizes, strict=True)],
    }


MIB = 1024 * 1024
DEFAULT = report.BASELINE
RUNS = [
    # round 1: the default profile's mean 4 s, the extender's 2 s: 2x
    _run(DEFAULT, 1, [2.0, 6.0], [10 * MIB, 10 * MIB]),
    _run("layer-locality", 1, [1.0, 3.0], [10 * MIB, 1000]),
    # round 2: 6 s against 4 s: 1.5x
    _run("layer-locality", 2, [3.0, 5.0], [10 * MIB, 5 * MIB]),
    _run(DEFAULT, 2, [5.0, 7.0], [10 * MIB, 10 * MIB]),
    # the other pull mode: its own comparison
    _run(DEFAULT, 1, [8.0, 8.0], [10 * MIB, 10 * MIB], "parallel"),
    _run("layer-locality", 1, [4.0, 4.0], [10 * MIB, 10 * MIB], "parallel"),
]


def test_the_speedup_is_taken_round_by_round_then_spread() -> None:
    summary = report.summarise(RUNS, "serial")
    speedup = summary["layer-locality"]["speedup"]
    # mean of 2.0 and 1.5; the range is the rounds'
    assert speedup == {"mean": 1.75, "min": 1.5, "max": 2.0, "n": 2}
    assert summary[DEFAULT]["speedup"]["mean"] == 1.0
    # round 1's extender pod of 1,000 bytes pulled no layer; round 2's both did
    assert summary["layer-locality"]["pulled_nothing_share"] == {
        "mean": 0.25,
        "min": 0.0,
        "max": 0.5,
        "n": 2,
    }
    assert summary["layer-locality"]["mean_startup_s"] == {
        "mean": 3.0,
        "min": 2.0,
        "max": 4.0,
        "n": 2,
    }
    # the parallel mode is compared within itself: 8 s against 4 s
    assert report.summarise(RUNS, "parallel")["layer-locality"]["speedup"]["mean"] == 2.0


@pytest.mark.parametrize(
    ("pulls", "mean", "most"),
    [
        # n1 pulls 0-10 and 5-15, n2 0-10: at n1's midpoints (5, 10) both run; n2's alone
        ([("n1", 10.0, 10.0), ("n1", 15.0, 10.0), ("n2", 10.0, 10.0)], 1.667, 2),
        # one after the other (serial): each alone at its midpoint
        ([("n1", 10.0, 10.0), ("n1", 20.0, 10.0)], 1.0, 1),
        # a 0.2 s pull found its layers present: not a concurrent pull
        ([("n1", 10.0, 10.0), ("n1", 5.0, 0.2)], 1.0, 1),
    ],
    ids=["overlapping", "serial", "present"],
)
def test_concurrent_pulls_per_node(
    pulls: list[tuple[str, float, float]], mean: float, most: int
) -> None:
    pods = [
        {"node": node, "pulled": True, "pulled_at_s": end, "pull_s": took}
        for node, end, took in pulls
    ]
    found = report.concurrency(pods)
    assert (found["mean"], found["max"]) == (mean, most)


def test_the_wait_behind_other_pulls_is_the_pulling_pods_kubelet_wait() -> None:
    pods = [
        _pod(10.0, 5 * MIB, wait_behind_s=4.0, node="n1"),
        _pod(6.0, 5 * MIB, wait_behind_s=0.0, node="n2"),
        # found its image present: no wait to count
        _pod(2.0, 0, wait_behind_s=None, node="n1"),
    ]
    figures = report.run_figures(pods, nodes=["n1", "n2", "n3"])
    assert figures["mean_wait_behind_s"] == 2.0
    assert figures["pulling_pods"] == 2
    assert figures["pods_per_node"] == {"n1": 2, "n2": 1, "n3": 0}
    assert (figures["min_pods_per_node"], figures["max_pods_per_node"]) == (0, 2)


def _results() -> dict[str, Any]:
    runs = copy.deepcopy(RUNS)
    runs[0]["estimate"] = {
        "totals": {"pulled_bytes": 20 * MIB, "avoidable_bytes": 8 * MIB, "pods": 2}
    }
    sim = {
        DEFAULT: [{"seed": 0, "startup_s": [4.0, 4.0], "bytes_pulled": [1, 1]}],
        "layer-locality": [{"seed": 0, "startup_s": [2.0, 2.0], "bytes_pulled": [1, 0]}],
    }
    burst_pods = [{"node": "n1", "bytes": MIB}, {"node": "n2", "bytes": MIB}]
    return {
        "format": report.FORMAT,
        "trace": {
            "path": "harness/bench/replay/trace.json",
            "seed": 36,
            "pods": 2,
            "images": 2,
            "layers": 3,
            "distinct_bytes": 30 * MIB,
            "cluster": {
                "nodes": 6,
                "containers_per_node": 4,
                "link_rates_bits_per_s": [20_000_000] * 6,
            },
        },
        "burst": {"image": "app-20", "image_bytes": 43 * MIB, "replicas": 2, "slots_per_node": 20},
        "plan": {"rounds": 3},
        "runs": runs,
        "bursts": [
            {"round": 1, "mode": "serial", "arm": DEFAULT, "all_ready_s": 40.0, "pods": burst_pods},
            {
                "round": 1,
                "mode": "serial",
                "arm": "layer-locality",
                "all_ready_s": 20.0,
                "pods": burst_pods[:1],
            },
        ],
        "simulation": {
            "seeds_count": 1,
            "serial": {"trace": sim, "burst": {DEFAULT: [{"seed": 0, "startup_s": [30.0, 36.0]}]}},
            "parallel": {"trace": sim, "burst": {}},
        },
        "provenance": None,
    }


def test_the_block_gives_real_and_simulated_figures_with_their_ranges() -> None:
    text = report.markdown(_results())
    serial, parallel = text.split("**Parallel pulls")
    row = next(
        line
        for line in serial.splitlines()
        if line.startswith("| default plugins + layer-locality extender (as installed) | 3.0")
    )
    # mean start-up 3.0 over rounds of 2.0 and 4.0; speedup 1.75 (1.50-2.00); the
    # simulator's 2.0 s, 4/2 = 2x; simulated over real 2.0 / 3.0 = 0.67: flagged
    assert "| 3.0 (2.0–4.0) |" in row
    assert "1.75× (1.50–2.00)" in row
    assert row.endswith("| 2.0 | 2.00× | 0.67 **off** | - |")
    assert "differ by more than 10% for: default profile (the baseline); default plugins" in serial
    # the parallel mode's own table: 8 s against 4 s
    assert (
        "| default plugins + layer-locality extender (as installed) | 4.0 | 4.0 | 4.0 | 2.00×"
        in parallel
    )
    # 2 of the 3 rounds asked ran: said in bold
    assert "**3 were asked; the others did not run**" in text
    # the estimate after round 1's default-profile run: 8 MiB avoidable; the extender
    # pulled 20 - 10 MiB = 10 MiB less
    assert "called 8 MiB of that run's pulls avoidable" in text
    assert "default plugins + layer-locality extender (as installed) pulled 10 MiB less" in text
    # the burst: 40 s against 20 s, one node against two; the simulator's last start 36 s
    burst = next(
        line
        for line in text.splitlines()
        if line.startswith("| default profile (the baseline) | 40.0")
    )
    assert burst.endswith("| 36.0 | - |")
    assert (
        "| default plugins + layer-locality extender (as installed) | 20.0 | 2.00× | 1.0 |" in text
    )
    # no run finished: the simulator columns say they are the nominal prediction
    assert "no measured overheads calibrate it" in text
    assert "1.4–2.3×" in text
    assert "records no commit" in text


def test_a_results_file_from_before_the_fair_replay_is_named_not_shown() -> None:
    legacy = {"runs": [], "strategies": ["image-locality"], "provenance": None}
    text = report.markdown(legacy)
    assert "before issue 42's fair replay" in text
    assert "|" not in text


def test_the_block_names_its_results_file_and_the_traces_path_in_this_checkout() -> None:
    results = _results()
    results["trace"] = dict(results["trace"], path="bench/replay/trace.json")
    text = report.markdown(results, source=report.ARMS_RESULTS)
    assert text.startswith(f"Generated by `make figures` from `{report.ARMS_RESULTS}`")
    # recorded before issue 47 moved the benchmarks under harness/: named where it is now
    assert "`harness/bench/replay/trace.json` (seed" in text
    assert report.markdown(results).startswith(
        f"Generated by `make figures` from `{report.DEFAULT_RESULTS}`"
    )


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ("bench/replay/trace.json", "harness/bench/replay/trace.json"),
        ("harness/bench/replay/trace.json", "harness/bench/replay/trace.json"),
        ("/tmp/x/trace.json", "/tmp/x/trace.json"),
    ],
)
def test_a_recorded_trace_path_is_found_where_the_trace_is_now(
    recorded: str, expected: str
) -> None:
    assert report.trace_file(recorded) == expected


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ({"link_rate_bits_per_s": 2_500_000}, "2.5 Mbit/s links"),
        ({"link_rates_bits_per_s": [20_000_000] * 3}, "20 Mbit/s links"),
        (
            {"link_rates_bits_per_s": [40_000_000, 20_000_000, 10_000_000]},
            "links of 40, 20, 10 Mbit/s, n1 first",
        ),
    ],
    ids=["results-before-37", "equal", "differing"],
)
def test_the_block_names_the_links(cluster: dict[str, Any], expected: str) -> None:
    assert report.links_text(cluster) == expected


def test_the_plot_is_drawn(tmp_path: Path) -> None:
    prereq.module("matplotlib", "matplotlib (layersched[sim]) draws the plot")
    report.plot(_results(), tmp_path / "replay.png")
    assert (tmp_path / "replay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bursts_only_file_shows_its_bursts_and_says_it_replayed_nothing(
    tmp_path: Path,
) -> None:
    results = _results()
    results["runs"] = []
    results["plan"] = {"rounds": 1, "burst": True, "replays": False}
    text = report.markdown(results)
    # one round ran (the bursts'), as asked: no "did not run"
    assert "1 round, every arm once a round" in text
    assert "did not run" not in text
    assert "its burst only (the trace not replayed)" in text
    assert "**Serial pulls" not in text and "**Parallel pulls" not in text
    assert "| default profile (the baseline) | 40.0 |" in text
    assert "this run had none" in text
    prereq.module("matplotlib", "matplotlib (layersched[sim]) draws the plot")
    assert report.plotted_modes(results) == [report.SERIAL]
    report.plot(results, tmp_path / "burst.png")
    assert (tmp_path / "burst.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_serial_only_run_is_drawn_in_one_panel(tmp_path: Path) -> None:
    prereq.module("matplotlib", "matplotlib (layersched[sim]) draws the plot")

    def width(results: dict[str, Any], name: str) -> int:
        report.plot(results, tmp_path / name)
        # the PNG's IHDR chunk: its width in pixels, big-endian, at byte 16
        return int.from_bytes((tmp_path / name).read_bytes()[16:20], "big")

    results = _results()
    both = width(results, "both.png")
    results["runs"] = [run for run in results["runs"] if run["mode"] == report.SERIAL]
    assert results["runs"]
    assert report.plotted_modes(results) == [report.SERIAL]
    # half the width of the two-mode plot: no empty panel for the mode it did not run
    assert width(results, "serial.png") * 2 == both


@pytest.mark.parametrize(
    ("serial", "expected"),
    [
        # two 1 MB pulls on one 8 Mbit/s link (1 s each alone), both at t=0:
        # shared equally, both end at 2 s; one at a time, at 1 s and 2 s
        (False, [2.0, 2.0]),
        (True, [1.0, 2.0]),
    ],
    ids=["shared-link", "serial-pulls"],
)
def test_serial_pulls_take_turns_where_shared_ones_split_the_link(
    serial: bool, expected: list[float]
) -> None:
    doc = {
        "format": "layersched-replay-trace/1",
        "seed": 1,
        "cluster": {
            "nodes": 1,
            "containers_per_node": 2,
            "link_rate_bits_per_s": 8_000_000,
            "start_overhead_s": 0.0,
            "serial_pulls": serial,
        },
        "layers": {
            "L1": {"seed": 1, "size_bytes": 1_000_000},
            "L2": {"seed": 2, "size_bytes": 1_000_000},
        },
        "images": [{"name": "a", "layers": ["L1"]}, {"name": "b", "layers": ["L2"]}],
        "pods": [
            {"name": "p1", "image": "a", "arrival_s": 0.0, "lifetime_s": 5.0},
            {"name": "p2", "image": "b", "arrival_s": 0.0, "lifetime_s": 5.0},
        ],
    }
    (run,) = simulate_trace(parse_trace(doc, "t.json"), ["layer-locality"], seeds=[0])
    assert list(run.startup_s) == pytest.approx(expected)


def test_scaling_bytes_and_link_together_keeps_every_start_up() -> None:
    # a pull takes bytes / rate: dividing both by 8 leaves every pod's start-up as it was
    # (to the rounding of layer sizes to whole bytes)
    whole = generate_trace(3, TraceParams(pods=12, images=6, byte_scale=1.0))
    eighth = generate_trace(3, TraceParams(pods=12, images=6, byte_scale=0.125))
    assert [r * 8 for r in eighth.cluster.link_rates_bits_per_s] == list(
        whole.cluster.link_rates_bits_per_s
    )
    assert eighth.distinct_bytes() == pytest.approx(whole.distinct_bytes() / 8, rel=1e-4)
    (big,) = simulate_trace(whole, ["layer-locality"], seeds=[0])
    (small,) = simulate_trace(eighth, ["layer-locality"], seeds=[0])
    assert small.startup_s == pytest.approx(big.startup_s, abs=1e-3)
    assert small.node == big.node


def test_the_testbed_is_brought_up_with_the_traces_links_and_checked_against_them(
    tmp_path: Path,
) -> None:
    trace = generate_trace(3, SMALL)
    args = bench_replay.up_arguments(trace)
    assert args == ["--nodes", "2", "--replay-arms", "--node-rate", "n1=20", "--node-rate", "n2=5"]
    # the parallel mode's testbed: the same, its kubelets pulling in parallel
    assert bench_replay.up_arguments(trace, "parallel") == [*args, "--parallel-pulls"]
    bench_replay.check_rates(trace, {"n1": 20_000_000, "n2": 5_000_000}, tmp_path)
    # the same rates on the other nodes: refused, saying how to bring it up right
    with pytest.raises(TestbedError, match="testbed up --nodes 2 --replay-arms --node-rate n1=20"):
        bench_replay.check_rates(trace, {"n1": 5_000_000, "n2": 20_000_000}, tmp_path)
    with pytest.raises(TestbedError, match="the trace wants"):
        bench_replay.check_rates(trace, {"n1": 20_000_000}, tmp_path)


def test_the_replay_script_writes_a_trace_and_prints_its_prediction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.json"
    assert bench_replay.main(["--trace", str(path), "trace", "--seed", "36"]) == 0
    assert trace_document(read_trace(path)) == json.loads(
        (ROOT / DEFAULT_TRACE).read_text(encoding="utf-8")
    )
    assert bench_replay.main(["--trace", str(path), "simulate"]) == 0
    out = capsys.readouterr().out
    # every arm under both pull modes, with the burst
    for key in report.ARM_KEYS:
        assert out.count(f"  {key} ") == 2
    assert "serial pulls:" in out and "parallel pulls:" in out and "burst all Ready" in out


# ------------------------------------------------------------------ the plan and its resumption


def test_every_step_runs_once_and_the_kubelets_switch_once_a_round() -> None:
    arms = ["default-scheduler", "layer-locality", "pull-time"]
    steps = plan_steps(arms, ["serial", "parallel"], 3)
    keys = [step.key for step in steps]
    assert len(keys) == len(set(keys)) == 3 * 2 * 2 * len(arms)
    # serial, parallel | parallel, serial | serial, parallel: one setting, then 3 switches
    modes = list(dict.fromkeys((step.round, step.mode) for step in steps))
    assert [mode for _, mode in modes] == ["serial", "parallel"] * 1 + [
        "parallel",
        "serial",
        "serial",
        "parallel",
    ]
    assert bench_replay._switches(steps, None) == 4
    assert bench_replay._switches(steps, "serial") == 3
    # each round rotates the arms by one; a mode's replays come before its bursts
    firsts = [step.arm for step in steps if step.kind == "replay" and step.mode == "serial"][::3]
    assert firsts == ["default-scheduler", "layer-locality", "pull-time"]
    block = [step.kind for step in steps[: 2 * len(arms)]]
    assert block == ["replay"] * 3 + ["burst"] * 3
    # the estimate counts each kind and switch
    assert bench_replay.duration_s(steps, None) == pytest.approx(
        18 * bench_replay.REPLAY_STEP_S + 18 * bench_replay.BURST_STEP_S + 4 * bench_replay.SWITCH_S
    )


def test_a_bursts_only_plan_runs_every_burst_and_no_replay() -> None:
    arms = ["default-scheduler", "layer-locality"]
    steps = plan_steps(arms, ["serial", "parallel"], 3, replay=False)
    assert {step.kind for step in steps} == {"burst"}
    # the same bursts, in the same order, as the full plan's
    full = [step for step in plan_steps(arms, ["serial", "parallel"], 3) if step.kind == "burst"]
    assert steps == full
    assert bench_replay.duration_s(steps, None) == pytest.approx(
        12 * bench_replay.BURST_STEP_S + 4 * bench_replay.SWITCH_S
    )
    with pytest.raises(TestbedError, match="neither replays nor bursts"):
        plan_steps(arms, ["serial"], 1, burst=False, replay=False)


def test_estimate_takes_bursts_only_and_refuses_it_with_no_burst(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_replay.main(["estimate", "--rounds", "3", "--bursts-only"]) == 0
    out = capsys.readouterr().out
    steps = 6 * len(report.ARM_KEYS)
    assert out.startswith(f"{steps} steps (0 replays, {steps} bursts")
    with pytest.raises(SystemExit):
        bench_replay.main(["estimate", "--bursts-only", "--no-burst"])
    assert "not allowed with argument" in capsys.readouterr().err


PLAN = {"rounds": 3, "modes": ["serial", "parallel"], "arms": ["a"], "burst": True}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({}, None),
        ({"complete": True}, "not an unfinished run"),
        ({"format": "layersched-replay-results/1"}, "not an unfinished run"),
        ({"plan": PLAN | {"rounds": 1}}, "another plan"),
        ({"trace": {"sha256": "other"}}, "another trace"),
        ({"provenance": {"commit": "def"}}, "another commit"),
    ],
    ids=["same", "finished", "older-format", "other-plan", "other-trace", "other-commit"],
)
def test_an_unfinished_run_of_the_same_plan_trace_and_commit_is_continued(
    change: dict[str, Any], why: str | None
) -> None:
    found = {
        "format": report.FORMAT,
        "complete": False,
        "plan": PLAN,
        "trace": {"sha256": "abc"},
        "provenance": {"commit": "c0ffee"},
    } | change
    answer = bench_replay.resumable(found, PLAN, "abc", "c0ffee")
    assert answer is None if why is None else why in (answer or "")


def test_the_records_of_a_resumed_run_are_merged() -> None:
    first = {
        "commit": "c0ffee",
        "dirty": False,
        "date": "2026-11-29T00:00:00+00:00",
        "load_average_1m_at_start": 1.0,
        "load_average_1m_at_end": 2.0,
        "load_average_1m_max": 3.0,
        "other_processes_cores": 0.1,
        "other_processes_cores_all": 0.2,
        "duration_s": 3000.0,
    }
    second = first | {
        "date": "2026-11-29T02:00:00+00:00",
        "load_average_1m_at_end": 1.5,
        "load_average_1m_max": 5.0,
        "other_processes_cores": 0.4,
        "other_processes_cores_all": 0.4,
        "duration_s": 1000.0,
    }
    merged = bench_replay._merged([first, second])
    # the first's date and start, the last's end, the highest load; the other processes'
    # cores weighted by each invocation's time: (0.1 * 3000 + 0.4 * 1000) / 4000
    assert merged["date"] == first["date"]
    assert merged["load_average_1m_at_end"] == 1.5
    assert merged["load_average_1m_max"] == 5.0
    assert merged["other_processes_cores"] == 0.175
    assert merged["other_processes_cores_all"] == 0.25
    assert "duration_s" not in merged


@pytest.mark.parametrize(
    ("config", "want", "ok"),
    [
        ({"serializeImagePulls": True}, 1, True),
        ({}, 1, True),  # the kubelet's default is serial
        ({"serializeImagePulls": False, "maxParallelImagePulls": 3}, 3, True),
        ({"serializeImagePulls": True}, 3, False),
        ({"serializeImagePulls": False}, 1, False),  # no bound at all
    ],
    ids=["serial", "default", "parallel", "still-serial", "unbounded"],
)
def test_the_kubelets_running_configuration_is_checked(
    config: dict[str, Any], want: int, ok: bool
) -> None:
    if ok:
        bench_replay.check_pulls("n1", config, want)
    else:
        with pytest.raises(TestbedError, match="node n1's kubelet pulls"):
            bench_replay.check_pulls("n1", config, want)


# ------------------------------------------------------------------ the burst


class _BurstDriver(_RecordingDriver):
    """A cluster in which a Deployment's replicas are bound at once to n1 and n2 in turn
    and Ready 3 s (n1) or 5 s (n2) after it was created, each with its Scheduled and
    Pulled events (the first replica of a node pulled 2 s after waiting 1 s)."""

    def create_deployment(self, document: Mapping[str, Any]) -> dict[str, Any]:
        self.deployment = (self.clock.now, copy.deepcopy(dict(document)))
        return {"metadata": {"creationTimestamp": self._stamp(self.clock.now)}}

    def delete_deployment(self, name: str) -> bool:
        self.deleted = name
        return True

    def pods(self) -> list[dict[str, Any]]:
        at, document = self.deployment
        template = document["spec"]["template"]
        out = []
        for i in range(document["spec"]["replicas"]):
            node, ready_after = ("n1", 3.0) if i % 2 == 0 else ("n2", 5.0)
            ready = self.clock.now - at >= ready_after
            status: dict[str, Any] = {
                "phase": "Running" if ready else "Pending",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "lastTransitionTime": self._stamp(at + ready_after),
                    }
                ],
            }
            if ready:
                started = {"startedAt": self._stamp(at + ready_after)}
                status["containerStatuses"] = [{"name": "main", "state": {"running": started}}]
            out.append(
                {
                    "metadata": {
                        "name": f"burst-{i}",
                        "uid": f"uid-{i}",
                        "labels": template["metadata"]["labels"],
                        "creationTimestamp": self._stamp(at),
                    },
                    "spec": {"nodeName": node},
                    "status": status,
                }
            )
        return out

    def events(self, reason: str) -> list[dict[str, Any]]:
        at, _ = self.deployment
        if reason == "Scheduled":
            return [
                {
                    "reason": "Scheduled",
                    "involvedObject": {"uid": f"uid-{i}"},
                    "reportingComponent": "sched-default-scheduler",
                    "eventTime": self._stamp(at + 0.25),
                    "message": f"Successfully assigned ns/burst-{i} to n1",
                }
                for i in range(4)
            ]
        message = 'Successfully pulled image "x" in 2s (3s including waiting). Image size: 9 bytes.'
        return [
            {
                "reason": "Pulled",
                "involvedObject": {"uid": f"uid-{i}"},
                "firstTimestamp": self._stamp(at + 3),
                "message": message,
            }
            for i in range(2)
        ]


def test_the_burst_is_one_deployment_timed_until_its_last_replica_is_ready() -> None:
    trace = generate_trace(3, SMALL)
    clock = _Clock()
    driver = _BurstDriver(clock)
    replay = Replay(
        driver,  # type: ignore[arg-type]
        trace,
        "10.0.0.1:5000",
        access_log=lambda offset: [],
        log_end=lambda: 0,
        build=TraceBuild({}, {}),
        clock=clock,
        wall=lambda: 1_800_000_000 + clock.now,
        sleep=clock.sleep,
    )
    burst = replay.burst("default-scheduler", "run-7", trace.images[0].name, 4, 20)
    _, document = driver.deployment
    spec = document["spec"]
    assert spec["replicas"] == 4
    assert spec["selector"]["matchLabels"] == {"layersched.io/replay-burst": "run-7"}
    pod = spec["template"]["spec"]
    # a Deployment's pods restart always; each asks a twentieth of a worker (2 cores)
    assert pod["restartPolicy"] == "Always"
    assert pod["schedulerName"] == "sched-default-scheduler"
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == "100m"
    assert pod["containers"][0]["image"].endswith(f"/replay/{trace.images[0].name}:run-7")
    # the last replica (on n2) was Ready 5 s after the Deployment was made
    assert burst["all_ready_s"] == 5.0
    assert 5.0 <= burst["observed_all_ready_s"] <= 5.5
    assert driver.deleted == "burst"
    first = burst["pods"][0]
    # bound a quarter of a second after creation (the event's microseconds), its pull of
    # 2 s waited 1 s behind another
    assert first["scheduled_at_s"] - first["created_at_s"] == pytest.approx(0.25)
    assert first["wait_behind_s"] == 1.0 and first["pull_s"] == 2.0
    assert first["image_size_bytes"] == 9
    assert burst["pods"][3]["pulled"] is None  # no event for it


def test_every_plugin_arm_is_a_profile_the_testbed_runs() -> None:
    # the in-flight plugin arm (and the other plugin arms) are profiles of the testbed's
    # plugin process under --replay-arms, named as the replay's arms: a run finds them
    configs = generate_testbed_configs(
        TestbedSchedulers(
            kubeconfig="/k",
            extender_url="http://e",
            extender_timeout_s=1,
            kubernetes_version=kubernetes_build().version,
            replay_arms=True,
        )
    )
    profiles = {p["schedulerName"]: p for p in configs[LAYER_LOCALITY_PLUGIN_SCHEDULER]["profiles"]}
    in_flight = report.arm(REPLAY_PLUGIN_INFLIGHT_SCHEDULER)
    assert in_flight.key in report.ARM_KEYS
    assert in_flight.profile.strategy == "in-flight" and in_flight.profile.via == "plugin"
    (args,) = [c["args"] for c in profiles[in_flight.key]["pluginConfig"]]
    assert args["strategy"] == "in-flight"
    assert (
        in_flight.profile.weight
        == profiles[in_flight.key]["plugins"]["score"]["enabled"][0]["weight"]
    )
    # told the kubelets' pull mode in the simulator as on the testbed
    assert in_flight.simulated("parallel").strategy == "in-flight+parallel"
    assert {"layer-locality-plugin-replay", "layer-locality-plugin-no-imagelocality"} < set(
        profiles
    )
    # the spread-off arm (issue 42): spread off on the testbed and in the simulator, and
    # ImageLocality as the testbed's profile has it
    no_spread = report.arm("layer-locality-plugin-no-spread")
    (args,) = [c["args"] for c in profiles[no_spread.key]["pluginConfig"]]
    assert args["spread"] is False
    assert no_spread.profile.strategy == "layer-locality"  # sim/settings.py: spread off
    keeps = "disabled" not in profiles[no_spread.key]["plugins"]["score"]
    assert (no_spread.profile.image_locality_weight > 0) is keeps


# ------------------------------------------------------------------ the calibration


def _slot_pods(c_bound_s: float) -> list[dict[str, Any]]:
    """Two pods fill n1's two slots at 0 s (started 2 s and 3 s: their nominal ends 2.5 s
    and 3.5 s after those plus their lifetimes); c, created at 1 s, waits and is bound at
    ``c_bound_s``; d, on n2, is bound at once."""

    def pod(name: str, node: str, created: float, bound: float, started: float) -> dict[str, Any]:
        return {
            "name": name,
            "node": node,
            "created_wall_s": created,
            "scheduled_at_s": bound,
            "started_at_s": started,
            "pulled": True,
            "pulled_at_s": started,
            "pull_waited_s": started - bound - 0.3,
            "pull_s": 1.0,
            "bytes": 2 * MIB,
        }

    return [
        pod("a", "n1", 0.0, 0.0, 2.0),
        pod("b", "n1", 0.0, 0.0, 3.0),
        pod("c", "n1", 1.0, c_bound_s, c_bound_s + 1.0),
        pod("d", "n2", 5.0, 5.01, 7.0),
    ]


def test_the_slot_release_is_the_bind_after_the_nominal_end_that_made_room() -> None:
    # a ends at 2.5 + 10 = 12.5, b at 3.5 + 20 = 23.5: c needs one of them gone (2 slots,
    # 2 bound before it): the earlier, 12.5; bound at 15: 2.5 s. d never waited.
    lifetimes = {"a": 10.0, "b": 20.0, "c": 10.0, "d": 10.0}
    pods = _slot_pods(15.0)
    assert report.slot_release_lags(pods, lifetimes, 2) == [2.5]
    # with three slots c had room: a wait for something else, not counted
    assert report.slot_release_lags(pods, lifetimes, 3) == []
    runs = [
        {"mode": "serial", "pods": pods},
        {"mode": "serial", "pods": _slot_pods(13.5)},  # 1.0 s
        {"mode": "serial", "pods": _slot_pods(16.5)},  # 4.0 s
        {"mode": "parallel", "pods": _slot_pods(30.0)},  # another mode's
    ]
    rates = {"n1": 20_000_000, "n2": 20_000_000}
    found = report.overheads(runs, "serial", rates, lifetimes, 2)
    # the median of the mode's lags, one value for every arm, and the lags themselves
    assert (found["slot_release_s"], found["slot_waits"]) == (2.5, 3)
    assert found["slot_release_samples_s"] == [1.0, 2.5, 4.0]
    # without the trace's lifetimes nothing is measured: the simulator frees slots at once
    assert report.overheads(runs, "serial", rates)["slot_release_s"] is None


def test_resimulate_rewrites_the_simulator_columns_and_keeps_the_runs(tmp_path: Path) -> None:
    trace = generate_trace(3, SMALL)
    trace_path = tmp_path / "trace.json"
    write_trace(trace, trace_path)
    first, second, third = (pod.name for pod in trace.pods[:3])
    lifetimes = {pod.name: pod.lifetime_s for pod in trace.pods}
    pods = _slot_pods(0.0)
    # the trace's first two pods fill n1; the third is bound 2 s after the first's end;
    # the rest go to n2 at once, one after the other
    for pod, name in zip(pods, (first, second, third, trace.pods[3].name), strict=True):
        pod["name"] = name
    for k, later in enumerate(trace.pods[4:]):
        pods.append(dict(pods[3], name=later.name, created_wall_s=100.0 * (k + 1)))
        pods[-1]["scheduled_at_s"] = pods[-1]["created_wall_s"]
    ends = pods[0]["started_at_s"] + 0.5 + lifetimes[first]
    pods[2]["scheduled_at_s"] = ends + 2.0
    pods[2]["started_at_s"] = pods[2]["pulled_at_s"] = ends + 3.0
    pods[2]["pull_waited_s"] = 0.7
    record = {"commit": "0" * 40, "date": "2026-11-29T07:28:23+00:00"}
    found = {
        "format": report.FORMAT,
        "trace": {"path": str(trace_path)},
        "burst": {"replicas": 2, "slots_per_node": 4},
        "plan": {"arms": [DEFAULT]},
        "testbed": {
            "nodes": ["n1", "n2"],
            "link_rates_bits_per_s": {"n1": 20_000_000, "n2": 5_000_000},
        },
        "runs": [{"round": 1, "mode": "serial", "arm": DEFAULT, "pods": pods}],
        "provenance": record,
    }
    results = tmp_path / "replay.json"
    results.write_text(json.dumps(found), encoding="utf-8")
    assert bench_replay.main(["resimulate", str(results)]) == 0
    again = json.loads(results.read_text(encoding="utf-8"))
    # the runs and their provenance untouched; the simulator's columns say what made them
    assert again["runs"] == found["runs"] and again["provenance"] == record
    assert len(again[report.SIMULATED_BY]["commit"] or "") == 40
    # as many seeds per node: every node starts kube-scheduler's order as often
    seeds = bench_replay.SIM_SEEDS_PER_NODE * SMALL.nodes
    assert again["simulation"]["seeds_count"] == seeds
    runs = again["simulation"]["serial"]["trace"][DEFAULT]
    assert [run["seed"] for run in runs] == list(range(seeds))
    costs = again["simulation_calibrated"]["serial"]["overheads"]
    assert costs["slot_release_s"] == pytest.approx(2.0)
    assert costs["slot_release_samples_s"] == [pytest.approx(2.0)]

    # no parallel run: no calibration for that mode
    assert "overheads" not in again["simulation_calibrated"]["parallel"]
    # the time model on the run's own nodes: one run, each pod where the run put it
    # (n1, n1, n1, then n2) whenever its node had room, the others counted
    (placed,) = again["simulation_calibrated"]["serial"]["placed"][DEFAULT]
    wanted = [0, 0, 0] + [1] * (len(trace.pods) - 3)
    elsewhere = sum(1 for n, w in zip(placed["node"], wanted, strict=True) if n != w)
    assert placed["node"][:2] == [0, 0]
    assert elsewhere == placed["unfollowed"] < len(trace.pods) - 2
    assert "placed" not in again["simulation"]["serial"]
    text = report.overheads_sentence(again)
    assert (
        "a pod's slot taken again 2.0 s after its lifetime ended (the median; each "
        "simulated pod's drawn from the 1 measured)" in text
    )
    assert "recomputed from the recorded runs at commit" in text
    # its plot drawn again beside it
    assert results.with_suffix(".png").stat().st_size > 0


def test_resimulate_refuses_a_trace_other_than_the_one_its_runs_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_path = tmp_path / "trace.json"
    write_trace(generate_trace(3, SMALL), trace_path)
    found = {
        "format": report.FORMAT,
        "trace": {"path": str(trace_path), "sha256": "0" * 64},
        "burst": {"replicas": 2, "slots_per_node": 4},
        "plan": {"arms": [DEFAULT]},
        "runs": [],
        "provenance": {"commit": "0" * 40},
    }
    results = tmp_path / "replay.json"
    results.write_text(json.dumps(found), encoding="utf-8")
    assert bench_replay.main(["resimulate", str(results)]) != 0
    assert "sha256 differs" in capsys.readouterr().err
    # nothing stored is lost
    assert json.loads(results.read_text(encoding="utf-8")) == found


def test_the_link_efficiency_counts_only_pulls_alone_on_the_link() -> None:
    # parallel pulls: n1's two 8 MiB pulls shared its 8 MiB/s link (2 s each, 8..10 and
    # 8.5..10.5), n2's ran alone at 90% of it; the simulator shares the link itself, so
    # only n2's counts: 0.9, not the median of 0.5, 0.5 and 0.9
    def pull(node: str, end: float, took: float) -> dict[str, Any]:
        return {
            "node": node,
            "pulled": True,
            "bytes": 8 * MIB,
            "pull_s": took,
            "pulled_at_s": end,
            "pull_waited_s": took,
            "created_wall_s": 0.0,
            "scheduled_at_s": 0.0,
        }

    pods = [pull("n1", 10.0, 2.0), pull("n1", 10.5, 2.0), pull("n2", 20.0, 1.0 / 0.9)]
    assert report.alone_on_the_link(pods) == [False, False, True]
    rates = {"n1": 8 * MIB * 8, "n2": 8 * MIB * 8}
    found = report.overheads([{"mode": "parallel", "pods": pods}], "parallel", rates)
    assert found["link_efficiency"] == pytest.approx(0.9)


def test_the_block_puts_the_simulator_on_the_real_nodes_beside_it() -> None:
    results = _results()
    placed = {
        DEFAULT: [{"seed": 0, "startup_s": [4.0, 5.0], "bytes_pulled": [1, 1]}],
        "layer-locality": [{"seed": 0, "startup_s": [3.0, 3.0], "bytes_pulled": [1, 0]}],
    }
    results["simulation_calibrated"] = copy.deepcopy(results["simulation"])
    results["simulation_calibrated"]["serial"]["placed"] = placed
    serial = report.markdown(results).split("**Parallel pulls")[0]
    # the default profile's real mean 5.0 s, 4.5 s on its own nodes: 0.90; the
    # extender's 3.0 s against 3.0 s: 1.00
    assert "| 0.80 **off** | 0.90 |" in serial
    assert "| 0.67 **off** | 1.00 |" in serial
    assert "within 10% of the real start-up for every arm" in serial
    placed[DEFAULT][0]["startup_s"] = [2.0, 2.0]
    serial = report.markdown(results).split("**Parallel pulls")[0]
    assert "more than 10% from the real start-up for: default profile (the baseline)." in serial
