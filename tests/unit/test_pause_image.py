"""The pause (sandbox) image: binary checks, one reproducible layer, the archive and its CLI."""

from __future__ import annotations

import gzip
import io
import json
import struct
import tarfile
from pathlib import Path

import pytest
import yaml

from layersched.cli.main import main as cli_main
from layersched.core.errors import InputError
from layersched.core.manifest import DEFAULT_PLATFORM, Platform
from layersched.images.oci_layout import oci_archive
from layersched_harness.testbed.idle_program import idle_program
from layersched_harness.testbed.pause_image import (
    DEFAULT_PAUSE_IMAGE,
    build_pause_image,
    check_static_executable,
    write_pause_archive,
)

NAME = "layersched.local/pause:3.2"
#: A static linux/amd64 ELF without a compiler: the scenario images' idle program.
STATIC = idle_program()
#: Offsets in an ELF64 file: e_ident[EI_CLASS], e_machine, the first program header's p_type.
EI_CLASS = 4
E_MACHINE = 18
FIRST_P_TYPE = 64
PT_INTERP = 3


def _patched(offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(STATIC)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@pytest.mark.parametrize(
    ("binary", "platform", "message"),
    [
        # A shell script is no ELF file.
        (b"#!/bin/sh\nsleep infinity\n", DEFAULT_PLATFORM, "not a 64-bit little-endian ELF"),
        # ELFCLASS32 (1): a 32-bit build.
        (_patched(EI_CLASS, "<B", 1), DEFAULT_PLATFORM, "not a 64-bit little-endian ELF"),
        # An aarch64 (0xB7) binary for a linux/amd64 image.
        (_patched(E_MACHINE, "<H", 0xB7), DEFAULT_PLATFORM, r"linux/amd64 executable"),
        # The amd64 binary for a linux/arm64 image.
        (STATIC, Platform.parse("linux/arm64"), r"linux/arm64 executable \(machine 0xb7\)"),
        # A PT_INTERP program header: dynamically linked, needs a libc the image lacks.
        (_patched(FIRST_P_TYPE, "<I", PT_INTERP), DEFAULT_PLATFORM, "gcc -static"),
        # No ELF machine is known for s390x.
        (STATIC, Platform.parse("linux/s390x"), "supported platforms are linux/amd64"),
        # Headers cut off after the ELF header: the program header is missing.
        (STATIC[:66], DEFAULT_PLATFORM, "truncated ELF program headers"),
    ],
    ids=["script", "elf32", "wrong-machine", "wrong-platform", "dynamic", "s390x", "truncated"],
)
def test_binary_checks(binary: bytes, platform: Platform, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_static_executable(binary, platform, "pause")


def test_static_binary_passes() -> None:
    check_static_executable(STATIC, DEFAULT_PLATFORM, "pause")


def test_pause_image_is_one_executable_layer() -> None:
    # One layer with one member, pause (0755, 0:0, mtime 0); Entrypoint /pause; reproducible.
    image = build_pause_image(STATIC)
    assert image == build_pause_image(STATIC)
    (layer,) = image.layers
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(image.blobs[layer.digest]))) as tar:
        (member,) = tar.getmembers()
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert extracted.read() == STATIC
    assert (member.name, member.mode, member.uid, member.gid, member.mtime) == (
        "pause",
        0o755,
        0,
        0,
        0,
    )
    config = json.loads(image.config_bytes)
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["config"]["WorkingDir"] == "/"
    assert (config["os"], config["architecture"]) == ("linux", "amd64")


def test_missing_binary_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="gcc -static"):
        write_pause_archive(tmp_path / "pause", NAME, tmp_path / "pause.tar")


def test_cli_writes_then_leaves_the_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # First run: "written"; second run: "unchanged" (what an Ansible changed_when reads).
    binary, output = tmp_path / "pause", tmp_path / "pause.tar"
    binary.write_bytes(STATIC)
    argv = ["testbed", "pause-image", "--binary", str(binary), "--name", NAME]
    argv += ["--output", str(output)]
    digest = build_pause_image(STATIC).digest
    assert cli_main(argv) == 0
    assert capsys.readouterr().out == f"{NAME} {digest} {output} written\n"
    assert cli_main(argv) == 0
    assert capsys.readouterr().out == f"{NAME} {digest} {output} unchanged\n"
    assert output.read_bytes() == oci_archive(build_pause_image(STATIC), NAME)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # A short name the CRI would normalise to docker.io/library/pause:3.2.
        (["--name", "pause:3.2"], "give the full name"),
        # A platform without machine code support.
        (["--platform", "linux/s390x"], "supported platforms"),
    ],
    ids=["short-name", "platform"],
)
def test_cli_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(STATIC)
    argv = ["testbed", "pause-image", "--binary", str(binary), "--output", str(tmp_path / "t")]
    assert cli_main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_the_default_name_is_the_local_testbeds_sandbox_image() -> None:
    # the e2e tests start pods of it, which must find it on every node, imported
    vars_file = (
        Path(__file__).resolve().parents[2] / "harness" / "playbooks" / "vars" / "testbed-local.yml"
    )
    settings = yaml.safe_load(vars_file.read_text())
    assert settings["testbed_pause_image"] == DEFAULT_PAUSE_IMAGE
