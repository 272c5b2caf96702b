"""The relay against a fake runtime: a real gRPC server on a unix socket in this process.

The fake answers chosen methods the way a runtime could (fixed bytes, errors
with trailing metadata, streams, slow calls that watch for cancellation) and
records what reached it, so each test can check one promise of the relay:
bytes unchanged, deadlines and cancellation carried, the runtime's own status
codes back, unknown methods through, UNAVAILABLE while the runtime is down.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import tenacity

from layersched.agent import build_node
from layersched.cli import relay as relay_cli
from layersched.cli.main import build_parser
from layersched.core.errors import CRIError, InputError
from layersched.core.layers import Layer, StaticLayerSource
from layersched.cri import CRIClient
from layersched.cri._gen import api_pb2
from layersched.relay import (
    Annotator,
    Dumper,
    DumpFile,
    DumpLevel,
    LayersByName,
    Relay,
    RelayMetrics,
    RelayOptions,
    parse_method,
    parse_selectors,
)
from layersched.relay._decode import decode, raw
from tests.fixtures.relay import running

#: Waits in these tests: local gRPC over a unix socket answers in milliseconds.
WAIT_TIMEOUT_S = 5.0
WAIT_POLL_S = 0.02
#: How long the fake's slow method runs unless cancelled.
SLOW_CALL_S = 30.0
PULL_DELAY_S = 0.2
#: gRPC rounds deadlines on the wire; the runtime may see a few ms more than was set.
CLOCK_SLACK_S = 0.05
#: Matching a selector against a name takes microseconds; this only turns a hang into a
#: failure (a backtracking regular expression took longer than 120 s).
HANG_TIMEOUT_S = 10.0

VERSION_V1 = api_pb2.VersionResponse(
    version="0.1.0", runtime_name="fake", runtime_version="1", runtime_api_version="v1"
).SerializeToString()
VERSION_V1ALPHA2 = api_pb2.VersionResponse(
    version="0.1.0", runtime_name="fake", runtime_version="1", runtime_api_version="v1alpha2"
).SerializeToString()
IMG_ID = "sha256:" + "c" * 64
IMG_TAG = "registry.local/app:v1"
IMG_DIGEST_REF = "registry.local/app@sha256:" + "d" * 64
LAYERS = (Layer("sha256:" + "1" * 64, 54917164), Layer("sha256:" + "2" * 64, 1234))
#: Field 99 of Image: unknown to the relay's message subset; must survive a rewrite.
UNKNOWN_IMAGE_FIELD = b"\x9a\x06\x05hello"  # tag (99 << 3 | 2) as varint, length 5


def _image(image_id: str, tags: list[str], digests: list[str], size: int) -> api_pb2.Image:
    image = api_pb2.Image(id=image_id, repo_tags=tags, repo_digests=digests, size=size)
    image.MergeFromString(UNKNOWN_IMAGE_FIELD)
    return image


LIST_IMAGES = api_pb2.ListImagesResponse(
    images=[
        _image(IMG_ID, [IMG_TAG], [IMG_DIGEST_REF], 55_000_000),
        _image("sha256:" + "e" * 64, ["registry.local/other:v1"], [], 10),
    ]
).SerializeToString()


@dataclass
class FakeRuntime:
    """What reached the fake runtime."""

    metadata: list[dict[str, str]] = field(default_factory=list)
    remaining_s: list[float | None] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    slow_started: threading.Event = field(default_factory=threading.Event)
    pulls: list[str] = field(default_factory=list)
    #: PullImage requests as they arrived (bytes)
    pull_requests: list[bytes] = field(default_factory=list)
    #: More unary methods, by path: the answer each gets (bytes)
    answers: dict[str, bytes] = field(default_factory=dict)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, seen: FakeRuntime) -> None:
        self.seen = seen

    def _record(self, context: grpc.ServicerContext) -> None:
        self.seen.metadata.append({k: str(v) for k, v in context.invocation_metadata()})
        self.seen.remaining_s.append(context.time_remaining())

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        path = details.method
        unary = {
            "/runtime.v1.RuntimeService/Version": self.version_v1,
            "/runtime.v1alpha2.RuntimeService/Version": self.version_v1alpha2,
            "/runtime.v1.RuntimeService/ExecSync": self.slow,
            "/runtime.v1.ImageService/RemoveImage": self.not_found,
            "/runtime.v1.ImageService/PullImage": self.pull,
            "/runtime.v1alpha2.ImageService/ListImages": self.list_images,
            "/runtime.v1.ImageService/ListImages": self.list_images,
            "/runtime.v1.ImageService/ImageStatus": self.image_status,
            "/runtime.v9.FutureService/Echo": self.echo,
        }
        if path in self.seen.answers:  # the test's own answer first
            answer = self.seen.answers[path]
            return grpc.unary_unary_rpc_method_handler(lambda request, context: answer)
        if path in unary:
            return grpc.unary_unary_rpc_method_handler(unary[path])
        if path == "/runtime.v1.RuntimeService/GetContainerEvents":
            return grpc.unary_stream_rpc_method_handler(self.events)
        if path == "/test.Adder/Sum":
            return grpc.stream_unary_rpc_method_handler(self.sum)
        return None

    def version_v1(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self._record(context)
        return VERSION_V1

    def version_v1alpha2(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self._record(context)
        return VERSION_V1ALPHA2

    def slow(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self._record(context)
        context.add_callback(self.seen.cancelled.set)
        self.seen.slow_started.set()
        self.seen.cancelled.wait(SLOW_CALL_S)
        return b""

    def not_found(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        context.set_trailing_metadata((("runtime-trace", "abc123"),))
        context.abort(grpc.StatusCode.NOT_FOUND, "no such image: x")
        return b""

    def pull(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        image = api_pb2.PullImageRequest.FromString(request).image.image
        self.seen.pulls.append(image)
        self.seen.pull_requests.append(request)
        if image.startswith("missing/"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"{image}: not found")
        time.sleep(PULL_DELAY_S)
        return api_pb2.PullImageResponse(image_ref=IMG_ID).SerializeToString()

    def list_images(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return LIST_IMAGES

    def image_status(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        ref = api_pb2.ImageStatusRequest.FromString(request).image.image
        response = api_pb2.ImageStatusResponse()
        if ref in (IMG_ID, IMG_TAG):
            response.image.CopyFrom(api_pb2.ListImagesResponse.FromString(LIST_IMAGES).images[0])
        return response.SerializeToString()

    def echo(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"echo:" + request

    def events(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        for index in range(3):
            yield bytes([index])

    def sum(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        return str(sum(int(message) for message in requests)).encode()


@dataclass
class Harness:
    seen: FakeRuntime
    runtime_socket: Path
    relay: Relay
    channel: grpc.Channel

    def call(self, path: str, request: bytes = b"", **kwargs: Any) -> bytes:
        result: bytes = self.channel.unary_unary(path)(request, **kwargs)
        return result


def _start_runtime(socket: Path, seen: FakeRuntime) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((_Handler(seen),))
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    return server


@pytest.fixture
def runtime_socket(tmp_path: Path) -> Path:
    return tmp_path / "runtime.sock"


def _harness(tmp_path: Path, options: RelayOptions | None = None) -> Iterator[Harness]:
    seen = FakeRuntime()
    socket = tmp_path / "runtime.sock"
    server = _start_runtime(socket, seen)
    metrics = RelayMetrics()
    relay = Relay(tmp_path / "relay.sock", str(socket), options, metrics)
    try:
        with running(relay), grpc.insecure_channel(relay.endpoint) as channel:
            yield Harness(seen, socket, relay, channel)
    finally:
        server.stop(0)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    yield from _harness(tmp_path)


def _sample(relay: Relay, name: str, labels: dict[str, str] | None = None) -> float:
    value = relay.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


# ------------------------------------------------------------------ forwarding
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # kubelet 1.20 speaks v1alpha2; the bytes come back exactly as the runtime sent them
        ("/runtime.v1alpha2.RuntimeService/Version", VERSION_V1ALPHA2),
        ("/runtime.v1.RuntimeService/Version", VERSION_V1),
    ],
    ids=["v1alpha2", "v1"],
)
def test_known_methods_pass_bytes_unchanged(harness: Harness, path: str, expected: bytes) -> None:
    assert harness.call(path, b"\x0a\x02v1", metadata=(("x-trace", "t1"),)) == expected
    # caller metadata reaches the runtime
    assert harness.seen.metadata[-1]["x-trace"] == "t1"
    version = "v1alpha2" if "v1alpha2" in path else "v1"
    assert (
        _sample(
            harness.relay,
            "layersched_relay_calls_total",
            {"version": version, "method": "RuntimeService/Version", "code": "OK"},
        )
        == 1
    )


def test_unknown_method_and_version_pass_through(harness: Harness) -> None:
    # a CRI version and service the relay has never heard of: forwarded as raw bytes
    assert harness.call("/runtime.v9.FutureService/Echo", b"\x01\x02") == b"echo:\x01\x02"
    # counted under the bounded label "other"
    labels = {"version": "other", "method": "other", "code": "OK"}
    assert _sample(harness.relay, "layersched_relay_calls_total", labels) == 1


def test_unimplemented_comes_from_the_runtime(harness: Harness) -> None:
    for path in ("/runtime.v1.RuntimeService/NoSuchMethod", "/other.Service/Call"):
        with pytest.raises(grpc.RpcError) as caught:
            harness.call(path, b"x")
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_server_streaming_and_client_streaming(harness: Harness) -> None:
    events = harness.channel.unary_stream("/runtime.v1.RuntimeService/GetContainerEvents")(b"")
    assert list(events) == [b"\x00", b"\x01", b"\x02"]
    # a client-streaming method the relay does not know: 1 + 2 + 3 = 6
    adder = harness.channel.stream_unary("/test.Adder/Sum")
    assert adder(iter([b"1", b"2", b"3"])) == b"6"


def test_runtime_status_details_and_trailers_come_back(harness: Harness) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        harness.call("/runtime.v1.ImageService/RemoveImage", b"")
    err = caught.value
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert err.details() == "no such image: x"
    assert ("runtime-trace", "abc123") in tuple(err.trailing_metadata())


def test_deadline_propagates(harness: Harness) -> None:
    harness.call("/runtime.v1.RuntimeService/Version", b"", timeout=7.0)
    remaining = harness.seen.remaining_s[-1]
    # the runtime sees the caller's deadline, less the relay's transit time
    assert remaining is not None
    assert 6.0 < remaining <= 7.0 + CLOCK_SLACK_S


@tenacity.retry(
    stop=tenacity.stop_after_delay(WAIT_TIMEOUT_S),
    wait=tenacity.wait_fixed(WAIT_POLL_S),
    reraise=True,
)
def _assert_sample(relay: Relay, name: str, labels: dict[str, str] | None, expected: float) -> None:
    assert _sample(relay, name, labels) == expected


def _assert_in_flight(relay: Relay, expected: float) -> None:
    _assert_sample(relay, "layersched_relay_calls_in_flight", None, expected)


def test_expired_deadline_cancels_the_runtime_call(harness: Harness) -> None:
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as caught:
        harness.call("/runtime.v1.RuntimeService/ExecSync", b"", timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # the runtime's call ended with the deadline, not after SLOW_CALL_S
    assert harness.seen.cancelled.wait(WAIT_TIMEOUT_S)
    assert time.monotonic() - started < WAIT_TIMEOUT_S
    _assert_in_flight(harness.relay, 0)


def test_client_cancellation_reaches_the_runtime(harness: Harness) -> None:
    future = harness.channel.unary_unary("/runtime.v1.RuntimeService/ExecSync").future(b"")
    # the call has reached the runtime (cancelling earlier never starts it there)
    assert harness.seen.slow_started.wait(WAIT_TIMEOUT_S)
    _assert_in_flight(harness.relay, 1)
    assert not harness.seen.cancelled.is_set()
    future.cancel()
    assert harness.seen.cancelled.wait(WAIT_TIMEOUT_S)
    _assert_in_flight(harness.relay, 0)


@tenacity.retry(
    stop=tenacity.stop_after_delay(WAIT_TIMEOUT_S),
    wait=tenacity.wait_fixed(0.1),
    reraise=True,
)
def _assert_version(client: CRIClient) -> None:
    assert client.version().runtime_name == "fake"


def test_runtime_down_is_unavailable_then_recovers(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.sock"
    relay = Relay(tmp_path / "relay.sock", str(runtime))
    with running(relay), CRIClient(relay.endpoint, timeout_s=5) as client:
        # no runtime yet: the caller sees the runtime's unavailability, the relay lives on
        with pytest.raises(CRIError, match="UNAVAILABLE"):
            client.version()
        code = {"version": "v1", "method": "RuntimeService/Version", "code": "UNAVAILABLE"}
        # counted once the relay's handler has finished (just after the caller got its answer)
        _assert_sample(relay, "layersched_relay_calls_total", code, 1)
        server = _start_runtime(runtime, FakeRuntime())
        try:
            # the relay reconnects within its 1 s back-off cap
            _assert_version(client)
        finally:
            server.stop(0)


# -------------------------------------------------------------- pull telemetry
def test_pull_telemetry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    options = RelayOptions(log_pulls=True, node_name="n1")
    for harness in _harness(tmp_path, options):
        caplog.set_level("INFO", logger="layersched.relay.pulls")
        with CRIClient(harness.relay.endpoint) as client:
            assert client.pull_image(IMG_TAG) == IMG_ID
            with pytest.raises(CRIError, match="NOT_FOUND"):
                client.pull_image("missing/app:v1")
        relay = harness.relay
        hist = "layersched_relay_pull_duration_seconds"
        assert _sample(relay, f"{hist}_count", {"result": "ok"}) == 1
        # the kubelet waited at least as long as the runtime took
        assert _sample(relay, f"{hist}_sum", {"result": "ok"}) >= PULL_DELAY_S
        assert _sample(relay, f"{hist}_count", {"result": "error"}) == 1
        assert _sample(relay, "layersched_relay_pulls_total", {"result": "ok"}) == 1
        assert _sample(relay, "layersched_relay_pulls_total", {"result": "not_found"}) == 1
        _assert_pull_logged(caplog)


@tenacity.retry(
    stop=tenacity.stop_after_delay(WAIT_TIMEOUT_S),
    wait=tenacity.wait_fixed(WAIT_POLL_S),
    reraise=True,
)
def _assert_pull_logged(caplog: pytest.LogCaptureFixture) -> None:
    lines = [r.getMessage() for r in caplog.records if r.name == "layersched.relay.pulls"]
    ok = [line for line in lines if f"image={IMG_TAG}" in line]
    assert ok, lines
    # the size comes from an ImageStatus of the pulled image: the fake says 55 MB
    assert "node=n1 result=ok" in ok[0]
    assert "size_bytes=55000000" in ok[0]
    assert any("image=missing/app:v1" in line and "result=not_found" in line for line in lines)


# ------------------------------------------------------------------------ dump
SEED3 = "off:*,full:Create*,full:Remove*,full:Run*,full:Update*,full:Start*,full:Stop*"


@pytest.mark.parametrize(
    ("selectors", "method", "level"),
    [
        # seed 002's "everything, in full" (its '.*' is the glob '*')
        ("reset,full:*", "PullImage", DumpLevel.FULL),
        # the last matching item wins
        ("name:*,full:PullImage", "PullImage", DumpLevel.FULL),
        ("name:*,full:PullImage", "ListImages", DumpLevel.NAME),
        ("full:PullImage,off:*", "PullImage", DumpLevel.OFF),
        # seed 003's selector, one item per alternative: only the mutating runtime calls
        (SEED3, "RunPodSandbox", DumpLevel.FULL),
        (SEED3, "ListImages", DumpLevel.OFF),
        # reset forgets what came before
        ("full:*,reset,name:Version", "PullImage", DumpLevel.OFF),
        # matches the whole name, or Service/Method
        ("full:Pull", "PullImage", DumpLevel.OFF),
        ("full:ImageService/*", "PullImage", DumpLevel.FULL),
        # ? is one character: "Pull?mage" matches, "Pull?" does not
        ("full:Pull?mage", "PullImage", DumpLevel.FULL),
        ("full:Pull?", "PullImage", DumpLevel.OFF),
        # nothing given: nothing dumped
        ("", "PullImage", DumpLevel.OFF),
    ],
    ids=["all-full", "last-wins", "last-wins-other", "off-last", "seed3-run", "seed3-list",
         "reset", "fullmatch", "service", "question-mark", "question-mark-short", "empty"],
)  # fmt: skip
def test_selectors(selectors: str, method: str, level: DumpLevel) -> None:
    service = "ImageService" if "Image" in method else "RuntimeService"
    parsed = parse_method(f"/runtime.v1alpha2.{service}/{method}")
    assert parse_selectors(selectors).level(parsed) == level


@pytest.mark.parametrize(
    ("selectors", "message"),
    [
        ("all:*", "LEVEL is one of off, name, full"),
        ("full", "is not LEVEL:GLOB"),
        # seed 002's regular expression: refused, with the glob that means the same
        ("reset,full:.*", "'full:.*' looks like a regular expression ('.' is not allowed): "
         "selectors are method names or globs (letters, digits, _, /, and the wildcards * "
         "and ?), not regular expressions: write full:*"),
        ("full:ImageService/.*", "write full:ImageService/*"),
        # seed 003's alternation: one item per alternative
        ("off:*,full:((Create)|(Remove)).*", "write one item per alternative, e.g. "
         "'full:Create*,full:Remove*'"),
        # the one that never finished matching (issue 23): refused before any match
        ("full:(.*)*x", "'full:(.*)*x' looks like a regular expression"),
        ("full:^PullImage$", "write full:PullImage"),
        ("full:" + "P" * 129, "a glob has at most 128 characters"),
        # a megabyte of ConfigMap value: refused, and the message stays short
        ("full:(" + "." * 1_000_000, "'…: a glob has at most 128 characters"),
        (",".join(["name:Version"] * 65), "65 items; at most 64"),
    ],
    ids=["bad-level", "no-glob", "seed2-regex", "service-regex", "seed3-regex",
         "catastrophic-regex", "anchored-regex", "long-glob", "huge-regex", "many-items"],
)  # fmt: skip
def test_bad_selectors_say_how_to_fix(selectors: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_selectors(selectors)
    assert message in str(caught.value)
    assert str(caught.value).startswith("--dump: ")
    assert len(str(caught.value)) < 600


def _hostile_globs() -> list[str]:
    """Globs built to make a backtracking matcher explode: every wildcard mix up to the
    length cap, ending in a character the names below never have."""
    return [
        "*a" * 63 + "b",  # 127 characters: 63 stars each with a literal to seek
        "*?" * 63 + "b",
        "?*" * 63 + "b",
        "a*" * 63 + "b",
        "*" * 127 + "b",
    ]


def test_hostile_globs_match_in_linear_time() -> None:
    # A gRPC method path is up to 8 KiB (grpc's default metadata cap). Every hostile glob
    # against every hostile name must answer: a backtracking matcher takes exponential
    # time here (a regular expression like '(.*)*x' did not finish within 120 s). The
    # matching runs on a thread with a bound far above what linear matching takes, so a
    # regression fails instead of hanging the suite.
    names = [
        "/runtime.v1.ImageService/" + "a" * 8000,
        "/" + "a" * 4000 + "/" + "a" * 4000,
        "/runtime.v1.RuntimeService/" + "ab" * 4000,
    ]
    selector = parse_selectors(",".join(f"full:{glob}" for glob in _hostile_globs()))
    levels: list[DumpLevel] = []

    def match_all() -> None:
        levels.extend(selector.level(parse_method(name)) for name in names)

    worker = threading.Thread(target=match_all, daemon=True)
    worker.start()
    worker.join(HANG_TIMEOUT_S)
    assert not worker.is_alive(), f"glob matching still running after {HANG_TIMEOUT_S} s"
    # none of the names ends in "b" where the globs need it, except "ab" * 4000, which
    # every glob but "a*"*63+"b" (needing 63 a's in a row before it) matches
    assert levels == [DumpLevel.OFF, DumpLevel.OFF, DumpLevel.FULL]


def test_dump_full_and_name(tmp_path: Path) -> None:
    dump_path = tmp_path / "dump" / "cri.jsonl"
    dumper = Dumper(
        parse_selectors("reset,name:*,full:PullImage"), DumpFile(dump_path), allow_sensitive=True
    )
    for harness in _harness(tmp_path, RelayOptions(dumper=dumper)):
        with CRIClient(harness.relay.endpoint) as client:
            client.pull_image(IMG_TAG)
            client.version()
    records = [json.loads(line) for line in dump_path.read_text().splitlines()]
    assert [(r["event"], r["method"]) for r in records] == [
        ("request", "/runtime.v1.ImageService/PullImage"),
        ("response", "/runtime.v1.ImageService/PullImage"),
        ("response", "/runtime.v1.RuntimeService/Version"),
    ]
    request, response, version = records
    assert request["request"] == {"image": {"image": IMG_TAG}}
    assert response["response"] == {"image_ref": IMG_ID}
    assert response["call"] == request["call"]
    assert response["duration_s"] >= PULL_DELAY_S
    # name level: no message bodies
    assert "response" not in version and version["code"] == "OK"
    # the relay's own share of a unary call's time
    assert 0 <= version["relay_s"] <= version["duration_s"]


def test_dump_rotation_bounds_the_size(tmp_path: Path) -> None:
    path = tmp_path / "cri.jsonl"
    max_bytes, backups = 2000, 2
    dump = DumpFile(path, max_bytes=max_bytes, backups=backups)
    record = {"event": "response", "padding": "x" * 300}
    line_bytes = len(json.dumps(record, separators=(",", ":"))) + 1
    for _ in range(100):
        dump.write(record)
    dump.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["cri.jsonl", "cri.jsonl.1", "cri.jsonl.2"]
    assert all(f.stat().st_size <= max_bytes for f in files)
    # 100 lines of 334 bytes, 5 per 2000-byte file (6 would be 2004): 20 files' worth,
    # so 19 rotations
    lines_per_file = max_bytes // line_bytes
    assert dump.rotations == -(-100 // lines_per_file) - 1
    assert all(json.loads(line) == record for f in files for line in f.read_text().splitlines())


def test_decode_named_and_raw() -> None:
    pull = parse_method("/runtime.v1alpha2.ImageService/PullImage")
    request = api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image="a:1")).SerializeToString()
    assert decode(pull, "Request", request) == {"image": {"image": "a:1"}}
    # a method outside the subset: field numbers, nested message, string and varint
    create = parse_method("/runtime.v1.RuntimeService/CreateContainer")
    assert decode(create, "Request", request) == {"#1": {"#1": "a:1"}}
    assert raw(b"\x08\x96\x01") == {"#1": 150}
    # short printable strings stay strings ("p1" also parses as field 14 = 49)
    assert raw(b"\x0a\x02p1") == {"#1": "p1"}
    # kubelet's PullImageRequest carries sandbox_config (field 3), outside the subset:
    # the named fields, plus field 3 schema-less
    sandbox = b"\x1a\x06\x0a\x04\x12\x02p1"  # #3 { #1 { #2: "p1" } }
    shown = decode(pull, "Request", request + sandbox)
    assert shown == {"image": {"image": "a:1"}, "#3": {"#1": {"#2": "p1"}}}


# ---------------------------------------------------------- annotation injection
@pytest.fixture
def annotating(tmp_path: Path) -> Iterator[Harness]:
    metrics = RelayMetrics()
    source = StaticLayerSource({IMG_TAG: LAYERS})
    options = RelayOptions(annotator=Annotator(LayersByName(source), metrics))
    seen = FakeRuntime()
    server = _start_runtime(tmp_path / "runtime.sock", seen)
    relay = Relay(tmp_path / "relay.sock", str(tmp_path / "runtime.sock"), options, metrics)
    try:
        with running(relay), grpc.insecure_channel(relay.endpoint) as channel:
            yield Harness(seen, tmp_path / "runtime.sock", relay, channel)
    finally:
        server.stop(0)


RYAX_ANNOTATIONS = {
    # exactly the Ryax-patched CRI-O's form: imageLayer.<digest> -> decimal compressed size
    f"imageLayer.sha256:{'1' * 64}": "54917164",
    f"imageLayer.sha256:{'2' * 64}": "1234",
}


def test_annotations_on_list_images_and_image_status(annotating: Harness) -> None:
    with CRIClient(annotating.relay.endpoint) as client:
        known, unknown = client.list_images()
        assert dict(known.annotations) == RYAX_ANNOTATIONS
        # the layer source does not know the other image: unchanged
        assert dict(unknown.annotations) == {}
        status = client.image_status(IMG_TAG)
    assert status.image is not None
    assert dict(status.image.annotations) == RYAX_ANNOTATIONS
    # every other field, the one the relay's subset does not know included, is kept
    raw_answer = annotating.call("/runtime.v1alpha2.ImageService/ListImages")
    first = api_pb2.ListImagesResponse.FromString(raw_answer).images[0]
    assert UNKNOWN_IMAGE_FIELD in first.SerializeToString()
    assert first.size == 55_000_000 and list(first.repo_digests) == [IMG_DIGEST_REF]
    metrics = annotating.relay
    assert _sample(metrics, "layersched_relay_annotated_images_total") >= 2


def test_agent_reads_the_annotations_back(annotating: Harness) -> None:
    with CRIClient(annotating.relay.endpoint) as client:
        node = build_node("n1", client.list_images(), {"cpu": "2"})
    (entry,) = [e for e in node["status"]["images"] if IMG_TAG in e["names"]]
    assert entry["layers"] == {layer.digest: layer.size_bytes for layer in LAYERS}


def test_injection_is_off_by_default(harness: Harness) -> None:
    with CRIClient(harness.relay.endpoint) as client:
        assert all(not image.annotations for image in client.list_images())


# ------------------------------------------------------------------------ docs
DOCS = Path(__file__).resolve().parents[2] / "docs" / "relay.md"


def test_docs_name_only_real_flags_and_metrics() -> None:
    text = DOCS.read_text()
    relay_parser = build_parser()._subparsers._group_actions[0].choices["relay"]  # type: ignore[union-attr]
    flags = {flag for action in relay_parser._actions for flag in action.option_strings}
    documented = set(re.findall(r"`(--[a-z-]+)", text))
    # kubelet's own flags are named in the docs too
    kubelet = {"--container-runtime-endpoint", "--image-service-endpoint"}
    assert documented - kubelet <= flags, documented - kubelet - flags
    metrics = RelayMetrics()
    names = {metric.name for metric in metrics.registry.collect()}
    for name in re.findall(r"`(layersched_relay_[a-z_]+)`", text):
        assert name.removesuffix("_total") in names, name


def test_crio_storage_is_a_layer_source(tmp_path: Path) -> None:
    # CRI-O's containers/storage: base <- top, named as the CRI answer names the image
    (tmp_path / "overlay-layers").mkdir()
    (tmp_path / "overlay-images").mkdir()
    base = {"id": "base", "compressed-diff-digest": f"sha256:{1:064x}", "compressed-size": 300}
    top = {"id": "top", "parent": "base", "compressed-diff-digest": f"sha256:{2:064x}"}
    top["compressed-size"] = 20
    (tmp_path / "overlay-layers" / "layers.json").write_text(json.dumps([base, top]))
    image = {"id": "f" * 64, "names": ["reg/app:1"], "layer": "top"}
    (tmp_path / "overlay-images" / "images.json").write_text(json.dumps([image]))
    args = build_parser().parse_args(["relay", "--inject-layers-from-crio-storage", str(tmp_path)])
    source = relay_cli._layers(args)
    assert source is not None
    # base first, with the compressed digests and sizes the manifest lists
    assert source.image_layers("f" * 64, ["reg/app:1"]) == (
        Layer(f"sha256:{1:064x}", 300),
        Layer(f"sha256:{2:064x}", 20),
    )
    assert source.image_layers("e" * 64, ["reg/other:1"]) is None


def test_one_layer_source_at_most(tmp_path: Path) -> None:
    argv = ["relay", "--inject-layers-from-containerd", "/run/x.sock"]
    argv += ["--inject-layers-from-crio-storage", str(tmp_path)]
    with pytest.raises(InputError, match="--inject-layers-from-containerd and --inject-layers-"):
        relay_cli._layers(build_parser().parse_args(argv))
