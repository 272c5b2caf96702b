"""The relay's dump against a REAL containerd: credentials never written, a full disk never
fails a call.

* A registry behind htpasswd (docker-registry) that containerd can only pull
  from with the credentials kubelet would send in ``PullImageRequest.auth``:
  the pull through the relay succeeds (the credentials reached containerd
  unchanged), and the dump holds the request without them, for both CRI
  versions.
* ``CreateContainer`` with Secret-like environment values, sent through the
  relay to containerd (which refuses it: the sandbox does not exist; the
  request is dumped when it arrives all the same).
* The dump on a 64 KiB tmpfs: once it is full, every call still gets
  containerd's own answer, and the failures are counted; once space is freed,
  the dump goes on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from layersched.cri._gen import api_pb2
from layersched.images.oci import build_image, push_image, random_layer
from layersched.registry import RegistryClient
from layersched.relay import REDACTED, Dumper, DumpFile, Relay, RelayOptions, parse_selectors
from tests.fixtures import prereq
from tests.fixtures.containerd import ContainerdProcess
from tests.fixtures.cri_messages import TYPES, VERSIONS, assert_no_secret
from tests.fixtures.registry import RegistryProcess
from tests.fixtures.relay import running

pytestmark = pytest.mark.integration

KIB = 1024
IMAGE = build_image([random_layer(231, 96 * KIB)], labels={"title": "relay-secrets"})
CALL_TIMEOUT_S = 10.0
PULL_TIMEOUT_S = 60.0
#: Small enough to fill within a few hundred calls' records.
FULL_DISK_BYTES = 64 * KIB
MOUNT_BINARY = "mount"
UMOUNT_BINARY = "umount"


def _relay(tmp_path: Path, runtime: str, dumper: Dumper) -> Relay:
    return Relay(tmp_path / "relay.sock", runtime, RelayOptions(dumper=dumper))


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.mark.parametrize("package", VERSIONS, ids=["v1alpha2", "v1"])
def test_pull_with_credentials_dumps_no_secret(
    containerd: ContainerdProcess, auth_registry: RegistryProcess, tmp_path: Path, package: str
) -> None:
    assert auth_registry.username is not None and auth_registry.password is not None
    user, password = auth_registry.username, auth_registry.password
    containerd.trust_plain_http(auth_registry.host)
    image = f"{auth_registry.host}/secret/app:v1"
    with RegistryClient(auth_files=(), credentials={auth_registry.host: (user, password)}) as c:
        push_image(c, image, IMAGE)
    spec = api_pb2.ImageSpec(image=image)
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    requests = [
        # as kubelet sends a pull secret's user and password
        api_pb2.PullImageRequest(
            image=spec, auth=api_pb2.AuthConfig(username=user, password=password)
        ),
        # as kubelet sends a dockerconfigjson "auth" entry (its key as the server address)
        api_pb2.PullImageRequest(
            image=spec, auth=api_pb2.AuthConfig(auth=basic, server_address=auth_registry.url)
        ),
    ]
    path = f"/{package}.ImageService/PullImage"
    with grpc.insecure_channel(containerd.endpoint) as direct:
        # the registry really needs them: without, containerd cannot pull
        with pytest.raises(grpc.RpcError) as refused:
            direct.unary_unary(path)(
                api_pb2.PullImageRequest(image=spec).SerializeToString(), timeout=PULL_TIMEOUT_S
            )
        assert "401 Unauthorized" in str(refused.value.details())
    dump_path = tmp_path / "cri.jsonl"
    # the most the relay can be told to dump: everything, in full, sensitive calls included
    dumper = Dumper(parse_selectors("full:*"), DumpFile(dump_path), allow_sensitive=True)
    relay = _relay(tmp_path, containerd.endpoint, dumper)
    with running(relay), grpc.insecure_channel(relay.endpoint) as via:
        for request in requests:
            answer = via.unary_unary(path)(request.SerializeToString(), timeout=PULL_TIMEOUT_S)
            assert api_pb2.PullImageResponse.FromString(answer).image_ref
    records = _records(dump_path)
    pulls = [r for r in records if r["method"] == path and r["event"] == "request"]
    assert len(pulls) == 2
    assert_no_secret(records, password, basic, f"{user}:{password}")
    assert password not in dump_path.read_text()
    assert pulls[0]["request"]["auth"] == {"username": REDACTED, "password": REDACTED}  # type: ignore[index]
    assert pulls[1]["request"]["auth"] == {  # type: ignore[index]
        "auth": REDACTED,
        "server_address": auth_registry.url,
    }


@pytest.mark.parametrize("package", VERSIONS, ids=["v1alpha2", "v1"])
def test_container_environment_is_not_dumped(
    containerd: ContainerdProcess, tmp_path: Path, package: str
) -> None:
    types = TYPES[package]
    value = f"db-password-{secrets.token_hex(12)}"
    config = types["ContainerConfig"](
        command=["/app"], envs=[types["KeyValue"](key="DB_PASSWORD", value=value)]
    )
    request = types["CreateContainerRequest"](pod_sandbox_id="no-such-sandbox", config=config)
    dump_path = tmp_path / "cri.jsonl"
    dumper = Dumper(parse_selectors("full:*"), DumpFile(dump_path), allow_sensitive=True)
    path = f"/{package}.RuntimeService/CreateContainer"
    relay = _relay(tmp_path, containerd.endpoint, dumper)
    with (
        running(relay),
        grpc.insecure_channel(relay.endpoint) as via,
        pytest.raises(grpc.RpcError) as err,
    ):
        via.unary_unary(path)(request.SerializeToString(), timeout=CALL_TIMEOUT_S)
    # containerd's own refusal came back
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    records = _records(dump_path)
    (arrived,) = [r for r in records if r["event"] == "request"]
    assert arrived["request"]["#2"]["#6"] == {"#1": "DB_PASSWORD", "#2": REDACTED}  # type: ignore[index]
    assert value not in dump_path.read_text()
    assert_no_secret(records, value)


# -- a full disk -------------------------------------------------------------------------


@contextlib.contextmanager
def tiny_tmpfs(directory: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on ``directory`` (needs root), unmounted after."""
    if os.geteuid() != 0 or shutil.which(MOUNT_BINARY) is None:
        prereq.missing("mounting a tmpfs for the full-disk test needs root and mount(8)")
    directory.mkdir()
    subprocess.run(
        [MOUNT_BINARY, "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700", "tmpfs", directory],
        check=True,
        capture_output=True,
    )
    try:
        yield directory
    finally:
        subprocess.run([UMOUNT_BINARY, "-l", directory], check=False, capture_output=True)


def test_a_full_disk_fails_no_call(
    containerd: ContainerdProcess, registry: RegistryProcess, tmp_path: Path
) -> None:
    containerd.trust_plain_http(registry.host)
    image = f"{registry.host}/relay/full:v1"
    with RegistryClient(auth_files=()) as client:
        push_image(client, image, IMAGE)
    calls = [
        ("/runtime.v1.RuntimeService/Version", b""),
        ("/runtime.v1alpha2.ImageService/ListImages", b""),
        (
            "/runtime.v1.ImageService/ImageStatus",
            api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image)).SerializeToString(),
        ),
    ]
    with tiny_tmpfs(tmp_path / "disk", FULL_DISK_BYTES) as disk:
        dump_path = disk / "cri.jsonl"
        # a rotation size larger than the disk: the disk fills before any rotation
        selector = parse_selectors("name:*,full:Version,full:ListImages,full:ImageStatus")
        dumper = Dumper(selector, DumpFile(dump_path, max_bytes=1024 * KIB, backups=1))
        relay = _relay(tmp_path, containerd.endpoint, dumper)
        with (
            running(relay),
            grpc.insecure_channel(relay.endpoint) as via,
            grpc.insecure_channel(containerd.endpoint) as direct,
        ):
            direct.unary_unary("/runtime.v1.ImageService/PullImage")(
                api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=image)).SerializeToString(),
                timeout=PULL_TIMEOUT_S,
            )
            answered = 0
            for _ in range(200):
                for path, request in calls:
                    got = via.unary_unary(path)(request, timeout=CALL_TIMEOUT_S)
                    if not path.endswith("Version"):  # same bytes as containerd's own
                        assert got == direct.unary_unary(path)(request, timeout=CALL_TIMEOUT_S)
                    answered += 1
            failures = relay.metrics.registry.get_sample_value(
                "layersched_relay_dump_failures_total", {"error": "ENOSPC"}
            )
            ok = sum(
                relay.metrics.registry.get_sample_value(
                    "layersched_relay_calls_total",
                    {"version": path.split(".")[1], "method": path.split(".", 2)[2], "code": "OK"},
                )
                or 0
                for path, _ in calls
            )
            # every call answered, and counted OK; the dump could not keep up, and said so
            assert answered == ok == 600
            assert failures is not None and failures > 0
            assert dump_path.stat().st_size > FULL_DISK_BYTES // 2
            # space freed: the next call is dumped again, on a line of its own
            os.truncate(dump_path, 0)
            via.unary_unary("/runtime.v1.RuntimeService/Version")(b"", timeout=CALL_TIMEOUT_S)
            records = _records(dump_path)
        dumper.file.close()
        assert records[-1]["method"] == "/runtime.v1.RuntimeService/Version"
        assert records[-1]["event"] == "response"


#: ``StatusRequest{verbose: true}`` (field 1, a bool), as kubelet's ``crictl info`` asks.
VERBOSE = b"\x08\x01"


@pytest.mark.parametrize("allowed", [False, True], ids=["flag-off", "flag-on"])
def test_verbose_runtime_status_dumps_no_registry_credentials(
    tmp_path: Path, allowed: bool
) -> None:
    # Issue 30: containerd's verbose Status answers its whole CRI config, the static pull
    # credentials of registry.configs.*.auth included, and the relay dumped it as is.
    # Now every verbose info map's values are redacted in any dump, and Status is
    # dumped in full only with --allow-sensitive-dumps.
    user, password = "ci-puller", secrets.token_urlsafe(18)
    host = "registry.example.test:5000"
    with ContainerdProcess(tmp_path / "containerd", registry_auth={host: (user, password)}) as proc:
        path = "/runtime.v1.RuntimeService/Status"
        with grpc.insecure_channel(proc.endpoint) as direct:
            answer = direct.unary_unary(path)(VERBOSE, timeout=CALL_TIMEOUT_S)
        if password.encode() not in answer:  # what the test guards against must be there
            prereq.missing(
                f"containerd {'.'.join(map(str, proc.version))} does not answer its registry "
                "credentials in a verbose Status: nothing to redact"
            )
        dump_path = tmp_path / "cri.jsonl"
        dumper = Dumper(parse_selectors("full:*"), DumpFile(dump_path), allow_sensitive=allowed)
        relay = _relay(tmp_path, proc.endpoint, dumper)
        with running(relay), grpc.insecure_channel(relay.endpoint) as via:
            # the caller gets the runtime's answer (its map's order varies from call to
            # call), credentials and all: only the dump is redacted
            relayed = via.unary_unary(path)(VERBOSE, timeout=CALL_TIMEOUT_S)
            assert password.encode() in relayed
    text = dump_path.read_text()
    assert password not in text
    records = _records(dump_path)
    assert_no_secret(records, password, f"{user}:{password}")
    [record] = [r for r in records if r["method"] == path and r["event"] == "response"]
    if allowed:  # in full, each info value a marker
        info = record["response"]["#2"]  # type: ignore[index]
        entries = info if isinstance(info, list) else [info]
        assert entries and all(entry["#2"] == REDACTED for entry in entries), entries
    else:  # a name line only
        assert "response" not in record
