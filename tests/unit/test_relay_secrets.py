"""The relay's dump never writes a secret, and never more than its flags allow.

Requests and answers are built by a real protobuf encoder (the CRI subset's
generated code for ``PullImageRequest``; message types built here from the
upstream field numbers for the rest, one set per CRI version, in
tests/fixtures/cri_messages.py), filled with
secrets generated to be awkward: quotes, backslashes, newlines, non-ASCII,
bytes that are not UTF-8, fields repeated or unknown, a credential sent where
a message should be, messages cut short. Each is decoded the way the dump
decodes it, and every string and every base64 blob of the result is searched
for the secret. The table of redacted fields is checked against both
upstream ``api.proto`` files of the Kubernetes build.

The same with a real containerd, and a dump on a full disk, is in
tests/integration/test_relay_secrets.py.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layersched.cli.main import build_parser
from layersched.cli.relay import build_relay
from layersched.core.errors import InputError
from layersched.cri._gen import api_pb2
from layersched.relay import (
    REDACTED,
    Dumper,
    DumpFile,
    DumpLevel,
    RelayOptions,
    is_sensitive,
    parse_method,
    parse_selectors,
)
from layersched.relay._decode import decode
from layersched.relay._redact import RULES, UNREADABLE, Action, Shape
from layersched_harness.testbed.builds import kubernetes_build
from tests.fixtures import prereq
from tests.fixtures.cri_messages import TYPES, VERSIONS, assert_no_secret, hostile_secrets
from tests.unit.test_relay import IMG_ID, IMG_TAG, _harness

#: A request with ``verbose: true`` (field 1, a bool, in each of them).
VERBOSE_REQUEST = b"\x08\x01"


def _method(package: str, short: str) -> Any:
    return parse_method(f"/{package}.{short}")


# -- AuthConfig --------------------------------------------------------------------------


def _pull(auth: api_pb2.AuthConfig, extra: bytes = b"") -> bytes:
    request = api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=IMG_TAG), auth=auth)
    return request.SerializeToString() + extra


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field by hand, for shapes no encoder produces."""
    assert number < 16 and len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize("package", [*VERSIONS, "runtime.v9"], ids=["v1alpha2", "v1", "unknown"])
@pytest.mark.parametrize("seed", range(4))
def test_auth_config_is_redacted(package: str, seed: int) -> None:
    # Named decoding for the CRI versions (the subset's PullImageRequest), schema-less for
    # a version the relay does not know: the same fields are redacted, by number.
    user, password, auth, identity, registry_token, unknown = hostile_secrets(seed)
    config = api_pb2.AuthConfig(
        username=user,
        password=password,
        auth=base64.b64encode(f"{user}:{password}".encode()).decode(),
        server_address="registry.example:5000",
        identity_token=identity,
        registry_token=registry_token,
    )
    # a field AuthConfig may gain one day (99), carrying a secret: redacted too
    config.MergeFromString(bytes([0x9A, 0x06, len(unknown.encode())]) + unknown.encode())
    shown = decode(_method(package, "ImageService/PullImage"), "Request", _pull(config))
    assert_no_secret(shown, user, password, auth, identity, registry_token, unknown)
    assert_no_secret(shown, f"{user}:{password}")
    if package == "runtime.v9":
        # schema-less: field 2 is the AuthConfig, its fields by number
        assert shown["#2"]["#2"] == REDACTED
        assert shown["#2"]["#4"] == "registry.example:5000"
        assert shown["#1"] == {"#1": IMG_TAG}
    else:
        assert shown["auth"] == {
            "username": REDACTED,
            "password": REDACTED,
            "auth": REDACTED,
            "server_address": "registry.example:5000",
            "identity_token": REDACTED,
            "registry_token": REDACTED,
        }
        assert shown["image"] == {"image": IMG_TAG}


@pytest.mark.parametrize(
    ("package", "request_bytes", "kept"),
    [
        # a password that is not UTF-8: the subset's parser refuses the message, and the
        # schema-less form (which shows such bytes as base64) is made from redacted bytes
        ("runtime.v1", _field(1, _field(1, b"img")) + _field(2, _field(2, b"\xff\xfepw-NOT-UTF8")),
         "img"),
        # AuthConfig sent twice (protobuf merges repeated message fields): both redacted
        ("runtime.v1alpha2", _pull(api_pb2.AuthConfig(password="pw-FIRST"))
         + _field(2, _field(2, b"pw-SECOND")), IMG_TAG),
        # a credential where the AuthConfig message should be (bytes that do not parse as one)
        ("runtime.v1", _field(1, _field(1, b"img")) + _field(2, b"\x0a\xffpw-GARBLED"), "img"),
        # the AuthConfig as a varint: not a secret's shape, but not shown either
        ("runtime.v1", _field(1, _field(1, b"img")) + b"\x10\x96\x01", "img"),
    ],
    ids=["not-utf8", "repeated", "garbled-auth", "varint-auth"],
)  # fmt: skip
def test_malformed_auth_is_redacted(package: str, request_bytes: bytes, kept: str) -> None:
    shown = decode(_method(package, "ImageService/PullImage"), "Request", request_bytes)
    assert_no_secret(shown, b"pw-")
    assert REDACTED in json.dumps(shown)
    assert kept in json.dumps(shown)


@pytest.mark.parametrize("package", VERSIONS, ids=["v1alpha2", "v1"])
def test_a_pull_request_that_does_not_parse_is_not_shown(package: str) -> None:
    # Cut short inside the AuthConfig: nothing of it can be redacted field by field, so
    # nothing is shown (the schema-less decoder would have shown it as base64).
    whole = _pull(api_pb2.AuthConfig(password="pw-CUT-SHORT"))
    shown = decode(_method(package, "ImageService/PullImage"), "Request", whole[:-3])
    assert shown == UNREADABLE
    assert_no_secret(shown, b"pw-CUT")


# -- container environments, streaming URLs, verbose status ------------------------------


@pytest.mark.parametrize("package", VERSIONS, ids=["v1alpha2", "v1"])
@pytest.mark.parametrize("seed", range(4))
def test_container_environment_values_are_redacted(package: str, seed: int) -> None:
    types = TYPES[package]
    values = hostile_secrets(100 + seed)
    envs = [types["KeyValue"](key=f"VAR_{index}", value=v) for index, v in enumerate(values)]
    config = types["ContainerConfig"](
        command=["/bin/app"], args=["--verbose"], working_dir="/srv", envs=envs
    )
    request = types["CreateContainerRequest"](pod_sandbox_id="sandbox-1", config=config)
    shown = decode(
        _method(package, "RuntimeService/CreateContainer"), "Request", request.SerializeToString()
    )
    assert_no_secret(shown, *values)
    # CreateContainer is outside the CRI subset: schema-less, by field number
    assert shown["#1"] == "sandbox-1"
    container = shown["#2"]
    # names kept, one marker per value
    assert container["#6"] == [{"#1": f"VAR_{i}", "#2": REDACTED} for i in range(len(values))]
    # the rest of the config is shown (only with --allow-sensitive-dumps: see below)
    assert (container["#3"], container["#4"], container["#5"]) == ("/bin/app", "--verbose", "/srv")


@pytest.mark.parametrize("package", VERSIONS, ids=["v1alpha2", "v1"])
def test_streaming_urls_and_verbose_status_are_redacted(package: str) -> None:
    types = TYPES[package]
    token = hostile_secrets(200, 1)[0]
    for name in ("Exec", "Attach", "PortForward"):
        answer = types["ExecResponse"](url=f"http://127.0.0.1:10010/{name.lower()}/{token}")
        shown = decode(
            _method(package, f"RuntimeService/{name}"), "Response", answer.SerializeToString()
        )
        assert shown == {"#1": REDACTED}
    # containerd's verbose ContainerStatus: the container's spec, its environment included
    info = json.dumps({"runtimeSpec": {"process": {"env": [f"PASSWORD={token}"]}}})
    status = types["ContainerStatusResponse"](info={"info": info})
    shown = decode(
        _method(package, "RuntimeService/ContainerStatus"), "Response", status.SerializeToString()
    )
    assert_no_secret(shown, token)
    assert shown == {"#2": {"#1": "info", "#2": REDACTED}}


def _verbose_answers(token: str) -> dict[str, bytes]:
    """The verbose answers of the methods with an ``info`` map, as containerd gives
    them (its registry credentials in Status's ``config``), ``token`` in each."""
    types = TYPES["runtime.v1"]
    config = {"registry": {"configs": {"reg.test": {"auth": {"username": "u", "password": token}}}}}
    image = api_pb2.ImageStatusResponse(info={"info": json.dumps({"imageSpec": {"env": [token]}})})
    return {
        "RuntimeService/Status": types["StatusResponse"](
            info={"config": json.dumps(config), "golang": "go1.22"}
        ).SerializeToString(),
        "RuntimeService/PodSandboxStatus": types["PodSandboxStatusResponse"](
            info={"info": json.dumps({"config": {"annotations": {"secret": token}}})}
        ).SerializeToString(),
        "ImageService/ImageStatus": image.SerializeToString(),
    }


@pytest.mark.parametrize("allowed", [False, True], ids=["flag-off", "flag-on"])
def test_verbose_info_maps_are_never_dumped(tmp_path: Path, allowed: bool) -> None:
    # A real relay over a fake runtime answering verbose Status, PodSandboxStatus and
    # ImageStatus: selectors say "everything in full". Without the flag each is a name
    # line; with it, each in full with every info value a marker. Before (issue 30):
    # all three were dumped in full, containerd's registry credentials included.
    token = hostile_secrets(400, 1)[0]
    answers = _verbose_answers(token)
    dump_path = tmp_path / "cri.jsonl"
    dumper = Dumper(parse_selectors("full:*"), DumpFile(dump_path), allow_sensitive=allowed)
    for harness in _harness(tmp_path, RelayOptions(dumper=dumper)):
        harness.seen.answers.update({f"/runtime.v1.{m}": answer for m, answer in answers.items()})
        for method, answer in answers.items():
            # the caller gets the runtime's answer as it was: only the dump is redacted
            assert harness.call(f"/runtime.v1.{method}", VERBOSE_REQUEST) == answer
    text = dump_path.read_text()
    assert token not in text and json.dumps(token)[1:-1] not in text
    responses = {
        r["method"].split(".", 2)[2]: r
        for r in map(json.loads, text.splitlines())
        if r["event"] == "response"
    }
    assert set(responses) == set(answers)
    for method, record in responses.items():
        assert_no_secret(record, token)
        if not allowed:
            assert "response" not in record, method
            continue
        # schema-less ({"#2": entry or [entries]}, each {"#1": key, "#2": value}), or
        # named by the CRI subset (ImageStatus: {"info": {key: value}})
        shown = record["response"]
        if "info" in shown:
            values = list(shown["info"].values())
        else:
            entries = shown["#2"] if isinstance(shown["#2"], list) else [shown["#2"]]
            values = [entry["#2"] for entry in entries]
        assert values and set(values) == {REDACTED}, (method, shown)


def test_messages_without_secrets_are_unchanged() -> None:
    # The redaction touches only the messages in its table.
    request = api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=IMG_TAG)).SerializeToString()
    answer = api_pb2.PullImageResponse(image_ref=IMG_ID).SerializeToString()
    pull = parse_method("/runtime.v1.ImageService/PullImage")
    assert decode(pull, "Request", request) == {"image": {"image": IMG_TAG}}
    assert decode(pull, "Response", answer) == {"image_ref": IMG_ID}


# -- the table against the upstream protos -----------------------------------------------


def _upstream_proto(version: str) -> str:
    """The CRI api.proto of the cri-api module the Kubernetes build pins (k8s.io/cri-api at
    the staging version of the release), from the build's Go module cache."""
    build = kubernetes_build()
    _, minor = build.minor
    patch = build.version.rsplit(".", 1)[1]
    proto = (
        build.go_cache_dir()
        / "mod"
        / f"k8s.io/cri-api@v0.{minor}.{patch}/pkg/apis/runtime/{version}/api.proto"
    )
    if not proto.is_file():
        prereq.missing(
            f"the CRI {version} api.proto of the Kubernetes build's cri-api module is not at "
            f"{proto}: run make kubernetes"
        )
    return proto.read_text()


def _messages(proto: str) -> dict[str, dict[int, tuple[str, str]]]:
    """``message Name { type name = N; }`` -> {Name: {N: (name, type)}} (top level only)."""
    messages = {}
    for name, body in re.findall(r"^message (\w+) \{\n(.*?)^\}", proto, re.M | re.S):
        fields = re.findall(r"^\s+(?:repeated )?(map<[^>]+>|[\w.]+) (\w+) = (\d+)", body, re.M)
        messages[name] = {int(n): (field, kind) for kind, field, n in fields}
    return messages


def _check(shape: Shape, upstream: dict[str, dict[int, tuple[str, str]]]) -> None:
    fields = upstream[shape.name]
    for number, (name, action) in shape.fields.items():
        assert fields[number][0] == name, (shape.name, number)
        if isinstance(action, Shape) and action.name != "map entry":
            assert fields[number][1] == action.name, (shape.name, name)
            _check(action, upstream)
        elif isinstance(action, Shape):
            assert fields[number][1] == "map<string, string>", (shape.name, name)
    if shape.others is Action.REDACT:
        # a message whose unknown fields are redacted: every upstream field is listed
        assert set(fields) <= set(shape.fields), shape.name


# v1 only: v1alpha2 left cri-api in 1.26, and no kubelet or runtime of the testbeds speaks
# it any more (kubelet 1.37, containerd 2.x)
@pytest.mark.parametrize("version", ["v1"])
def test_redaction_table_matches_the_upstream_proto(version: str) -> None:
    upstream = _messages(_upstream_proto(version))
    for (short, suffix), shape in RULES.items():
        assert shape.name == f"{short.split('/')[1]}{suffix}"
        _check(shape, upstream)
    # every verbose info map of the CRI is redacted (issue 30: Status's was not)
    verbose = {
        name.removesuffix("Response")
        for name, fields in upstream.items()
        if (2, ("info", "map<string, string>")) in fields.items() and name.endswith("Response")
    }
    assert verbose >= {"Status", "PodSandboxStatus", "ContainerStatus", "ImageStatus"}
    covered = {short.split("/")[1] for (short, suffix) in RULES if suffix == "Response"}
    assert verbose <= covered, verbose - covered
    # and the subset's AuthConfig, which names the fields in decoded dumps, agrees
    subset = {f.number: f.name for f in api_pb2.AuthConfig.DESCRIPTOR.fields}
    assert subset == {n: name for n, (name, _) in upstream["AuthConfig"].items()}


# -- full dumps of sensitive methods need the start-up flag --------------------------------


@pytest.mark.parametrize(
    ("method", "sensitive"),
    [
        ("/runtime.v1alpha2.ImageService/PullImage", True),
        ("/runtime.v1.RuntimeService/CreateContainer", True),
        ("/runtime.v1.RuntimeService/ExecSync", True),
        ("/runtime.v1.RuntimeService/ContainerStatus", True),
        # every method with a verbose info map (issue 30: Status answered containerd's
        # registry credentials), and those carrying a pod's annotations
        ("/runtime.v1.RuntimeService/Status", True),
        ("/runtime.v1.RuntimeService/PodSandboxStatus", True),
        ("/runtime.v1.ImageService/ImageStatus", True),
        ("/runtime.v1.RuntimeService/ListContainers", True),
        ("/runtime.v1.RuntimeService/ListPodSandboxStats", True),
        # the relay cannot tell what a method it does not know carries
        ("/runtime.v9.FutureService/Echo", True),
        # on the allow-list
        ("/runtime.v1.ImageService/ListImages", False),
        ("/runtime.v1alpha2.RuntimeService/Version", False),
        ("/runtime.v1.ImageService/ImageFsInfo", False),
    ],
    ids=[
        "pull", "create", "exec-sync", "container-status", "runtime-status", "sandbox-status",
        "image-status", "list-containers", "sandbox-stats", "unknown", "list", "version",
        "fs-info",
    ],
)  # fmt: skip
def test_sensitive_methods(method: str, sensitive: bool) -> None:
    assert is_sensitive(parse_method(method)) is sensitive


@pytest.mark.parametrize(
    ("allowed", "events"),
    [
        # selectors say "everything in full"; without the flag PullImage gets a name line
        (False, [("response", "PullImage", False), ("request", "Version", True),
                 ("response", "Version", True)]),
        # with it, the request too, its AuthConfig redacted
        (True, [("request", "PullImage", True), ("response", "PullImage", True),
                ("request", "Version", True), ("response", "Version", True)]),
    ],
    ids=["flag-off", "flag-on"],
)  # fmt: skip
def test_full_dumps_of_secrets_need_the_flag(
    tmp_path: Path, allowed: bool, events: list[tuple[str, str, bool]]
) -> None:
    dump_path = tmp_path / "cri.jsonl"
    dumper = Dumper(parse_selectors("full:*"), DumpFile(dump_path), allow_sensitive=allowed)
    assert dumper.level(parse_method("/runtime.v1.ImageService/PullImage")) == (
        DumpLevel.FULL if allowed else DumpLevel.NAME
    )
    password = hostile_secrets(300, 1)[0]
    request = _pull(api_pb2.AuthConfig(username="u", password=password))
    for harness in _harness(tmp_path, RelayOptions(dumper=dumper)):
        assert harness.call("/runtime.v1.ImageService/PullImage", request)
        harness.call("/runtime.v1.RuntimeService/Version")
        # the runtime got the credentials as sent: only the dump is redacted
        assert harness.seen.pull_requests == [request]
    text = dump_path.read_text()
    assert password not in text and json.dumps(password)[1:-1] not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [(r["event"], r["method"].rsplit("/", 1)[1], "request" in r or "response" in r)
            for r in records] == events  # fmt: skip


# -- the dump file's mode ----------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def umask_000() -> Iterator[None]:
    """The most permissive umask: what a dump file gets must not depend on it."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_dump_files_are_private_whatever_the_umask(tmp_path: Path, umask_000: None) -> None:
    path = tmp_path / "made" / "by-the-relay" / "cri.jsonl"
    dump = DumpFile(path, max_bytes=300, backups=2)
    for _ in range(5):  # rotations create the live file again
        dump.write({"event": "response", "padding": "x" * 200})
    dump.close()
    assert dump.rotations >= 2
    assert [_mode(p) for p in (path, path.with_name("cri.jsonl.1"))] == [0o600, 0o600]
    assert [_mode(p) for p in (tmp_path / "made", path.parent)] == [0o700, 0o700]
    # a file an older relay left readable by all is made private when opened
    older = tmp_path / "older.jsonl"
    older.write_text('{"event":"response"}\n')
    older.chmod(0o644)
    DumpFile(older).close()
    assert _mode(older) == 0o600


def test_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    # Someone who can write in the dump's directory plants a link to a file of theirs (or
    # to /etc/shadow, for a relay running as root): refused, nothing written through it.
    target = tmp_path / "theirs"
    target.write_text("")
    link = tmp_path / "cri.jsonl"
    link.symlink_to(target)
    with pytest.raises(InputError, match="not a symbolic link"):
        DumpFile(link)
    assert target.read_text() == ""


def test_a_directory_others_can_read_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="layersched.relay._dump"):
        DumpFile(shared / "cri.jsonl").close()
    assert f"the dump directory {shared} has mode 0755: every user can list it" in caplog.text
    assert f"chmod 700 {shared}" in caplog.text
    assert _mode(shared / "cri.jsonl") == 0o600


@pytest.mark.parametrize("allowed", [False, True], ids=["without-flag", "with-flag"])
def test_the_start_up_flag(tmp_path: Path, caplog: pytest.LogCaptureFixture, allowed: bool) -> None:
    # `layersched relay --dump 'reset,name:*,full:PullImage'`: PullImage in full only with
    # --allow-sensitive-dumps; without it, a warning at start names what is held back.
    argv = ["relay", "--listen", str(tmp_path / "r.sock"), "--dump", "reset,name:*,full:PullImage",
            "--dump-file", str(tmp_path / "cri.jsonl")]  # fmt: skip
    args = build_parser().parse_args([*argv, "--allow-sensitive-dumps"] if allowed else argv)
    with caplog.at_level(logging.WARNING, logger="layersched.relay._config"):
        relay, resources, _ = build_relay(args)
    assert resources.dump_file is not None
    resources.dump_file.close()
    dumper = relay.options.dumper
    assert dumper is not None
    pull = parse_method("/runtime.v1alpha2.ImageService/PullImage")
    assert dumper.level(pull) == (DumpLevel.FULL if allowed else DumpLevel.NAME)
    warned = [r.getMessage() for r in caplog.records if "--allow-sensitive-dumps" in r.message]
    if allowed:
        assert warned == []
    else:
        (line,) = warned
        assert line.startswith(
            "dump selectors from flags ask for full dumps of ImageService/PullImage"
        )
