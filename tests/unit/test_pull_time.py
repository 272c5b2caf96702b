"""Worked tables for the ``pull-time`` strategy: estimate, bandwidth source, mapping."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from layersched.cli.main import main
from layersched.core.errors import InputError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.nodeimages import NodeInfo
from layersched.core.pod import PodImages
from layersched.core.strategies import (
    STRATEGY_NAMES,
    get_strategy,
    resolve_pod_layers,
    strategy_args,
)
from layersched.core.strategies.pull_time import BANDWIDTH_KEY

MB = 1_000_000  # decimal megabytes keep the bit arithmetic readable
MBIT = 1_000_000


def _digest(label: str) -> str:
    return "sha256:" + label.encode().hex().ljust(64, "0")


# The pod's image: 10 MB + 20 MB + 70 MB = 100 MB = 800 Mbit.
L1, L2, L3 = (
    Layer(_digest("l1"), 10 * MB),
    Layer(_digest("l2"), 20 * MB),
    Layer(_digest("l3"), 70 * MB),
)
SOURCE = StaticLayerSource({"app:1": (L1, L2, L3), "empty:1": ()})
POD = PodImages.of("app:1")


def node(name: str, layers: tuple[Layer, ...] = (), bw: float | None = None, **kw: str) -> NodeInfo:
    labels = {BANDWIDTH_KEY: str(int(bw))} if bw is not None else {}
    annotations = {BANDWIDTH_KEY: kw["annotation"]} if "annotation" in kw else {}
    if "label" in kw:
        labels = {BANDWIDTH_KEY: kw["label"]}
    return NodeInfo(name, annotation_layers=layers, labels=labels, annotations=annotations)


def scores(nodes: list[NodeInfo], pod: PodImages = POD, **opts: float) -> dict[str, int]:
    inventory = build_layer_index(nodes)
    candidates = inventory.indices_of([n.name for n in nodes])[0]
    strategy = get_strategy("pull-time", strategy_args("pull-time", **opts))
    result = strategy.score(pod, resolve_pod_layers(pod, SOURCE), inventory, candidates)
    return result.as_dict(inventory)


@pytest.mark.parametrize(
    ("nodes", "opts", "expected"),
    [
        (
            # Same link (default 100 Mbit/s), overhead 1 s:
            # a holds L1+L2: missing 70 MB = 560 Mbit -> 5.6 s + 1 = 6.6 s
            # b holds nothing: 800 Mbit -> 8 s + 1 = 9 s -> floor(100 * 6.6 / 9) = 73
            [node("a", (L1, L2)), node("b")],
            {},
            {"a": 100, "b": 73},
        ),
        (
            # The slow node holds more but pulls slower:
            # a: 10 Mbit/s, holds L1+L2: 560 Mbit / 10 = 56 s + 1 = 57 s
            # b: 1000 Mbit/s, holds nothing: 800 / 1000 = 0.8 s + 1 = 1.8 s
            # a: floor(100 * 1.8 / 57) = 3; b fastest = 100 (layer-locality would pick a)
            [node("a", (L1, L2), bw=10 * MBIT), node("b", bw=1000 * MBIT)],
            {},
            {"a": 3, "b": 100},
        ),
        (
            # a holds everything: 0 s + 1 s; b pulls 800 Mbit at 800 Mbit/s: 1 s + 1 s = 2 s
            # -> b = floor(100 * 1 / 2) = 50
            [node("a", (L1, L2, L3)), node("b", bw=800 * MBIT)],
            {},
            {"a": 100, "b": 50},
        ),
        (
            # Zero overhead, a holds everything: a's estimate is 0 -> 100, others 0
            [node("a", (L1, L2, L3)), node("b", (L1, L2))],
            {"overhead_s": 0.0},
            {"a": 100, "b": 0},
        ),
        (
            # Ties stay ties: two identical empty nodes both estimate 9 s -> both 100
            [node("a"), node("b")],
            {},
            {"a": 100, "b": 100},
        ),
        (
            # The default bandwidth option applies to unlabelled nodes only:
            # a unlabelled at 400 Mbit/s: 800 / 400 = 2 s + 1 = 3 s
            # b labelled 100 Mbit/s: 8 s + 1 = 9 s -> floor(100 * 3 / 9) = 33
            [node("a"), node("b", bw=100 * MBIT)],
            {"default_bandwidth_bits_per_s": 400 * MBIT},
            {"a": 100, "b": 33},
        ),
    ],
    ids=[
        "same-link-fewer-missing-bytes-wins",
        "fast-empty-beats-slow-warm",
        "overhead-keeps-ratio-meaningful",
        "zero-overhead-zero-estimate",
        "ties",
        "default-bandwidth-option",
    ],
)
def test_pull_time_scores(
    nodes: list[NodeInfo], opts: dict[str, float], expected: dict[str, int]
) -> None:
    assert scores(nodes, **opts) == expected


@pytest.mark.parametrize(
    ("label", "annotation", "expected_b"),
    [
        # Label wins: b at 800 Mbit/s pulls 800 Mbit in 1 s + 1 s = 2 s.
        # a (default 100 Mbit/s) has everything: 1 s -> b = floor(100 * 1 / 2) = 50
        ("800000000", "1", 50),
        # Only the annotation: same 800 Mbit/s -> 50
        (None, "8e8", 50),
        # Unreadable label falls back to the annotation -> 50
        ("fast", "800000000", 50),
        # Unreadable / non-positive everywhere -> default 100 Mbit/s: 8 s + 1 = 9 s -> 11
        ("-5", "nan", 11),
    ],
    ids=["label-wins", "annotation", "bad-label-falls-back", "bad-everywhere-default"],
)
def test_bandwidth_sources(
    label: str | None, annotation: str, expected_b: int, caplog: pytest.LogCaptureFixture
) -> None:
    kw = {"annotation": annotation} | ({"label": label} if label is not None else {})
    with caplog.at_level(logging.WARNING):
        result = scores([node("a", (L1, L2, L3)), node("b", **kw)])
    assert result == {"a": 100, "b": expected_b}


def test_pod_without_bytes_has_no_preference() -> None:
    # Nothing to pull anywhere: 0 everywhere, as layer-locality does.
    assert scores([node("a"), node("b", bw=MBIT)], pod=PodImages.of("empty:1")) == {"a": 0, "b": 0}


def test_bandwidth_cache_follows_added_nodes() -> None:
    # The per-inventory bandwidth cache is rebuilt when a node is appended.
    inventory = build_layer_index([node("a", bw=100 * MBIT)])
    strategy = get_strategy("pull-time")
    layers = resolve_pod_layers(POD, SOURCE)
    first = strategy.score(POD, layers, inventory, inventory.indices_of(["a"])[0])
    assert first.as_dict(inventory) == {"a": 100}
    inventory.add_node(node("b", (L1, L2, L3), bw=100 * MBIT))
    both = strategy.score(POD, layers, inventory, inventory.indices_of(["a", "b"])[0])
    # a: 8 s + 1 = 9 s; b: 1 s -> a = floor(100 / 9) = 11
    assert both.as_dict(inventory) == {"a": 11, "b": 100}


def test_registered_and_needs_layers() -> None:
    assert "pull-time" in STRATEGY_NAMES
    assert get_strategy("pull-time").needs_layers


@pytest.mark.parametrize(
    "opts",
    [{"default_bandwidth_bits_per_s": 0}, {"overhead_s": -1.0}, {"spread": True}],
    ids=["zero-bandwidth", "negative-overhead", "unknown-option"],
)
def test_invalid_options(opts: dict[str, float]) -> None:
    with pytest.raises(InputError):
        get_strategy("pull-time", strategy_args("pull-time", **opts))


def test_score_cli_runs_pull_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # n1 at 10 Mbit/s holds L1+L2 (30 MB): pulls L3, 560 Mbit -> 56 s + 1 = 57 s
    # n2 unlabelled (100 Mbit/s) holds nothing: 800 Mbit -> 9 s -> fastest = 100
    # n1 = floor(100 * 9 / 57) = 15
    def layer(x: Layer) -> dict[str, object]:
        return {"digest": x.digest, "size": x.size_bytes}

    nodes = {
        "kind": "NodeList",
        "items": [
            {
                "metadata": {"name": "n1", "labels": {BANDWIDTH_KEY: "10000000"}},
                "status": {"images": [{"names": ["base:1"], "sizeBytes": 30 * MB}]},
            },
            {"metadata": {"name": "n2"}, "status": {}},
        ],
    }
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pod.json").write_text(
        json.dumps({"kind": "Pod", "spec": {"containers": [{"image": "app:1"}]}})
    )
    layers = {"app:1": [layer(x) for x in (L1, L2, L3)], "base:1": [layer(L1), layer(L2)]}
    (tmp_path / "layers.json").write_text(json.dumps(layers))
    argv = ["score", "--strategy", "pull-time", "-o", "json"]
    for key in ("nodes", "pod", "layers"):
        argv += [f"--{key}", str(tmp_path / f"{key}.json")]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"n1": 15, "n2": 100}
