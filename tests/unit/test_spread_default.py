"""One default for layer-locality's spread, on, in every place that has one (issue 45).

The install turns it on (the chart, ``install/kustomize/``, the plugin's ``DefaultSpread``); the
library, ``layersched score``, the extender's CLI and the testbed must predict that
scheduler, so each default is read here and compared, not assumed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layersched.cli._sources import strategy_from_args
from layersched.cli.main import build_parser
from layersched.core.errors import InputError
from layersched.core.strategies import LayerLocalityArgs, get_strategy
from layersched.core.strategies.layer_locality import LayerLocality
from layersched.deploy import StackSpec, extender_args
from layersched.deploy._plugin_config import PluginArgs
from layersched_harness.sim.settings import LAYER_LOCALITY, LAYER_LOCALITY_SPREAD, build_strategy
from layersched_harness.testbed.scheduler_configs import TestbedSchedulers, _testbed_plugin_args

REPO_ROOT = Path(__file__).resolve().parents[2]
GO_ARGS = REPO_ROOT / "src" / "kube-scheduler" / "pkg" / "layerlocality" / "args.go"


def _go_default_spread() -> bool:
    match = re.search(r"^\s*DefaultSpread\s*=\s*(true|false)\s*$", GO_ARGS.read_text(), re.M)
    assert match is not None, f"no DefaultSpread constant in {GO_ARGS}"
    return match[1] == "true"


def _cli_spread(*argv: str) -> bool:
    args = build_parser().parse_args(["score", "--nodes", "n.json", "--pod", "p.json", *argv])
    strategy = strategy_from_args(args)
    assert isinstance(strategy, LayerLocality)
    return strategy.spread


def test_every_default_is_on_and_agrees() -> None:
    defaults = {
        "library (LayerLocalityArgs)": LayerLocalityArgs().spread,
        "get_strategy('layer-locality')": get_strategy("layer-locality").spread,  # type: ignore[attr-defined]
        "layersched score / extender, no flag": _cli_spread(),
        "plugin args (PluginArgs)": PluginArgs().spread,
        "install (StackSpec)": StackSpec().spread,
        "Go plugin (DefaultSpread)": _go_default_spread(),
        "simulator's installed label": build_strategy(LAYER_LOCALITY_SPREAD).spread,  # type: ignore[attr-defined]
        "testbed's plugin profiles": _testbed_plugin_args(
            TestbedSchedulers("kubeconfig", "http://127.0.0.1:8888", 5.0, "v1.37.2")
        ).spread,
    }
    assert all(defaults.values()), defaults


def test_off_is_said_explicitly() -> None:
    assert _cli_spread("--no-spread") is False
    assert _cli_spread("--spread") is True
    assert build_strategy(LAYER_LOCALITY).spread is False  # type: ignore[attr-defined]
    # the install says it either way, never resting on the CLI's default
    assert "--spread" in extender_args(StackSpec(strategy="layer-locality"))
    off = extender_args(StackSpec(strategy="layer-locality", spread=False))
    assert "--no-spread" in off and "--spread" not in off
    assert PluginArgs(spread=False).to_config()["spread"] is False


@pytest.mark.parametrize("flag", ["--spread", "--no-spread"])
@pytest.mark.parametrize("strategy", ["image-locality", "pull-time"])
def test_either_flag_with_another_strategy_is_refused(strategy: str, flag: str) -> None:
    args = build_parser().parse_args(
        ["score", "--nodes", "n.json", "--pod", "p.json", "--strategy", strategy, flag]
    )
    with pytest.raises(InputError, match=f"{flag} applies to layer-locality only"):
        strategy_from_args(args)
