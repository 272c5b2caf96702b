"""The scheduler benchmark's pure parts (harness/bench/scheduler_report.py,
harness/bench/bench_scheduler.py),
the no-op extender (harness/bench/noop_extender.py, in process), and the README and docs blocks
generated from the committed harness/results/scheduler.json."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))

import bench_scheduler as bench  # noqa: E402
import noop_extender as noop  # noqa: E402
import scheduler_report as report  # noqa: E402
from corpus import workload  # noqa: E402

from layersched import deploy, generated  # noqa: E402
from layersched.core.nodelayers import parse_document  # noqa: E402
from layersched_harness.evidence import provenance  # noqa: E402
from layersched_harness.testbed.scheduler_configs import batchable  # noqa: E402

# Buckets 0.1, 0.2, 0.4, +Inf with 10 observations: 4 under 0.1, 4 in (0.1, 0.2], 2 in
# (0.2, 0.4], none beyond.
METRICS = """\
# HELP demo_seconds A demo histogram.
# TYPE demo_seconds histogram
demo_seconds_bucket{result="scheduled",le="0.1"} 4
demo_seconds_bucket{result="scheduled",le="0.2"} 8
demo_seconds_bucket{result="scheduled",le="0.4"} 10
demo_seconds_bucket{result="scheduled",le="+Inf"} 10
demo_seconds_sum{result="scheduled"} 1.5
demo_seconds_count{result="scheduled"} 10
# HELP demo_answers_total Answers.
# TYPE demo_answers_total counter
demo_answers_total{reason="not_ready"} 3
"""
KEY = (("result", "scheduled"),)


@pytest.mark.parametrize(
    ("q", "expected_s"),
    [
        # rank 5 falls in (0.1, 0.2] holding ranks 4..8: 0.1 + 0.1 * (5 - 4) / 4 = 0.125
        (0.5, 0.125),
        # rank 9.9 falls in (0.2, 0.4] holding 8..10: 0.2 + 0.2 * (9.9 - 8) / 2 = 0.39
        (0.99, 0.39),
        # rank 2 in the first bucket, from 0: 0.1 * 2 / 4 = 0.05
        (0.2, 0.05),
    ],
    ids=["p50", "p99", "p20-first-bucket"],
)
def test_histogram_quantile_interpolates_like_prometheus(q: float, expected_s: float) -> None:
    histogram = report.histograms(METRICS, "demo_seconds")[KEY]
    assert histogram.quantile(q) == pytest.approx(expected_s)


def test_histogram_past_the_last_finite_bound_reports_that_bound() -> None:
    # 1 of 2 observations beyond 0.4: p99 cannot be placed, Prometheus answers 0.4
    h = report.Histogram(((0.4, 1.0), (float("inf"), 2.0)), 10.0, 2.0)
    assert h.quantile(0.99) == pytest.approx(0.4)


def test_histogram_difference_between_scrapes() -> None:
    after = report.histograms(METRICS, "demo_seconds")
    # a series the earlier scrape lacks: everything in it is new
    assert report.series_delta(after, {}) == after
    earlier = report.Histogram(((0.1, 4.0), (0.2, 6.0), (0.4, 6.0), (float("inf"), 6.0)), 1.0, 6.0)
    delta = after[KEY].minus(earlier)
    # 10 - 6 = 4 observations since, all in (0.1, 0.4]; sum 1.5 - 1.0 = 0.5 s
    assert delta.count == 4
    assert delta.sum_s == pytest.approx(0.5)
    assert delta.buckets == ((0.1, 0.0), (0.2, 2.0), (0.4, 4.0), (float("inf"), 4.0))
    # mean 0.5 / 4 = 125 ms
    assert delta.summary_ms()["mean_ms"] == pytest.approx(125.0)


def test_counters_read_the_total_samples() -> None:
    assert report.counters(METRICS, "demo_answers") == {(("reason", "not_ready"),): 3.0}


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        (set(), 700),  # nothing held: 100 + 200 + 400
        ({"a", "c"}, 200),  # only b missing
        ({"a", "b", "c", "z"}, 0),  # all held (z is irrelevant)
    ],
    ids=["empty-node", "one-missing", "all-held"],
)
def test_pull_bytes_counts_the_missing_distinct_layers(held: set[str], expected: int) -> None:
    assert report.pull_bytes({"a": 100, "b": 200, "c": 400}, held) == expected


def test_latency_stats_percentiles() -> None:
    stats = report.latency_stats([i / 1000 for i in range(1, 101)])  # 1..100 ms
    # numpy's linear percentile of 1..100: p50 = 50.5, p99 = 99.01
    assert stats["p50_ms"] == pytest.approx(50.5)
    assert stats["p99_ms"] == pytest.approx(99.0, abs=0.05)
    assert stats["max_ms"] == pytest.approx(100.0)
    assert report.latency_stats([])["p99_ms"] is None


def test_fake_node_is_ready_with_room_and_the_corpus_images() -> None:
    load = workload(200)
    item = load.node_list(1, 20, seed=1)["items"][0]
    node = bench.fake_node(item)
    assert node["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    ]
    assert node["status"]["allocatable"]["pods"] == bench.NODE_PODS
    assert len(node["status"]["images"]) == 20
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == item["metadata"]["name"]


def test_inventory_document_matches_the_node_images() -> None:
    """The fake node's NodeLayerInventory parses, and holds exactly the layers its
    status.images name (what the full-Nodes extender and the decision check use)."""
    load = workload(200)
    item = load.node_list(1, 20, seed=1)["items"][0]
    parsed = parse_document(bench.inventory_document(load, item), "test")
    assert parsed.node == item["metadata"]["name"]
    assert len(parsed.images) == 20
    assert parsed.layer_digests() == set(bench.node_layers(load, item))


def _plane(tmp_path: Path) -> bench.ControlPlane:
    return bench.ControlPlane(
        address="10.0.0.1",
        api_server="https://10.0.0.1:6443",
        kubeconfig=tmp_path / "k",
        scheduler_kubeconfig=tmp_path / "s",
        extender_kubeconfig=tmp_path / "e",
        ca_file=tmp_path / "ca",
        admin_cert=tmp_path / "c",
        admin_key=tmp_path / "key",
        bin_dir=tmp_path,
        pidfiles={},
    )


def test_scheduler_configuration_per_mode(tmp_path: Path) -> None:
    plane = _plane(tmp_path)
    assert "extenders" not in bench.scheduler_config(plane, "default")
    full = bench.scheduler_config(plane, "extender-nodes")["extenders"][0]
    names = bench.scheduler_config(plane, "extender-node-names")["extenders"][0]
    zeros = bench.scheduler_config(plane, "extender-noop")["extenders"][0]
    assert full["nodeCacheCapable"] is False
    assert names["nodeCacheCapable"] is True
    # the no-op extender gets exactly the request layersched's NodeNames extender gets
    assert zeros == names
    assert names["httpTimeout"] == "5s" and names["ignorable"] is True
    assert "--watch" in bench.extender_argv(plane, "extender-node-names", tmp_path / "l")
    assert "--watch" not in bench.extender_argv(plane, "extender-nodes", tmp_path / "l")
    assert str(bench.NOOP_EXTENDER) in bench.extender_argv(plane, "extender-noop", tmp_path / "l")


@pytest.mark.parametrize("config", report.CONFIGURATIONS)
def test_every_row_is_the_generators_configuration_for_the_build(
    tmp_path: Path, config: str
) -> None:
    """Each row's file is what layersched.deploy renders for a process of the build's
    release (v1 for 1.37), with the client rate raised and batching possible in every row
    alike; nothing of it is written by the benchmark itself."""
    plane = _plane(tmp_path)
    doc = bench.scheduler_config(plane, config)
    version = bench.kubernetes_build().version
    assert doc["apiVersion"] == deploy.scheduler_api_version_for(version)
    assert doc["clientConnection"] == {
        "kubeconfig": str(plane.scheduler_kubeconfig),
        "qps": bench.SCHEDULER_CLIENT_QPS,
        "burst": bench.SCHEDULER_CLIENT_QPS,
    }
    [profile] = doc["profiles"]
    assert profile["schedulerName"] == "default-scheduler"  # the pods name no scheduler
    # PodTopologySpread's system defaults off in every row: pods can be signed, batched
    assert {
        "name": "PodTopologySpread",
        "args": {"defaultingType": "List", "defaultConstraints": []},
    } in profile["pluginConfig"]
    if config == "default":
        assert batchable(deploy.default_scheduler_config())["profiles"] == doc["profiles"]


def test_the_plugin_row_is_the_generators_plugin_profile(tmp_path: Path) -> None:
    """The plugin rows' profiles are layersched.deploy's plugin_scheduler_config (the
    install's plugin mode, ImageLocality as each row says), with the scheduler's kubeconfig
    for the plugin's informer and a staleness bound the run cannot reach: LayerLocality at
    preScore and score beside the defaults."""
    plane = _plane(tmp_path)
    version = bench.kubernetes_build().version
    expected = deploy.plugin_scheduler_config(
        deploy.PluginArgs(
            kubeconfig=str(plane.scheduler_kubeconfig),
            inventory_max_age_s=bench.PLUGIN_INVENTORY_MAX_AGE_S,
            inventory_sync_timeout_s=bench.PLUGIN_INVENTORY_SYNC_TIMEOUT_S,
        ),
        "default-scheduler",
        api_version=deploy.scheduler_api_version_for(version),
        kubernetes_version=version,
        image_locality=True,
    )
    [profile] = bench.scheduler_config(plane, "plugin")["profiles"]
    assert profile == batchable(expected)["profiles"][0]
    enabled = {point: [p["name"] for p in v["enabled"]] for point, v in profile["plugins"].items()}
    assert enabled["preScore"] == ["LayerLocality"] and enabled["score"] == ["LayerLocality"]
    [plugin_config] = [c for c in profile["pluginConfig"] if c["name"] == "LayerLocality"]
    assert plugin_config["args"]["kubeConfigPath"] == str(plane.scheduler_kubeconfig)
    # a day: the inventories are created once, and a slow run lasts hours at most
    assert plugin_config["args"]["inventoryMaxAgeSeconds"] == 86_400
    # listing 5,000 inventories at start-up may take minutes on a loaded machine
    assert plugin_config["args"]["inventorySyncTimeoutSeconds"] == 600


def test_kube_scheduler_serves_the_benchmarks_reads_on_its_secure_port(tmp_path: Path) -> None:
    # 1.25+ has no insecure port: metrics and pprof on the secure port, open to the bench
    argv = bench.scheduler_argv(Path("/k"), tmp_path / "c.yaml", _plane(tmp_path), tmp_path)
    assert f"--secure-port={bench.SCHEDULER_METRICS_PORT}" in argv
    [paths] = [a for a in argv if a.startswith("--authorization-always-allow-paths=")]
    assert {"/healthz", "/metrics", "/debug/pprof/*"} <= set(paths.split("=", 1)[1].split(","))


def test_a_stand_in_plugin_is_enabled_at_score_beside_the_defaults(tmp_path: Path) -> None:
    [profile] = bench.scheduler_config(_plane(tmp_path), "plugin", "NodeResourcesMostAllocated")[
        "profiles"
    ]
    assert profile["schedulerName"] == "default-scheduler"
    assert profile["plugins"] == {
        "score": {"enabled": [{"name": "NodeResourcesMostAllocated", "weight": 1}]}
    }


@pytest.mark.parametrize(
    ("content", "absent"),
    [
        # a Go binary registering the plugin carries its name as a string constant
        (b"\x7fELF...imagelocality...LayerLocality...", False),
        # the stock build: ImageLocality and friends, no LayerLocality
        (b"\x7fELF...ImageLocality...NodeResourcesFit...", True),
    ],
    ids=["plugin-built-in", "stock-build"],
)
def test_plugin_absent_looks_for_the_registered_name(
    tmp_path: Path, content: bytes, absent: bool
) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_bytes(content)
    reason = bench.plugin_absent(binary, "LayerLocality", "the test's kube-scheduler")
    assert (reason is not None) == absent
    if reason:
        assert reason.startswith("the test's kube-scheduler has no LayerLocality Score plugin")
        assert "make kubernetes" in reason


def test_plugin_absent_names_a_missing_binary(tmp_path: Path) -> None:
    reason = bench.plugin_absent(tmp_path / "nope")
    assert reason is not None
    assert str(tmp_path / "nope") in reason
    assert "make kubernetes" in reason


def test_the_stopped_process_is_explained_by_its_last_error_line(tmp_path: Path) -> None:
    log = tmp_path / "kube-scheduler.log"
    log.write_text(
        'I1124 00:00:01 "Starting Kubernetes Scheduler"\n'
        'E1124 00:00:02 couldn\'t create scheduler: plugin "LayerLocality" does not exist\n'
        "I1124 00:00:02 exiting\n"
    )
    assert bench._last_line(log).endswith('plugin "LayerLocality" does not exist')
    log.write_text("just one line\n")
    assert bench._last_line(log) == "just one line"
    assert bench._last_line(tmp_path / "missing.log") == "no log"


def test_a_process_that_exits_is_reported_at_once_not_after_the_timeout(tmp_path: Path) -> None:
    # a program that dies at start-up (a syntax error, a refused flag) is not waited for
    # until the readiness timeout: the row ends with its last line, not "did not become
    # ready within 600 s"
    argv = [sys.executable, "-c", "import sys; print('error: bad flag --x'); sys.exit(3)"]
    with (
        pytest.raises(bench.BenchError, match=r"^p exited with 3 \(error: bad flag --x\)"),
        bench._process(argv, tmp_path / "p.log", "http://127.0.0.1:9/", "p", 600.0),
    ):
        pass


# ------------------------------------------------------------------ the drain


@pytest.mark.parametrize(
    ("times_s", "expected"),
    [
        # 5 bindings over 2 s: 4 intervals / 2 s = 2 pods/s (not 5 / 2)
        ([10.0, 10.5, 11.0, 11.5, 12.0], 2.0),
        # order does not matter: first 1.0, last 1.25, 3 intervals / 0.25 s = 12
        ([1.25, 1.0, 1.1, 1.2], 12.0),
        # one binding spans nothing
        ([3.0], None),
        # no time between the first and the last
        ([3.0, 3.0], None),
        ([], None),
    ],
    ids=["even", "unsorted", "one", "no-span", "none"],
)
def test_drain_rate_between_the_first_and_the_last_binding(
    times_s: list[float], expected: float | None
) -> None:
    assert report.drain_rate(times_s) == (pytest.approx(expected) if expected else None)


def test_event_time_is_microseconds_since_the_epoch() -> None:
    # 0.000250 s apart, on the scheduler's clock (MicroTime); a double near 1.8e9 s
    # resolves 2**-22 s (0.24 us), far below the milliseconds a drain is read in
    later = report.event_time_s("2026-11-24T00:10:00.000250Z")
    earlier = report.event_time_s("2026-11-24T00:10:00.000000Z")
    assert later - earlier == pytest.approx(0.00025, abs=1e-6)
    # 2026-11-24T00:10:00Z: 20,781 days after the epoch, + 600 s
    assert report.event_time_s("2026-11-24T00:10:00Z") == 20_781 * 86_400 + 600
    with pytest.raises(ValueError, match="no time zone"):
        report.event_time_s("2026-11-24T00:10:00")


def _event(
    pod: str, at: str | None, reason: str = "Scheduled", kind: str = "Pod"
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "reason": reason,
        "regarding": {"kind": kind, "name": pod, "namespace": "bench"},
    }
    if at is not None:
        event["eventTime"] = f"2026-11-24T00:10:{at}Z"
    return event


def test_binding_times_from_scheduled_events() -> None:
    events = [
        _event("a", "01.000000"),
        # a second event for a (a series update): the earliest is the binding
        _event("a", "05.000000"),
        _event("b", "02.500000"),
        # not a binding, not a pod, not one of ours, no time: all ignored
        _event("c", "03.000000", reason="FailedScheduling"),
        _event("d", "03.000000", kind="Node"),
        _event("other", "03.000000"),
        _event("e", None),
    ]
    times = report.binding_times_s(events, ["a", "b", "c", "d", "e"])
    assert set(times) == {"a", "b"}
    assert times["b"] - times["a"] == pytest.approx(1.5)


def _watch(bound_at: dict[str, float]) -> bench.BindWatch:
    watch = bench.BindWatch(api=None)  # type: ignore[arg-type]  # never started
    watch.bound_at.update(bound_at)
    return watch


def test_drain_result_takes_the_events_when_every_binding_has_one() -> None:
    names = ["p0", "p1", "p2", "p3"]
    phase = bench.Phase(names, {n: 100.0 + i * 0.1 for i, n in enumerate(names)}, complete=True)
    # the watch saw them 0.5 s apart: 3 / 1.5 = 2 pods/s
    watch = _watch({n: 200.0 + i * 0.5 for i, n in enumerate(names)})
    # the scheduler bound them 0.25 s apart, from 1000.0: 3 / 0.75 = 4 pods/s
    events = {n: 1000.0 + i * 0.25 for i, n in enumerate(names)}
    result = bench.drain_result(phase, watch, events, started_at_s=998.0)
    assert result["binding_source"] == "events"
    assert result["pods_per_s"] == pytest.approx(4.0)
    assert result["pods_per_s_watch"] == pytest.approx(2.0)
    assert result["span_s"] == pytest.approx(0.75)
    # started at 998.0, first binding at 1000.0
    assert result["start_to_first_binding_s"] == pytest.approx(2.0)
    # created 0.1 s apart: 0.3 s in all
    assert result["created_in_s"] == pytest.approx(0.3)
    # one event missing: the watch's rate stands in, and says so
    result = bench.drain_result(phase, watch, dict(list(events.items())[:3]), 998.0)
    assert result["binding_source"] == "watch"
    assert result["pods_per_s"] == pytest.approx(2.0)
    assert result["events"] == 3


def test_drain_result_counts_only_bound_pods() -> None:
    names = ["p0", "p1", "p2"]
    phase = bench.Phase(names, dict.fromkeys(names, 0.0), complete=False)
    watch = _watch({"p0": 1.0, "p1": 2.0})  # p2 never bound
    result = bench.drain_result(phase, watch, {"p0": 50.0, "p1": 50.5}, 49.0)
    assert (result["pods"], result["bound"], result["complete"]) == (3, 2, False)
    # two bindings 0.5 s apart: 1 / 0.5 = 2 pods/s, from the events (one per bound pod)
    assert result["binding_source"] == "events"
    assert result["pods_per_s"] == pytest.approx(2.0)


def _rounds(rates: list[float], p99s: list[float] | None = None) -> dict[str, Any]:
    """A configuration's row from its rounds (as the benchmark summarises them)."""
    p99s = p99s or [100.0] * len(rates)
    return report.summarise_rounds(
        [
            {"round": r, "pods_per_s": rate, "p50_ms": p99 / 2, "p99_ms": p99}
            for r, (rate, p99) in enumerate(zip(rates, p99s, strict=True))
        ]
    )


def test_rounds_are_summarised_by_their_median_and_range() -> None:
    row = _rounds([90.0, 110.0, 100.0], [30.0, 10.0, 20.0])
    assert row["pods_per_s"] == 100.0 and row["pods_per_s_range"] == [90.0, 110.0]
    assert row["p99_ms"] == 20.0 and row["p99_ms_range"] == [10.0, 30.0]
    assert [r["pods_per_s"] for r in row["rounds"]] == [90.0, 110.0, 100.0]
    # a round that failed is listed; a configuration whose every round failed is skipped
    failed = report.summarise_rounds([{"round": 0, "skipped": "boom"}])
    assert failed == {"skipped": "boom"}


@pytest.mark.parametrize(
    ("rates", "hop", "ours"),
    [
        # per round: 1000/100 = 10 ms; 1000/80 = 12.5 ms; 1000/50 = 20 ms: hop 2.5, ours 7.5
        (([100.0] * 3, [80.0] * 3, [50.0] * 3), 2.5, 7.5),
        # one round shows our answer faster than the zeros (1000/250 < 1000/200): noise, so
        # no cost is given for it, and never a negative one
        (([400.0] * 3, [200.0] * 3, [190.0, 250.0, 190.0]), 2.5, None),
        # two rounds only: no spread to judge an effect against
        (([100.0] * 2, [80.0] * 2, [50.0] * 2), None, None),
        # the hop shows in every round (1.11, 1.09, 1.11 ms) but the default alone moved
        # 2 ms between rounds (10 and 8 ms): within the noise; ours over the no-op's
        # (8.89 to 10.91 ms, its own spread 2.02 ms) is not
        (([100.0, 125.0, 100.0], [90.0, 110.0, 90.0], [50.0] * 3), None, 8.89),
    ],
    ids=["split", "negative-round-is-noise", "too-few-rounds", "below-the-base-spread"],
)
def test_hop_split_per_pod(
    rates: tuple[list[float], ...], hop: float | None, ours: float | None
) -> None:
    configs = ("default", "extender-noop", "extender-node-names")
    rows = {c: _rounds(r) for c, r in zip(configs, rates, strict=True)}
    split = report.hop_split_ms(rows)
    assert split is not None
    assert split["hop"].get("median_ms") == hop and split["hop"]["resolved"] is (hop is not None)
    assert split["layersched"].get("median_ms") == ours
    assert split["layersched"]["resolved"] is (ours is not None)
    del rows["extender-noop"]
    assert report.hop_split_ms(rows) is None  # the no-op row did not run: no split


# ------------------------------------------------------------------ targets


@pytest.mark.parametrize(
    ("config", "rates", "p99s", "verdict"),
    [
        # plugin (issue 43): every round >= 0.97x (0.97, 0.98, 0.99) and p99 <= 1.1x: met
        ("plugin", [97.0, 98.0, 99.0], [105.0, 110.0, 100.0], "met"),
        # plugin: every round < 0.97x: missed, whatever the p99
        ("plugin", [90.0, 91.0, 96.0], [100.0] * 3, "missed"),
        # plugin: the rounds straddle 0.97x (0.95 .. 0.99): the effect is within the noise
        ("plugin", [95.0, 97.0, 99.0], [100.0] * 3, "inconclusive"),
        # plugin: every round's p99 over 1.1x (1.15 .. 1.2): missed
        ("plugin", [99.0] * 3, [115.0, 120.0, 116.0], "missed"),
        # NodeNames: 0.8x .. 0.85x and p99 2.0x at most: met
        ("extender-node-names", [80.0, 85.0, 82.0], [200.0, 150.0, 190.0], "met"),
        # NodeNames: p99 2.5x in every round: missed
        ("extender-node-names", [90.0] * 3, [250.0] * 3, "missed"),
    ],
    ids=[
        "plugin-met",
        "plugin-missed",
        "plugin-straddles",
        "plugin-p99-missed",
        "names-met",
        "names-p99-missed",
    ],
)
def test_target_verdicts(config: str, rates: list[float], p99s: list[float], verdict: str) -> None:
    rows = {"default": _rounds([100.0] * 3, [100.0] * 3), config: _rounds(rates, p99s)}
    got = report.target_verdicts(rows)[config]
    assert got["verdict"] == verdict
    text = report.verdict_text(config, got)
    if verdict == "inconclusive":
        assert "no verdict" in text and "met" not in text and "missed" not in text
    else:
        assert text.endswith(f"**{verdict}**.")


def test_an_overloaded_machine_or_too_few_rounds_gives_no_verdict() -> None:
    rows = {"default": _rounds([100.0] * 3), "plugin": _rounds([99.0] * 3)}
    assert report.target_verdicts(rows)["plugin"]["verdict"] == "met"
    busy = report.target_verdicts(rows, "the load average reached 9.1 on 2 cores")["plugin"]
    assert busy["verdict"] == "inconclusive" and "9.1 on 2 cores" in busy["why"]
    one = {"default": _rounds([100.0]), "plugin": _rounds([99.0])}
    assert report.target_verdicts(one)["plugin"]["verdict"] == "inconclusive"


def test_no_verdict_without_the_row_or_the_default() -> None:
    base = _rounds([100.0] * 3)
    # a skipped plugin row gives no verdict, the NodeNames row still does
    rows = {"default": base, "plugin": {"skipped": "no plugin"}, "extender-node-names": base}
    assert set(report.target_verdicts(rows)) == {"extender-node-names"}
    assert report.target_verdicts({"extender-node-names": base}) == {}
    assert report.target_verdicts({"default": {"skipped": "x"}, "plugin": base}) == {}


# ------------------------------------------------------------------ profiles

# Two threads; the main thread's request handler (3 samples) and resolver (1), a worker
# (2); `walk` recursive in one stack.
_RUN, _HANDLE = "run (aiohttp/web.py:1)", "handle (layersched/extender/_server.py:9)"
_SCORE, _WALK = "score (layersched/core/layerindex.py:5)", "walk (layersched/core/layers.py:7)"
PROFILE = (
    f"thread (0x1): MainThread;{_RUN};{_HANDLE};{_SCORE} 3\n"
    f"thread (0x1): MainThread;{_RUN};decode (msgspec.py:2) 1\n"
    f"thread (0x2): ThreadPoolExecutor-0_0;{_WALK};{_WALK} 2\n"
)


def test_collapsed_profile_self_and_total_samples() -> None:
    profile = report.collapsed_profile(PROFILE)
    assert profile.samples == 6
    assert profile.threads == {"MainThread": 4, "ThreadPoolExecutor-0": 2}
    score = "score (layersched/core/layerindex.py:5)"
    walk = "walk (layersched/core/layers.py:7)"
    assert profile.self_samples == {score: 3, "decode (msgspec.py:2)": 1, walk: 2}
    # run is on 4 samples' stacks, never innermost; walk's recursion counts once
    assert profile.total_samples["run (aiohttp/web.py:1)"] == 4
    assert "run (aiohttp/web.py:1)" not in profile.self_samples
    assert profile.total_samples[walk] == 2


def test_py_spy_counts_from_its_log() -> None:
    log = (
        "py-spy> Sampling process 250 times a second. Press Control-C to exit.\n"
        "py-spy> Wrote raw flamegraph data to 'x.txt'. Samples: 400 Errors: 3\n"
    )
    assert report.py_spy_counts(log) == (400, 3)
    assert report.py_spy_counts("py-spy> Error: Permission denied\n") is None


def test_collapsed_profile_rejects_a_line_without_a_count() -> None:
    with pytest.raises(ValueError, match="profile line 2"):
        report.collapsed_profile("a;b 1\na;b\n")


@pytest.mark.parametrize(
    ("frame", "package"),
    [
        ("f (aiohttp/web_protocol.py:438)", "aiohttp"),
        # layersched's own code by subpackage: core (scoring) apart from the extender
        ("LayerIndex.layer_holders (layersched/core/layerindex.py:535)", "layersched.core"),
        ("_json (layersched/extender/_server.py:78)", "layersched.extender"),
        ("x (layersched/__init__.py:3)", "layersched"),
        ("SSLSocket.read (ssl.py:1158)", "ssl"),
        ("__init__ (<string>:2)", "<string>"),
    ],
    ids=["library", "layersched-core", "layersched-extender", "layersched-top", "module", "exec"],
)
def test_frame_package(frame: str, package: str) -> None:
    assert report.frame_package(frame) == package


def test_profile_summary_shares() -> None:
    summary = report.profile_summary(report.collapsed_profile(PROFILE), keep=2)
    # self: score 3/6, walk 2/6, decode 1/6 (cut by keep=2)
    assert [(e["frame"].split()[0], e["share"]) for e in summary["self"]] == [
        ("score", 0.5),
        ("walk", 0.3333),
    ]
    # each self frame carries its total share: score is on 3 of 6 stacks, walk on 2
    assert [e["total_share"] for e in summary["self"]] == [0.5, 0.3333]
    # by package: layersched.core 5/6 (score + walk), msgspec 1/6
    assert summary["packages"] == {"layersched.core": 0.8333, "msgspec": 0.1667}
    assert report.profile_summary(report.collapsed_profile(""))["samples"] == 0


# What `go tool pprof -top -cum` prints (shortened from a kube-scheduler profile).
_VENDOR, _MODULE = "k8s.io/kubernetes/vendor/", "k8s.io/kubernetes/"
PPROF_TOP = (
    "File: kube-scheduler\n"
    "Type: cpu\n"
    "Duration: 5s, Total samples = 660ms (13.20%)\n"
    "Showing nodes accounting for 500ms, 75.76% of 660ms total\n"
    "      flat  flat%   sum%        cum   cum%\n"
    f"         0     0%     0%      160ms 24.24%  {_VENDOR}k8s.io/client-go/util/workqueue.Run\n"
    f"      50ms  7.58%  7.58%       80ms 12.12%  {_MODULE}pkg/scheduler/core.(*E).Prioritize\n"
    "    1.20ms  0.18%  7.76%     1.20ms  0.18%  encoding/json.Marshal\n"
)


def test_pprof_top_reads_shares_and_shortens_names() -> None:
    top = report.pprof_top(PPROF_TOP)
    # "of 660ms total"
    assert top["cpu_s"] == pytest.approx(0.66)
    # the vendor tree and the module prefix are cut; shares are pprof's percentages
    assert [(f["function"], f["flat_share"], f["cum_share"]) for f in top["functions"]] == [
        ("k8s.io/client-go/util/workqueue.Run", 0.0, 0.2424),
        ("pkg/scheduler/core.(*E).Prioritize", 0.0758, 0.1212),
        ("encoding/json.Marshal", 0.0018, 0.0018),
    ]
    assert report.pprof_top("no profile here") == {"cpu_s": None, "functions": []}


# ------------------------------------------------------------------ rendering


def _row(rate: float, p99_ms: float, **extra: Any) -> dict[str, Any]:
    phase = {"pods": 10, "bound": 10, "complete": True}
    return {
        "drain": {**phase, "events": 10, "binding_source": "events", "pods_per_s": rate},
        "steady": phase,
        "pods_per_s": rate,
        "p50_ms": p99_ms / 2,
        "p99_ms": p99_ms,
        "resources": {"drain": {"kube-scheduler": {"cpu_s": 1.5}, "kube-apiserver": {"cpu_s": 2}}},
        "scheduler_metrics": {"drain": {"scheduling_algorithm": [{"mean_ms": 4.25}]}},
        "decision": {"mean_pull_mib": 22.5},
        **extra,
    }


def _measured(rates: list[float], p99_ms: float, **extra: Any) -> dict[str, Any]:
    """A configuration's summary over rounds of ``_row``s at ``rates`` (same p99)."""
    return report.summarise_rounds(
        [_row(rate, p99_ms, round=r, **extra) for r, rate in enumerate(rates)]
    )


def _results(load_max: float = 1.5) -> dict[str, Any]:
    names = _measured(
        [160.0, 150.0, 170.0],
        90.0,
        extender_metrics={"drain": {"requests": {"prioritize": {"mean_ms": 1.234}}}},
    )
    rows = {
        "default": _measured([200.0, 190.0, 210.0], 50.0),
        "plugin": {"skipped": "no LayerLocality in this kube-scheduler"},
        "extender-node-names": names,
        "extender-noop": _measured([190.0, 180.0, 215.0], 60.0),
        "extender-nodes": _measured([20.0, 20.0, 20.0], 5000.0),
    }
    rows["extender-nodes"]["drain"] |= {"complete": False, "bound": 7, "binding_source": "watch"}
    return {
        "provenance": {
            "commit": "0123456789abcdef",
            "dirty": False,
            "date": "2026-11-27T09:00:00+00:00",
            "machine": {"cpus": 2, "memory_gib": 23.0, "model": "Test CPU", "kernel": "6"},
            "kubernetes_version": "v1.37.2",
            "load_average_1m_at_start": 0.5,
            "load_average_1m_max": load_max,
            "load_average_1m_at_end": 1.0,
        },
        "settings": {
            "kubernetes_version": "v1.37.2",
            "rounds": 3,
            "images_per_node": 50,
            "drain_pods": 10,
            "steady_pods": 10,
            "steady_rate_pods_per_s": 20.0,
            "profile_rate_hz": 100,
            "development": None,
        },
        "node_counts": [500],
        "500": rows,
        "profiles": {},
        "run_time_s": 90.0,
    }


def test_markdown_rows_ratios_and_notes() -> None:
    text = report.markdown(_results())
    lines = text.splitlines()
    [names] = [line for line in lines if line.startswith("| 500 | + layersched extender, `No")]
    # medians: 160 / 200 = 0.80x, the rounds' range beside; p99 90 / 50 = 1.80x
    assert "| 160.0 (150.0-170.0) | 0.80x (0.79-0.81) |" in names
    # no CPU per pod measured in these rows (results from before issue 43): "-"
    assert "| 1.80x | - | - | 4.2 ms | 1.23 ms | 22.5 MiB | 1.5 / - / 2.0 / - |" in names
    assert "not run: no LayerLocality in this kube-scheduler" in text
    assert "commit `0123456789ab`" in text and "2 CPUs (Test CPU)" in text
    # NodeNames: per round 0.8, 0.79, 0.81 of the default: straddles 0.8x, so no verdict
    assert "`extender-node-names` targets:** drain throughput 0.8x (rounds 0.79-0.81x)" in text
    assert "**inconclusive** (the rounds' spread straddles a target" in text
    # per round, against the base's own spread from round to round: the no-op's costs
    # (0.29 ms at most) are within the default's 0.5 ms; ours over the no-op's, 0.99 to
    # 1.23 ms, are each above the no-op's 0.9 ms: resolved, median 1.11 ms
    assert (
        "the extender hop alone (no-op extender) is within the noise (at most 0.29 ms in a "
        "round, against the default's own spread of 0.5 ms from round to round)"
    ) in text
    assert (
        "layersched's answer on top of the hop adds 1.11 ms (rounds 0.99-1.23 ms; the no-op "
        "extender's own spread 0.9 ms)"
    ) in text
    assert "drain: 7 of 10 pods bound" in text
    assert "the drain rate is the watch's" in text
    assert "Development run" not in text and "Inconclusive run" not in text
    results = _results()
    results["settings"]["development"] = "500 nodes only, load average 9"
    assert report.markdown(results).startswith(
        "**Development run, not the final table:** 500 nodes only, load average 9"
    )


def test_an_overloaded_run_is_labelled_inconclusive_and_prints_no_verdict() -> None:
    text = report.markdown(_results(load_max=4.5))
    assert text.startswith("**Inconclusive run:** the load average reached 4.5 on 2 cores")
    verdicts = [line for line in text.splitlines() if "targets:**" in line]
    assert verdicts and all("no verdict" in line for line in verdicts)
    assert "**met**" not in text and "**missed**" not in text


def test_no_negative_cost_is_ever_printed() -> None:
    # the no-op extender faster than the default in every round: a negative cost is noise
    results = _results()
    results["500"]["extender-noop"] = _measured([220.0, 230.0, 240.0], 60.0)
    text = report.markdown(results)
    [cost] = [line for line in text.splitlines() if "each pod's cost" in line]
    assert "shows no cost in any of the 3 rounds (within the noise)" in cost
    assert " -" not in cost.replace(" - ", "")


def test_a_stand_in_plugin_row_says_so_and_gets_no_verdict() -> None:
    """``--plugin-name`` checks the plugin row's machinery with a plugin 1.20 has; the
    row must never read as LayerLocality's."""
    results = _results()
    results["500"]["plugin"] = _row(199.0, 51.0, plugin_name="NodeResourcesMostAllocated")
    text = report.markdown(results)
    assert (
        "| stand-in Score plugin `NodeResourcesMostAllocated` (checks the plugin row's "
        "machinery; not LayerLocality) | 199.0 | 0.99x" in text
    )
    assert "plugin" not in report.target_verdicts(results["500"])
    results["500"]["plugin"]["plugin_name"] = "LayerLocality"
    assert f"| {report.LABELS['plugin']} | 199.0 |" in report.markdown(results)
    assert "plugin" in report.target_verdicts(results["500"])


def test_profile_markdown_from_the_results() -> None:
    results = _results()
    assert "No profile was taken" in report.profile_markdown(results)
    summary = report.profile_summary(report.collapsed_profile(PROFILE))
    results["profiles"] = {
        "500": {
            "extender-node-names": {
                "drain": {"span_s": 0.05, "pods_per_s": 150.0},
                "sampled_s": 2.0,
                "rate_hz": 100,
                "sample_errors": 2,
                "extender": summary,
            }
        }
    }
    text = report.profile_markdown(results)
    # 6 samples in a 0.05 s drain at 100 Hz (5 expected): the GIL held 120%; unprofiled 160
    assert "6 samples; the GIL was held 120% of the drain" in text
    assert "attached 150.0 pods/s (unprofiled: 160.0); 2 samples lost." in text
    assert "Self time by package: layersched.core 83%, msgspec 17%." in text
    assert "| `score (layersched/core/layerindex.py:5)` | 50.0% | 50.0% |" in text
    # run is on 4 of 6 stacks; no frame is on all 6 here, so none is left out
    assert "| `run (aiohttp/web.py:1)` | 66.7% |" in text
    # a frame on every stack (the entry chain) is left out of the total table only
    rooted = report.collapsed_profile(
        f"main (m.py:1);{_RUN};{_SCORE} 3\nmain (m.py:1);{_RUN};decode (msgspec.py:2) 1\n"
    )
    results["profiles"]["500"]["extender-node-names"]["extender"] = report.profile_summary(rooted)
    text = report.profile_markdown(results)
    assert "| `main (m.py:1)` |" not in text
    # run too is on all 4 stacks; score on 3 of 4
    assert "| `run (aiohttp/web.py:1)` |" not in text
    assert "| `score (layersched/core/layerindex.py:5)` | 75.0% |" in text


def test_go_profile_summary_stages_and_tops() -> None:
    top = report.pprof_top(PPROF_TOP)
    # pretend the fixture's Prioritize is kube-scheduler's real extender call
    top["functions"][1]["function"] = "pkg/scheduler.(*HTTPExtender).Prioritize"
    summary = report.go_profile_summary(top, keep=2)
    stages = {e["stage"]: e["cum_share"] for e in summary["stages"]}
    assert stages["extender call"] == 0.1212
    # a stage under pprof's cut-off has no share, rather than 0
    assert stages["garbage collector"] is None
    assert [e["function"] for e in summary["by_cum"]] == [
        "k8s.io/client-go/util/workqueue.Run",
        "pkg/scheduler.(*HTTPExtender).Prioritize",
    ]
    # by flat: Prioritize 7.58%, then json.Marshal 0.18% (Run has no flat time)
    assert [e["flat_share"] for e in summary["by_flat"]] == [0.0758, 0.0018]


def test_profile_markdown_shows_kube_schedulers_side() -> None:
    results = _results()
    top = report.pprof_top(PPROF_TOP)
    top["functions"][1]["function"] = "pkg/scheduler.(*HTTPExtender).Prioritize"
    profile: dict[str, Any] = {
        "drain": {"span_s": 1.0, "pods_per_s": 150.0},
        "sampled_s": 2.0,
        "rate_hz": 100,
        "extender": report.profile_summary(report.collapsed_profile(PROFILE)),
        "kube_scheduler": {"seconds": 5, "summary": report.go_profile_summary(top)},
    }
    results["profiles"] = {"500": {"extender-node-names": profile}}
    text = report.profile_markdown(results)
    assert "(`/debug/pprof/profile` for 5 s from the first binding, 0.66 CPU s sampled)" in text
    assert "| extender call | `pkg/scheduler.(*HTTPExtender).Prioritize` | 12.1% |" in text
    assert "| garbage collector | `runtime.gcBgMarkWorker` | - |" in text
    assert "| `pkg/scheduler.(*HTTPExtender).Prioritize` | 7.6% | 12.1% |" in text
    profile["kube_scheduler"] = {"skipped": "`go` is not on PATH"}
    assert "CPU profile: not taken (`go` is not on PATH)." in report.profile_markdown(results)


@pytest.mark.parametrize(
    ("drain", "expected_s"),
    [
        # from the first binding: 10.2 s of drain -> 11, + a 3 s margin = 14
        ({"start_to_first_binding_s": 1.4, "span_s": 10.2}, 14),
        # a row that did not run: the margin alone
        (None, 3),
    ],
    ids=["from-the-row", "no-row"],
)
def test_kube_scheduler_profile_covers_the_measured_drain(
    drain: dict[str, float] | None, expected_s: int
) -> None:
    assert bench._profile_s({"drain": drain} if drain else None) == expected_s


# ------------------------------------------------------------------ the no-op extender


@pytest.mark.parametrize(
    ("args", "hosts"),
    [
        ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["n1", "n2"]}, ["n1", "n2"]),
        (
            {"Pod": None, "Nodes": {"items": [{"metadata": {"name": "a"}, "status": {}}]}},
            ["a"],
        ),
        ({"Pod": {}, "NodeNames": None, "Nodes": None}, []),
    ],
    ids=["node-names", "full-nodes", "no-nodes"],
)
def test_noop_extender_answers_zero_for_every_node(args: dict[str, Any], hosts: list[str]) -> None:
    answer = json.loads(noop.zero_scores(json.dumps(args).encode()))
    assert answer == [{"Host": h, "Score": 0} for h in hosts]


def test_noop_extender_serves_the_protocol() -> None:
    async def scenario() -> None:
        async with TestClient(TestServer(noop.create_app())) as client:
            body = {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["n1"]}
            response = await client.post("/prioritize", data=json.dumps(body))
            assert response.status == 200
            assert await response.json() == [{"Host": "n1", "Score": 0}]
            response = await client.post("/prioritize", data=b"{not json")
            assert response.status == 400
            assert "malformed ExtenderArgs" in (await response.json())["Error"]
            assert (await client.get("/healthz")).status == 200
            # read the way the benchmark reads layersched's extender
            metrics = await (await client.get("/metrics")).text()
            series = report.histograms(metrics, "layersched_extender_request_duration_seconds")
            assert series[(("verb", "prioritize"),)].count == 1

    asyncio.run(scenario())


def test_noop_extender_rejects_a_wrong_shape() -> None:
    with pytest.raises(msgspec.ValidationError):
        noop.zero_scores(b'{"NodeNames": "n1"}')


# ------------------------------------------------------------------ committed results


def test_readme_block_is_generated_from_the_committed_results() -> None:
    # `make bench-scheduler` writes harness/results/scheduler.json and this block together;
    # editing either by hand fails here
    results = json.loads((ROOT / "harness" / "results" / "scheduler.json").read_text())
    assert generated.read_block(ROOT / "README.md", report.BLOCK) == report.markdown(results)
    for n in results["node_counts"]:
        for config in report.CONFIGURATIONS:
            row = results[str(n)].get(config)
            if row and not row.get("skipped"):
                assert row["pods_per_s"] > 0
                assert row["p50_ms"] <= row["p99_ms"]
                assert row["drain"]["binding_source"] in ("events", "watch")


def test_the_results_hold_every_configuration_at_every_node_count() -> None:
    """A row that did not run says why (never a silent gap)."""
    results = json.loads((ROOT / "harness" / "results" / "scheduler.json").read_text())
    # the configurations the run asked for (runs before issue 43 recorded none: every
    # configuration but the one it added)
    asked = results["settings"].get(
        "configurations", [c for c in report.CONFIGURATIONS if c != "plugin-no-image-locality"]
    )
    for n in results["node_counts"]:
        assert set(results[str(n)]) == set(asked)
        for row in results[str(n)].values():
            assert row.get("skipped") or row.get("pods_per_s")


def test_a_round_leaves_a_complete_results_file(tmp_path: Path) -> None:
    """After every round the results so far are a results file of their own: the node
    counts measured, the rounds' summaries, the provenance up to now, the verdicts."""
    results = _results()
    del results["500"]["extender-nodes"]
    results["1000"] = {}  # a node count not reached yet is left out
    record = dict(results.pop("provenance"))
    output = tmp_path / "scheduler.json"
    bench.write_partial(results, record, [500], 0.0, output)
    written = json.loads(output.read_text())
    assert written["node_counts"] == [500]
    assert written["provenance"]["load_average_1m_at_end"] is not None
    assert set(written["targets"]["500"]) == {"extender-node-names"}
    assert report.markdown(written)  # renders as any results file


# ------------------------------------------------------------------ issue 43


def _cpu_rows(default_ms: list[float], plugin_ms: list[float]) -> dict[str, Any]:
    """Rows whose rounds carry kube-scheduler's CPU per pod (drains of 200 pods/s)."""
    return {
        config: report.summarise_rounds(
            [_row(200.0, 50.0, round=r, scheduler_cpu_ms_per_pod=ms) for r, ms in enumerate(values)]
        )
        for config, values in (("default", default_ms), ("plugin", plugin_ms))
    }


@pytest.mark.parametrize(
    ("plugin_ms", "verdict"),
    [
        # 1.0/1.0, 1.05/1.0, 1.1/1.0: every round within 10%: met
        ([1.0, 1.05, 1.1], "met"),
        # 1.2, 1.25, 1.3: every round past 1.1x: missed
        ([1.2, 1.25, 1.3], "missed"),
        # 1.0 .. 1.2: the rounds straddle 1.1x: within the noise
        ([1.0, 1.2, 1.05], "inconclusive"),
    ],
)
def test_the_plugins_cpu_per_pod_is_judged_round_by_round(
    plugin_ms: list[float], verdict: str
) -> None:
    rows = _cpu_rows([1.0, 1.0, 1.0], plugin_ms)
    assert rows["plugin"]["scheduler_cpu_ms_per_pod"] == round(float(np.median(plugin_ms)), 3)
    got = report.cpu_verdicts(rows)["plugin"]
    assert got["verdict"] == verdict
    text = report.cpu_verdict_text(got)
    assert text.startswith("kube-scheduler's CPU per pod in the drain ")
    assert ("no verdict" in text) is (verdict == "inconclusive")
    # a busy machine or two rounds: no verdict
    assert report.cpu_verdicts(rows, "busy")["plugin"]["verdict"] == "inconclusive"
    two = _cpu_rows([1.0, 1.0], plugin_ms[:2])
    assert report.cpu_verdicts(two)["plugin"]["verdict"] == "inconclusive"


def test_the_block_prints_the_cpu_per_pod_and_labels_a_cost_within_the_noise() -> None:
    results = _results()
    rows = _cpu_rows([1.0, 1.0, 1.0], [1.0, 1.05, 1.1])
    results["500"] |= rows
    results["500"]["plugin-no-image-locality"] = {"skipped": "not asked"}
    text = report.markdown(results)
    [plugin] = [
        line for line in text.splitlines() if line.startswith(f"| 500 | {report.LABELS['plugin']}")
    ]
    # median of rounds 1.05 ms (1.00-1.10); per-round ratio median 1.05x (1.00-1.10)
    assert "| 1.05 ms (1.00-1.10) | 1.05x (1.00-1.10) |" in plugin
    assert "`plugin` CPU:** kube-scheduler's CPU per pod in the drain 1.05x" in text
    # both drains at 200 pods/s in every round: the plugin's cost per pod is no more than
    # the default's own spread from round to round: said so, with no figure
    assert (
        "`plugin`, each pod's cost in the drain** (1,000 / pods/s, round by round against "
        "the default's): default 5.00 ms; the plugin shows no cost in any of the 3 rounds "
        "(within the noise)."
    ) in text
    assert "per-round ratio to default" in text and "median of rounds" in text


@pytest.mark.parametrize(
    ("text", "rounds"),
    [
        ("500=5,5000=3", {500: 5, 5000: 3}),
        ("4", {500: 4, 5000: 4}),
        # a node count not named gets MIN_ROUNDS
        ("500=5", {500: 5, 5000: 3}),
    ],
)
def test_rounds_by_node_count(text: str, rounds: dict[int, int]) -> None:
    assert bench.rounds_by_nodes(text, [500, 5000]) == rounds


@pytest.mark.parametrize("text", ["0", "500=0", "500:5", "five"])
def test_rounds_by_node_count_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="round"):
        bench.rounds_by_nodes(text, [500])


def test_the_rounds_asked_per_node_count_are_said() -> None:
    results = _results()
    results["node_counts"] = [500, 5000]
    results["5000"] = results["500"]
    results["rounds_completed"] = {"500": 5, "5000": 2}
    text = report._rounds_text(results, {"500": 5, "5000": 3})
    assert text == (
        "Alternating rounds: 5 at 500 nodes, 2 of the 3 asked at 5,000 nodes (the run was stopped)"
    )


def test_the_plugin_rows_render_the_generators_profile_with_and_without_image_locality(
    tmp_path: Path,
) -> None:
    plane = _plane(tmp_path)
    for config, row in bench.PLUGIN_CONFIGURATIONS.items():
        (profile,) = bench.scheduler_config(plane, config)["profiles"]
        disabled = profile["plugins"]["score"].get("disabled", [])
        assert ({"name": "ImageLocality"} not in disabled) is row.image_locality
        (args,) = (c["args"] for c in profile["pluginConfig"] if c["name"] == "LayerLocality")
        assert args["strategy"] == ("in-flight" if row.in_flight else "layer-locality")
        assert ("inFlight" in args) is row.in_flight
    # one row is the install's profile, whichever way issues 42 and 43 decided it
    installed = bench.INSTALLED_PLUGIN_CONFIGURATION
    assert bench.PLUGIN_CONFIGURATIONS[installed].image_locality is (
        deploy.PLUGIN_KEEPS_IMAGE_LOCALITY
    )
    assert installed == "plugin-no-image-locality"
    installs = [
        c for c, label in report.LABELS.items() if label.endswith("(the install's profile)")
    ]
    assert installs == [installed]


# ---------------------------------------------------------------- the held start (issue 43)


def test_a_held_start_elects_the_leader_on_upstreams_lease(tmp_path: Path) -> None:
    plane = _plane(tmp_path)
    cold = bench.scheduler_config(plane, "plugin-no-image-locality")
    held = bench.scheduler_config(plane, "plugin-no-image-locality", start=bench.HELD_START)
    assert cold["leaderElection"] == {"leaderElect": False}
    election = held["leaderElection"]
    assert election["leaderElect"] is True
    assert (election["resourceNamespace"], election["resourceName"]) == (
        "kube-system",
        "kube-scheduler",
    )
    assert election["resourceLock"] == "leases"
    # it takes a released Lease within its retry period, not a lease duration
    assert election["retryPeriod"] == "500ms"
    # everything else is the cold configuration's
    assert {k: v for k, v in held.items() if k != "leaderElection"} == {
        k: v for k, v in cold.items() if k != "leaderElection"
    }


def test_the_lease_is_held_then_released() -> None:
    requests: list[tuple[str, str, Any]] = []
    present = {"lease": True}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        requests.append((request.method, request.url.path, body))
        if request.method == "DELETE":
            found, present["lease"] = present["lease"], False
            return httpx.Response(200 if found else 404, json={})
        present["lease"] = True
        return httpx.Response(201, json=body)

    api = httpx.Client(transport=httpx.MockTransport(handler), base_url="https://api")
    bench.hold_leadership(api, now=1_764_000_000.25)
    bench.release_leadership(api)
    bench.release_leadership(api)  # none left: not an error
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    methods = [(method, url) for method, url, _ in requests]
    # a stopped scheduler's Lease is replaced, then released; twice is harmless
    assert methods == [
        ("DELETE", f"{path}/kube-scheduler"),
        ("POST", path),
        ("DELETE", f"{path}/kube-scheduler"),
        ("DELETE", f"{path}/kube-scheduler"),
    ]
    spec = requests[1][2]["spec"]
    assert spec["holderIdentity"] == bench.LEASE_HOLDER
    assert spec["leaseDurationSeconds"] == bench.LEASE_HELD_S
    assert spec["renewTime"] == "2025-11-24T16:00:00.250000Z"


def test_a_lease_that_cannot_be_held_is_a_clear_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(404, json={})
        return httpx.Response(403, text="leases is forbidden")

    api = httpx.Client(transport=httpx.MockTransport(handler), base_url="https://api")
    with pytest.raises(bench.BenchError, match="holding kube-scheduler's Lease: HTTP 403"):
        bench.hold_leadership(api)


class _Clock:
    """A clock the settle loop's sleeps advance, and processes using CPU at set rates."""

    def __init__(self, rates: dict[int, list[tuple[float, float]]]) -> None:
        # by pid: (from time, cores used from then on)
        self.now, self.rates = 0.0, rates

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def cpu_s(self, pid: int) -> float:
        used, steps = 0.0, self.rates[pid]
        for i, (since, cores) in enumerate(steps):
            until = steps[i + 1][0] if i + 1 < len(steps) else float("inf")
            used += cores * max(0.0, min(self.now, until) - since)
        return used


def test_settle_waits_until_the_scheduler_and_the_api_server_are_quiet() -> None:
    # kube-scheduler busy for 5 s (listing), the API server for 3 s, both quiet then
    clock = _Clock({1: [(0.0, 1.0), (5.0, 0.02)], 2: [(0.0, 0.8), (3.0, 0.05)], 3: [(0.0, 1.0)]})
    pids = {"kube-scheduler": 1, "kube-apiserver": 2, "etcd": 3}  # etcd is not watched
    result = bench.settle(pids, read_cpu_s=clock.cpu_s, clock=lambda: clock.now, sleep=clock.sleep)
    assert result["settled"] is True
    # quiet over a whole window after 5 s: settled at 7 s, not before
    assert 7.0 <= result["s"] <= 7.0 + bench.SETTLE_POLL_S
    # etcd is not watched: its constant load does not keep the start-up unsettled


def test_settle_gives_up_after_its_timeout_and_says_so() -> None:
    clock = _Clock({1: [(0.0, 0.5)], 2: [(0.0, 0.0)]})
    pids = {"kube-scheduler": 1, "kube-apiserver": 2}
    result = bench.settle(
        pids, timeout_s=10.0, read_cpu_s=clock.cpu_s, clock=lambda: clock.now, sleep=clock.sleep
    )
    assert result["settled"] is False
    assert result["s"] == pytest.approx(10.0, abs=bench.SETTLE_POLL_S)


def test_the_block_says_how_the_drain_started_and_gives_the_start_up() -> None:
    assert "starts held" in report.start_text("held")
    assert "starts cold" in report.start_text(None)  # files from before the option
    up = {"settled": True, "s": 30.0, "resources": {"kube-scheduler": {"cpu_s": 26.0}}}
    rows = {
        "default": {"rounds": [{"start_up": {**up, "s": 2.0}}]},
        "plugin-no-image-locality": {
            "rounds": [{"start_up": up}, {"start_up": {**up, "s": 40.0, "settled": False}}]
        },
    }
    line = report.start_up_text(5000, rows)
    assert line is not None
    assert "default profile 2.0 s" in line or "2.0 s" in line
    assert "35.0 s" in line  # the median of 30 and 40
    assert "kube-scheduler 26.0 s" in line
    assert "1 of 2 rounds had not settled" in line
    assert report.start_up_text(500, {"default": {"rounds": [{"round": 0}]}}) is None


MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
tmpfs /tmp/a\\040b tmpfs rw 0 0
"""


def test_the_state_dir_goes_to_memory_when_the_machine_has_a_tmpfs() -> None:
    assert provenance.filesystem_of(Path("/dev/shm/lsbn-state"), MOUNTS) == "tmpfs"
    assert provenance.filesystem_of(Path("/tmp/lsbn-state"), MOUNTS) == "ext4"
    # the longest mount point above the path, its escaped space read back
    assert provenance.filesystem_of(Path("/tmp/a b/x"), MOUNTS) == "tmpfs"
    assert provenance.memory_backed("lsbn-state", MOUNTS) == Path("/dev/shm/lsbn-state")
    without = "/dev/vda / ext4 rw 0 0\n"
    assert provenance.memory_backed("lsbn-state", without) == provenance.DISK_DIR / "lsbn-state"
    assert provenance.filesystem_of(Path("/x"), "") is None


def test_the_block_says_where_etcd_kept_its_data() -> None:
    assert "in memory (tmpfs)" in report.etcd_text("tmpfs")
    assert "on disk (ext4)" in report.etcd_text("ext4")
    assert report.etcd_text(None) == ""  # results from before it was recorded


def test_kube_scheduler_is_exempt_from_flow_control_and_rejections_are_counted() -> None:
    posted: list[dict[str, Any]] = []
    metrics = (
        "# TYPE apiserver_request_total counter\n"
        'apiserver_request_total{code="201",resource="pods",subresource="binding"} 900\n'
        'apiserver_request_total{code="429",resource="pods",subresource="binding"} 12\n'
        'apiserver_request_total{code="429",group="events.k8s.io",resource="events"} 3\n'
        'apiserver_flowcontrol_rejected_requests_total{reason="queue-full"} 15\n'
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(json.loads(request.content))
            return httpx.Response(201, json=posted[-1])
        return httpx.Response(200, text=metrics)

    api = httpx.Client(transport=httpx.MockTransport(handler), base_url="https://api")
    bench.exempt_scheduler_from_flow_control(api)
    (schema,) = posted
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": "exempt"}
    # ahead of the built-in kube-scheduler schema, behind the mandatory exempt one
    assert 2 < schema["spec"]["matchingPrecedence"] < 100
    (rule,) = schema["spec"]["rules"]
    assert rule["subjects"] == [{"kind": "User", "user": {"name": "system:kube-scheduler"}}]
    # only the 429 answers, of every resource
    assert bench.rejected_requests(api) == 15


def test_the_block_counts_the_rejections_left() -> None:
    rows = {
        "default": {"rounds": [{"rejected_429": 0}, {"rejected_429": 2}]},
        "plugin-no-image-locality": {"rounds": [{"rejected_429": 0}, {"rejected_429": 0}]},
    }
    line = report.rejections_text(500, rows)
    assert line is not None
    assert "2 in 2 rounds" in line and "0 in 2 rounds" in line
    assert report.rejections_text(500, {"default": {"rounds": [{"round": 0}]}}) is None
