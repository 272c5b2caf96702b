"""The scheduler benchmark's pure parts (bench/scheduler_report.py, bench/bench_scheduler.py)
and the README block generated from the committed bench/results/scheduler.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_scheduler as bench  # noqa: E402
import scheduler_report as report  # noqa: E402
from corpus import workload  # noqa: E402

from layersched import _generated as generated  # noqa: E402
from layersched.core.nodelayers import parse_document  # noqa: E402

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


@pytest.mark.parametrize(
    ("names", "verdict"),
    [
        # 90 / 100 = 0.9x >= 0.8; 150 / 100 = 1.5x <= 1.5
        ({"pods_per_s": 90.0, "p99_ms": 150.0}, ("met", "met")),
        # 70 / 100 = 0.7x < 0.8; 200 / 100 = 2.0x > 1.5
        ({"pods_per_s": 70.0, "p99_ms": 200.0}, ("MISSED", "MISSED")),
    ],
    ids=["both-met", "both-missed"],
)
def test_target_verdict(names: dict[str, float], verdict: tuple[str, str]) -> None:
    rows = {"default": {"pods_per_s": 100.0, "p99_ms": 100.0}, "extender-node-names": names}
    text = report.target_verdict(rows)
    assert text is not None
    assert f"{report.TARGET_THROUGHPUT_RATIO}x: {verdict[0]}" in text
    assert f"{report.TARGET_P99_RATIO}x: {verdict[1]}" in text
    assert report.target_verdict({"default": rows["default"]}) is None


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


def test_scheduler_configuration_per_mode(tmp_path: Path) -> None:
    plane = bench.ControlPlane(
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
    assert "extenders" not in bench.scheduler_config(plane, "default")
    full = bench.scheduler_config(plane, "extender-nodes")["extenders"][0]
    names = bench.scheduler_config(plane, "extender-node-names")["extenders"][0]
    assert full["nodeCacheCapable"] is False
    assert names["nodeCacheCapable"] is True
    assert "--watch" in bench.extender_argv(plane, "extender-node-names", tmp_path / "l")
    assert "--watch" not in bench.extender_argv(plane, "extender-nodes", tmp_path / "l")


def test_readme_block_is_generated_from_the_committed_results() -> None:
    # `make bench-scheduler` writes bench/results/scheduler.json and this block together;
    # editing either by hand fails here
    results = json.loads((ROOT / "bench" / "results" / "scheduler.json").read_text())
    assert generated.read_block(ROOT / "README.md", report.BLOCK) == report.markdown(results)
    for n in results["node_counts"]:
        for config in report.CONFIGURATIONS:
            row = results[str(n)].get(config)
            if row and not row.get("skipped"):
                assert row["pods_per_s"] > 0
                assert row["p50_ms"] <= row["p99_ms"]
