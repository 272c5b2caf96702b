#!/usr/bin/python3 -I
"""Pin new namespaces to files: the testbed's stand-in for CRI-O's ``pinns`` helper.

CRI-O creates a pod's IPC, UTS and network namespaces by running ``pinns_path`` with
``-d DIR -f NAME`` and one ``--ipc``, ``--uts`` or ``--net`` per namespace (``=host``:
pin the caller's own namespace instead of a new one), plus ``-s KEY=VALUE`` per pod
sysctl. Upstream's pinns is C from CRI-O's repository, which this project never compiles
(only Go modules come through the module proxy, and Debian has no CRI-O package), so
this program does the same with the standard library: it unshares the asked namespaces
in its own (single-threaded) process, writes the sysctls into them, and bind-mounts
``/proc/self/ns/TYPE`` onto ``DIR/TYPEns/NAME`` (created empty first), where CRI-O
reads them back. The mounts keep the namespaces alive after this process exits.

User and mount namespaces (pods with ``hostUsers: false``, or a CRI-O configured to pin
its mount namespace) need a second process and ID mappings: they are refused with a
message, and the testbed never asks for them. Only sysctls that belong to a namespace
pinned here are accepted (``net.*`` with ``--net``; ``kernel.shm*``, ``kernel.msg*``,
``kernel.sem`` and ``fs.mqueue.*`` with ``--ipc``; ``kernel.hostname`` and
``kernel.domainname`` with ``--uts``): any other would change the host.

The testbed installs a root-owned copy outside the checkout and runs it as
``/usr/bin/python3 -I`` (this file's first line): CRI-O runs it as root.

Exit status 0 when every namespace is pinned, 1 with the reason on stderr otherwise
(what CRI-O logs as "failed to pin namespaces"). Linux and root only.

    pinns.py -d /var/run/crio/ns -f 3f2c… --ipc --uts --net -s net.ipv4.ip_forward=1
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: From <sched.h> and <sys/mount.h>.
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
#: The namespaces this stand-in pins, in the order upstream's pinns binds them, with the
#: clone flag that makes a new one.
NAMESPACES = {"uts": CLONE_NEWUTS, "ipc": CLONE_NEWIPC, "net": CLONE_NEWNET}
#: Asked for with ``--NAME[=host]``; refused (see the docstring).
REFUSED = ("user", "cgroup", "mnt")
HOST = "host"
#: Which pinned namespace a sysctl lives in: key prefixes (``net.``) and exact keys.
SYSCTL_NAMESPACE_PREFIXES = {
    "net.": "net",
    "kernel.shm": "ipc",
    "kernel.msg": "ipc",
    "fs.mqueue.": "ipc",
}
SYSCTL_NAMESPACE_KEYS = {
    "kernel.sem": "ipc",
    "kernel.hostname": "uts",
    "kernel.domainname": "uts",
}
PROC_SYS = Path("/proc/sys")
PROC_SELF_NS = Path("/proc/self/ns")


class PinError(Exception):
    """What went wrong, said for CRI-O's log."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pinns", description=__doc__.split("\n\n")[0])
    parser.add_argument("-d", "--dir", required=True, help="where TYPEns/NAME are created")
    parser.add_argument("-f", "--filename", required=True, help="NAME of every pinned file")
    parser.add_argument("-s", "--sysctl", action="append", default=[], metavar="KEY=VALUE")
    for name in (*NAMESPACES, *REFUSED):
        parser.add_argument(f"--{name}", nargs="?", const="", default=None, metavar=HOST)
    parser.add_argument("--uid-mapping", default=None)
    parser.add_argument("--gid-mapping", default=None)
    return parser.parse_args(argv)


def sysctl_namespace(key: str) -> str | None:
    """The namespace sysctl ``key`` belongs to, or None when it is the host's."""
    if key in SYSCTL_NAMESPACE_KEYS:
        return SYSCTL_NAMESPACE_KEYS[key]
    for prefix, namespace in SYSCTL_NAMESPACE_PREFIXES.items():
        if key.startswith(prefix):
            return namespace
    return None


def parse_sysctls(items: Sequence[str], unshared: set[str]) -> list[tuple[str, str]]:
    """``KEY=VALUE`` pairs, each checked to live in a namespace unshared here."""
    sysctls = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or "/" in key or ".." in key:
            raise PinError(f"sysctl {item!r}: expected KEY=VALUE, e.g. net.ipv4.ip_forward=1")
        namespace = sysctl_namespace(key)
        if namespace is None or namespace not in unshared:
            where = f"the {namespace} namespace, which is not new here" if namespace else "the host"
            raise PinError(f"sysctl {key}: it would change {where}; refused")
        sysctls.append((key, value))
    return sysctls


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(result: int, doing: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise PinError(f"{doing}: {os.strerror(errno)} (errno {errno})")


def pin(args: argparse.Namespace) -> list[Path]:
    """Unshare, apply the sysctls, bind the namespaces; the files pinned."""
    for name in REFUSED:
        if getattr(args, name) is not None:
            raise PinError(
                f"--{name}: this pinns stand-in pins only {', '.join(NAMESPACES)} namespaces "
                "(run the testbed's pods with host users)"
            )
    if args.uid_mapping is not None or args.gid_mapping is not None:
        raise PinError("ID mappings need a user namespace, which this pinns does not pin")
    asked = {name: getattr(args, name) for name in NAMESPACES if getattr(args, name) is not None}
    if not asked:
        raise PinError("no namespace to pin: give --ipc, --uts or --net")
    for name, value in asked.items():
        if value not in ("", HOST):
            raise PinError(f"--{name}={value}: the only value is {HOST}")
    unshared = {name for name, value in asked.items() if value != HOST}
    sysctls = parse_sysctls(args.sysctl, unshared)
    libc = _libc()
    flags = 0
    for name in unshared:
        flags |= NAMESPACES[name]
    if flags:
        _check(libc.unshare(flags), f"unshare({', '.join(sorted(unshared))})")
    for key, value in sysctls:
        path = PROC_SYS / key.replace(".", "/")
        try:
            path.write_text(value)
        except OSError as err:
            raise PinError(f"sysctl {key}={value}: {err.strerror}") from err
    pinned = []
    for name in NAMESPACES:
        if name not in asked:
            continue
        directory = Path(args.dir) / f"{name}ns"
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / args.filename
        if target.parent != directory:
            raise PinError(f"--filename {args.filename!r}: must be a plain file name")
        target.touch(mode=0o000, exist_ok=True)
        source = PROC_SELF_NS / name
        _check(
            libc.mount(str(source).encode(), str(target).encode(), None, MS_BIND, None),
            f"bind-mounting {source} on {target}",
        )
        pinned.append(target)
    return pinned


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        pinned = pin(args)
    except PinError as err:
        print(f"pinns: {err}", file=sys.stderr)
        return 1
    print(" ".join(str(path) for path in pinned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
