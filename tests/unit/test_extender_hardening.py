"""Issue 10 ("Hardening"), the extender half, in process: the concurrency limit, the
log formats, the version's single source and the operational metrics.

The cluster is test_extender's seed scenario: N1 holds Img1 (L1+L2+L3 = 90M), N2 Img2
(L1+L2 shared = 50M), N3 nothing.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import threading
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import tenacity

import layersched
from layersched.cli._logging import JsonFormatter, TextFormatter
from layersched.cli.main import build_parser
from layersched.core.errors import LayerResolutionError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.core.manifest import DEFAULT_PLATFORM, Platform
from layersched.core.objects import Node
from layersched.core.strategies import get_strategy
from layersched.extender import Extender, Platforms, StaticLayerIndexProvider, make_extender
from layersched.extender._platforms import MAX_PLATFORMS
from layersched.registry import POSITIVE_TTL_S
from tests.fixtures.strategies import without_spread
from tests.unit.test_extender import (
    L1,
    L2,
    L3,
    L4,
    MB,
    SHORT_DEADLINE_S,
    WARM_TIMEOUT_S,
    Call,
    _digest,
    _extender,
    _metrics_text,
    _pod,
    _serve,
    _SlowSource,
)

REPO = Path(__file__).resolve().parents[2]
NEUTRAL = [{"Host": "N1", "Score": 0}, {"Host": "N2", "Score": 0}]


# ------------------------------------------------------------------ concurrency limit
@tenacity.retry(
    stop=tenacity.stop_after_delay(WARM_TIMEOUT_S), wait=tenacity.wait_fixed(0.01), reraise=True
)
async def _assert_resolving(extender: Extender) -> None:
    assert extender.resolver._pending, "no pod image is being resolved yet"


def test_overload_answers_neutral_fast_and_counts(tmp_path: Any) -> None:
    # --max-concurrent-requests 1: a pod waits for a slow registry (it holds the slot);
    # meanwhile a second prioritize is answered at once with zeros (neutral: no resolution,
    # no scoring), and a filter passes every node; both are counted as overloaded. Once
    # the registry answers, the first pod gets its real scores (N1 10, N2 5).
    source = _SlowSource()
    extender = _extender(tmp_path, source=source, resolve_timeout_s=WARM_TIMEOUT_S)
    body = {"Pod": _pod("img1:1"), "NodeNames": ["N1", "N2"]}

    async def scenario(call: Call) -> None:
        first = asyncio.ensure_future(call("POST", "/prioritize", body))
        await _assert_resolving(extender)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await call("POST", "/prioritize", body) == (200, NEUTRAL)
        status, answer = await call("POST", "/filter", body)
        assert (status, answer["NodeNames"], answer["FailedNodes"]) == (200, ["N1", "N2"], {})
        assert loop.time() - started < WARM_TIMEOUT_S / 2
        # a malformed request is still a 400 when shed
        assert (await call("POST", "/prioritize", {"NodeNames": ["N1"]}))[0] == 400
        source.release.set()
        assert await first == (
            200,
            [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 5}],
        )

    try:
        _serve(extender, scenario, max_concurrent_requests=1)
    finally:
        source.release.set()
        extender.resolver.close()
    text = _metrics_text(extender)
    assert 'layersched_extender_overloaded_requests_total{verb="prioritize"} 2.0' in text
    assert 'layersched_extender_overloaded_requests_total{verb="filter"} 1.0' in text
    assert 'layersched_extender_neutral_answers_total{reason="overloaded"} 1.0' in text


# ----------------------------------------------------------------------------- logs
def _record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    record = logging.LogRecord("layersched.extender", level, __file__, 1, message, (), None)
    record.created = 1_795_385_416.123  # 2026-11-22T22:10:16.123Z
    return record


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # the neutral-answer line, unchanged behind the timestamp
        (
            "pod default/p1: neutral scores for 3 nodes (pod_unresolved)",
            "2026-11-22T22:10:16.123+00:00 INFO layersched.extender: "
            "pod default/p1: neutral scores for 3 nodes (pod_unresolved)",
        ),
        # a decision log keeps its per-node lines
        (
            "pod default/p1 (layer-locality):\n  N1: present 1 / total 2 bytes -> 50/100 -> 5/10",
            "2026-11-22T22:10:16.123+00:00 INFO layersched.extender: pod default/p1 "
            "(layer-locality):\n  N1: present 1 / total 2 bytes -> 50/100 -> 5/10",
        ),
    ],
    ids=["neutral-line", "decision-lines"],
)
def test_text_format_adds_an_iso_timestamp(message: str, expected: str) -> None:
    assert TextFormatter().format(_record(message)) == expected


def test_json_format_is_one_object_per_line() -> None:
    # a multi-line message stays one line of JSON; an exception's traceback rides along
    line = JsonFormatter().format(_record("pod a (layer-locality):\n  N1: …", logging.DEBUG))
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-11-22T22:10:16.123+00:00",
        "level": "DEBUG",
        "logger": "layersched.extender",
        "message": "pod a (layer-locality):\n  N1: …",
    }
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = _record("failed")
        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert entry["exception"].endswith("ValueError: boom")


@pytest.mark.parametrize(
    ("argv", "level", "fmt"),
    [
        # -v still works, before the subcommand; text is the default
        (["-v", "extender", "--port", "1"], None, "text"),
        # the options after the subcommand
        (
            ["extender", "--port", "1", "--log-format", "json", "--log-level", "debug"],
            "debug",
            "json",
        ),
        # or before it
        (["--log-format", "json", "extender", "--port", "1"], None, "json"),
    ],
    ids=["verbose", "after-subcommand", "before-subcommand"],
)
def test_log_options_parse_anywhere(argv: list[str], level: str | None, fmt: str) -> None:
    args = build_parser().parse_args(argv)
    assert (args.log_level, args.log_format) == (level, fmt)


# ---------------------------------------------------------------------- version, metrics
def test_the_version_has_one_source() -> None:
    # pyproject.toml takes the version from layersched.__version__ (setuptools dynamic),
    # so the installed distribution and the package never disagree
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project
    assert project["dynamic"] == ["version"]
    assert importlib.metadata.version("layersched") == layersched.__version__


def test_metrics_include_process_gc_and_build_info(tmp_path: Any) -> None:
    text = _metrics_text(_extender(tmp_path))
    for name in (
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_gc_objects_collected_total",
        "python_info{",
        f'version="{layersched.__version__}"',
    ):
        assert name in text
    assert "layersched_build_info{" in text


# -------------------------------------------------------- malformed bodies the fuzzer found
@pytest.mark.parametrize(
    ("verb", "body", "status", "fragment"),
    [
        # an unknown field nested 100,000 deep: msgspec's skipping recursed (RecursionError)
        (
            "/prioritize",
            b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            400,
            "nested too deeply",
        ),
        ("/filter", b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
        # a string that is not UTF-8: msgspec raised UnicodeDecodeError
        ("/prioritize", b'{"Pod": {"metadata": {"name": "p\xfc"}}, "NodeNames": []}', 400, "UTF-8"),
        ("/filter", b'{"Pod": {}, "NodeNames": ["N\xfc"]}', 400, "UTF-8"),
        # filter keeps the Pod as raw bytes it never reads: passed through, not refused
        ("/filter", b'{"Pod": {"metadata": {"name": "p\xfc"}}, "NodeNames": []}', 200, ""),
        # a lone surrogate escape is valid JSON: decoded, then refused for a missing container
        ("/prioritize", b'{"Pod": {"metadata": {"name": "\\ud800"}}, "NodeNames": []}', 400, ""),
    ],
    ids=[
        "deep-prioritize",
        "deep-filter",
        "utf8-prioritize",
        "utf8-filter-names",
        "utf8-filter-raw-pod",
        "lone-surrogate",
    ],
)
def test_malformed_bodies_are_a_400_not_a_500(
    tmp_path: Any, verb: str, body: bytes, status: int, fragment: str
) -> None:
    extender = _extender(tmp_path)

    async def scenario(call: Call) -> None:
        got, answer = await call("POST", verb, body)
        assert got == status, answer
        if status == 400:
            assert fragment in answer["Error"]

    _serve(extender, scenario)


# --------------------------------------------------- resolver: pins, revalidation, clock
class _Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class _MovingRegistry:
    """A registry stand-in whose answers the test changes: ``layers[name]``, or failing
    while ``down``; counts what it was asked. Answers wait for ``gate`` when it is set."""

    def __init__(self, layers: dict[str, tuple[Layer, ...]]) -> None:
        self.layers = dict(layers)
        self.down = False
        self.asked: list[str] = []
        self.gate: threading.Event | None = None

    def resolve(self, image: str) -> tuple[Layer, ...]:
        self.asked.append(image)
        if self.gate is not None:
            self.gate.wait(WARM_TIMEOUT_S)
        if self.down:
            raise LayerResolutionError(f"{image!r}: registry unreachable")
        return self.layers[image]


PINNED = "reg.lan/app@" + _digest("app")
#: Past the tag TTL.
AFTER_TTL_S = POSITIVE_TTL_S + 1


def _full_nodes(*names_per_node: tuple[str, ...]) -> dict[str, Any]:
    items = [
        {
            "metadata": {"name": f"W{k}"},
            "status": {"images": [{"names": list(names), "sizeBytes": MB}]},
        }
        for k, names in enumerate(names_per_node)
    ]
    return {"items": items}


@tenacity.retry(
    stop=tenacity.stop_after_delay(WARM_TIMEOUT_S), wait=tenacity.wait_fixed(0.01), reraise=True
)
async def _assert_scores(call: Call, body: dict[str, Any], expected: list[int]) -> None:
    status, answer = await call("POST", "/prioritize", body)
    assert status == 200
    assert [e["Score"] for e in answer] == expected


@tenacity.retry(
    stop=tenacity.stop_after_delay(WARM_TIMEOUT_S), wait=tenacity.wait_fixed(0.01), reraise=True
)
async def _assert_idle(extender: Extender) -> None:
    """No resolution or revalidation is under way (the clock may move on)."""
    assert not extender.resolver._warming and not extender.resolver._pending


def test_digest_pinned_layers_never_expire(tmp_path: Any) -> None:
    # A repo-digest name is resolved once; a year later it is answered from the cache
    # without asking the registry (which is down by then): the content cannot change.
    clock = _Clock()
    registry = _MovingRegistry({PINNED: (L1, L2, L3)})
    extender = _extender(tmp_path, source=registry, resolve_timeout_s=WARM_TIMEOUT_S, clock=clock)
    body = {"Pod": _pod(PINNED), "NodeNames": ["N1", "N2"]}

    async def scenario(call: Call) -> None:
        # N1 holds L1+L2+L3 = 90M of 90M: 10; N2 L1+L2 = 50M: floor(100 * 50 / 90) = 55 -> 5
        await _assert_scores(call, body, [10, 5])
        clock.now_s += 365 * 24 * 3600
        registry.down = True
        await _assert_scores(call, body, [10, 5])

    try:
        _serve(extender, scenario)
    finally:
        extender.resolver.close()
    assert registry.asked == [PINNED]


def test_a_tag_past_its_ttl_is_served_stale_while_revalidated(tmp_path: Any) -> None:
    # app:1 is img1's layers (L1+L2+L3). Past the TTL the tag has moved to img2's
    # (L1+L2+L4), and the registry is slow: the next pod is answered at once from the old
    # layers (N1 10, N2 5: never neutral), the revalidation runs in the background, and
    # once it lands pods see the new layers: N1 holds L1+L2 = 50M of 60M:
    # floor(100 * 50 / 60) = 83 -> 8; N2 holds all of them: 10.
    clock = _Clock()
    registry = _MovingRegistry({"app:1": (L1, L2, L3)})
    extender = _extender(tmp_path, source=registry, resolve_timeout_s=SHORT_DEADLINE_S, clock=clock)
    body = {"Pod": _pod("app:1"), "NodeNames": ["N1", "N2"]}

    async def scenario(call: Call) -> None:
        registry.gate = None
        await _assert_scores(call, body, [10, 5])
        clock.now_s += AFTER_TTL_S
        registry.layers["app:1"] = (L1, L2, L4)
        registry.gate = threading.Event()  # slower than the pod's deadline
        assert await call("POST", "/prioritize", body) == (
            200,
            [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 5}],
        )
        registry.gate.set()
        await _assert_scores(call, body, [8, 10])

    try:
        _serve(extender, scenario)
    finally:
        if registry.gate is not None:
            registry.gate.set()
        extender.resolver.close()
    assert extender.resolver.timeouts == 0
    assert registry.asked == ["app:1", "app:1"]
    assert "layersched_extender_revalidations_total 1.0" in _metrics_text(extender)


def test_full_nodes_keep_their_layers_across_the_ttl(tmp_path: Any) -> None:
    # Full Nodes: W0 holds tag app:1 = L1 (30M of img1:1's 90M: floor(100 * 30 / 90) = 33
    # -> 3), W1 holds pinned app@sha256 = L2 (20M: 22 -> 2). Past the TTL, with the
    # registry down, both keep their layers (before: the slot cache reset and the node
    # images expired, so both fell to 0). Back up with app:1 moved to L3 (40M: 44 -> 4),
    # W0's entry alone is refreshed; the pinned one is never asked again.
    clock = _Clock()
    registry = _MovingRegistry({"img1:1": (L1, L2, L3), "app:1": (L1,), PINNED: (L2,)})
    extender = _extender(tmp_path, source=registry, resolve_timeout_s=WARM_TIMEOUT_S, clock=clock)
    body = {"Pod": _pod("img1:1"), "Nodes": _full_nodes(("app:1",), (PINNED,))}

    async def scenario(call: Call) -> None:
        await _assert_scores(call, body, [3, 2])  # once the node images are warmed
        for _ in range(3):  # past the TTL, registry down: never absent
            clock.now_s += AFTER_TTL_S
            registry.down = True
            await _assert_scores(call, body, [3, 2])
            await _assert_idle(extender)  # the revalidation failed; it is due again later
            await _assert_scores(call, body, [3, 2])
        registry.down = False
        registry.layers["app:1"] = (L3,)
        clock.now_s += AFTER_TTL_S
        await _assert_scores(call, body, [4, 2])

    try:
        _serve(extender, scenario)
    finally:
        extender.resolver.close()
    assert registry.asked.count(PINNED) == 1
    assert registry.asked.count("app:1") >= 3  # resolved, failed revalidation(s), moved


# ----------------------------------------------------------------------- platforms
def _wire_node(labels: dict[str, str] | None = None, info: dict[str, str] | None = None) -> Node:
    document: dict[str, Any] = {"metadata": {"name": "n", "labels": labels}, "status": {}}
    if info is not None:
        document["status"]["nodeInfo"] = info
    return msgspec.json.decode(json.dumps(document), type=Node)


ARM_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}


@pytest.mark.parametrize(
    ("labels", "info", "key"),
    [
        # the well-known labels win
        (ARM_LABELS, {"operatingSystem": "linux", "architecture": "amd64"}, "linux/arm64"),
        # no labels: status.nodeInfo
        (None, {"operatingSystem": "linux", "architecture": "arm64"}, "linux/arm64"),
        # aliases fold as in image indexes: aarch64 is arm64
        ({"kubernetes.io/os": "linux", "kubernetes.io/arch": "aarch64"}, None, "linux/arm64"),
        # neither: the default (--platform)
        (None, None, "linux/amd64"),
        # garbage is the default, not a new platform
        ({"kubernetes.io/os": "linux", "kubernetes.io/arch": "ARM 64!"}, None, "linux/amd64"),
        # well formed but no known pair (issue 44): the default too
        ({"kubernetes.io/os": "linux", "kubernetes.io/arch": "a7"}, None, "linux/amd64"),
        ({"kubernetes.io/os": "plan9", "kubernetes.io/arch": "amd64"}, None, "linux/amd64"),
    ],
    ids=["labels", "node-info", "alias", "unknown", "garbage", "made-up-arch", "made-up-os"],
)
def test_a_nodes_platform(
    labels: dict[str, str] | None, info: dict[str, str] | None, key: str
) -> None:
    made: list[str] = []

    def factory(platform: Platform) -> StaticLayerSource:
        made.append(str(platform))
        return StaticLayerSource({})

    platforms = Platforms(DEFAULT_PLATFORM, StaticLayerSource({}), factory)
    assert platforms.key(_wire_node(labels, info)) == key
    assert platforms.key(_wire_node(labels, info)) == key  # remembered
    assert made == []  # what one node reports makes no source


def _labelled(name: str, arch: str) -> dict[str, Any]:
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch}
    return {"metadata": {"name": name, "labels": labels}}


def test_one_kubelet_cannot_claim_the_platform_slots() -> None:
    # issue 44: one kubelet cycled its arch label through made-up values, each request a
    # new platform, until every slot was taken for good; two real arm64 nodes added
    # later were scored as amd64. Now a made-up pair is the default, and a known one
    # gets a source only while two nodes report it
    made: list[str] = []
    arm_source = _MovingRegistry({"app:1": (L4,)})

    def factory(platform: Platform) -> _MovingRegistry:
        made.append(str(platform))
        return arm_source if str(platform) == "linux/arm64" else _MovingRegistry({})

    amd_source = _MovingRegistry({"app:1": (L1, L2, L3)})
    platforms = Platforms(DEFAULT_PLATFORM, amd_source, factory)
    provider = StaticLayerIndexProvider(None, None)
    provider.load()
    extender = make_extender(
        without_spread("layer-locality"),  # the arm64 node holds all: unscaled, 10
        amd_source,
        provider,
        resolve_timeout_s=WARM_TIMEOUT_S,
        platforms=platforms,
    )
    arches = [f"a{k}" for k in range(MAX_PLATFORMS + 5)] + ["s390x", "ppc64le", "riscv64"]

    async def scenario(call: Call) -> None:
        for arch in arches:  # the kubelet's label, one request each
            nodes = {"items": [{"metadata": {"name": "amd"}}, _labelled("evil", arch)]}
            await _assert_scores(call, {"Pod": _pod("app:1"), "Nodes": nodes}, [0, 0])
        assert made == []
        # two real arm64 nodes: app:1 is L4 there, which arm-1's node image holds
        arm = [_labelled("arm-1", "arm64"), _labelled("arm-2", "arm64")]
        arm[0]["status"] = {"images": [{"names": ["app:1"], "sizeBytes": 10 * MB}]}
        nodes = {"items": [{"metadata": {"name": "amd"}}, *arm]}
        body = {"Pod": _pod("app:1"), "Nodes": nodes}

        @tenacity.retry(
            stop=tenacity.stop_after_delay(WARM_TIMEOUT_S),
            wait=tenacity.wait_fixed(0.05),
            reraise=True,
        )
        async def scored_in_arm64() -> None:
            await _assert_scores(call, body, [0, 10, 0])

        await scored_in_arm64()
        assert made == ["linux/arm64"]

    try:
        _serve(extender, scenario)
    finally:
        extender.close()


def test_pull_time_compares_nodes_across_platforms(tmp_path: Any) -> None:
    # pull-time scores the fastest pull 100 and the others by the ratio, across every
    # node. app:1 is L1+L2+L3 (90M) on amd64 and L4 (10M) on arm64. "amd" holds nothing
    # at the default 1e8 bit/s: 90 MiB * 8 / 1e8 + 1 = 8.55 s. "arm" holds nothing
    # either: 10 MiB * 8 / 1e8 + 1 = 1.84 s, the fastest: 100 -> 10.
    # amd: floor(100 * 1.8389 / 8.5498) = 21 -> 2. (Scored per platform alone, each
    # would be its group's fastest: 10 and 10.) arm-2 is arm's twin.
    amd_source = _MovingRegistry({"app:1": (L1, L2, L3)})
    platforms = Platforms(DEFAULT_PLATFORM, amd_source, lambda _: _MovingRegistry({"app:1": (L4,)}))
    provider = StaticLayerIndexProvider(None, None)
    provider.load()
    extender = make_extender(
        get_strategy("pull-time"),
        amd_source,
        provider,
        resolve_timeout_s=WARM_TIMEOUT_S,
        platforms=platforms,
    )
    nodes = {
        "items": [
            {"metadata": {"name": "amd"}},
            {"metadata": {"name": "arm", "labels": ARM_LABELS}},
            # a platform is scored in its own only when two nodes report it (issue 44)
            {"metadata": {"name": "arm-2", "labels": ARM_LABELS}},
        ]
    }
    body = {"Pod": _pod("app:1"), "Nodes": nodes}

    async def scenario(call: Call) -> None:
        await _assert_scores(call, body, [2, 10, 10])

    try:
        _serve(extender, scenario)
    finally:
        extender.close()
