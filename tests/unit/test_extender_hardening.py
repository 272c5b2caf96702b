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
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tenacity

import layersched
from layersched.cli._logging import JsonFormatter, TextFormatter
from layersched.cli.main import build_parser
from layersched.extender import Extender
from tests.unit.test_extender import (
    WARM_TIMEOUT_S,
    Call,
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
