"""The scenario images' idle program: well-formed ELF, and it really runs and stops on signals.

Running it takes nothing outside the test but the kernel: the bytes are
written to a temporary file and executed (Linux on x86-64 only).
"""

from __future__ import annotations

import os
import platform
import signal
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tenacity

from layersched.core.errors import InputError
from layersched.core.manifest import Platform, sha256_digest
from layersched_harness.testbed.idle_program import LOAD_ADDRESS, idle_program
from tests.fixtures import prereq

# Pinned: the program is a pure function of this module, so every machine builds these bytes.
IDLE_PROGRAM_BYTES = 232
IDLE_PROGRAM_DIGEST = "sha256:0a66bc3cdc41276378bd1cf24f9ce78c59100e57e29cfbd36b8b301811021230"
#: The handlers are installed by the program's first two syscalls: microseconds after exec.
HANDLERS_TIMEOUT_S = 5.0
HANDLERS_POLL_S = 0.01
#: How long the program must stay up on its own.
STAYS_UP_S = 0.3
#: The handler exits at once; a second allows for a loaded machine.
EXIT_TIMEOUT_S = 1.0
EXIT_OK = 0


def test_elf_headers() -> None:
    # ELF64, little-endian, ET_EXEC for x86-64; entry right after the 64+56 header bytes;
    # one PT_LOAD, read+execute, mapping the whole file at LOAD_ADDRESS.
    program = idle_program()
    assert program[:7] == b"\x7fELF\x02\x01\x01"
    e_type, e_machine, _, e_entry, e_phoff = struct.unpack_from("<HHIQQ", program, 16)
    assert (e_type, e_machine, e_entry, e_phoff) == (2, 0x3E, LOAD_ADDRESS + 64 + 56, 64)
    p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, p_align = struct.unpack_from(
        "<IIQQQQQQ", program, 64
    )
    assert (p_type, p_flags, p_offset, p_vaddr) == (1, 0b101, 0, LOAD_ADDRESS)
    assert p_filesz == p_memsz == len(program) == IDLE_PROGRAM_BYTES
    assert p_align == 0x1000


def test_bytes_are_pinned() -> None:
    # No compiler, no randomness: the same 232 bytes on every machine and every build.
    assert idle_program() == idle_program()
    assert sha256_digest(idle_program()) == IDLE_PROGRAM_DIGEST


@pytest.mark.parametrize(
    "wanted",
    ["linux/arm64", "linux/arm/v7", "windows/amd64"],
    ids=["arm64", "armv7", "windows"],
)
def test_other_platforms_are_refused(wanted: str) -> None:
    with pytest.raises(InputError, match="only linux/amd64"):
        idle_program(Platform.parse(wanted))


@pytest.fixture
def program_path(tmp_path: Path) -> Path:
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        prereq.unavailable(
            f"the program is linux/amd64 code (this is {sys.platform}/{platform.machine()})"
        )
    path = tmp_path / "layersched-idle"
    path.write_bytes(idle_program())
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def running(program_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([str(program_path)])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _caught_signals(pid: int) -> int:
    """The ``SigCgt`` mask in /proc/PID/status: bit N-1 set when signal N has a handler."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"/proc/{pid}/status has no SigCgt line")


@tenacity.retry(
    stop=tenacity.stop_after_delay(HANDLERS_TIMEOUT_S),
    wait=tenacity.wait_fixed(HANDLERS_POLL_S),
    reraise=True,
)
def assert_handlers_installed(pid: int) -> None:
    # Exactly SIGINT (2) and SIGTERM (15) are caught: bits 1 and 14.
    assert _caught_signals(pid) == (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_runs_until_signalled_then_exits_0(
    running: subprocess.Popen[bytes], signo: signal.Signals
) -> None:
    # It installs both handlers, stays up (pause loop), and exits 0 from the handler
    # (a default-action death would be returncode -signo).
    assert_handlers_installed(running.pid)
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=STAYS_UP_S)
    os.kill(running.pid, signo)
    assert running.wait(timeout=EXIT_TIMEOUT_S) == EXIT_OK


def test_survives_other_harmless_signals(running: subprocess.Popen[bytes]) -> None:
    # SIGCHLD's default action is to ignore it: pause() returns, the loop pauses again.
    assert_handlers_installed(running.pid)
    os.kill(running.pid, signal.SIGCHLD)
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=STAYS_UP_S)
