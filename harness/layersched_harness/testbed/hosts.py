"""Where a testbed's files and sockets are: this machine, or a host reached over SSH.

The cluster backends read logs from an offset, ask a node's containerd over CRI and call
the extender's HTTP port. On the local testbed those are files, unix sockets and
addresses of this machine (:class:`LocalHost`); on cloud nodes they are on other
machines (:class:`SSHHost`), reached with the OpenSSH client:

* a file's size is ``stat -c %s``, the lines after an offset ``tail -c +N``;
* a unix socket (a node's containerd) is forwarded to a local one with
  ``ssh -L LOCAL.sock:REMOTE.sock``, so the same :class:`layersched.cri.CRIClient` talks
  to it;
* a TCP port (the extender, the registry) is forwarded to ``127.0.0.1:PORT`` with
  ``ssh -L``.

Every ssh runs with ``BatchMode`` (never a password prompt), the configured key, port and
user; commands share one master connection per host (``ControlMaster``), forwards have
their own. :meth:`SSHHost.close` ends every ssh process it started.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

import msgspec
import tenacity

from layersched_harness.testbed.errors import TestbedError

#: A command over an open master connection answers in milliseconds; the first one opens
#: it (TCP, key exchange, auth): a slow uplink to a cloud region takes seconds.
SSH_COMMAND_TIMEOUT_S = 30.0
#: An unreachable host fails the TCP connect within this.
SSH_CONNECT_TIMEOUT_S = 10
#: A forward is usable once its local end accepts; ssh sets it up after auth.
FORWARD_READY_TIMEOUT_S = 20.0
FORWARD_POLL_S = 0.1
#: ssh's exit status when the connection itself failed (not the remote command).
SSH_CONNECTION_FAILED = 255
#: The master connection outlives an idle moment, not a forgotten close().
CONTROL_PERSIST_S = 60
#: ``stat`` and ``tail`` name a missing file with this (GNU coreutils, C locale).
_NO_SUCH_FILE = "No such file or directory"


def file_end(path: Path) -> int:
    """The size of ``path`` (0 if it does not exist yet): an offset to read on from."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def lines_since(path: Path, offset: int) -> list[str]:
    """The lines of ``path`` after byte ``offset`` (none if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return []


class SSHTarget(msgspec.Struct, frozen=True, kw_only=True):
    """How to log in to one host: OpenSSH's host, port, user and identity file."""

    host: str
    port: int = 22
    user: str = "root"
    key_file: str
    #: Where host keys are remembered (``accept-new``: the first key seen is trusted).
    known_hosts: str
    #: Prefix remote commands with ``sudo -n`` (a cloud image's admin user, not root).
    become: bool = False

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


class Host(Protocol):
    """Files, commands and sockets of one machine, wherever it is."""

    def file_end(self, path: str) -> int:
        """The size of ``path`` in bytes (0 if it does not exist yet)."""
        ...

    def lines_since(self, path: str, offset: int) -> list[str]:
        """The lines of ``path`` after byte ``offset`` (none if it does not exist)."""
        ...

    def run(self, argv: list[str], what: str) -> str:
        """Run ``argv`` on the host; its stdout. ``what`` names it in errors."""
        ...

    def unix_socket(self, path: str) -> str:
        """A path on this machine through which the host's unix socket ``path`` answers."""
        ...

    def tcp(self, address: str, port: int) -> str:
        """``HOST:PORT`` on this machine through which ``address:port``, as the host
        reaches it, answers."""
        ...

    def close(self) -> None:
        """End whatever was started to reach the host."""
        ...


class LocalHost:
    """This machine: files are files, sockets and addresses are reachable as they are."""

    def __str__(self) -> str:
        return "this machine"

    def file_end(self, path: str) -> int:
        return file_end(Path(path))

    def lines_since(self, path: str, offset: int) -> list[str]:
        return lines_since(Path(path), offset)

    def run(self, argv: list[str], what: str) -> str:
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=SSH_COMMAND_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise TestbedError(f"{what}: {err}") from err
        if done.returncode != 0:
            raise TestbedError(f"{what}: exit {done.returncode}: {_last_line(done.stderr)}")
        return done.stdout

    def unix_socket(self, path: str) -> str:
        return path

    def tcp(self, address: str, port: int) -> str:
        return f"{address}:{port}"

    def close(self) -> None:
        return None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class SSHHost:
    """A host reached with the OpenSSH client (``ssh``), never a password prompt."""

    def __init__(
        self, target: SSHTarget, *, command_timeout_s: float = SSH_COMMAND_TIMEOUT_S
    ) -> None:
        if shutil.which("ssh") is None:
            raise TestbedError(
                f"reaching {target} over SSH: no ssh on PATH (apt-get install openssh-client)"
            )
        self.target = target
        self.command_timeout_s = command_timeout_s
        # Unix socket paths are short (108 bytes): a directory of our own under /tmp.
        self._dir = Path(tempfile.mkdtemp(prefix="layersched-ssh-"))
        self._forwards: dict[str, tuple[subprocess.Popen[bytes], str]] = {}

    def __str__(self) -> str:
        return str(self.target)

    def _options(self) -> list[str]:
        t = self.target
        return [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={t.known_hosts}",
            "-o", "IdentitiesOnly=yes",
            "-i", t.key_file,
            "-p", str(t.port),
            "-l", t.user,
        ]  # fmt: skip

    def _control(self) -> list[str]:
        return [
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={self._dir}/master",
            "-o", f"ControlPersist={CONTROL_PERSIST_S}",
        ]  # fmt: skip

    def _exec(self, argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
        remote = (["sudo", "-n"] if self.target.become else []) + argv
        command = ["ssh", *self._options(), *self._control(), self.target.host, "--",
                   shlex.join(remote)]  # fmt: skip
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=self.command_timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise TestbedError(
                f"ssh {self.target}: {what} timed out after {self.command_timeout_s:.0f} s "
                "(SSH_COMMAND_TIMEOUT_S): is the host up and its sshd answering?"
            ) from None
        except OSError as err:
            raise TestbedError(f"ssh {self.target}: {what}: {err}") from err
        if done.returncode == SSH_CONNECTION_FAILED:
            raise TestbedError(
                f"ssh {self.target}: cannot log in for {what}: {_last_line(done.stderr)} "
                "(check the address, the port, the key and that the host is up)"
            )
        return done

    def run(self, argv: list[str], what: str) -> str:
        done = self._exec(argv, what)
        if done.returncode != 0:
            raise TestbedError(
                f"ssh {self.target}: {what}: exit {done.returncode}: {_last_line(done.stderr)}"
            )
        return done.stdout

    def file_end(self, path: str) -> int:
        done = self._exec(["stat", "-c", "%s", "--", path], f"the size of {path}")
        if done.returncode != 0:
            if _NO_SUCH_FILE in done.stderr:
                return 0
            raise TestbedError(f"ssh {self.target}: the size of {path}: {_last_line(done.stderr)}")
        try:
            return int(done.stdout.strip())
        except ValueError:
            raise TestbedError(
                f"ssh {self.target}: stat of {path} printed {done.stdout.strip()!r}, not a size"
            ) from None

    def lines_since(self, path: str, offset: int) -> list[str]:
        done = self._exec(["tail", "-c", f"+{offset + 1}", "--", path], f"reading {path}")
        if done.returncode != 0:
            if _NO_SUCH_FILE in done.stderr:
                return []
            raise TestbedError(f"ssh {self.target}: reading {path}: {_last_line(done.stderr)}")
        return done.stdout.splitlines()

    def _forward(self, key: str, spec: str, ready: str, what: str) -> None:
        """Start ``ssh -N -L SPEC`` (its own connection) and wait until ``ready`` answers."""
        command = ["ssh", *self._options(), "-o", "ControlPath=none", "-o",
                   "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes", "-N",
                   "-L", spec, self.target.host]  # fmt: skip
        log = (self._dir / f"forward-{len(self._forwards)}.log").open("wb")
        with log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
            )
        self._forwards[key] = (process, ready)

        @tenacity.retry(
            stop=tenacity.stop_after_delay(FORWARD_READY_TIMEOUT_S),
            wait=tenacity.wait_fixed(FORWARD_POLL_S),
            retry=tenacity.retry_if_exception_type(OSError),
            reraise=True,
        )
        def answers() -> None:
            if process.poll() is not None:
                return
            if ready.startswith("/"):
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.connect(ready)
            else:
                host, _, port = ready.rpartition(":")
                socket.create_connection((host, int(port)), timeout=1.0).close()

        try:
            answers()
        except OSError as err:
            self._stop(key)
            raise TestbedError(
                f"ssh {self.target}: forwarding {what} did not answer within "
                f"{FORWARD_READY_TIMEOUT_S:.0f} s (FORWARD_READY_TIMEOUT_S): {err}"
            ) from err
        if process.poll() is not None:
            stderr = Path(log.name).read_text(errors="replace")
            self._forwards.pop(key, None)
            raise TestbedError(
                f"ssh {self.target}: forwarding {what} failed (exit {process.returncode}): "
                f"{_last_line(stderr)}"
            )

    def unix_socket(self, path: str) -> str:
        key = f"unix:{path}"
        if key not in self._forwards:
            local = str(self._dir / f"socket-{len(self._forwards)}.sock")
            self._forward(key, f"{local}:{path}", local, f"unix socket {path}")
        return self._forwards[key][1]

    def tcp(self, address: str, port: int) -> str:
        key = f"tcp:{address}:{port}"
        if key not in self._forwards:
            local = f"127.0.0.1:{free_local_port()}"
            self._forward(key, f"{local}:{address}:{port}", local, f"{address}:{port}")
        return self._forwards[key][1]

    def _stop(self, key: str) -> None:
        process, _ = self._forwards.pop(key)
        process.terminate()
        try:
            process.wait(timeout=SSH_CONNECT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        for key in list(self._forwards):
            self._stop(key)
        # Ends the master connection, if one was opened (ControlPersist keeps it a while).
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                ["ssh", *self._options(), *self._control(), "-O", "exit", self.target.host],
                capture_output=True,
                timeout=SSH_CONNECT_TIMEOUT_S,
                check=False,
            )
        shutil.rmtree(self._dir, ignore_errors=True)
