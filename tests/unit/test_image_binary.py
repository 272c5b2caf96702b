"""What the image builder reads from a Go binary: its ELF header (machine, static) and the
build info the go command embeds, on synthetic files laid out as the ELF specification and
Go's ``debug/buildinfo`` lay them out (a real binary's: tests/integration/test_stack_images.py).
"""

from __future__ import annotations

import hashlib
import struct

import pytest

from layersched.core.errors import InputError
from layersched.images.binary import GoModule, elf_facts, go_build_info
from tests.fixtures.gobinary import (
    EM_AARCH64,
    EM_X86_64,
    PT_DYNAMIC,
    PT_INTERP,
    PT_LOAD,
    buildinfo_blob,
    elf_bytes,
    go_binary,
)


@pytest.mark.parametrize(
    ("machine", "types", "arch", "static"),
    [
        # CGO_ENABLED=0: loadable segments only
        (EM_X86_64, [PT_LOAD, PT_LOAD], "amd64", True),
        (EM_AARCH64, [PT_LOAD], "arm64", True),
        # cgo: a loader (PT_INTERP) and a dynamic section
        (EM_X86_64, [PT_INTERP, PT_LOAD, PT_DYNAMIC], "amd64", False),
        # a static-pie would still carry PT_DYNAMIC: the image has no loader for it either
        (EM_AARCH64, [PT_LOAD, PT_DYNAMIC], "arm64", False),
        # RISC-V (243): no image of ours; named by number
        (243, [PT_LOAD], "ELF machine 243", True),
    ],
    ids=["amd64-static", "arm64-static", "amd64-cgo", "arm64-static-pie", "riscv"],
)
def test_elf_machine_and_linkage(machine: int, types: list[int], arch: str, static: bool) -> None:
    facts = elf_facts(elf_bytes(machine, types), "bin")
    assert (facts.machine, facts.static) == (arch, static)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"#!/bin/sh\necho hi\n" + b"\0" * 64, "bin: not an ELF executable"),
        # EI_CLASS 1: 32-bit
        (b"\x7fELF\x01\x01" + b"\0" * 64, "32-bit or big-endian"),
        # a program header table past the end of the file
        (elf_bytes(EM_X86_64, [PT_LOAD])[:66], "program headers run past the end"),
    ],
    ids=["script", "elf32", "truncated"],
)
def test_what_is_no_64_bit_elf_is_named(data: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        elf_facts(data, "bin")


MODINFO = (
    "path\tlayersched.io/kube-scheduler/cmd/kube-scheduler\n"
    "mod\tlayersched.io/kube-scheduler\t(devel)\t\n"
    "dep\tgithub.com/beorn7/perks\tv1.0.1\th1:perks=\n"
    "dep\tk8s.io/kubernetes\tv1.37.2\n"
    "=>\tk8s.io/kubernetes\tv1.35.4\th1:k135=\n"
    "build\t-trimpath=true\n"
    "build\tCGO_ENABLED=0\n"
    "build\tGOARCH=arm64\n"
    "build\tGOOS=linux\n"
)


def test_build_info_is_read_as_go_version_m_prints_it() -> None:
    info = go_build_info(go_binary(EM_AARCH64, "go1.26.8", MODINFO), "bin")
    assert info.go_version == "go1.26.8"
    assert info.path == "layersched.io/kube-scheduler/cmd/kube-scheduler"
    assert info.main == GoModule("layersched.io/kube-scheduler", "(devel)", "")
    # a replaced module is the replacement: what was compiled
    assert info.dep("k8s.io/kubernetes") == GoModule("k8s.io/kubernetes", "v1.35.4", "h1:k135=")
    assert info.setting("GOARCH") == "arm64" and info.setting("CGO_ENABLED") == "0"
    assert info.setting("-ldflags") is None
    # one digest over every module's "path version checksum" line, sorted
    lines = "github.com/beorn7/perks v1.0.1 h1:perks=\nk8s.io/kubernetes v1.35.4 h1:k135=\n"
    assert info.deps_sha256 == f"sha256:{hashlib.sha256(lines.encode()).hexdigest()}"


def test_the_build_info_is_found_on_its_16_byte_boundary_only() -> None:
    # the magic also occurs off the boundary (a string in the data): only 16 * k counts
    decoy = b"x\xff Go buildinf:\x08\x02"
    prefix = decoy + b"\0" * (32 - len(decoy))
    data = prefix + buildinfo_blob("go1.26.8", MODINFO)
    assert go_build_info(data, "bin").go_version == "go1.26.8"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\0" * 128, "no Go build info"),
        # flags without the inline-strings bit: a toolchain before Go 1.18
        (b"\xff Go buildinf:" + struct.pack("<BB", 8, 0) + b"\0" * 16, "before Go 1.18"),
        # a length past the end
        (b"\xff Go buildinf:" + struct.pack("<BB", 8, 2) + b"\0" * 16 + b"\x7f", "cut short"),
    ],
    ids=["absent", "old-go", "truncated"],
)
def test_missing_or_old_build_info_is_named(data: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        go_build_info(data, "bin")
