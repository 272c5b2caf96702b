#!/usr/bin/env python3
"""Start/stop a daemon of the local testbed detached from Ansible, with a pidfile.

There is no systemd here, and the daemons must outlive the playbook run.

``start`` runs ARGV in a new session (in network namespace ``--netns`` when given: only
the network namespace changes, so mounts such as the cgroup hierarchies stay visible),
stdin closed, stderr appended to ``--log`` (stdout too, unless ``--stdout-log``), each
``--path`` directory first on its PATH, and records its pid in ``--pidfile``. It then
waits until ``--ready-socket`` exists or ``--ready-tcp`` accepts a connection. Nothing
is done when the pidfile names a live, ready process whose command line contains
``--match``; a live one that is not ready (a daemon shutting down after SIGTERM) is
waited for until it is ready or gone. When the
pidfile is lost or stale but such a process still runs (the same executable, or one of
``--executable``, with ``--match`` in its command line: the same scan ``stop`` does),
it is adopted: its pid is written to the pidfile and no second daemon is started on
the same root.

``stop`` sends SIGTERM to the pidfile's process and to every process whose executable
is one of ``--executable`` and whose command line contains ``--match`` (the fallback for
lost pidfiles), waits up to ``--stop-timeout-s``, then sends SIGKILL. Zombies count as
stopped: on hosts whose PID 1 is not an init system nothing reaps orphans, and a zombie
holds no memory, sockets or mounts.

Prints one JSON object (``changed``, ``pids``) for Ansible's ``changed_when``; on
failure prints why (and the log's tail) to stderr and exits 1. Standard library only.

    local_testbed_daemon.py start --name registry --pidfile R/registry.pid \\
        --log R/registry.log --match R/config.yml --ready-tcp 10.250.50.1:5000 \\
        -- docker-registry serve R/config.yml
    local_testbed_daemon.py stop --name testbed --match /srv/tb/ --executable containerd
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: How often readiness and exit are polled; the daemons start in well under a second.
POLL_INTERVAL_S = 0.05
#: Timeout of one readiness connection attempt.
CONNECT_TIMEOUT_S = 0.5
#: Log lines quoted when a daemon dies while starting.
LOG_TAIL_LINES = 20
#: Where `ip netns add` pins named network namespaces.
NETNS_DIR = "/run/netns"
#: /proc/PID/stat states of a process that is gone but not yet reaped.
DEAD_STATES = ("Z", "X")


class DaemonError(Exception):
    """A daemon could not be started or stopped."""


def alive(pid: int) -> bool:
    """True for a running process; False for a missing or zombie one."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in DEAD_STATES


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def ancestors() -> set[int]:
    """This process and its parents: never signalled, whatever their command line."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def pidfile_pid(pidfile: Path | None, match: str) -> int | None:
    """The pidfile's pid when that process is alive and ours."""
    if pidfile is None:
        return None
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) and match in " ".join(cmdline(pid)) else None


def scan(match: str, executables: list[str]) -> set[int]:
    """Live processes running one of ``executables`` with ``match`` in their command line."""
    found, skip = set(), ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        argv = cmdline(int(entry.name))
        ours = argv and Path(argv[0]).name in executables and match in " ".join(argv)
        if ours and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


#: Lines that say why a Go program died: klog's fatal lines, a panic, a runtime fatal error.
CAUSE = re.compile(r"^(?:F\d{4} |panic: |fatal error: )")
CAUSE_LINES = 5


def tail(path: Path) -> str:
    """The log's first lines that say why the program died (a crash's goroutine dump
    buries them), then its last lines."""
    try:
        lines = path.read_text(errors="replace").splitlines(True)
    except OSError:
        return ""
    last = lines[-LOG_TAIL_LINES:]
    causes = [line for line in lines[: len(lines) - len(last)] if CAUSE.match(line)]
    head = "".join(causes[:CAUSE_LINES])
    return (f"{head}...\n" if head else "") + "".join(last)


def ready(ready_socket: Path | None, ready_tcp: str | None) -> bool:
    if ready_socket is not None and not ready_socket.exists():
        return False
    if ready_tcp:
        host, port = ready_tcp.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
                pass
        except OSError:
            return False
    return True


#: What :func:`await_ready` saw: the daemon ready, gone, or neither by the deadline.
READY, GONE, LATE = "ready", "gone", "late"


def await_ready(args: argparse.Namespace, running: Callable[[], bool]) -> str:
    """Poll until the daemon is ready (READY), stops ``running`` (GONE), or
    ``--ready-timeout-s`` passes (LATE)."""
    deadline = time.monotonic() + args.ready_timeout_s
    while True:
        if ready(args.ready_socket, args.ready_tcp):
            return READY if running() else GONE
        if not running():
            return GONE
        if time.monotonic() > deadline:
            return LATE
        time.sleep(POLL_INTERVAL_S)


def settled(pid: int, args: argparse.Namespace) -> bool:
    """Whether the running ``pid`` is (or becomes) ready; False once it has exited.

    A daemon that was just sent SIGTERM still runs while it shuts down (kube-apiserver
    drains its requests first, its port already closed): taking it for the running
    daemon left nothing to serve once it exited. So a live process that is not ready
    is waited for, up to ``--ready-timeout-s``, until it is ready or gone.
    """
    seen = await_ready(args, lambda: alive(pid))
    if seen == LATE:
        raise DaemonError(
            f"{args.name} (pid {pid}) runs but is not ready after {args.ready_timeout_s} s; "
            f"see {args.log}:\n{tail(args.log) if args.log else ''}"
        )
    return seen == READY


def start(args: argparse.Namespace) -> dict[str, object]:
    pid = pidfile_pid(args.pidfile, args.match)
    if pid is not None and settled(pid, args):
        return {"changed": False, "pids": [pid]}
    if not args.argv or args.pidfile is None or args.log is None:
        raise DaemonError("start needs --pidfile, --log and the command after --")
    running = sorted(scan(args.match, [Path(args.argv[0]).name, *args.executable]))
    if len(running) > 1:
        raise DaemonError(
            f"{args.name}: several processes {running} already run with {args.match!r}; "
            "tear the testbed down (layersched testbed down) and bring it up again"
        )
    if running and settled(running[0], args):
        args.pidfile.write_text(f"{running[0]}\n")
        return {"changed": True, "pids": running, "adopted": True}
    # nsenter switches the network namespace only. `ip netns exec` would also remount
    # /sys, hiding the cgroup hierarchies that the kubelet and runc need.
    netns = ["nsenter", f"--net={NETNS_DIR}/{args.netns}", "--"] if args.netns else []
    argv = netns + args.argv
    if args.ready_socket is not None:
        args.ready_socket.unlink(missing_ok=True)  # a stale socket would look ready
    with (
        args.log.open("ab") as log,
        (args.stdout_log or args.log).open("ab") as out,
        Path(os.devnull).open("rb") as devnull,
    ):
        env = dict(os.environ)
        if args.path:
            env["PATH"] = os.pathsep.join([*args.path, env.get("PATH", "")])
        proc = subprocess.Popen(
            argv,
            stdin=devnull,
            stdout=out,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    args.pidfile.write_text(f"{proc.pid}\n")
    seen = await_ready(args, lambda: proc.poll() is None)
    if seen == GONE:
        raise DaemonError(
            f"{args.name} exited with {proc.returncode} while starting; "
            f"see {args.log}:\n{tail(args.log)}"
        )
    if seen == LATE:
        proc.kill()
        raise DaemonError(
            f"{args.name} not ready after {args.ready_timeout_s} s (killed); "
            f"see {args.log}:\n{tail(args.log)}"
        )
    return {"changed": True, "pids": [proc.pid]}


def stop(args: argparse.Namespace) -> dict[str, object]:
    pids = scan(args.match, args.executable)
    own = pidfile_pid(args.pidfile, args.match)
    if own is not None:
        pids.add(own)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + args.stop_timeout_s
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
        if not any(alive(pid) for pid in pids):
            break
    left = sorted(pid for pid in pids if alive(pid))
    if left:
        raise DaemonError(f"{args.name}: processes {left} survived SIGKILL")
    had_pidfile = args.pidfile is not None and args.pidfile.exists()
    if had_pidfile:
        args.pidfile.unlink()
    return {"changed": bool(pids) or had_pidfile, "pids": sorted(pids)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], usage="%(prog)s {start,stop} [options] [-- ARGV...]"
    )
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--name", required=True, help="daemon name, for messages")
    parser.add_argument("--match", required=True, help="substring of our command lines")
    parser.add_argument("--pidfile", type=Path)
    parser.add_argument("--log", type=Path, help="stderr (and stdout) log")
    parser.add_argument("--stdout-log", type=Path, help="separate stdout log")
    parser.add_argument("--netns", help="network namespace to start in")
    parser.add_argument(
        "--path",
        action="append",
        default=[],
        help="a directory put first on the daemon's PATH (containerd finds its shim there)",
    )
    parser.add_argument("--ready-socket", type=Path, help="unix socket that appears when ready")
    parser.add_argument("--ready-tcp", metavar="HOST:PORT", help="accepts connections when ready")
    parser.add_argument("--ready-timeout-s", type=float, default=30.0)
    parser.add_argument("--stop-timeout-s", type=float, default=10.0)
    parser.add_argument(
        "--executable", action="append", default=[], help="basename the stop scan may signal"
    )
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.argv = argv[split + 1 :]
    try:
        result = start(args) if args.action == "start" else stop(args)
    except (DaemonError, OSError) as err:
        print(f"local_testbed_daemon {args.action} {args.name}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
