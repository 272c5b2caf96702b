"""Who already listens on a testbed's addresses, before ``up`` starts anything there.

A testbed's daemons bind the bridge address ``NET_BASE.1`` (API server, etcd, registry,
schedulers, extender). A testbed left running by a run that was killed, or another with
the same net base, holds those ports; bringing a second one up there fails late and
obscurely (its kubectl meets the other API server: "certificate signed by unknown
authority"). :func:`foreign_listeners` finds them from ``/proc``: the TCP sockets
listening on the address, each with the process that holds it, and whether that process
belongs to this state dir (its command line names it: then ``up`` adopts it).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: ``/proc/net/tcp``'s state of a listening socket.
_LISTEN = "0A"
#: Characters of a foreign process's command line quoted in an error.
MAX_COMMAND_CHARS = 160


@dataclass(frozen=True, slots=True)
class Listener:
    """A process listening on ``address:port``."""

    port: int
    pid: int
    command: str


def _listening_inodes(address: str, proc: Path) -> dict[int, int]:
    """``{socket inode: port}`` of the IPv4 TCP sockets listening on ``address``."""
    # /proc/net/tcp writes the address as the 32-bit value in host byte order, in hex
    wanted = socket.inet_aton(address)[::-1].hex().upper()
    found: dict[int, int] = {}
    try:
        lines = (proc / "net" / "tcp").read_text().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        host, _, port = fields[1].partition(":")
        if host == wanted:
            found[int(fields[9])] = int(port, 16)
    return found


def _socket_owners(inodes: dict[int, int], proc: Path) -> Iterator[tuple[int, int]]:
    """``(pid, port)`` for every process holding one of ``inodes``."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target.startswith("socket:[") and (inode := int(target[8:-1])) in inodes:
                yield int(entry.name), inodes[inode]


def _command(pid: int, proc: Path) -> str:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def foreign_listeners(address: str, state_dir: Path, proc: Path = Path("/proc")) -> list[Listener]:
    """The processes listening on ``address`` whose command line does not name
    ``state_dir`` (this testbed's own daemons do: ``up`` adopts them), by port."""
    inodes = _listening_inodes(address, proc)
    if not inodes:
        return []
    ours = str(state_dir)
    found = {}
    for pid, port in _socket_owners(inodes, proc):
        command = _command(pid, proc)
        if ours not in command:
            found[port] = Listener(port, pid, command[:MAX_COMMAND_CHARS])
    return [found[port] for port in sorted(found)]
