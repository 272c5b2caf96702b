"""Pure parts of the testbed: quantities, registry access-log accounting, scenario
sequencing and the report (the real runs are in tests/e2e)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from layersched.core.errors import InputError
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local._cluster import RegistryAccessLog
from layersched_harness.testbed.report import link_optimum_s, plot, print_table
from layersched_harness.testbed.scenario import (
    PHASES,
    Placement,
    Pull,
    ScenarioImages,
    plan_trials,
    report,
    repository_of,
    retag,
    run_scenario,
    run_trial,
    trial_images,
    trial_tag,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", Decimal(2)),
        ("500m", Decimal("0.5")),  # milli-cpu
        ("4Gi", Decimal(4 * 2**30)),  # binary suffix
        ("1G", Decimal(10**9)),  # decimal suffix
        ("1.5Mi", Decimal(3 * 2**19)),  # fractional binary
    ],
    ids=["cores", "millicores", "Gi", "G", "fraction"],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    from layersched.core.quantity import parse_quantity

    assert parse_quantity(text, "x") == value


def test_bad_quantity_names_the_field() -> None:
    from layersched.core.quantity import parse_quantity

    with pytest.raises(InputError, match=r"node n1 allocatable.memory: '4 GB'"):
        parse_quantity("4 GB", "node n1 allocatable.memory")


def test_access_log_counts_only_the_node_after_the_mark(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text('10.0.0.2 - - [t] "GET /v2/ HTTP/1.1" 200 999 "" "x"\n')
    log = RegistryAccessLog(path)
    mark = log.mark()
    with path.open("a") as f:
        f.write('10.0.0.2 - - [t] "GET /v2/a/manifests/v1 HTTP/1.1" 200 500 "" "containerd"\n')
        f.write('10.0.0.3 - - [t] "GET /v2/a/blobs/sha256:x HTTP/1.1" 200 7000 "" "c"\n')
        f.write('10.0.0.2 - - [t] "HEAD /v2/a/manifests/v1 HTTP/1.1" 200 - "" "c"\n')
        f.write('10.0.0.2 - - [t] "GET /v2/a/blobs/sha256:y HTTP/1.1" 200 4096 "" "c"\n')
    # 500 + 4096 for 10.0.0.2 after the mark; the 999 before it and 10.0.0.3's 7000 excluded
    assert log.bytes_since(mark, "10.0.0.2") == 4596


class _ScriptedDriver:
    """Records the calls run_trial makes; places pods on the first free node."""

    name = "scripted"

    def __init__(self, nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> None:
        self.calls: list[str] = []
        self.busy: dict[str, str] = {}
        self.nodes = nodes

    def reset(self, images: tuple[str, ...] | None = None) -> None:
        self.calls.append(f"reset {' '.join(images or ())}")
        self.busy.clear()

    def submit(self, pod: str, image: str, strategy: str) -> Placement:
        self.calls.append(f"submit {pod} {image}")
        free = [n for n in self.nodes if n not in self.busy.values()] or [self.nodes[0]]
        self.busy[pod] = free[0]
        scores = dict.fromkeys(free, 0)
        return Placement(free[0], scores, Pull(pod, free[0], 1, 0.5))

    def complete(self, submitted: Placement) -> Placement:
        self.calls.append(f"complete {submitted.pull.pod}")
        return submitted

    def delete(self, pod: str) -> None:
        self.calls.append(f"delete {pod}")
        del self.busy[pod]

    def settle(self, pod: str, strategy: str) -> float:
        self.calls.append(f"settle {pod} {strategy}")
        return 12.5


def test_trial_runs_the_four_steps_in_order() -> None:
    driver = _ScriptedDriver()
    images = ScenarioImages("img1", "img2", {"L3": ("sha256:" + "3" * 64, 4)})
    trial = run_trial(driver, images, "layer-locality")
    assert driver.calls == [
        # the reset waits until no node lists this trial's images
        "reset img1 img2",
        # P2 is submitted once P1 is bound (its node is full): the two pulls overlap
        "submit P1 img1",
        "submit P2 img2",
        "complete P1",
        "complete P2",
        "delete P2",
        # P1-again is scored only once P2's node lists Img2 where the strategy looks
        "settle P2 layer-locality",
        "submit P1-again img1",
        "complete P1-again",
    ]
    assert trial.images == {"Img1": "img1", "Img2": "img2"}
    assert trial.status_lag_s == {"P2": 12.5}
    # P2 freed n2, so the first free node for P1-again is n2 again
    assert trial.placements == {"P1": "n1", "P2": "n2", "P1-again": "n2"}
    assert trial.scores_t3 == {"n2": 0, "n3": 0}
    assert [p.pod for p in trial.pulls] == ["P1", "P2", "P1-again"]


def test_report_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    driver = _ScriptedDriver()
    layers = {"L3": ("sha256:" + "3" * 64, 2_500_000)}
    images = ScenarioImages("img1", "img2", layers)
    doc = report("local", 20_000_000, images, {"layer-locality": [run_trial(driver, images, "x")]})
    # 2.5 MB * 8 bits / 20 Mbit/s = 1 s
    assert link_optimum_s(doc) == pytest.approx(1.0)
    print_table(doc)
    assert "1/1" in capsys.readouterr().out  # P1-again landed on P2's node
    plot(doc, tmp_path / "scenario.png")
    assert (tmp_path / "scenario.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("node_rates", "expected"),
    [
        # Identical nodes: the headline rate is the one rate, every node recorded too.
        ({"n2": 20_000_000, "n1": 20_000_000}, {"n1": 20_000_000, "n2": 20_000_000}),
        # A driver that does not know per-node rates (kind): no such key at all.
        (None, None),
    ],
    ids=["local-per-node", "kind-without"],
)
def test_report_records_node_rates(
    node_rates: dict[str, int] | None, expected: dict[str, int] | None
) -> None:
    images = ScenarioImages("img1", "img2", {"L3": ("sha256:" + "3" * 64, 4)})
    doc = report("local", 20_000_000, images, {}, node_rates)
    assert doc["link_rate_bits_per_s"] == 20_000_000
    assert doc.get("node_rates_bits_per_s") == expected
    if expected is not None:
        assert list(doc["node_rates_bits_per_s"]) == ["n1", "n2"]  # sorted by node name


@pytest.mark.parametrize("trials", [0, -1], ids=["zero", "negative"])
def test_run_scenario_needs_a_trial(trials: int) -> None:
    # Zero trials would make every per-trial assertion pass vacuously.
    images = ScenarioImages("img1", "img2", {})
    with pytest.raises(InputError, match="at least 1 trial"):
        run_scenario(_ScriptedDriver(), images, ["layer-locality"], trials)


def test_every_step_of_a_trial_is_timed_and_the_report_sums_them() -> None:
    # where a trial's time goes: the report sums each step over every trial
    driver = _ScriptedDriver()
    images = ScenarioImages("r/img1:v1", "r/img2:v1", {"L1": ("sha256:" + "1" * 64, 1)})
    trials = [run_trial(driver, images, "layer-locality") for _ in range(3)]
    for trial in trials:
        assert list(trial.phase_s) == list(PHASES)
        assert all(seconds >= 0 for seconds in trial.phase_s.values())
    doc = report("local", 20_000_000, images, {"layer-locality": trials})
    assert list(doc["phases_s"]) == list(PHASES)
    for phase in PHASES:
        total = sum(trial.phase_s[phase] for trial in trials)
        assert doc["phases_s"][phase]["total"] == round(total, 1)


def test_p1_and_p2_on_one_node_is_an_error_not_a_measurement() -> None:
    # Overlapping pulls are honest only on two nodes (two links): one node would share
    # its link between them, so the trial refuses to report such pull times.
    driver = _ScriptedDriver(nodes=("n1",))
    images = ScenarioImages("img1", "img2", {})
    with pytest.raises(TestbedError, match="both landed on node n1"):
        run_trial(driver, images, "layer-locality")


@pytest.mark.parametrize(
    ("run_id", "number", "expected"),
    [
        # the run's start time and the trial's number over the whole run, two digits
        ("20261124031500", 7, "trial-20261124031500-07"),
        # more than 99 trials: the number just grows
        ("r1", 123, "trial-r1-123"),
    ],
    ids=["two-digits", "three-digits"],
)
def test_trial_tag(run_id: str, number: int, expected: str) -> None:
    assert trial_tag(run_id, number) == expected


@pytest.mark.parametrize(
    ("run_id", "number", "match"),
    [
        ("x", 0, "at least 1"),  # numbers start at 1, as plan_trials counts
        ("a/b", 1, "not a valid OCI tag"),  # '/' would change the repository
        ("x" * 130, 1, "not a valid OCI tag"),  # tags are at most 128 characters
    ],
    ids=["zero", "slash", "too-long"],
)
def test_trial_tag_refuses(run_id: str, number: int, match: str) -> None:
    with pytest.raises(InputError, match=match):
        trial_tag(run_id, number)


@pytest.mark.parametrize(
    ("ref", "repository"),
    [
        # a registry with a port: its colon is not a tag's
        ("10.250.50.1:5000/scenario/img1:v1", "10.250.50.1:5000/scenario/img1"),
        ("10.250.50.1:5000/scenario/img1", "10.250.50.1:5000/scenario/img1"),
        ("debian:12", "debian"),  # as written: no docker.io/library/ added
    ],
    ids=["port-and-tag", "port-no-tag", "short-name"],
)
def test_repository_of(ref: str, repository: str) -> None:
    assert repository_of(ref) == repository
    assert retag(ref, "t1") == f"{repository}:t1"


def test_a_reference_pinned_by_digest_cannot_be_retagged() -> None:
    with pytest.raises(InputError, match="pinned by digest"):
        retag("reg:5000/img1@sha256:" + "a" * 64, "t1")


def test_trial_images_keep_the_layers_and_change_the_tag() -> None:
    layers = {"L1": ("sha256:" + "1" * 64, 10)}
    images = ScenarioImages("reg:5000/s/img1:v1", "reg:5000/s/img2:v1", layers)
    tagged = trial_images(images, "trial-r-01")
    assert (tagged.img1, tagged.img2) == (
        "reg:5000/s/img1:trial-r-01",
        "reg:5000/s/img2:trial-r-01",
    )
    assert tagged.layers == layers


def test_plan_trials_numbers_every_trial_of_the_run_in_order() -> None:
    # (strategy, index within it, number over the run): a strategy's trials in a row
    assert plan_trials(["a", "b"], 2) == [("a", 0, 1), ("a", 1, 2), ("b", 0, 3), ("b", 1, 4)]


def test_run_scenario_gives_each_trial_its_images() -> None:
    driver = _ScriptedDriver()
    images = ScenarioImages("r/img1:v1", "r/img2:v1", {})
    results = run_scenario(
        driver,
        images,
        ["a", "b"],
        2,
        images_of=lambda number: trial_images(images, f"t{number}"),
    )
    # every trial reset for, pulled and recorded its own tag (numbered over the run)
    resets = [call for call in driver.calls if call.startswith("reset")]
    assert resets == [f"reset r/img1:t{n} r/img2:t{n}" for n in (1, 2, 3, 4)]
    assert [t.images["Img1"] for t in results["b"]] == ["r/img1:t3", "r/img1:t4"]
