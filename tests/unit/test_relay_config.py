"""Layered relay configuration from ConfigMaps: which one applies, what it sets, and what
a bad one does (nothing, except a warning naming the ConfigMap and key)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import InputError, KubeError
from layersched.core.layers import StaticLayerSource
from layersched.relay import (
    Annotator,
    Capabilities,
    DumpFile,
    DumpLevel,
    LayeredConfig,
    LayersByName,
    LiveSettings,
    RelayMetrics,
    RelayResources,
    config_map_names,
    options_for,
    parse_method,
    parse_selectors,
    parse_settings,
)

NS = "kube-system"
FLAGS = LiveSettings(parse_selectors(""), log_pulls=False, inject_layers=False)
CAN_ALL = Capabilities(dump_file=True, layer_source=True)
PULL = parse_method("/runtime.v1alpha2.ImageService/PullImage")
VERSION = parse_method("/runtime.v1alpha2.RuntimeService/Version")


def config_map(name: str, data: Mapping[str, str], version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "resourceVersion": version, "uid": "u"},
        "data": dict(data),
    }


@dataclass
class FakeSource:
    labels: dict[str, str] = field(default_factory=dict)
    maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    down: bool = False

    def node_labels(self, node: str) -> Mapping[str, str]:
        if self.down:
            raise KubeError("reading /api/v1/nodes/n1: the API server did not answer")
        return self.labels

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        assert namespace == NS
        return self.maps.get(name)

    def warn(self, config_map: Mapping[str, Any], message: str) -> None:
        self.warnings.append(message)


def _layered(source: FakeSource, applied: list[LiveSettings]) -> LayeredConfig:
    return LayeredConfig(source, "n1", NS, FLAGS, CAN_ALL, applied.append)


def test_names_most_specific_first() -> None:
    assert config_map_names("n1", "edge") == [
        "layersched-config.node.n1",
        "layersched-config.group.edge",
        "layersched-config.default",
    ]
    # a node without the group label skips the group level
    assert config_map_names("n1", None) == [
        "layersched-config.node.n1",
        "layersched-config.default",
    ]


@pytest.mark.parametrize(
    ("present", "labels", "winner"),
    [
        # the node's own ConfigMap wins over its group's and the default
        (("node", "group", "default"), {"layersched.io/group": "edge"}, "node"),
        # no node ConfigMap: the group's
        (("group", "default"), {"layersched.io/group": "edge"}, "group"),
        # a group ConfigMap of a group the node is not in does not apply
        (("group", "default"), {}, "default"),
        (("default",), {"layersched.io/group": "edge"}, "default"),
    ],
    ids=["node", "group", "not-in-group", "default"],
)
def test_first_existing_level_wins(
    present: tuple[str, ...], labels: dict[str, str], winner: str
) -> None:
    names = {
        "node": "layersched-config.node.n1",
        "group": "layersched-config.group.edge",
        "default": "layersched-config.default",
    }
    # each level dumps a different method, so the dump level says which one applied
    selectors = {"node": "full:PullImage", "group": "name:PullImage", "default": "off:*"}
    source = FakeSource(
        labels=labels,
        maps={names[k]: config_map(names[k], {"dump": selectors[k]}) for k in present},
    )
    applied: list[LiveSettings] = []
    settings = _layered(source, applied).refresh()
    assert settings.dump.text == selectors[winner]
    assert names[winner] in settings.origin


def test_levels_replace_not_merge() -> None:
    # the default turns pull logging on; the node's ConfigMap sets only the dump. The node's
    # wins whole: logPulls comes from the flags (false), not from the default
    source = FakeSource(
        maps={
            "layersched-config.node.n1": config_map(
                "layersched-config.node.n1", {"dump": "name:*"}
            ),
            "layersched-config.default": config_map(
                "layersched-config.default", {"logPulls": "true"}
            ),
        }
    )
    settings = _layered(source, []).refresh()
    assert settings.dump.level(PULL) == DumpLevel.NAME
    assert settings.log_pulls is False


def test_changes_apply_and_bad_config_keeps_the_last_good() -> None:
    name = "layersched-config.default"
    source = FakeSource(maps={name: config_map(name, {"logPulls": "true"}, "1")})
    applied: list[LiveSettings] = []
    layered = _layered(source, applied)
    layered.refresh()
    layered.refresh()  # unchanged: applied once
    assert [s.log_pulls for s in applied] == [True]

    # a typo in a value: rejected whole, one warning naming the ConfigMap and key
    source.maps[name] = config_map(name, {"logPulls": "yes", "dump": "full:*"}, "2")
    assert layered.refresh().log_pulls is True
    layered.refresh()
    assert len(source.warnings) == 1
    assert f"ConfigMap {NS}/{name} key 'logPulls'" in source.warnings[0]
    assert "keeping the last good config" in source.warnings[0]
    assert len(applied) == 1

    # fixed: applies at once
    source.maps[name] = config_map(name, {"logPulls": "false", "dump": "full:*"}, "3")
    assert layered.refresh().dump.level(PULL) == DumpLevel.FULL
    assert applied[-1].log_pulls is False

    # deleted: back to the flags
    del source.maps[name]
    assert layered.refresh() == FLAGS


def test_api_down_changes_nothing() -> None:
    source = FakeSource(down=True)
    layered = _layered(source, [])
    with pytest.raises(KubeError):
        layered.refresh()
    assert layered.current == FLAGS


@pytest.mark.parametrize(
    ("data", "can", "message"),
    [
        ({"dumpp": "full:*"}, CAN_ALL, "key 'dumpp': unknown"),
        ({"dump": "all:*"}, CAN_ALL, "key 'dump': 'all:\\*' is not LEVEL:GLOB"),
        # a regular expression: refused with the glob to write instead
        ({"dump": "reset,full:.*"}, CAN_ALL,
         "key 'dump': 'full:.\\*' looks like a regular expression .* write full:\\*"),
        # the catastrophic one: refused before it is ever matched
        ({"dump": "full:(.*)*x"}, CAN_ALL,
         "key 'dump': 'full:\\(.\\*\\)\\*x' looks like a regular expression"),
        ({"injectLayers": "on"}, CAN_ALL, "key 'injectLayers': 'on' is not true or false"),
        # settings the relay was not started to support
        ({"dump": "full:*"}, Capabilities(False, True), "started with --dump-file"),
        ({"injectLayers": "true"}, Capabilities(True, False), "started with a layer source"),
    ],
    ids=["unknown-key", "bad-selector", "regex-selector", "catastrophic-regex", "bad-bool",
         "no-dump-file", "no-layer-source"],
)  # fmt: skip
def test_bad_values_name_configmap_and_key(
    data: dict[str, str], can: Capabilities, message: str
) -> None:
    with pytest.raises(InputError, match=message) as caught:
        parse_settings(config_map("layersched-config.default", data), FLAGS, can)
    assert f"ConfigMap {NS}/layersched-config.default" in str(caught.value)


def test_options_follow_settings(tmp_path: Path) -> None:
    metrics = RelayMetrics()
    annotator = Annotator(LayersByName(StaticLayerSource({})), metrics)
    resources = RelayResources(DumpFile(tmp_path / "d.jsonl"), annotator, node_name="n1")
    on = options_for(LiveSettings(parse_selectors("full:*"), True, True), resources)
    assert on.dumper is not None and on.dumper.level(VERSION) == DumpLevel.FULL
    assert on.annotator is annotator and on.log_pulls and on.node_name == "n1"
    off = options_for(FLAGS, resources)
    assert off.dumper is None and off.annotator is None and not off.log_pulls


@pytest.mark.parametrize(
    ("allowed", "pull_level"),
    [
        # started without --allow-sensitive-dumps: a ConfigMap asking for PullImage in full
        # gets it at level name (it cannot raise what the flags allow)
        (False, DumpLevel.NAME),
        # started with it: in full
        (True, DumpLevel.FULL),
    ],
    ids=["flag-off", "flag-on"],
)
def test_a_configmap_can_only_ask_for_what_the_flag_allows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, allowed: bool, pull_level: DumpLevel
) -> None:
    resources = RelayResources(DumpFile(tmp_path / "d.jsonl"), None, allow_sensitive_dumps=allowed)
    name = "layersched-config.default"
    source = FakeSource(maps={name: config_map(name, {"dump": "reset,full:*"})})
    applied: list[LiveSettings] = []

    def apply(settings: LiveSettings) -> None:
        applied.append(settings)

    layered = LayeredConfig(source, "n1", NS, FLAGS, resources.capabilities, apply)
    with caplog.at_level("WARNING", logger="layersched.relay._config"):
        settings = layered.refresh()
    dumper = options_for(settings, resources).dumper
    assert dumper is not None
    assert dumper.level(PULL) == pull_level
    # a call that carries no secret is dumped in full either way
    assert dumper.level(VERSION) == DumpLevel.FULL
    held_back = [r.getMessage() for r in caplog.records if "allow-sensitive-dumps" in r.message]
    if allowed:
        assert held_back == []
        return
    # the log names the ConfigMap, the methods held back and the only way to allow them
    (line,) = held_back
    assert f"from ConfigMap {NS}/{name}@1" in line
    assert "ImageService/PullImage" in line and "RuntimeService/CreateContainer" in line
    assert "only restarting the relay with --allow-sensitive-dumps can" in line
