"""The pod sandbox ("pause") image, built without Docker and imported, never pulled.

kubelet and containerd start every pod with a sandbox image. On the testbed it
must already be in each node's containerd (``ctr -n k8s.io images import``),
so it never crosses the rate-limited link and never shows in the registry log.
:func:`build_pause_image` wraps a static ``pause`` binary (Kubernetes'
``build/pause/linux/pause.c`` built with ``gcc -static``) in a reproducible
single-layer image: ``/pause``, mode 0755, ``Entrypoint ["/pause"]``.
:func:`write_pause_archive` writes it as an OCI archive that the import names
exactly as asked (e.g. ``layersched.local/pause:3.2``).

The binary is checked first: an ELF executable for the image's platform with
no program interpreter, since the image holds no C library to load one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from layersched.core.errors import InputError
from layersched.core.manifest import DEFAULT_PLATFORM, Platform
from layersched.images.oci import (
    EXECUTABLE_MODE,
    BuiltImage,
    LayerFile,
    build_image,
    files_layer,
)
from layersched.images.oci_layout import write_oci_archive

#: Where the binary sits in the image, and the image's entrypoint.
PAUSE_PATH = "/pause"
#: The local testbed's sandbox image (``testbed_pause_image`` in
#: harness/playbooks/vars/testbed-local.yml, held equal by tests/unit/test_pause_image.py): every
#: node holds it, imported, so a pod of it starts with nothing to pull.
DEFAULT_PAUSE_IMAGE = "layersched.local/pause:1"

# ELF64 little-endian header fields (System V gABI).
_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
_ET_EXEC = 2
_ET_DYN = 3
_PT_INTERP = 3
_EHDR_BYTES = 64
_PHDR_TYPE = struct.Struct("<I")
#: e_type, e_machine at offset 16; e_phoff at 32; e_phentsize, e_phnum at 54.
_EHDR_TYPE_MACHINE = struct.Struct("<HH")
_EHDR_PHOFF = struct.Struct("<Q")
_EHDR_PHENT = struct.Struct("<HH")
#: e_machine by OCI architecture.
_ELF_MACHINES = {"amd64": 0x3E, "arm64": 0xB7}


@dataclass(frozen=True, slots=True)
class PauseArchive:
    """What :func:`write_pause_archive` did: the image, its name and whether the file changed."""

    image: BuiltImage
    name: str
    path: Path
    changed: bool


def check_static_executable(binary: bytes, platform: Platform, where: str) -> None:
    """Raise InputError unless ``binary`` is a static ELF64 executable for ``platform``."""
    machine = _ELF_MACHINES.get(platform.architecture)
    if platform.os != "linux" or machine is None:
        raise InputError(
            f"{where}: no pause image for {platform.os}/{platform.architecture}; "
            f"the supported platforms are linux/{', linux/'.join(sorted(_ELF_MACHINES))}"
        )
    if (
        len(binary) < _EHDR_BYTES
        or binary[:4] != _ELF_MAGIC
        or binary[4] != _ELFCLASS64
        or binary[5] != _ELFDATA2LSB
    ):
        raise InputError(
            f"{where}: not a 64-bit little-endian ELF executable; build pause.c with "
            "`gcc -static -O2 -o pause pause.c`"
        )
    e_type, e_machine = _EHDR_TYPE_MACHINE.unpack_from(binary, 16)
    if e_type not in (_ET_EXEC, _ET_DYN) or e_machine != machine:
        raise InputError(
            f"{where}: ELF type {e_type} for machine {e_machine:#x}, but a "
            f"linux/{platform.architecture} executable (machine {machine:#x}) is needed; "
            "build it on (or cross-compile it for) that platform"
        )
    (phoff,) = _EHDR_PHOFF.unpack_from(binary, 32)
    phentsize, phnum = _EHDR_PHENT.unpack_from(binary, 54)
    for index in range(phnum):
        offset = phoff + index * phentsize
        if offset + _PHDR_TYPE.size > len(binary):
            raise InputError(f"{where}: truncated ELF program headers; rebuild the binary")
        if _PHDR_TYPE.unpack_from(binary, offset)[0] == _PT_INTERP:
            raise InputError(
                f"{where}: dynamically linked (it names a program interpreter), but the pause "
                "image holds no C library; build it with `gcc -static`"
            )


def build_pause_image(
    binary: bytes, platform: Platform = DEFAULT_PLATFORM, *, where: str = "pause binary"
) -> BuiltImage:
    """A one-layer image holding ``binary`` as ``/pause`` (0755), its entrypoint.

    ``where`` names the binary in error messages (its path, say).
    """
    check_static_executable(binary, platform, where)
    layer = files_layer([LayerFile(PAUSE_PATH.lstrip("/"), binary, EXECUTABLE_MODE)])
    return build_image([layer], platform=platform, entrypoint=[PAUSE_PATH], working_dir="/")


def write_pause_archive(
    binary_path: Path, name: str, output: Path, platform: Platform = DEFAULT_PLATFORM
) -> PauseArchive:
    """Build the pause image from ``binary_path`` and write it to ``output`` as ``name``.

    Import it with ``ctr -n k8s.io images import OUTPUT``; the image is then
    listed as exactly ``name``. Writing an identical archive again leaves the
    file alone and reports ``changed=False`` (for Ansible's ``changed_when``).
    """
    try:
        binary = binary_path.read_bytes()
    except OSError as err:
        raise InputError(
            f"reading the pause binary {binary_path}: {err}; build it from Kubernetes' "
            "build/pause/linux/pause.c with `gcc -static`"
        ) from err
    image = build_pause_image(binary, platform, where=str(binary_path))
    changed = write_oci_archive(output, image, name)
    return PauseArchive(image=image, name=name, path=output, changed=changed)
