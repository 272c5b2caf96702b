"""The scheduler_perf driver's pure parts (harness/bench/bench_scheduler_perf.py): upstream's data
items read per workload and profile, rounds summarised, ratios to the default of the same
round, and the docs block's honesty about load."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.deploy import (
    DEFAULT_SCHEDULER,
    KUBE_SCHEDULER_CONFIG_V1,
    PLUGIN_KEEPS_IMAGE_LOCALITY,
    PluginArgs,
    plugin_scheduler_config,
)
from layersched_harness.testbed.scheduler_configs import batchable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))

import bench_scheduler_perf as perf  # noqa: E402


def _item(name: str, metric: str, data: dict[str, float], **labels: str) -> dict[str, Any]:
    return {
        "data": data,
        "unit": "ms",
        "labels": {"Name": f"BenchmarkPerfScheduling/{name}", "Metric": metric, **labels},
    }


def _round(default_rate: float, plugin_rate: float, plugin_p99: float) -> dict[str, Any]:
    """One round's data items as upstream writes them (labels absent elsewhere are filled
    with "not applicable", which the reader ignores)."""
    items = []
    for profile, rate, p99 in (
        ("default", default_rate, 10.0),
        ("layer-locality", plugin_rate, plugin_p99),
    ):
        name = f"SchedulingBasic_{profile}/500Nodes/namespace-2"
        items += [
            _item(name, "SchedulingThroughput", {"Average": rate, "Perc50": rate}),
            _item(
                name,
                "scheduler_scheduling_attempt_duration_seconds",
                {"Perc50": p99 / 2, "Perc99": p99},
                result="scheduled",
            ),
            # the unschedulable attempts' histogram is not the p99 reported
            _item(
                name,
                "scheduler_scheduling_attempt_duration_seconds",
                {"Perc50": 999.0, "Perc99": 999.0},
                result="unschedulable",
            ),
            _item(name, "SchedulingDuration", {"Duration": 4.0}),
        ]
    items.append(
        _item(
            "SchedulingBasic_layer-locality/500Nodes/namespace-2",
            "scheduler_plugin_execution_duration_seconds",
            {"Perc99": 0.05},
            plugin="LayerLocality",
            extension_point="Score",
        )
    )
    return {"version": "v1", "dataItems": items}


def test_items_are_read_per_workload_and_profile() -> None:
    parsed = perf.parse_items(_round(200.0, 190.0, 12.0))
    row = parsed["SchedulingBasic/500Nodes"]["layer-locality"]
    assert row["pods_per_s"] == 190.0
    assert row["attempt_p99_ms"] == 12.0  # result=scheduled, not the unschedulable 999
    assert row["measured_span_s"] == 4.0
    assert row["layer_locality_score_p99_ms"] == 0.05
    assert parsed["SchedulingBasic/500Nodes"]["default"]["pods_per_s"] == 200.0


def test_ratios_are_to_the_default_of_the_same_round() -> None:
    # round 1: 190 / 200 = 0.95; round 2: 100 / 100 = 1.0 (a slow round for both); round 3:
    # 180 / 200 = 0.9. Pooled medians would give 180 / 200 = 0.9; per round, the median 0.95
    rounds = [
        perf.parse_items(_round(200.0, 190.0, 12.0)),
        perf.parse_items(_round(100.0, 100.0, 10.0)),
        perf.parse_items(_round(200.0, 180.0, 15.0)),
    ]
    workloads = ["SchedulingBasic/500Nodes"]
    summary = perf.summarise(rounds, workloads, ["default", "layer-locality"])
    row = summary["SchedulingBasic/500Nodes"]["layer-locality"]
    assert row["pods_per_s_vs_default"] == 0.95
    assert row["pods_per_s_vs_default_range"] == [0.9, 1.0]
    assert row["pods_per_s"] == 180.0 and row["pods_per_s_range"] == [100.0, 190.0]
    # attempt p99: 12/10, 10/10, 15/10
    assert row["attempt_p99_ms_vs_default"] == 1.2
    assert row["attempt_p99_ms_vs_default_range"] == [1.0, 1.5]


def _results(load_max: float) -> dict[str, Any]:
    rounds = [perf.parse_items(_round(200.0, 190.0, 12.0))] * 3
    return {
        "provenance": {
            "commit": "0123456789abcdef",
            "date": "2026-11-27T09:00:00+00:00",
            "machine": {"cpus": 2, "model": "X", "memory_gib": 23.5},
            "kubernetes_version": "v1.37.2",
            "load_average_1m_at_start": 1.0,
            "load_average_1m_max": load_max,
            "load_average_1m_at_end": 1.0,
        },
        "rounds": 3,
        "workloads": perf.summarise(
            rounds, ["SchedulingBasic/500Nodes"], ["default", "layer-locality"]
        ),
    }


def test_the_block_labels_an_overloaded_run_inconclusive() -> None:
    quiet = perf.markdown(_results(1.5))
    assert "Inconclusive" not in quiet
    row = "| SchedulingBasic/500Nodes | layer-locality | 190 | 0.95x | 0.95 0.95 0.95 | 0.0% "
    assert row + "| 12 ms | 1.2x |" in quiet
    assert "Measured at commit `0123456789ab`" in quiet
    busy = perf.markdown(_results(7.0))
    assert busy.startswith("**Inconclusive run:** the load average reached 7.0 on 2 cores")


def _judged(rounds: list[tuple[float, float, float]], others: float = 0.01) -> str:
    results = {
        "provenance": {"machine": {"cpus": 2}, "other_processes_cores": others},
        "rounds": len(rounds),
        "workloads": perf.summarise(
            [perf.parse_items(_round(*r)) for r in rounds],
            ["SchedulingBasic/500Nodes"],
            ["default", "layer-locality"],
        ),
    }
    ((workload, profile, base, verdict),) = perf.verdicts(results)
    assert (workload, profile, base) == ("SchedulingBasic/500Nodes", "layer-locality", "default")
    return str(verdict["verdict"])


def test_the_plugins_target_is_judged_on_every_rounds_ratio() -> None:
    # (default pods/s, plugin pods/s, plugin p99 against the default's 10 ms); issue 43's
    # target: >= 0.97x, p99 <= 1.1x
    assert _judged([(200, 196, 11), (200, 198, 10), (200, 200, 10.5)]) == "met"
    # one round under 0.97x: the spread straddles the target
    assert _judged([(200, 196, 11), (200, 190, 10), (200, 200, 10.5)]) == "inconclusive"
    # every round's p99 over 1.1x
    assert _judged([(200, 196, 12), (200, 198, 14), (200, 200, 15)]) == "missed"
    # two rounds are too few; a shared machine gives no verdict
    assert _judged([(200, 196, 11), (200, 198, 10)]) == "inconclusive"
    assert _judged([(200, 196, 11), (200, 198, 10), (200, 200, 10)], others=0.6) == "inconclusive"


def _judged_large(rates: list[float]) -> dict[str, Any]:
    workload = perf.LARGE_WORKLOADS[0]
    rounds = []
    for rate in rates:
        items = perf.parse_items(_round(200.0, rate, 10.0))
        rounds.append({workload: items["SchedulingBasic/500Nodes"]})
    results = {
        "provenance": {"machine": {"cpus": 2}, "other_processes_cores": 0.01},
        "rounds": len(rates),
        "workloads": perf.summarise(rounds, [workload], ["default", "layer-locality"]),
    }
    ((_, _, _, verdict),) = perf.verdicts(results)
    return verdict


def test_a_large_workload_is_met_only_with_rounds_under_five_percent_apart() -> None:
    # issue 43: ratios 0.98, 0.99, 1.0: spread 0.02 / 0.99 = 2.0%: met
    tight = _judged_large([196.0, 198.0, 200.0])
    assert (tight["verdict"], tight["ratio_spread"]) == ("met", 0.02)
    # ratios 0.975, 1.0, 1.05 (every round >= 0.97x): spread 0.075 / 1.0 = 7.5%: the
    # rounds do not resolve 3%, whatever side they are on
    wide = _judged_large([195.0, 200.0, 210.0])
    assert (wide["verdict"], wide["ratio_spread"]) == ("inconclusive", 0.075)
    assert "7.5%" in wide["why"]


def test_each_rounds_ratio_and_their_spread_are_kept() -> None:
    rounds = [perf.parse_items(_round(200.0, rate, 10.0)) for rate in (190.0, 200.0, 210.0)]
    summary = perf.summarise(rounds, ["SchedulingBasic/500Nodes"], ["default", "layer-locality"])
    row = summary["SchedulingBasic/500Nodes"]["layer-locality"]
    # 0.95, 1.0, 1.05 in round order; (1.05 - 0.95) / 1.0
    assert row["pods_per_s_vs_default_rounds"] == [0.95, 1.0, 1.05]
    assert row["pods_per_s_vs_default_spread"] == 0.1
    assert perf.ratio_spread([1.0]) is None


def test_the_block_ends_with_the_verdicts() -> None:
    text = perf.markdown(_results(1.5))
    assert text.splitlines()[-1].startswith(
        "- SchedulingBasic/500Nodes, `layer-locality` against `default`: pods/s 0.95x"
    )
    # 0.95x in every round, under issue 43's 0.97x
    assert "**missed**" in text.splitlines()[-1]


PROFILES_DIR = ROOT / "harness/scheduler-perf/config/profiles"


@pytest.mark.parametrize(
    ("profile", "image_locality", "batching"),
    [
        ("layer-locality", True, False),
        ("no-image-locality-layer-locality", False, False),
        ("batching-layer-locality", True, True),
    ],
)
def test_the_layer_locality_profiles_are_the_generators(
    profile: str, image_locality: bool, batching: bool
) -> None:
    # each LayerLocality profile is the generator's plugin profile (the install's args:
    # spread on, quorum 2), with and without ImageLocality, plus upstream's batching
    # settings; only the start-up wait differs (the CRD is created after the scheduler),
    # and registry resolution is off (scheduler_perf has no registry: its pods' images
    # are never fetched during a measurement)
    config = plugin_scheduler_config(
        PluginArgs(inventory_sync_timeout_s=1, registry=None),
        scheduler_name=DEFAULT_SCHEDULER,
        api_version=KUBE_SCHEDULER_CONFIG_V1,
        image_locality=image_locality,
    )
    if batching:
        config = batchable(config)
    (want,) = config["profiles"]
    (got,) = yaml.safe_load((PROFILES_DIR / f"{profile}.yaml").read_text())["profiles"]
    assert got == want


def test_the_installed_profile_is_judged_first_against_the_default() -> None:
    # the profile judged first is the one the install renders (issue 43 decided whether it
    # keeps ImageLocality): its file disables ImageLocality exactly when the install does
    profile, base = perf.TARGET_PAIRS[0]
    assert (profile, base) == (perf.INSTALLED_PROFILE, perf.BASE_PROFILE)
    (config,) = yaml.safe_load((PROFILES_DIR / f"{profile}.yaml").read_text())["profiles"]
    disabled = config["plugins"]["score"].get("disabled", [])
    assert ({"name": "ImageLocality"} not in disabled) is PLUGIN_KEEPS_IMAGE_LOCALITY


def test_the_block_says_where_etcd_kept_its_data() -> None:
    assert "etcd beside it, its data in memory (tmpfs))" in perf.markdown(
        _results(1.5) | {"etcd_filesystem": "tmpfs"}
    )
    assert "its data on disk (ext4)" in perf.markdown(_results(1.5) | {"etcd_filesystem": "ext4"})
    # results from before it was recorded say nothing of it
    assert "etcd beside it), " in perf.markdown(_results(1.5))


class _Build:
    """The Kubernetes build as run_round reads it."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir

    def require(self, _name: str) -> Path:
        return self.bin_dir

    def go_version_needed(self) -> str:
        return "1.25"

    def go_env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin"}


def test_each_round_gives_etcd_a_temporary_directory_in_etcd_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stand-in for the test binary: it records its TMPDIR (where upstream's framework
    # makes etcd's data dir) and whether it exists, then writes one data file
    seen = tmp_path / "seen"
    binary = tmp_path / "scheduler_perf.test"
    binary.write_text(
        "#!/bin/sh\n"
        f'test -d "$TMPDIR" && echo "$TMPDIR" > {seen}\n'
        'while [ "$1" != "-data-items-dir" ]; do shift; done\n'
        'echo \'{"version": "v1", "dataItems": []}\' > "$2/items.json"\n'
    )
    binary.chmod(0o755)
    etcd_in = tmp_path / "memory"
    etcd_in.mkdir()
    monkeypatch.setattr(perf, "ETCD_IN", etcd_in)
    monkeypatch.setattr(perf, "kubernetes_build", lambda: _Build(tmp_path))
    monkeypatch.setattr(perf, "find_go", lambda _version: ("/usr/bin/go", "go1.25"))
    doc = perf.run_round(binary, ["W"], ["default"], tmp_path / "data", tmp_path / "log")
    assert doc == {"version": "v1", "dataItems": []}
    used = Path(seen.read_text().strip())
    assert used.parent == etcd_in and used.name.startswith("layersched-perf-etcd-")
    assert not used.exists()  # removed with the round


def _large_results(control: list[float], plugin: list[float]) -> dict[str, Any]:
    """Rounds of the first large workload: the default at 200 pods/s, its second run
    (the control) and the installed profile at the rates given, p99 alike."""
    workload = perf.LARGE_WORKLOADS[0]
    rounds = []
    for again, mine in zip(control, plugin, strict=True):
        rows = {
            perf.BASE_PROFILE: {"pods_per_s": 200.0, "attempt_p99_ms": 10.0},
            perf.CONTROL_PROFILE: {"pods_per_s": again, "attempt_p99_ms": 10.0},
            perf.INSTALLED_PROFILE: {"pods_per_s": mine, "attempt_p99_ms": 10.0},
        }
        rounds.append({workload: rows})
    profiles = [perf.BASE_PROFILE, perf.CONTROL_PROFILE, perf.INSTALLED_PROFILE]
    return {
        "provenance": {"machine": {"cpus": 2}, "other_processes_cores": 0.01},
        "rounds": len(rounds),
        "workloads": perf.summarise(rounds, [workload], profiles),
    }


def test_the_default_against_itself_is_the_noise_floor_each_verdict_cites() -> None:
    # the control's ratios 0.9, 1.0, 1.1: spread 20%; the plugin's 0.98, 1.0, 1.1 (every
    # round over 0.97x) spread 12%: not resolved, and the floor says why
    results = _large_results([180.0, 200.0, 220.0], [196.0, 200.0, 220.0])
    rows = results["workloads"][perf.LARGE_WORKLOADS[0]]
    assert perf.noise_floor(rows) == 0.2
    ((_, profile, _, verdict),) = perf.verdicts(results)
    assert (profile, verdict["verdict"]) == (perf.INSTALLED_PROFILE, "inconclusive")
    # the control straddles the target itself, which comes first
    assert verdict["why"] == (
        "the default against itself was inconclusive on this target in the same rounds "
        "(pods/s 0.9-1.1x, attempt p99 1-1x): the rounds do not resolve it"
    )
    text = perf.markdown(results)
    assert (
        f"- {perf.LARGE_WORKLOADS[0]}: `default-again` against `default` (the same profile "
        "run twice in each round): 0.9-1.1x, spread 20.0%, so no profile's spread can come "
        "under 5% in this run."
    ) in text
    # the noise lines come before the verdicts
    assert text.index("The machine's own noise") < text.index("Targets (issues 33 and 43)")


def test_a_met_pair_wider_than_five_percent_cites_the_floor() -> None:
    # the control meets the target (0.98-1.08x) but spreads 10%; the plugin's rounds
    # (0.98-1.1x) meet it too, spread 12%: not resolved, and the floor is cited
    results = _large_results([196.0, 200.0, 216.0], [196.0, 200.0, 220.0])
    ((_, _, _, verdict),) = perf.verdicts(results)
    assert verdict["verdict"] == "inconclusive"
    assert verdict["why"] == (
        "the per-round ratios spread 12.0%, not under 5%: the rounds do not resolve the "
        "effect; the default against itself spread 10.0% in the same rounds"
    )


def test_a_missed_pair_is_inconclusive_when_the_control_misses_too() -> None:
    # identical runs 0.9-0.95x of each other: the plugin's 0.9-0.94x says nothing
    results = _large_results([180.0, 186.0, 190.0], [180.0, 184.0, 188.0])
    ((_, _, _, verdict),) = perf.verdicts(results)
    assert verdict["verdict"] == "inconclusive"
    assert verdict["why"].startswith("the default against itself was missed on this target")
    # without the control, the same rounds are a miss
    del results["workloads"][perf.LARGE_WORKLOADS[0]][perf.CONTROL_PROFILE]
    ((_, _, _, alone),) = perf.verdicts(results)
    assert alone["verdict"] == "missed"


def test_a_quiet_control_claims_nothing_and_lets_a_tight_pair_be_met() -> None:
    results = _large_results([199.0, 200.0, 201.0], [196.0, 198.0, 200.0])
    ((_, _, _, verdict),) = perf.verdicts(results)
    assert verdict["verdict"] == "met"
    assert "no profile's spread can come under" not in perf.markdown(results)
    # without the control there is no floor and no line of it
    del results["workloads"][perf.LARGE_WORKLOADS[0]][perf.CONTROL_PROFILE]
    assert perf.noise_floor(results["workloads"][perf.LARGE_WORKLOADS[0]]) is None
    assert "The machine's own noise" not in perf.markdown(results)


def test_the_control_profile_is_the_default_profile() -> None:
    def profiles(name: str) -> Any:
        return yaml.safe_load((PROFILES_DIR / f"{name}.yaml").read_text())["profiles"]

    assert profiles(perf.CONTROL_PROFILE) == profiles(perf.BASE_PROFILE)
    assert perf.PROFILES[:2] == (perf.BASE_PROFILE, perf.CONTROL_PROFILE)


PERF_CONFIG = ROOT / "harness/scheduler-perf/config/layer-locality.yaml"
#: The label the benchmark's hold plugin (harness/scheduler-perf/hold) gates pods on.
HOLD_LABEL = "layersched.io/bench-hold-until"


def test_the_hold_plugin_gates_on_the_templates_label() -> None:
    source = (ROOT / "harness/scheduler-perf/hold/hold.go").read_text()
    assert f'const CountLabel = "{HOLD_LABEL}"' in source


def test_the_large_workloads_hold_their_measured_pods_until_all_exist() -> None:
    # issue 43: the measured pods wait in the queue (the hold plugin's label, its value
    # the op's count), so the measurement is the scheduler's drain alone
    test_cases = {case["name"]: case for case in yaml.safe_load(PERF_CONFIG.read_text())}
    for workload in perf.LARGE_WORKLOADS:
        case_name, name = workload.split("/")
        case = test_cases[case_name]
        params = next(w["params"] for w in case["workloads"] if w["name"] == name)
        assert params["measurePods"] == 5000
        (measured,) = [op for op in case["workloadTemplate"] if op.get("collectMetrics")]
        template = PERF_CONFIG.parent / measured["podTemplatePath"]
        pod = yaml.safe_load(template.read_text())
        assert pod["metadata"]["labels"] == {HOLD_LABEL: "{{.Count}}"}
        # the same pod as SharedLayers' otherwise
        plain = yaml.safe_load((PERF_CONFIG.parent / case["defaultPodTemplatePath"]).read_text())
        assert pod["spec"] == plain["spec"]
    assert set(perf.LARGE_WORKLOADS) <= set(perf.WORKLOADS)


def test_the_go_benchmarks_defaults_are_the_drivers() -> None:
    source = (ROOT / "harness/scheduler-perf/scheduler_perf_test.go").read_text()
    assert f'flag.String("workloads", "{",".join(perf.WORKLOADS)}"' in source
    assert f'flag.String("profiles", "{",".join(perf.PROFILES)}"' in source
