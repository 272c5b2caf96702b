"""A tiny static Linux program that idles until SIGTERM or SIGINT, as raw ELF bytes.

The scenario images must be *runnable* (kubelets start their pods), yet
reproducible without a compiler: :func:`idle_program` assembles a complete
x86-64 ELF executable from the instruction bytes listed below, so every build
on every machine yields the same 232 bytes.

What it does, as the C it stands for::

    static void on_signal(int sig) { exit_group(0); }
    static const struct kernel_sigaction act = {on_signal, SA_RESTORER, restorer, 0};
    void _start(void) {
        rt_sigaction(SIGTERM, &act, NULL, 8);
        rt_sigaction(SIGINT, &act, NULL, 8);
        for (;;) pause();
    }

A handler is required: PID 1 of a container ignores every signal it has no
handler for, so without one a pod deletion waits for the grace period and
SIGKILL. The handler exits at once. x86-64 kernels refuse to deliver a signal
to a handler registered without ``SA_RESTORER`` (``x64_setup_rt_frame`` returns
``-EFAULT`` and the process dies of SIGSEGV), so the program registers the
usual ``rt_sigreturn`` restorer even though its handler never returns.

File layout (one read+execute ``PT_LOAD`` segment maps the whole 232-byte file
at ``LOAD_ADDRESS``), with the code as ``objdump -D -b binary -m i386:x86-64``
disassembles it::

    0x400000  ELF64 header (64 bytes)
    0x400040  program header (56 bytes)
    0x400078  b8 0d 00 00 00     mov eax, 13         _start: rt_sigaction
    0x40007d  bf 0f 00 00 00     mov edi, 15           SIGTERM
    0x400082  be c8 00 40 00     mov esi, 0x4000c8     &act
    0x400087  31 d2              xor edx, edx          oldact = NULL
    0x400089  41 ba 08 00 00 00  mov r10d, 8           sizeof(sigset_t)
    0x40008f  0f 05              syscall
    0x400091  b8 0d 00 00 00     mov eax, 13         rt_sigaction
    0x400096  bf 02 00 00 00     mov edi, 2            SIGINT
    0x40009b  be c8 00 40 00     mov esi, 0x4000c8     (the same act)
    0x4000a0  31 d2              xor edx, edx
    0x4000a2  41 ba 08 00 00 00  mov r10d, 8
    0x4000a8  0f 05              syscall
    0x4000aa  b8 22 00 00 00     mov eax, 34         loop: pause
    0x4000af  0f 05              syscall
    0x4000b1  eb f7              jmp 0x4000aa          (-9: back to loop)
    0x4000b3  b8 e7 00 00 00     mov eax, 231        handler: exit_group
    0x4000b8  31 ff              xor edi, edi          status 0
    0x4000ba  0f 05              syscall
    0x4000bc  b8 0f 00 00 00     mov eax, 15         restorer: rt_sigreturn
    0x4000c1  0f 05              syscall
    0x4000c3  00 ×5                                  padding to 8 bytes
    0x4000c8  struct kernel_sigaction {0x4000b3, SA_RESTORER, 0x4000bc, 0}

Only ``linux/amd64`` is implemented (the testbed's platform); any other
platform raises :class:`~layersched.core.errors.InputError`.
"""

from __future__ import annotations

import signal
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from layersched.core.errors import InputError
from layersched.core.manifest import DEFAULT_PLATFORM, Platform

#: The one platform the program is written for.
SUPPORTED_PLATFORM = Platform("linux", "amd64")
#: Where the segment is mapped: the conventional non-PIE base, far above vm.mmap_min_addr.
LOAD_ADDRESS = 0x400000
#: The segment's alignment: the x86-64 page size.
PAGE_BYTES = 0x1000

# ELF constants (System V gABI and the x86-64 psABI).
_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
_EV_CURRENT = 1
_ELFOSABI_SYSV = 0
_ET_EXEC = 2
_EM_X86_64 = 0x3E
_PT_LOAD = 1
_PF_X = 0x1
_PF_R = 0x4
_EHDR_BYTES = 64
_PHDR_BYTES = 56
_CODE_OFFSET = _EHDR_BYTES + _PHDR_BYTES

# x86-64 Linux syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl).
_SYS_RT_SIGACTION = 13
_SYS_RT_SIGRETURN = 15
_SYS_PAUSE = 34
_SYS_EXIT_GROUP = 231
#: ``sa_flags``: the handler returns through ``sa_restorer`` (mandatory on x86-64).
_SA_RESTORER = 0x04000000
#: ``sizeof(sigset_t)`` as the kernel counts it: 64 signals, 8 bytes.
_SIGSET_BYTES = 8
_KERNEL_SIGACTION_BYTES = 32
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_EXIT_STATUS_ON_SIGNAL = 0


@dataclass(frozen=True, slots=True)
class Instruction:
    """One machine instruction: its bytes and the assembly they encode."""

    code: bytes
    asm: str


def _mov_imm32(opcode: int, register: str, value: int) -> Instruction:
    # B8+rd id: MOV r32, imm32. Writing a 32-bit register zero-extends into the 64-bit one.
    return Instruction(bytes([opcode]) + struct.pack("<I", value), f"mov {register}, {value:#x}")


def _mov_eax(value: int) -> Instruction:
    return _mov_imm32(0xB8, "eax", value)  # B8 = B8+0 (eax)


def _mov_edi(value: int) -> Instruction:
    return _mov_imm32(0xBF, "edi", value)  # BF = B8+7 (edi): 1st syscall argument


def _mov_esi(value: int) -> Instruction:
    return _mov_imm32(0xBE, "esi", value)  # BE = B8+6 (esi): 2nd syscall argument


def _mov_r10d(value: int) -> Instruction:
    # 41 = REX.B (selects r8..r15), BA = B8+2: r10d, the 4th syscall argument.
    return Instruction(b"\x41\xba" + struct.pack("<I", value), f"mov r10d, {value:#x}")


# 31 /r: XOR r/m32, r32; ModRM 0xD2 = 11 010 010 (register direct, edx, edx).
_XOR_EDX_EDX = Instruction(b"\x31\xd2", "xor edx, edx")
# ModRM 0xFF = 11 111 111 (register direct, edi, edi).
_XOR_EDI_EDI = Instruction(b"\x31\xff", "xor edi, edi")
# 0F 05: SYSCALL (number in rax, arguments in rdi, rsi, rdx, r10; clobbers rcx, r11).
_SYSCALL = Instruction(b"\x0f\x05", "syscall")


def _jmp_rel8(displacement: int) -> Instruction:
    # EB cb: JMP rel8, relative to the end of this 2-byte instruction.
    return Instruction(b"\xeb" + struct.pack("<b", displacement), f"jmp {displacement:+d}")


def _assemble(instructions: Sequence[Instruction]) -> bytes:
    return b"".join(i.code for i in instructions)


def _sigaction_call(signo: int, act_address: int) -> list[Instruction]:
    """``rt_sigaction(signo, act, NULL, sizeof(sigset_t))``: 25 bytes."""
    return [
        _mov_eax(_SYS_RT_SIGACTION),
        _mov_edi(signo),
        _mov_esi(act_address),  # const struct kernel_sigaction *act
        _XOR_EDX_EDX,  # struct kernel_sigaction *oldact = NULL
        _mov_r10d(_SIGSET_BYTES),
        _SYSCALL,
    ]


def _pause_loop() -> list[Instruction]:
    """``for (;;) pause();``: 9 bytes, the jump going back to its own start."""
    body = [_mov_eax(_SYS_PAUSE), _SYSCALL]
    jump_bytes = len(_jmp_rel8(0).code)
    return [*body, _jmp_rel8(-(len(_assemble(body)) + jump_bytes))]


def _handler() -> list[Instruction]:
    """``exit_group(0)``: the signal handler, which never returns."""
    return [_mov_eax(_SYS_EXIT_GROUP), _XOR_EDI_EDI, _SYSCALL]


def _restorer() -> list[Instruction]:
    """``rt_sigreturn()``: what a returning handler would land on (never reached here)."""
    return [_mov_eax(_SYS_RT_SIGRETURN), _SYSCALL]


def _code(act_address: int) -> tuple[list[Instruction], int, int]:
    """The program's instructions and the offsets of the handler and the restorer in them."""
    start: list[Instruction] = []
    for signo in _HANDLED_SIGNALS:
        start += _sigaction_call(int(signo), act_address)
    start += _pause_loop()
    handler_offset = len(_assemble(start))
    handler = _handler()
    restorer_offset = handler_offset + len(_assemble(handler))
    return [*start, *handler, *_restorer()], handler_offset, restorer_offset


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _check_platform(platform: Platform) -> None:
    if platform.normalized() != SUPPORTED_PLATFORM:
        raise InputError(
            f"idle program for {platform.os}/{platform.architecture}: only "
            f"{SUPPORTED_PLATFORM.os}/{SUPPORTED_PLATFORM.architecture} machine code is "
            "written; build the scenario images for linux/amd64 (the testbed's platform)"
        )


def idle_program(platform: Platform = DEFAULT_PLATFORM) -> bytes:
    """A static ELF executable for ``platform`` that sleeps until SIGTERM/SIGINT, then exits 0.

    Only ``linux/amd64`` is supported; any other platform raises InputError.
    """
    _check_platform(platform)
    code_bytes = len(_assemble(_code(0)[0]))
    act_offset = _align(_CODE_OFFSET + code_bytes, struct.calcsize("<Q"))
    act_address = LOAD_ADDRESS + act_offset
    instructions, handler_offset, restorer_offset = _code(act_address)
    code = _assemble(instructions)
    code_address = LOAD_ADDRESS + _CODE_OFFSET
    # struct kernel_sigaction (x86-64): sa_handler, sa_flags, sa_restorer, sa_mask.
    act = struct.pack(
        "<QQQQ",
        code_address + handler_offset,
        _SA_RESTORER,
        code_address + restorer_offset,
        0,  # block no extra signals while the handler runs
    )
    assert len(act) == _KERNEL_SIGACTION_BYTES
    padding = bytes(act_offset - _CODE_OFFSET - len(code))
    file_bytes = _CODE_OFFSET + len(code) + len(padding) + len(act)
    ident = _ELF_MAGIC + bytes([_ELFCLASS64, _ELFDATA2LSB, _EV_CURRENT, _ELFOSABI_SYSV])
    ehdr = struct.pack(
        "<16sHHIQQQIHHHHHH",
        ident,  # e_ident, zero-padded to 16 bytes (EI_ABIVERSION 0)
        _ET_EXEC,  # e_type: a fixed-address executable
        _EM_X86_64,  # e_machine
        _EV_CURRENT,  # e_version
        code_address,  # e_entry: _start, right after the headers
        _EHDR_BYTES,  # e_phoff: the program header follows this header
        0,  # e_shoff: no section headers
        0,  # e_flags
        _EHDR_BYTES,  # e_ehsize
        _PHDR_BYTES,  # e_phentsize
        1,  # e_phnum
        0,  # e_shentsize
        0,  # e_shnum
        0,  # e_shstrndx
    )
    phdr = struct.pack(
        "<IIQQQQQQ",
        _PT_LOAD,  # p_type
        _PF_R | _PF_X,  # p_flags: read+execute (the sigaction struct is only read)
        0,  # p_offset: map from the start of the file
        LOAD_ADDRESS,  # p_vaddr
        LOAD_ADDRESS,  # p_paddr
        file_bytes,  # p_filesz
        file_bytes,  # p_memsz: no .bss
        PAGE_BYTES,  # p_align
    )
    program = ehdr + phdr + code + padding + act
    assert len(program) == file_bytes
    return program
