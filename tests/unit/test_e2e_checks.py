"""The e2e scenario assertions (tests/e2e/_checks.py) accept a good report and reject
each way a run could go wrong; so the e2e cannot pass vacuously."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e._checks import (
    DEFAULT_TRIALS,
    LAYER_LOCALITY_PLUGIN,
    LOCAL_STRATEGIES,
    check_image_locality_tie,
    check_layer_locality,
    check_plugin_scores_are_the_cores,
    check_pull_bytes,
    check_pull_times_against_the_link,
    check_real_cluster,
    check_report,
    trials_from_env,
)

MIB = 1 << 20
#: L1+L2 = 40 MiB shared, L3/L4 = 4 MiB; manifest + config come to 1,807 B per pull.
SIZES = {"L1": 24 * MIB, "L2": 16 * MIB, "L3": 4 * MIB, "L4": 4 * MIB}
METADATA = 1807
IMG1 = SIZES["L1"] + SIZES["L2"] + SIZES["L3"]
IMG2 = SIZES["L1"] + SIZES["L2"] + SIZES["L4"]
RATE = 20_000_000
#: 4 MiB at 20 Mbit/s = 1.68 s of link time; measured pulls take about 1.8 s.
L3_PULL_S = 1.8
FULL_PULL_S = 19.5


def _trial(p1: str, p2: str, again: str, scores: dict[str, int]) -> dict[str, Any]:
    again_bytes = SIZES["L3"] + METADATA if again == p2 else IMG1 + METADATA
    again_s = L3_PULL_S if again == p2 else FULL_PULL_S
    return {
        "placements": {"P1": p1, "P2": p2, "P1-again": again},
        "scores_t3": scores,
        "pulls": [
            {"pod": "P1", "node": p1, "bytes": IMG1 + METADATA, "seconds": FULL_PULL_S},
            {"pod": "P2", "node": p2, "bytes": IMG2 + METADATA, "seconds": FULL_PULL_S},
            {"pod": "P1-again", "node": again, "bytes": again_bytes, "seconds": again_s},
        ],
    }


def _report() -> dict[str, Any]:
    layer = [
        # floor(100 * 40 * 2/3 / 44) = 60 -> 6 on the extender's 0-10 scale
        _trial("n2", "n3", "n3", {"n1": 0, "n3": 6}),
        _trial("n1", "n2", "n2", {"n2": 6, "n3": 0}),
    ]
    image = [
        _trial("n3", "n2", "n1", {"n1": 0, "n2": 0}),
        _trial("n2", "n1", "n1", {"n1": 0, "n3": 0}),
    ]
    return {
        "driver": "local",
        "link_rate_bits_per_s": RATE,
        "node_rates_bits_per_s": {"n1": RATE, "n2": RATE, "n3": RATE},
        "layers": {k: {"digest": f"sha256:{k}", "size": v} for k, v in SIZES.items()},
        "strategies": {"layer-locality": {"trials": layer}, "image-locality": {"trials": image}},
    }


def _all_checks(report: dict[str, Any]) -> None:
    check_report(report, "local", 2, {"n1", "n2", "n3"})
    check_layer_locality(report)
    check_image_locality_tie(report)
    check_pull_bytes(report)


def test_a_good_report_passes() -> None:
    _all_checks(_report())


def _layer_trial(report: dict[str, Any]) -> dict[str, Any]:
    trial: dict[str, Any] = report["strategies"]["layer-locality"]["trials"][0]
    return trial


def _image_trial(report: dict[str, Any]) -> dict[str, Any]:
    trial: dict[str, Any] = report["strategies"]["image-locality"]["trials"][0]
    return trial


@pytest.mark.parametrize(
    "spoil",
    [
        # Layer-locality won a 0-0 tie by the seeded pick: right node, wrong reason.
        lambda r: _layer_trial(r)["scores_t3"].update(n1=0, n3=0),
        # Layer-locality sent P1-again to the empty node n1.
        lambda r: _layer_trial(r)["placements"].update({"P1-again": "n1"}),
        # P1-again on P2's node re-downloaded L1 too: 4 MiB + 24 MiB > 4.2 MiB + 64 KiB.
        lambda r: _layer_trial(r)["pulls"][2].update(bytes=SIZES["L3"] + SIZES["L1"]),
        # 4 MiB took 3 s: over 1.15 x 1.68 s + 1 s = 2.93 s.
        lambda r: _layer_trial(r)["pulls"][2].update(seconds=3.0),
        # Image-locality scored P2's node above the empty one: no tie.
        lambda r: _image_trial(r)["scores_t3"].update(n2=3),
        # P1 from an empty cache got L2 twice: 16 MiB over the whole image + 64 KiB.
        lambda r: _image_trial(r)["pulls"][0].update(bytes=IMG1 + SIZES["L2"]),
        # P2 from an empty cache got less than Img2: a layer was not measured.
        lambda r: _image_trial(r)["pulls"][1].update(bytes=IMG2 - 1),
        # One trial missing: 1 of the 2 expected.
        lambda r: r["strategies"]["image-locality"]["trials"].pop(),
        # P1's node (full) was scored at t3.
        lambda r: _image_trial(r)["scores_t3"].update(n3=0),
        # P1 and P2 on one node although each takes a whole node.
        lambda r: _image_trial(r)["placements"].update(P2="n3"),
        # Another driver's report.
        lambda r: r.update(driver="kind"),
        # The report names nodes the testbed does not have.
        lambda r: r["node_rates_bits_per_s"].update(n4=RATE),
    ],
    ids=[
        "seeded-tie-win",
        "layer-locality-misplaced",
        "l1-twice",
        "too-slow",
        "no-tie",
        "double-download",
        "short-pull",
        "missing-trial",
        "full-node-scored",
        "shared-node",
        "wrong-driver",
        "unknown-node",
    ],
)
def test_a_spoiled_report_fails(spoil: Callable[[dict[str, Any]], Any]) -> None:
    report = copy.deepcopy(_report())
    spoil(report)
    with pytest.raises(AssertionError):
        _all_checks(report)


@pytest.mark.parametrize(
    ("environ", "trials"),
    [
        # Nothing set: the default of 5.
        ({}, DEFAULT_TRIALS),
        # The e2e's own variable.
        ({"LAYERSCHED_E2E_TRIALS": "3"}, 3),
        # Another variable of a similar name is not read.
        ({"LAYERSCHED_TRIALS": "2"}, DEFAULT_TRIALS),
    ],
    ids=["default", "e2e-name", "other-name-ignored"],
)
def test_trials_from_env(environ: dict[str, str], trials: int) -> None:
    assert trials_from_env(environ) == trials


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        # Zero trials would pass every per-trial assertion vacuously.
        ({"LAYERSCHED_E2E_TRIALS": "0"}, "LAYERSCHED_E2E_TRIALS=0: at least 1"),
        ({"LAYERSCHED_E2E_TRIALS": "-2"}, "LAYERSCHED_E2E_TRIALS=-2: at least 1"),
        ({"LAYERSCHED_E2E_TRIALS": "five"}, "expected a whole number"),
    ],
    ids=["zero", "negative", "not-a-number"],
)
def test_trials_from_env_rejects(environ: dict[str, str], message: str) -> None:
    with pytest.raises(pytest.fail.Exception, match=message):
        trials_from_env(environ)


SCHEDULERS = {"layer-locality": "layer-locality", "image-locality": "image-locality"}
VERSION = "v1.20.2"


def _real_cluster_report() -> dict[str, Any]:
    """A good report as the local driver writes it on the real cluster."""
    report = _report()
    report["components"] = {"kubernetes": VERSION, "kubelet": VERSION, "containerd": "1.6.20"}
    # two layer-locality trials of three pods, each at least one /prioritize
    report["extender_prioritize_requests"] = 6
    for strategy, runs in report["strategies"].items():
        for trial in runs["trials"]:
            trial["scheduler"] = dict.fromkeys(("P1", "P2", "P1-again"), SCHEDULERS[strategy])
            trial["status_lag_s"] = {"P2": 17.3}
    return report


def test_a_real_cluster_report_passes() -> None:
    report = _real_cluster_report()
    _all_checks(report)
    check_real_cluster(report, SCHEDULERS, VERSION)
    check_pull_times_against_the_link(report)


@pytest.mark.parametrize(
    "spoil",
    [
        # The default scheduler bound P1-again, not the strategy's own scheduler.
        lambda r: _layer_trial(r)["scheduler"].update({"P1-again": "default-scheduler"}),
        # Nobody recorded who bound the pods (a played scheduler, no Scheduled event).
        lambda r: _image_trial(r).pop("scheduler"),
        # The status lag of P2's node was not measured where the strategy reads it
        # (image-locality scores status.images; the layer-aware ones wait for the inventory).
        lambda r: _image_trial(r).pop("status_lag_s"),
        # 5 requests for 6 layer-locality pods: some pod never reached the extender.
        lambda r: r.update(extender_prioritize_requests=5),
        # Another Kubernetes answered (the machine's, not the one built here).
        lambda r: r["components"].update(kubernetes="v1.32.0"),
    ],
    ids=["wrong-scheduler", "no-scheduler", "no-status-lag", "extender-not-called", "version"],
)
def test_a_report_off_the_real_path_fails(spoil: Callable[[dict[str, Any]], Any]) -> None:
    report = _real_cluster_report()
    spoil(report)
    with pytest.raises(AssertionError):
        check_real_cluster(report, SCHEDULERS, VERSION)


def test_a_pull_faster_than_its_link_fails() -> None:
    report = _real_cluster_report()
    # Img1 (44 MiB + metadata) needs 18.5 s at 20 Mbit/s; 10 s means the event or the
    # registry log is wrong about this pull.
    _image_trial(report)["pulls"][0].update(seconds=10.0)
    with pytest.raises(AssertionError, match="faster than its link"):
        check_pull_times_against_the_link(report)


# ------------------------------------------------------- the local testbed's plugin column
def _local_report() -> dict[str, Any]:
    """A local run: layer-locality through the extender and through the plugin too."""
    report = _report()
    # the plugin's scale is 0-100: P2's node holds L1+L2 of L1+L2+L3 = 40 of 44 MiB, and
    # spread (on, as the testbed runs it) counts L1 and L2 on 2 of the 3 nodes:
    # floor(100 * 40 * 2/3 / 44) = 60; the empty node 0
    report["strategies"][LAYER_LOCALITY_PLUGIN] = {
        "trials": [
            _trial("n2", "n3", "n3", {"n1": 0, "n3": 60}),
            _trial("n1", "n2", "n2", {"n2": 60, "n3": 0}),
        ]
    }
    return report


def test_a_good_local_report_passes_for_the_plugin_too() -> None:
    report = _local_report()
    check_report(report, "local", 2, {"n1", "n2", "n3"}, LOCAL_STRATEGIES)
    check_layer_locality(report, LAYER_LOCALITY_PLUGIN)
    check_plugin_scores_are_the_cores(report)
    check_pull_bytes(report)
    check_pull_times_against_the_link(report)


def test_the_plugin_column_is_required_where_the_testbed_runs_it() -> None:
    with pytest.raises(AssertionError):
        check_report(_report(), "local", 2, {"n1", "n2", "n3"}, LOCAL_STRATEGIES)


@pytest.mark.parametrize(
    "scores",
    [
        # 61 would be rounding (60.6), not the core's floor
        {"n1": 0, "n3": 61},
        # the extender's 0-10 scale is not the plugin's
        {"n1": 0, "n3": 6},
        # an empty node scoring above 0
        {"n1": 1, "n3": 60},
        # spread off (floor(100 * 40 / 44)): not the testbed's plugin
        {"n1": 0, "n3": 90},
    ],
    ids=["rounded", "extender-scale", "empty-node-scored", "unspread"],
)
def test_plugin_scores_other_than_the_cores_fail(scores: dict[str, int]) -> None:
    report = _local_report()
    report["strategies"][LAYER_LOCALITY_PLUGIN]["trials"][0]["scores_t3"] = scores
    with pytest.raises(AssertionError):
        check_plugin_scores_are_the_cores(report)


def test_a_plugin_trial_on_the_empty_node_fails_like_the_extenders() -> None:
    report = _local_report()
    trial = report["strategies"][LAYER_LOCALITY_PLUGIN]["trials"][1]
    report["strategies"][LAYER_LOCALITY_PLUGIN]["trials"][1] = _trial(
        "n1", "n2", "n3", trial["scores_t3"]
    )
    with pytest.raises(AssertionError):
        check_layer_locality(report, LAYER_LOCALITY_PLUGIN)
