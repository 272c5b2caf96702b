"""``make live-minors``'s pure parts: the bring-up's variables, the scenario's objects,
the trial and batching verdicts, and the docs block rendered from the results
(``tests/unit/test_figures.py`` holds the committed block to ``harness/results/live-minors.json``).
The run itself needs the minors' builds and a control plane: ``make live-minors``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))

import live_minors as live  # noqa: E402
import live_minors_report as report  # noqa: E402

from layersched.core.nodelayers import parse_document  # noqa: E402
from layersched_harness.testbed.builds import kubernetes_build, minor_builds  # noqa: E402

P2_NODE = "t1-n2"


@pytest.mark.parametrize(
    ("placed", "scores", "verdict"),
    [
        # the seed scenario: P1 on n1, P2 on n2 (n1 full), P1' on n2 over the empty n3;
        # 100 x (L1+L2) / (L1+L2+L3) = 100 x 70 / 80 MiB = 87
        (
            {"p1": "t1-n1", "p2": P2_NODE, "p1-again": P2_NODE},
            {P2_NODE: 87, "t1-n3": 0},
            None,
        ),
        (
            {"p1": "t1-n1", "p2": P2_NODE, "p1-again": "t1-n3"},
            {P2_NODE: 87, "t1-n3": 0},
            "P1' on t1-n3, not on P2's node t1-n2",
        ),
        # on P2's node, but by a tie the plugin did not break (its inventory unseen)
        (
            {"p1": "t1-n1", "p2": P2_NODE, "p1-again": P2_NODE},
            {P2_NODE: 0, "t1-n3": 0},
            "P1' scored 0 on t1-n2, not above the others",
        ),
        (
            {"p1": "t1-n1", "p2": P2_NODE, "p1-again": P2_NODE},
            None,
            "no LayerLocality score of P1' on t1-n2",
        ),
        ({"p1": "t1-n1", "p2": "t1-n1", "p1-again": "t1-n1"}, None, "P2 on P1's full node"),
        ({"p1": "t1-n1", "p2": P2_NODE}, None, "not bound: p1-again"),
    ],
    ids=["placed", "elsewhere", "tie", "no-scores", "p2-on-p1", "unbound"],
)
def test_a_trial_passes_only_as_the_seed_scenario_asks(
    placed: dict[str, str], scores: dict[str, int] | None, verdict: str | None
) -> None:
    got = report.trial_verdict(placed, scores)
    if verdict is None:
        assert got is None
    else:
        assert got is not None and got.startswith(verdict), got


METRICS = """\
# TYPE scheduler_batch_attempts_total counter
scheduler_batch_attempts_total{profile="layer-locality-plugin",result="hint_used"} 2
scheduler_batch_attempts_total{profile="layer-locality-plugin",result="no_hint"} 5
scheduler_batch_attempts_total{profile="default-scheduler",result="hint_used"} 9
"""


def test_batching_is_on_when_the_profile_took_hints() -> None:
    before = live.batch_attempts(METRICS)
    assert before == {"hint_used": 2.0, "no_hint": 5.0}  # the other profile's left out
    after = {"hint_used": 3.0, "no_hint": 6.0}
    hints = report.batch_hints(before, after)
    assert hints == {"hint_used": 1.0, "no_hint": 1.0}
    assert report.batching_on(hints)
    # a profile that does not sign pods only ever counts no_hint
    assert not report.batching_on(report.batch_hints(before, {"no_hint": 8.0, "hint_used": 2.0}))
    # a release without the metric: nothing counted, not on
    assert live.batch_attempts("") == {}
    assert not report.batching_on({})


def test_the_bring_up_runs_the_minors_build_on_loopback(tmp_path: Path) -> None:
    main = kubernetes_build()
    for build in minor_builds():
        given = live.playbook_vars(build, tmp_path)
        assert given["kubernetes_bin_dir"] == str(build.bin_dir()) != str(main.bin_dir())
        assert given["kubernetes_version"] == build.version
        assert given["kubernetes_build_id"] == build.build_id
        assert given["testbed_registry_address"] == "127.0.0.1"
        assert given["bench_control_plane_bridge"] is False
        assert given["k8s_control_plane_components"] == [live.PLUGIN_DAEMON]
        assert given["k8s_control_plane_kubectl"] == str(main.binary("kubectl"))
        # the role's every other daemon binary comes from the minor's build
        assert "kubectl" not in build.binaries
        ports = [v for k, v in given.items() if k.endswith("_port")]
        assert ports and all(26_000 <= p < 27_000 for p in ports)
        assert len(given["testbed_prefix"]) <= 5  # the playbook's own check


def test_the_scenario_objects() -> None:
    # Img1 and Img2 share L1 and L2 (the seed scenario), and P1 fills a node
    img1, img2 = (set(live.IMAGES[i].layers) for i in ("img1", "img2"))
    assert len(img1 & img2) == 2 and len(img1 | img2) == 4
    pod = live.scenario_pod("p", "reg.test/live/img1:v1")
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == live.NODE_CPU
    assert pod["spec"]["schedulerName"] == live.PROFILE
    # the node's inventory is one the plugin and the extender accept
    document = live.inventory("t1-n2", ["img2"])
    parsed = parse_document(document, "test")
    assert parsed.node == "t1-n2"
    assert {layer.digest for image in parsed.images for layer in image.layers} == {
        layer.digest for layer in live.IMAGES["img2"].layers
    }
    # batch pods: one signature, one per node by the host port
    a, b = live.batch_pod("a"), live.batch_pod("b")
    assert a["spec"]["containers"] == b["spec"]["containers"]
    assert a["spec"]["containers"][0]["ports"][0]["hostPort"] == live.BATCH_HOST_PORT


RESULTS: dict[str, Any] = {
    "run_time_s": 600.0,
    "minors": [
        {
            "minor": "1.35",
            "build": {"seconds": 412.0, "state": "built"},
            "versions": {
                "kube-apiserver": "v1.35.4",
                "kube-scheduler": "v1.35.4",
                "etcd": "v3.6.5",
            },
            "apply": {"objects": 20, "refused": 0},
            "trials": [
                {
                    "placed": {"p2": "t1-n2"},
                    "p1_again_scores": {"t1-n2": 87, "t1-n3": 0},
                    "verdict": None,
                }
            ],
            "batching": {"hints": {"hint_used": 1.0, "no_hint": 2.0}, "on": True},
        }
    ],
}


def test_the_block_says_what_ran_and_how_it_placed() -> None:
    text = report.markdown(RESULTS)
    assert "| 1.35 | v1.35.4 / v1.35.4 / v3.6.5 | 20 objects, 0 refused | 1/1 | 87 vs 0 |" in text
    assert "on (hint_used 1, no_hint 2)" in text
    assert "Failed" not in text
    assert "1.35 412 s (built)" in text


def test_the_block_says_what_failed() -> None:
    results = copy.deepcopy(RESULTS)
    minor = results["minors"][0]
    minor["trials"][0]["verdict"] = "P1' on t1-n3, not on P2's node t1-n2"
    minor["batching"] = {"hints": {"no_hint": 3.0}, "on": False}
    text = report.markdown(results)
    assert "| 0/1 |" in text
    assert "**off** (no_hint 3)" in text
    assert "**Failed:** 1.35 trial 1: P1' on t1-n3" in text
