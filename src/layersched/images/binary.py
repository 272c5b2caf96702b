"""What a Go binary says about itself: its ELF header and the build info Go embeds.

The kube-scheduler images package a binary compiled elsewhere (``make kubernetes``, or
cross-compiled for another architecture), so the builder reads from the file itself what
it is, rather than trusting a path: the ELF machine and whether it is static
(:func:`elf_facts`: an arm64 image never carries an amd64 binary, and a binary that needs
a dynamic loader is refused, as the image has none), and the build info the Go toolchain
writes into every binary (:func:`go_build_info`: the Go version, the build settings,
every module linked with its version and checksum; what ``go version -m`` prints), which
the image's labels record.

Pure: bytes in, facts out.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from layersched.core.errors import InputError

_ELF_MAGIC = b"\x7fELF"
_ELF_CLASS64 = 2
_ELF_LITTLE_ENDIAN = 1
#: ``e_machine`` of the architectures the images are built for (the ELF specification's
#: numbers), by Go's name for them.
ELF_MACHINES: Mapping[int, str] = {62: "amd64", 183: "arm64"}
#: Program header types: a dynamic section, and the dynamic loader's path.
_PT_DYNAMIC = 2
_PT_INTERP = 3
_ELF64_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_ELF64_PHDR_TYPE = struct.Struct("<I")

#: Go's build info: a 32-byte header (magic, pointer size, flags) on a 16-byte boundary of
#: the data, then (flags bit 2, every Go since 1.18) the Go version and the module info,
#: each a varint length and the bytes; the module info is framed by 16-byte sentinels.
_BUILDINFO_MAGIC = b"\xff Go buildinf:"
_BUILDINFO_HEADER_BYTES = 32
_BUILDINFO_ALIGN = 16
_BUILDINFO_FLAGS_OFFSET = 15
_BUILDINFO_INLINE_STRINGS = 0x2
_MODINFO_SENTINEL_BYTES = 16
_VARINT_MORE = 0x80
_VARINT_BITS = 7


@dataclass(frozen=True, slots=True)
class ElfFacts:
    """What an ELF header says: the machine (Go's name), and whether it is static."""

    machine: str
    static: bool


def elf_facts(data: bytes, what: str) -> ElfFacts:
    """The machine and linkage of a 64-bit little-endian ELF file (``what`` names it in
    errors); static means no dynamic section and no loader (``PT_INTERP``)."""
    if len(data) < _ELF64_HEADER.size or data[:4] != _ELF_MAGIC:
        raise InputError(f"{what}: not an ELF executable (no ELF header): give a Linux binary")
    if data[4] != _ELF_CLASS64 or data[5] != _ELF_LITTLE_ENDIAN:
        raise InputError(
            f"{what}: a 32-bit or big-endian ELF file; the images are built for "
            f"{' and '.join(sorted(set(ELF_MACHINES.values())))} (64-bit little-endian)"
        )
    fields = _ELF64_HEADER.unpack_from(data)
    machine, phoff, phentsize, phnum = fields[2], fields[5], fields[9], fields[10]
    types = []
    for index in range(phnum):
        offset = phoff + index * phentsize
        if offset + _ELF64_PHDR_TYPE.size > len(data):
            raise InputError(f"{what}: its program headers run past the end of the file")
        types.append(_ELF64_PHDR_TYPE.unpack_from(data, offset)[0])
    static = _PT_INTERP not in types and _PT_DYNAMIC not in types
    return ElfFacts(ELF_MACHINES.get(machine, f"ELF machine {machine}"), static)


@dataclass(frozen=True, slots=True)
class GoModule:
    """A module linked into the binary: its path, version and go.sum checksum (``h1:…``)."""

    path: str
    version: str
    checksum: str

    def line(self) -> str:
        return f"{self.path} {self.version} {self.checksum}".rstrip()


@dataclass(frozen=True, slots=True)
class GoBuildInfo:
    """The build info of a Go binary, as ``go version -m`` prints it."""

    go_version: str
    #: The main package's import path.
    path: str
    main: GoModule
    #: Every module linked in, after ``replace`` directives (the version compiled).
    deps: tuple[GoModule, ...]
    #: ``-trimpath``, ``-ldflags``, ``CGO_ENABLED``, ``GOARCH``, ``GOOS``... in order.
    settings: tuple[tuple[str, str], ...]

    def setting(self, key: str) -> str | None:
        return next((value for name, value in self.settings if name == key), None)

    def dep(self, path: str) -> GoModule | None:
        return next((module for module in self.deps if module.path == path), None)

    @property
    def deps_sha256(self) -> str:
        """``sha256:`` of every linked module's ``path version checksum`` line, sorted, each
        ending in a newline: one digest for all the module sums that went in."""
        text = "".join(f"{line}\n" for line in sorted(module.line() for module in self.deps))
        return f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"


def _uvarint(data: bytes, offset: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while offset < len(data):
        byte = data[offset]
        offset += 1
        value |= (byte & ~_VARINT_MORE) << shift
        if not byte & _VARINT_MORE:
            return value, offset
        shift += _VARINT_BITS
    raise InputError(f"{what}: its Go build info is cut short")


def _bytes(data: bytes, offset: int, what: str) -> tuple[bytes, int]:
    length, offset = _uvarint(data, offset, what)
    if offset + length > len(data):
        raise InputError(f"{what}: its Go build info is cut short")
    return data[offset : offset + length], offset + length


def _module(words: list[str]) -> GoModule:
    path, version, checksum = [*words, "", "", ""][1:4]
    return GoModule(path, version, checksum)


def go_build_info(data: bytes, what: str) -> GoBuildInfo:
    """The build info in a Go binary's bytes (``what`` names it in errors)."""
    start = data.find(_BUILDINFO_MAGIC)
    while start != -1 and start % _BUILDINFO_ALIGN:
        start = data.find(_BUILDINFO_MAGIC, start + 1)
    if start == -1:
        raise InputError(f"{what}: no Go build info: not a binary the go command built")
    if not data[start + _BUILDINFO_FLAGS_OFFSET] & _BUILDINFO_INLINE_STRINGS:
        raise InputError(f"{what}: Go build info of a toolchain before Go 1.18: rebuild it")
    version_bytes, offset = _bytes(data, start + _BUILDINFO_HEADER_BYTES, what)
    framed, _ = _bytes(data, offset, what)
    # the module info is framed by 16-byte sentinels when it ends in a newline
    # (debug/buildinfo's own test)
    end = len(framed) - _MODINFO_SENTINEL_BYTES - 1
    if len(framed) > 2 * _MODINFO_SENTINEL_BYTES and framed[end : end + 1] == b"\n":
        framed = framed[_MODINFO_SENTINEL_BYTES:-_MODINFO_SENTINEL_BYTES]
    go_version = version_bytes.decode("utf-8", "replace")
    modinfo = framed.decode("utf-8", "replace")
    path = ""
    main = GoModule("", "", "")
    deps: list[GoModule] = []
    settings: list[tuple[str, str]] = []
    for line in modinfo.splitlines():
        words = line.split("\t")
        kind = words[0]
        if kind == "path" and len(words) > 1:
            path = words[1]
        elif kind == "mod":
            main = _module(words)
        elif kind == "dep":
            deps.append(_module(words))
        elif kind == "=>" and deps:
            deps[-1] = _module(words)  # the replacement is what was compiled
        elif kind == "build" and len(words) > 1:
            key, _, value = words[1].partition("=")
            settings.append((key, value))
    if not go_version or not path:
        raise InputError(f"{what}: its Go build info names no Go version or main package")
    return GoBuildInfo(go_version, path, main, tuple(deps), tuple(settings))
