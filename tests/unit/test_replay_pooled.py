"""Every round of every replay run, pooled: ratios only within a round, the median over
rounds from several files, and where the start-up time went by link (issue 42)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))

import replay_pooled as pooled  # noqa: E402
import replay_report as report  # noqa: E402

DEFAULT = report.BASELINE
RATES = {"n1": 40, "n2": 10}


def _pod(name: str, node: str, bound: float, startup: float) -> dict[str, Any]:
    return {
        "name": name,
        "node": node,
        "startup_s": startup,
        "scheduled_at_s": bound,
        "started_at_s": bound + startup,
        "created_wall_s": bound,
        "bytes": 1,
        "pulled": False,
    }


def _run(arm: str, number: int, mode: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {"round": number, "mode": mode, "arm": arm, "pods": pods}


def _results(runs: list[dict[str, Any]], commit: str, bursts: Any = ()) -> dict[str, Any]:
    return {
        "format": report.FORMAT,
        "trace": {
            "seed": 36,
            "pods": 3,
            "images": 1,
            "layers": 1,
            "smallest_layer_bytes": 1,
            "cluster": {"containers_per_node": 1},
        },
        "testbed": {"link_rates_bits_per_s": RATES},
        "runs": runs,
        "bursts": list(bursts),
        "provenance": {"commit": commit},
    }


def _two_pods(arm: str, number: int, fast: float, slow: float, mode: str = "serial") -> Any:
    # a on the fast node, b sent to the slow one while a still holds the fast node's
    # one slot: b is forced
    return _run(
        arm,
        number,
        mode,
        [_pod("a", "n1", 0.0, fast), _pod("b", "n2", 1.0, slow)],
    )


def test_ratios_are_taken_within_a_round_and_pooled_over_every_file() -> None:
    first = _results(
        [_two_pods(DEFAULT, 1, 4.0, 8.0), _two_pods("layer-locality", 1, 2.0, 4.0)], "a" * 40
    )
    # the second file's default is twice as slow: its arm's ratio is taken against it,
    # never against the first file's seconds
    second = _results(
        [
            _two_pods(DEFAULT, 1, 8.0, 16.0),
            _two_pods("layer-locality", 1, 8.0, 16.0),
            _two_pods(DEFAULT, 2, 8.0, 16.0),
            _two_pods("layer-locality", 2, 2.0, 2.0),
        ],
        "b" * 40,
    )
    found = pooled.pooled({"one.json": first, "two.json": second}, None)["serial"]["arms"]
    arm = found["layer-locality"]
    # 6/3 = 2.0 in the first file; 12/12 = 1.0 and 12/2 = 6.0 in the second
    assert arm["rounds"] == 3
    assert arm["files"] == ["one.json", "two.json"]
    assert arm["speedup"] == {"median": 2.0, "min": 1.0, "max": 6.0, "n": 3}
    assert arm["default_mean_startup_s"]["min"] == 6.0
    assert arm["links"] is None
    assert found[DEFAULT]["speedup"]["median"] == 1.0


def test_slow_link_pods_are_split_by_whether_a_faster_slot_was_free() -> None:
    lifetimes = {"a": 10.0, "b": 10.0, "c": 10.0}
    pods = [
        _pod("a", "n1", 0.0, 2.0),  # fast: holds n1 until 2 + 0.5 + 10 = 12.5
        _pod("b", "n2", 1.0, 6.0),  # slow, n1 taken: forced
        _pod("c", "n2", 20.0, 4.0),  # slow, n1 free again: a score could have avoided it
    ]
    kinds = pooled.placements(pods, RATES, lifetimes, 1, 0.0)
    assert kinds == [pooled.FAST, pooled.FORCED, pooled.FREE]
    # a slot released 10 s late keeps n1 taken at c's binding too
    assert pooled.placements(pods, RATES, lifetimes, 1, 10.0)[2] == pooled.FORCED
    # with two slots a node, n1 had room for b
    assert pooled.placements(pods, RATES, lifetimes, 2, 0.0)[1] == pooled.FREE
    results = _results([_run(DEFAULT, 1, "serial", pods)], "c" * 40)
    split = pooled.link_split(results, "serial", lifetimes)[DEFAULT]
    assert split["all_pods"] == 3 and split["all_s"] == 12.0
    # the three parts add up to the whole
    assert split["fast_s"] + split["forced_s"] + split["free_s"] == split["all_s"]
    assert (split["fast_pods"], split["forced_pods"], split["free_pods"]) == (1, 1, 1)


def _documents() -> dict[str, Any]:
    results = _results(
        [
            _two_pods(DEFAULT, 1, 4.0, 8.0),
            _two_pods("layer-locality-plugin-inflight", 1, 2.0, 4.0),
        ],
        "d" * 40,
        bursts=[
            {"round": 1, "mode": "parallel", "arm": DEFAULT, "all_ready_s": 40.0, "pods": []},
            {
                "round": 1,
                "mode": "parallel",
                "arm": "layer-locality-plugin-inflight",
                "all_ready_s": 20.0,
                "pods": [],
            },
        ],
    )
    trace = json.loads((ROOT / pooled.TRACE).read_text())
    trace["pods"] = trace["pods"][:3]
    trace["pods"][0]["name"], trace["pods"][1]["name"] = "a", "b"
    results["trace"] |= {
        "seed": trace["seed"],
        "images": len(trace["images"]),
        "layers": len(trace["layers"]),
    }
    return {"main.json": results, pooled.TRACE: trace}


def test_the_block_names_each_file_and_says_what_bounds_the_best_arm() -> None:
    text = pooled.markdown(_documents())
    assert "`main.json` (1 rounds, at `dddddddddddd`)" in text
    # 6 s against 3 s
    assert "| default plugins + in-flight plugin | 1 | 2.00× | 2.00× | 6.0 (6.0–6.0) |" in text
    # a on the fast link (2 s), b forced to the slow one (4 s): 1.0 and 2.0 s a pod
    assert "| default plugins + in-flight plugin | 3.0 | 50% | 1.0 | 0% | 0.0 | 50% | 2.0 |" in text
    assert "spent 2.0 s of its 3.0 s mean start-up on pods sent to the slowest links" in text
    # the burst, parallel only
    assert "| default plugins + in-flight plugin | parallel | 1 | 2.00× |" in text
    assert "| serial |" not in text


def test_another_trace_leaves_the_link_table_out_and_says_why() -> None:
    documents = _documents()
    documents["main.json"]["trace"]["seed"] = 37
    text = pooled.markdown(documents)
    assert "is not the trace the runs replayed" in text
    assert "Where the start-up time went" not in text
    assert "| default plugins + in-flight plugin | 1 | 2.00×" in text


@pytest.mark.parametrize("source", pooled.SOURCES)
def test_every_file_of_the_trace_is_pooled(source: str) -> None:
    # a further run that gets its own block is pooled too
    assert source in (report.DEFAULT_RESULTS, *report.FURTHER_RUNS)
    assert (ROOT / source).exists()
