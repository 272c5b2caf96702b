"""The local testbed's pure pieces: settings, ansible output parsing, the inventory file,
the scenario spec, the CLI's option parsing, and the playbook tools' argument parsing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tenacity
import yaml

from layersched.cli.main import build_parser
from layersched.cli.main import main as cli_main
from layersched.core.errors import InputError
from layersched_harness.testbed import errors
from layersched_harness.testbed.cli.testbed import _mbit_to_bits, _pairs, layer_sizes
from layersched_harness.testbed.local import (
    TestbedSettings,
    parse_runtimes,
    parse_state,
    tbf_rate_bits_per_s,
)
from layersched_harness.testbed.local._ansible import (
    SETTINGS_FILE,
    _check_recorded_settings,
    _Watch,
    recorded_prefix,
)
from layersched_harness.testbed.local._cluster import (
    PLUGIN_OF_STRATEGY,
    SCORE_SOURCES,
    LocalBackend,
)
from layersched_harness.testbed.scenario_images import DEFAULT_SPEC_PATH, load_spec, parse_spec
from layersched_harness.testbed.scheduler_configs import (
    REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER,
    REPLAY_PLUGIN_SCHEDULER,
)
from tests.fixtures.playbook_tools import load_tool
from tests.unit._testbed_docs import inventory_doc

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "harness" / "playbooks" / "tools"
MIB = 1 << 20


def _tool(name: str) -> ModuleType:
    """Import a stdlib-only playbook tool by path (they are not part of the package)."""
    return load_tool(name)


# ------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("changes", "error"),
    [
        # The defaults: 3 nodes at 20 Mbit/s, prefix lstb, 10.250.50.0/24.
        ({}, None),
        # n3 on a 5 Mbit/s edge link: a heterogeneous testbed is fine.
        ({"node_rate_bits_per_s": {"n3": 5_000_000}}, None),
        # n4 does not exist with 3 nodes: a typo must not be silently ignored.
        ({"node_rate_bits_per_s": {"n4": 5_000_000}}, "unknown node"),
        # Zero nodes is no testbed at all.
        ({"node_count": 0}, "--nodes"),
        # tbf cannot shape to 0 bit/s.
        ({"rate_bits_per_s": 0}, "positive"),
        # 6 characters: over the 5 that keep every PREFIX-NODE within 15-character link names.
        ({"prefix": "layers"}, "prefix"),
        # Upper case would make names the teardown regexp might miss.
        ({"prefix": "LS"}, "prefix"),
        # 256 is not an octet.
        ({"net_base": "10.256.1"}, "net base"),
        # A full address is not a base: the playbook appends .1, .11, ...
        ({"net_base": "10.250.50.0"}, "net base"),
    ],
    ids=[
        "defaults",
        "per-node-rate",
        "unknown-node-rate",
        "no-nodes",
        "zero-rate",
        "long-prefix",
        "uppercase-prefix",
        "bad-octet",
        "four-octets",
    ],
)
def test_settings_check(changes: dict[str, Any], error: str | None, tmp_path: Path) -> None:
    settings = TestbedSettings(state_dir=tmp_path, **changes)
    if error is None:
        settings.check()
    else:
        with pytest.raises(errors.TestbedError, match=error):
            settings.check()


def test_settings_extra_vars_name_the_playbook_variables(tmp_path: Path) -> None:
    # Every key must be a variable of harness/playbooks/vars/testbed-local.yml, and the state dir
    # absolute: the playbook refuses a relative one.
    settings = TestbedSettings(state_dir=tmp_path / "tb", node_rate_bits_per_s={"n2": 1_000_000})
    extra = settings.extra_vars()
    assert extra == {
        "testbed_state_dir": str((tmp_path / "tb").resolve()),
        "testbed_node_count": 3,
        "testbed_rate_bits_per_s": 20_000_000,
        "testbed_node_rate_bits_per_s": {"n2": 1_000_000},
        "testbed_prefix": "lstb",
        "testbed_net_base": "10.250.50",
        # every node containerd (nodes past the list do)
        "testbed_node_runtimes": [],
        # three schedulers: pull-time is opt-in (layersched testbed up --pull-time)
        "testbed_pull_time": False,
        # and the replay's other arms (--replay-arms)
        "testbed_replay_arms": False,
        # the kubelets pull one image at a time, their default (--parallel-pulls)
        "testbed_parallel_pulls": False,
    }
    shared = (TOOLS.parent / "vars" / "testbed-local.yml").read_text()
    for key in extra:
        assert f"\n{key}:" in shared


@pytest.mark.parametrize(
    ("content", "prefix"),
    [
        # What the bring-up writes first: teardown deletes lsit-* and nothing else.
        ('{"prefix": "lsit", "net_base": "10.250.51"}', "lsit"),
        # No record (never brought up, or interrupted before the first task).
        (None, None),
        # A truncated write: no record rather than a crash.
        ('{"prefix": ', None),
        # A hand-edited file with a number: ignored.
        ('{"prefix": 7}', None),
    ],
    ids=["recorded", "absent", "truncated", "not-a-string"],
)
def test_recorded_prefix(content: str | None, prefix: str | None, tmp_path: Path) -> None:
    if content is not None:
        (tmp_path / SETTINGS_FILE).write_text(content)
    assert recorded_prefix(tmp_path) == prefix


@pytest.mark.parametrize(
    ("content", "refused"),
    [
        # A good record: up goes on (the playbook then checks prefix and net base).
        ('{"prefix": "lsit", "net_base": "10.250.51"}', False),
        # Never brought up: nothing to protect.
        (None, False),
        # Damaged: up stops with a one-line error pointing at teardown.
        ('{"prefix": ', True),
        ('{"prefix": 7}', True),
    ],
    ids=["recorded", "absent", "truncated", "not-a-string"],
)
def test_up_refuses_a_damaged_record(content: str | None, refused: bool, tmp_path: Path) -> None:
    if content is not None:
        (tmp_path / SETTINGS_FILE).write_text(content)
    if refused:
        with pytest.raises(errors.TestbedError, match=r"settings.json: .*damaged.*testbed down"):
            _check_recorded_settings(tmp_path)
    else:
        _check_recorded_settings(tmp_path)


# ------------------------------------------------------------------ ansible output
FAILED_RUN = [
    "PLAY [Bring up the local testbed] ***",
    "TASK [local_testbed_registry : Start the registry] *******",
    'fatal: [localhost]: FAILED! => {"changed": false, "msg": "non-zero return code", '
    '"stderr": "registry exited with 1 while starting"}',
    "PLAY RECAP *********",
    "localhost                  : ok=7    changed=2    unreachable=0    failed=1    "
    "skipped=1    rescued=0    ignored=0",
]
GOOD_RUN = [
    "TASK [Write the inventory file] ****",
    "ok: [localhost]",
    "PLAY RECAP *********",
    "localhost                  : ok=13   changed=0    unreachable=0    failed=0    "
    "skipped=2    rescued=0    ignored=0",
]
LOOP_FAILURE = [
    "TASK [local_testbed_node : Start containerd inside each node's network namespace] ***",
    "changed: [localhost] => (item=n1)",
    "failed: [localhost] (item=n2) => not json at all",
]


@pytest.mark.parametrize(
    ("lines", "task", "failure", "recap"),
    [
        # The fatal line's JSON gives msg and stderr; the task is the last TASK header.
        (
            FAILED_RUN,
            "local_testbed_registry : Start the registry",
            "non-zero return code: registry exited with 1 while starting",
            {"ok": 7, "changed": 2, "failed": 1},
        ),
        # No failure; the recap's changed=0 is what "idempotent" is checked against.
        (GOOD_RUN, "", "", {"ok": 13, "changed": 0, "failed": 0}),
        # A loop item failing without JSON: the raw text is kept.
        (
            LOOP_FAILURE,
            "local_testbed_node : Start containerd inside each node's network namespace",
            "not json at all",
            {},
        ),
    ],
    ids=["fatal-with-json", "clean-recap", "loop-item-failure"],
)
def test_watch_reads_ansible_output(
    lines: list[str], task: str, failure: str, recap: dict[str, int]
) -> None:
    watch = _Watch()
    for line in lines:
        watch.feed(line)
    assert (watch.failed_task, watch.failure, watch.recap) == (task, failure, recap)


# ------------------------------------------------------------------ inventory file
def test_inventory_round_trip() -> None:
    # What the playbook writes decodes into typed structs; registry.host is what image
    # references name.
    inventory = parse_state(json.dumps(inventory_doc()).encode(), "inventory.json")
    assert inventory.registry.host == "10.250.50.1:5000"
    assert inventory.node("n1").link_rate_bits_per_s == 20_000_000
    with pytest.raises(errors.TestbedError, match="no node 'n9'"):
        inventory.node("n9")


def test_the_scenario_may_run_the_replays_plugin_profiles() -> None:
    # issue 43: with --replay-arms the plugin process's replay profiles (ImageLocality
    # kept, disabled) are strategies the scenario runs, scored from that process's log
    doc = inventory_doc()
    plugin_log = "/s/control-plane/scheduler-layer-locality-plugin.log"
    replay = (REPLAY_PLUGIN_SCHEDULER, REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER)
    profiles = ("layer-locality-plugin", *replay)
    for strategy in profiles:
        doc["cluster"]["schedulers"][strategy] = {"name": strategy, "log": plugin_log}
    backend = LocalBackend(parse_state(json.dumps(doc).encode(), "inventory.json"))
    for strategy in profiles:
        assert backend.schedulers[strategy] == strategy
        assert backend._score_logs[strategy] == plugin_log
        assert PLUGIN_OF_STRATEGY[strategy] == "LayerLocality"
        assert strategy in SCORE_SOURCES
    # a testbed without them runs neither
    plain = LocalBackend(parse_state(json.dumps(inventory_doc()).encode(), "inventory.json"))
    assert not set(replay) & set(plain._score_logs)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        # A node without its CRI socket is unusable: say so, and how to fix it.
        (lambda d: d["nodes"][0].pop("cri_socket"), "malformed testbed inventory"),
        # A rate written as text by a hand edit.
        (lambda d: d["nodes"][0].update(link_rate_bits_per_s="fast"), "malformed"),
        # An inventory from the layout before the cluster (version 1).
        (lambda d: d.update(version=1), "inventory version 1"),
    ],
    ids=["missing-field", "wrong-type", "other-version"],
)
def test_inventory_rejects(change: Any, error: str) -> None:
    doc = inventory_doc()
    change(doc)
    with pytest.raises(errors.TestbedError, match=error):
        parse_state(json.dumps(doc).encode(), "inventory.json")


# ------------------------------------------------------------------ scenario spec
def test_default_spec_is_the_seed_scenario() -> None:
    # Img1 = L1,L2,L3 and Img2 = L1,L2,L4; L1+L2 = 24+16 MiB, L3 = L4 = 4 MiB.
    spec = load_spec(DEFAULT_SPEC_PATH)
    assert spec.images["Img1"].layers == ("L1", "L2", "L3")
    assert spec.images["Img2"].layers == ("L1", "L2", "L4")
    sizes = {label: layer.size_bytes for label, layer in spec.layers.items()}
    assert sizes == {"L1": 24 * MIB, "L2": 16 * MIB, "L3": 4 * MIB, "L4": 4 * MIB}
    assert len({layer.seed for layer in spec.layers.values()}) == len(spec.layers)


def test_spec_with_sizes_replaces_only_named_layers() -> None:
    # L1 shrinks to 1 MiB; seeds and the other sizes stay.
    spec = load_spec(DEFAULT_SPEC_PATH)
    small = spec.with_sizes({"L1": MIB})
    assert small.layers["L1"].size_bytes == MIB
    assert small.layers["L1"].seed == spec.layers["L1"].seed
    assert small.layers["L2"] == spec.layers["L2"]


@pytest.mark.parametrize(
    ("sizes", "error"),
    [
        # There is no L5 in the scenario.
        ({"L5": MIB}, "unknown layer"),
        # A zero-byte layer would make the scenario meaningless.
        ({"L3": 0}, "positive"),
    ],
    ids=["unknown-layer", "zero-size"],
)
def test_spec_with_sizes_rejects(sizes: dict[str, int], error: str) -> None:
    with pytest.raises(InputError, match=error):
        load_spec(DEFAULT_SPEC_PATH).with_sizes(sizes)


LAYERS = {"L1": {"seed": 1, "size_bytes": 10}, "L2": {"seed": 2, "size_bytes": 10}}


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        # Only Img1: the scenario needs both images.
        (
            {"layers": LAYERS, "images": {"Img1": {"repository": "a", "tag": "v", "layers": []}}},
            "exactly images Img1 and Img2",
        ),
        # Img2 names L9, which is not defined.
        (
            {
                "layers": LAYERS,
                "images": {
                    "Img1": {"repository": "a", "tag": "v", "layers": ["L1"]},
                    "Img2": {"repository": "b", "tag": "v", "layers": ["L9"]},
                },
            },
            "undefined layer",
        ),
        # No "layers" section at all.
        ({"images": {}}, "malformed scenario spec"),
        # A size written as "4Mi" in the file: the spec takes bytes.
        ({"layers": {"L1": {"seed": 1, "size_bytes": "4Mi"}}, "images": {}}, "integer"),
    ],
    ids=["one-image", "undefined-layer", "no-layers", "size-as-text"],
)
def test_parse_spec_rejects(doc: dict[str, Any], error: str) -> None:
    with pytest.raises(InputError, match=error):
        parse_spec(doc, "scenario.yml")


# ----------------------------------------------------------------------------- CLI
@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("20", 20_000_000),  # the default link: 20 Mbit/s
        ("2.5", 2_500_000),  # fractional rates are fine
        ("0.1", 100_000),  # 100 kbit/s, a very slow edge link
    ],
    ids=["twenty", "fractional", "slow"],
)
def test_mbit_to_bits(text: str, bits: int) -> None:
    assert _mbit_to_bits(text, "--rate-mbit") == bits


@pytest.mark.parametrize("text", ["0", "-3", "fast"], ids=["zero", "negative", "text"])
def test_mbit_to_bits_rejects(text: str) -> None:
    with pytest.raises(InputError, match="--rate-mbit"):
        _mbit_to_bits(text, "--rate-mbit")


@pytest.mark.parametrize(
    ("items", "pairs"),
    [
        (["n3=5"], {"n3": "5"}),  # one override
        (["n1=1", "n2=2"], {"n1": "1", "n2": "2"}),  # repeated option
        (["L1=8Mi"], {"L1": "8Mi"}),  # layer sizes use the same syntax
    ],
    ids=["one", "two", "quantity"],
)
def test_pairs(items: list[str], pairs: dict[str, str]) -> None:
    assert _pairs(items, "--node-rate") == pairs


@pytest.mark.parametrize("item", ["n3", "=5", "n3="], ids=["no-equals", "no-name", "no-value"])
def test_pairs_rejects(item: str) -> None:
    with pytest.raises(InputError, match="NAME=VALUE"):
        _pairs([item], "--node-rate")


def test_status_without_testbed_is_one_line(tmp_path: Path, capsys: Any) -> None:
    # No inventory in the state dir: exit 1 and a one-line hint, never a traceback.
    assert cli_main(["testbed", "status", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "no testbed inventory" in err and "testbed up" in err


# ---------------------------------------------------------------- playbook tools
@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        # netns=address@rate: node n1 of the default testbed.
        ("lstb-n1=10.250.50.11@20000000", ("lstb-n1", "10.250.50.11", 20_000_000)),
        # A 5 Mbit/s edge node.
        ("lsit-n2=10.250.51.12@5000000", ("lsit-n2", "10.250.51.12", 5_000_000)),
    ],
    ids=["default-node", "slow-node"],
)
def test_net_tool_node_spec(text: str, parsed: tuple[str, str, int]) -> None:
    assert _tool("local_testbed_net")._node(text) == parsed


@pytest.mark.parametrize(
    "text",
    ["lstb-n1=10.250.50.11", "lstb-n1@20000000", "lstb n1=1.2.3.4@1"],
    ids=["no-rate", "no-address", "space-in-name"],
)
def test_net_tool_node_spec_rejects(text: str) -> None:
    tool = _tool("local_testbed_net")
    with pytest.raises(Exception, match="NETNS=ADDRESS@RATE_BITS_PER_S"):
        tool._node(text)


@pytest.mark.parametrize(
    ("options", "rate_bits_per_s", "matches"),
    [
        # Exactly what was asked: 20 Mbit/s = 2,500,000 B/s, 10 ms bucket = 25,000 B.
        ({"rate": 2_500_000, "burst": 25_000}, 20_000_000, True),
        # iproute2 reads 16384 B back as 16383 at 5 Mbit/s (ticks): the same qdisc.
        ({"rate": 625_000, "burst": 16_383}, 5_000_000, True),
        # 7777777 bit/s reads back as 972222 B/s = 7777776 bit/s: within 1%.
        ({"rate": 972_222, "burst": 16_383}, 7_777_777, True),
        # A rate changed from 5 to 20 Mbit/s must be re-applied.
        ({"rate": 625_000, "burst": 25_000}, 20_000_000, False),
        # The right rate with a bucket 2% too small (24,500 B of 25,000) is re-applied.
        ({"rate": 2_500_000, "burst": 24_500}, 20_000_000, False),
    ],
    ids=["exact", "burst-rounded", "rate-rounded", "rate-changed", "burst-off-by-2pct"],
)
def test_net_tool_tbf_matches_within_tc_rounding(
    options: dict[str, int], rate_bits_per_s: int, matches: bool
) -> None:
    tool = _tool("local_testbed_net")
    qdisc = {"kind": "tbf", "root": True, "options": options}
    assert (
        tool.tbf_matches(qdisc, rate_bits_per_s, tool.tbf_burst_bytes(rate_bits_per_s)) is matches
    )


@pytest.mark.parametrize(
    "qdisc",
    [
        {"kind": "htb", "root": True, "options": {"rate": 2_500_000, "burst": 25_000}},
        {"kind": "tbf", "root": False, "options": {"rate": 2_500_000, "burst": 25_000}},
        {"kind": "tbf", "root": True, "options": {"rate": "fast"}},
    ],
    ids=["not-tbf", "not-root", "unreadable"],
)
def test_net_tool_tbf_matches_only_our_root_tbf(qdisc: dict[str, Any]) -> None:
    assert not _tool("local_testbed_net").tbf_matches(qdisc, 20_000_000, 25_000)


def test_link_rate_without_tc_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # No tc on PATH: a TestbedError saying to install iproute2, not a FileNotFoundError.
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(errors.TestbedError, match=r"tc -j qdisc show dev lstb-n1.*iproute2"):
        tbf_rate_bits_per_s("lstb-n1")


def test_status_without_tc_is_one_line(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A testbed inventory whose daemons are gone (registry on a closed local port, no CRI
    # socket) and no tc: exit 1 with one line naming iproute2.
    doc = inventory_doc()
    doc["registry"]["url"] = "http://127.0.0.1:9"
    doc["nodes"][0]["cri_endpoint"] = f"unix://{tmp_path}/none.sock"
    (tmp_path / "inventory.json").write_text(json.dumps(doc))
    monkeypatch.setenv("PATH", "/nonexistent")
    assert cli_main(["testbed", "status", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "iproute2" in err, err


# ---------------------------------------------------------------- scenario options
@pytest.mark.parametrize(
    ("items", "sizes"),
    [
        # Binary suffixes: 8 MiB = 8,388,608 B.
        (["L1=8Mi"], {"L1": 8 * MIB}),
        # Decimal suffix and plain bytes, two layers at once.
        (["L3=2M", "L4=4096"], {"L3": 2_000_000, "L4": 4096}),
        # No option: no override.
        ([], {}),
    ],
    ids=["mebibytes", "decimal-and-bytes", "none"],
)
def test_layer_sizes(items: list[str], sizes: dict[str, int]) -> None:
    assert layer_sizes(items) == sizes


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        # The same NAME=VALUE syntax as `testbed images --size`.
        (["--size", "L1"], "NAME=VALUE"),
        (["--size", "L1=big"], "--size L1: 'big'"),
        # Zero trials would pass every assertion vacuously.
        (["--trials", "0"], None),
    ],
    ids=["no-equals", "not-a-quantity", "zero-trials"],
)
def test_scenario_rejects_bad_options(
    argv: list[str], error: str | None, tmp_path: Path, capsys: Any
) -> None:
    if error is None:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["scenario", *argv])
        assert exit_info.value.code == 2
        assert "at least 1 trial" in capsys.readouterr().err
        return
    with pytest.raises(InputError, match=error):
        layer_sizes(argv[1:])


def test_teardown_matches_the_extender_command_the_scenario_runs() -> None:
    # The teardown role stops extenders by pidfile (extender-*.pid), and checks the
    # process's command line first ("--match") so a recycled pid is never killed: the
    # text it matches must be in the testbed's own extender (layersched_extender role)
    # and in any `python -m layersched.cli.main extender` recorded there.
    tasks = yaml.safe_load(
        (ROOT / "harness/playbooks/roles/local_testbed_teardown/tasks/main.yml").read_text()
    )
    stop = next(t for t in tasks if t["name"] == "Stop the extenders")
    match = next(a for a in stop["ansible.builtin.command"]["argv"] if a.startswith("--match="))
    text = match.removeprefix("--match=")
    assert text in "-m layersched.cli.main extender"
    role = yaml.safe_load(
        (ROOT / "harness/playbooks/roles/layersched_extender/tasks/main.yml").read_text()
    )
    describe = next(t for t in role if t["name"] == "Describe the extender's command")
    command = describe["ansible.builtin.set_fact"]["layersched_extender_command"]
    assert text in " ".join(str(a) for a in command)
    # what starts it runs that command (and the extra options: the in-flight pull mode)
    start = next(t for t in role if t["name"] == "Start the layersched extender")
    argv = start["ansible.builtin.command"]["argv"]
    assert "+ layersched_extender_command + layersched_extender_extra_args" in argv


def test_a_long_task_shows_the_last_line_of_its_log(tmp_path: Path) -> None:
    # The Kubernetes build names its log in the task; the spinner follows it (Ansible's
    # async polling prints a line every 15 s, and each line refreshes the spinner).
    from layersched_harness.testbed.local._ansible import _followed_log

    log = tmp_path / "build.log"
    log.write_text("+++ Building go targets for linux/amd64:\n    cmd/kube-apiserver\n\n")
    assert _followed_log(f"Build the binaries, log in {log}") == " | cmd/kube-apiserver"
    assert _followed_log(f"Build the binaries, log in {tmp_path / 'missing.log'}") == ""
    assert _followed_log("Start the registry") == ""


# ------------------------------------------------------------- apt sources for builds
DEBIAN_SOURCES = """Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            # the Kubernetes build: deb-src for the codename and its -updates/-security
            ["--codename", "bookworm"],
            [
                "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                f"http://deb.debian.org/{path} {suite} main"
                for path, suite in (
                    ("debian", "bookworm"),
                    ("debian", "bookworm-updates"),
                    ("debian-security", "bookworm-security"),
                )
            ],
        ),
        (
            # the containerd download: the archive's own line, its suite swapped for sid
            ["--codename", "bookworm", "--type", "deb", "--suite", "sid"],
            [
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                "http://deb.debian.org/debian sid main"
            ],
        ),
    ],
    ids=["deb-src", "deb-sid"],
)
def test_apt_sources_derive_from_the_machines_archive(
    argv: list[str],
    expected: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tool = _tool("apt_sources")
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEBIAN_SOURCES)
    monkeypatch.setattr(tool, "APT_SOURCES_LIST", tmp_path / "sources.list")
    monkeypatch.setattr(tool, "APT_SOURCES_DIR", tmp_path / "sources.list.d")
    monkeypatch.setattr(sys, "argv", ["apt_sources.py", "sources", *argv])
    assert tool.main() == 0
    assert capsys.readouterr().out.splitlines() == expected


class _FakeIp:
    """``ip`` as the kernel answers while a namespace's veth is going away: the link is
    listed and shown, then gone by the time it is deleted (or, ``stays``, still there)."""

    def __init__(self, stays: bool) -> None:
        self.stays = stays
        self.deleted = False

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        def done(rc: int, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(argv, rc, out, err)

        if argv[:4] == ["ip", "-j", "link", "show"]:
            return done(0, json.dumps([{"ifname": "lsux-n1"}, {"ifname": "eth0"}]))
        if argv[:4] == ["ip", "-j", "addr", "show"]:
            gone = self.deleted and not self.stays
            return done(1, err="Device does not exist") if gone else done(0, '[{"ifname": "x"}]')
        if argv[:3] == ["ip", "link", "delete"]:
            self.deleted = True
            return done(1, err=f'Cannot find device "{argv[3]}"')
        raise AssertionError(f"unexpected command {argv}")


@pytest.mark.parametrize("stays", [False, True], ids=["gone-meanwhile", "still-there"])
def test_net_tool_teardown_of_a_link_gone_meanwhile(
    stays: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a veth goes away with its peer's namespace, a moment after `ip netns delete`: a
    # delete that finds it gone is done, not failed (CI once failed here); a link that
    # refuses to go is still an error
    tool = _tool("local_testbed_net")
    monkeypatch.setattr(tool, "NETNS_DIR", tmp_path)
    monkeypatch.setattr(tool.subprocess, "run", _FakeIp(stays))
    net = tool.Net()
    if stays:
        with pytest.raises(tool.NetError, match="Cannot find device"):
            net.remove("lsux")
    else:
        net.remove("lsux")
        assert net.actions[-1] == "lsux-n1 went away with its namespace"


def test_a_crashed_daemons_excerpt_starts_with_why_it_died(tmp_path: Path) -> None:
    # a Go crash prints its cause, then thousands of goroutine lines: the tail alone (what
    # a failed bring-up used to show) named only the last goroutine
    tool = _tool("local_testbed_daemon")
    log = tmp_path / "kubelet.log"
    dump = [f"goroutine {i} [chan send]:\n\tsome/file.go:{i} +0x1\n" for i in range(500)]
    log.write_text(
        "I1124 02:52:06.053955    3195 server.go:416] Version: v1.20.2\n"
        "E1124 02:52:11.573651    3195 server.go:1165] Failed to set rlimit: not permitted\n"
        "F1124 02:52:12.000001    3195 kubelet.go:1296] Failed to start ContainerManager: boom\n"
        + "".join(dump)
    )
    excerpt = tool.tail(log)
    assert excerpt.startswith("F1124 02:52:12.000001")
    assert "Failed to start ContainerManager: boom" in excerpt
    assert "goroutine 499" in excerpt  # and still the tail
    assert "rlimit" not in excerpt  # not every error line: what killed it
    # a log without a crash: the tail alone, as before
    log.write_text("".join(f"I line {i}\n" for i in range(100)))
    assert tool.tail(log) == "".join(f"I line {i}\n" for i in range(100 - tool.LOG_TAIL_LINES, 100))


def _free_port_outside_the_ephemeral_range() -> int:
    """A free loopback port below the kernel's ephemeral range, where no client socket
    of this host (nor the probe's own, by a TCP self-connect) can take it meanwhile."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in range(max(1024, low - 8000) + os.getpid() % 4000, low):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free loopback port below {low}")


#: How long a stand-in daemon may take to show its command line after Popen returned.
EXEC_TIMEOUT_S = 30.0


@tenacity.retry(
    stop=tenacity.stop_after_delay(EXEC_TIMEOUT_S), wait=tenacity.wait_fixed(0.01), reraise=True
)
def _exec_done(pid: int, marker: str) -> None:
    """``pid``'s command line shows ``marker``. Popen returns once the child's exec closed
    the error pipe, a moment before the kernel fills in the new command line: on a loaded
    machine a scan in that moment reads an empty one."""
    shown = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    assert marker in shown, f"pid {pid} does not show {marker} in its cmdline yet"


def test_start_replaces_a_daemon_that_is_shutting_down(tmp_path: Path) -> None:
    # The e2e's API server restart: SIGTERM, then `testbed up`. The old kube-apiserver
    # still ran (draining, its port closed), `start` took it for the running daemon,
    # and once it exited nothing served: "connection refused" until the readiness
    # wait gave up. A live process that is not ready is now waited for until it is
    # ready or gone, and a gone one is replaced.
    tool = _tool("local_testbed_daemon")
    port = _free_port_outside_the_ephemeral_range()
    marker = f"lstest-{os.getpid()}-{time.monotonic_ns()}"
    pidfile, log = tmp_path / "d.pid", tmp_path / "d.log"
    # the "shutting down" daemon: alive for a moment, never listening
    dying = subprocess.Popen(
        [sys.executable, "-c", "import time, sys; time.sleep(1.0)", marker],
        start_new_session=True,
    )
    _exec_done(dying.pid, marker)
    pidfile.write_text(f"{dying.pid}\n")
    server = (
        "import socket, sys, time\n"
        f"s = socket.create_server(('127.0.0.1', {port}))\n"
        "time.sleep(60)\n"
    )
    argv = ["start", "--name", "d", "--match", marker, "--pidfile", str(pidfile),
            "--log", str(log), "--ready-tcp", f"127.0.0.1:{port}", "--ready-timeout-s", "20",
            "--", sys.executable, "-c", server, marker]  # fmt: skip
    try:
        assert tool.main(argv) == 0
        dying.wait(timeout=5)
        replaced = int(pidfile.read_text())
        assert replaced != dying.pid
        assert tool.alive(replaced)
        assert tool.ready(None, f"127.0.0.1:{port}")
        # a second start finds it ready and changes nothing
        assert tool.main(argv) == 0
        assert int(pidfile.read_text()) == replaced
    finally:
        dying.kill()
        tool.main(["stop", "--name", "d", "--match", marker, "--pidfile", str(pidfile),
                   "--executable", Path(sys.executable).name])  # fmt: skip


def test_start_gives_up_on_a_live_daemon_that_never_becomes_ready(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool("local_testbed_daemon")
    marker = f"lstest-{os.getpid()}-{time.monotonic_ns()}"
    pidfile, log = tmp_path / "d.pid", tmp_path / "d.log"
    log.write_text("I still draining\n")
    stuck = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", marker], start_new_session=True
    )
    _exec_done(stuck.pid, marker)
    pidfile.write_text(f"{stuck.pid}\n")
    args = ["start", "--name", "d", "--match", marker, "--pidfile", str(pidfile),
            "--log", str(log), "--ready-tcp", "127.0.0.1:9", "--ready-timeout-s", "0.5",
            "--", sys.executable, "-c", "pass", marker]  # fmt: skip
    try:
        assert tool.main(args) == 1
        err = capsys.readouterr().err
        assert f"d (pid {stuck.pid}) runs but is not ready after 0.5 s" in err
        assert "I still draining" in err  # the log's tail says why
        assert int(pidfile.read_text()) == stuck.pid  # and nothing second was started
    finally:
        stuck.kill()
        stuck.wait()


def test_testbed_up_takes_its_prefix_and_network_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the variables that name a testbed of one's own for the tests name it for the CLI too
    monkeypatch.setenv("LAYERSCHED_TESTBED_PREFIX", "mine")
    monkeypatch.setenv("LAYERSCHED_TESTBED_NET_BASE", "10.250.61")
    args = build_parser().parse_args(["testbed", "up"])
    assert (args.prefix, args.net_base) == ("mine", "10.250.61")
    monkeypatch.delenv("LAYERSCHED_TESTBED_PREFIX")
    monkeypatch.delenv("LAYERSCHED_TESTBED_NET_BASE")
    args = build_parser().parse_args(["testbed", "up"])
    assert (args.prefix, args.net_base) == ("lstb", "10.250.50")


@pytest.mark.parametrize(
    ("text", "runtimes", "error"),
    [
        # the mix: n3 on CRI-O, n1 and n2 on containerd
        ("containerd,containerd,crio", ("containerd", "containerd", "crio"), None),
        # n1 on CRI-O; n2 and n3, past the list, on containerd
        ("crio", ("crio",), None),
        # nothing said: every node on containerd
        ("", (), None),
        # a typo must not quietly become containerd
        ("containerd,cri-o", None, "cri-o unknown"),
        # four runtimes for three nodes
        ("crio,crio,crio,crio", None, "4 runtimes for 3 nodes"),
    ],
    ids=["issue-mix", "first-only", "default", "typo", "too-many"],
)
def test_runtimes_name_a_known_runtime_per_node(
    text: str, runtimes: tuple[str, ...] | None, error: str | None, tmp_path: Path
) -> None:
    def settings() -> TestbedSettings:
        made = TestbedSettings(state_dir=tmp_path, runtimes=parse_runtimes(text))
        made.check()
        return made

    if error is not None:
        with pytest.raises(errors.TestbedError, match=error):
            settings()
        return
    assert settings().extra_vars()["testbed_node_runtimes"] == list(runtimes or ())
