"""Bring the local testbed up and down by running its Ansible playbooks, with progress.

``ansible-playbook`` runs as a child process; its output goes line by line to a log
file while a rich spinner shows the task that is running. A failure becomes a
:class:`TestbedError` naming the failing task, its message and the log, never a
traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from layersched.builds import REPO_ROOT
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local._listeners import foreign_listeners
from layersched_harness.testbed.local._state import DEFAULT_STATE_DIR, default_state_dir

#: Where the testbed's playbooks live.
PLAYBOOKS_DIR = REPO_ROOT / "harness" / "playbooks"
UP_PLAYBOOK = PLAYBOOKS_DIR / "testbed-local.yml"
DOWN_PLAYBOOK = PLAYBOOKS_DIR / "testbed-local-down.yml"
LOCAL_INVENTORY = PLAYBOOKS_DIR / "inventory" / "local.yml"
#: What every bring-up records first in the state dir (prefix, net base), for teardown.
SETTINGS_FILE = "settings.json"

#: Defaults, the same as harness/playbooks/vars/testbed-local.yml (which the playbooks use when
#: run by hand); the CLI always passes them explicitly.
DEFAULT_NODE_COUNT = 3
DEFAULT_RATE_BITS_PER_S = 20_000_000
DEFAULT_PREFIX = "lstb"
DEFAULT_NET_BASE = "10.250.50"
#: Environment variables naming a testbed of one's own beside ``$LAYERSCHED_TESTBED_DIR``
#: (two testbeds on one machine need two prefixes and two networks): the CLI's and the
#: tests' defaults.
PREFIX_ENV = "LAYERSCHED_TESTBED_PREFIX"
NET_BASE_ENV = "LAYERSCHED_TESTBED_NET_BASE"
#: The nodes' runtimes, n1 first (``containerd,containerd,crio``; ``make testbed
#: RUNTIMES=...`` sets it): the CLI's and the tests' default.
RUNTIMES_ENV = "LAYERSCHED_TESTBED_RUNTIMES"
#: A node's container runtime: containerd 2.x (``make containerd``, the default) or CRI-O
#: (``make crio``).
RUNTIMES = ("containerd", "crio")
#: ``maxParallelImagePulls`` of a testbed brought up with parallel pulls (issue 42's
#: setting); the same as harness/playbooks/vars/testbed-local.yml's.
PARALLEL_IMAGE_PULLS = 3


def default_prefix() -> str:
    """``$LAYERSCHED_TESTBED_PREFIX`` if set, else :data:`DEFAULT_PREFIX`."""
    return os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX


def default_net_base() -> str:
    """``$LAYERSCHED_TESTBED_NET_BASE`` if set, else :data:`DEFAULT_NET_BASE`."""
    return os.environ.get(NET_BASE_ENV) or DEFAULT_NET_BASE


def parse_runtimes(text: str) -> tuple[str, ...]:
    """``containerd,containerd,crio`` as a tuple (empty text: every node containerd)."""
    runtimes = tuple(word.strip() for word in text.split(",") if word.strip())
    unknown = sorted(set(runtimes) - set(RUNTIMES))
    if unknown:
        raise TestbedError(
            f"runtimes {text!r}: {', '.join(unknown)} unknown; each node runs one of "
            f"{', '.join(RUNTIMES)} (example: containerd,containerd,crio)"
        )
    return runtimes


def default_runtimes() -> tuple[str, ...]:
    """``$LAYERSCHED_TESTBED_RUNTIMES`` if set, else every node containerd."""
    return parse_runtimes(os.environ.get(RUNTIMES_ENV, ""))


#: A Unix socket's path holds at most 107 bytes (sun_path is 108, with its NUL); the
#: deepest socket a node has under the state dir is the kubelet's pod-resources one.
MAX_SOCKET_PATH_BYTES = 107
DEEPEST_SOCKET = "kubelet/root/pod-resources/kubelet.sock"
#: Linux link names have at most 15 characters; PREFIX-nNNN must fit.
MAX_PREFIX_CHARS = 5
#: The node addresses are BASE.(10+K) in one /24.
MAX_NODES = 200
#: Characters of an Ansible failure message quoted in the error (the log has it all).
MAX_FAILURE_CHARS = 600

_TASK_LINE = re.compile(r"^TASK \[(?P<name>.+?)\] \**$")
_FAILED_LINE = re.compile(r"^(?:fatal|failed): \[[^\]]+\]:? (?:.*?=> )?(?P<detail>.*)$")
_RECAP_LINE = re.compile(
    r"^\S+\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+.*failed=(?P<failed>\d+)"
)
_TASK_LOG = re.compile(r"log in (?P<path>/\S+)$")
#: How much of a followed log is read to find its last line, and how much of it is shown.
LOG_TAIL_BYTES = 4096
MAX_TAIL_CHARS = 80
_NET_BASE = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")
_PREFIX = re.compile(r"^[a-z][a-z0-9]*$")


@dataclass(frozen=True, slots=True)
class TestbedSettings:
    """How to bring the local testbed up (what ``layersched testbed up`` takes)."""

    __test__ = False  # not a pytest test class, whatever its name says

    state_dir: Path = field(default_factory=default_state_dir)
    node_count: int = DEFAULT_NODE_COUNT
    #: Registry-to-node link rate, the same for every node unless overridden below.
    rate_bits_per_s: int = DEFAULT_RATE_BITS_PER_S
    #: Per-node link rates (heterogeneous edge links), e.g. ``{"n3": 5_000_000}``.
    node_rate_bits_per_s: Mapping[str, int] = field(default_factory=dict)
    #: Every netns and host link is named PREFIX-*: two testbeds need two prefixes.
    prefix: str = DEFAULT_PREFIX
    #: First three octets of the testbed's /24; two testbeds need two bases.
    net_base: str = DEFAULT_NET_BASE
    #: Each node's runtime, n1 first (:data:`RUNTIMES`); nodes past the end run containerd.
    runtimes: tuple[str, ...] = ()
    #: Also run the pull-time kube-scheduler and its extender (``make replay``); the
    #: default testbed (the seed scenario's) runs three schedulers.
    pull_time: bool = False
    #: Also run the replay's other arms (``make replay``: the plugin process's replay
    #: profiles); implies ``pull_time`` in the CLI.
    replay_arms: bool = False
    #: The kubelets pull in parallel (``serializeImagePulls: false``,
    #: ``maxParallelImagePulls``: :data:`PARALLEL_IMAGE_PULLS`); False: one at a time,
    #: the kubelet's default.
    parallel_pulls: bool = False

    def check(self) -> None:
        """Raise :class:`TestbedError` on settings the playbook would reject."""
        if not 1 <= self.node_count <= MAX_NODES:
            raise TestbedError(f"--nodes must be 1..{MAX_NODES}, got {self.node_count}")
        if self.rate_bits_per_s <= 0 or any(r <= 0 for r in self.node_rate_bits_per_s.values()):
            raise TestbedError("link rates must be positive")
        names = {f"n{i}" for i in range(1, self.node_count + 1)}
        unknown = sorted(set(self.node_rate_bits_per_s) - names)
        if unknown:
            raise TestbedError(
                f"--node-rate names unknown node(s) {', '.join(unknown)}; "
                f"nodes are n1..n{self.node_count}"
            )
        if len(self.prefix) > MAX_PREFIX_CHARS or not _PREFIX.match(self.prefix):
            raise TestbedError(
                f"prefix {self.prefix!r}: use 1-{MAX_PREFIX_CHARS} lowercase letters/digits"
            )
        if len(self.runtimes) > self.node_count:
            raise TestbedError(
                f"--runtimes names {len(self.runtimes)} runtimes for {self.node_count} nodes"
            )
        parse_runtimes(",".join(self.runtimes))
        octets = _NET_BASE.match(self.net_base)
        if octets is None or any(int(o) > 255 for o in octets.groups()):
            raise TestbedError(f"net base {self.net_base!r}: expected three octets, e.g. 10.250.50")

    def extra_vars(self) -> dict[str, Any]:
        """The playbook variables (see harness/playbooks/vars/testbed-local.yml)."""
        return {
            "testbed_state_dir": str(self.state_dir.resolve()),
            "testbed_node_count": self.node_count,
            "testbed_rate_bits_per_s": self.rate_bits_per_s,
            "testbed_node_rate_bits_per_s": dict(self.node_rate_bits_per_s),
            "testbed_prefix": self.prefix,
            "testbed_net_base": self.net_base,
            "testbed_node_runtimes": list(self.runtimes),
            "testbed_pull_time": self.pull_time,
            "testbed_replay_arms": self.replay_arms,
            "testbed_parallel_pulls": self.parallel_pulls,
        }


@dataclass(frozen=True, slots=True)
class PlaybookResult:
    """The play recap of one successful ``ansible-playbook`` run."""

    ok: int
    changed: int
    log_path: Path


@dataclass(slots=True)
class _Watch:
    """What the output has said so far."""

    task: str = ""
    failed_task: str = ""
    failure: str = ""
    recap: dict[str, int] = field(default_factory=dict)

    def feed(self, line: str) -> None:
        if match := _TASK_LINE.match(line):
            self.task = match["name"]
        elif (match := _FAILED_LINE.match(line)) and not self.failure:
            self.failed_task, self.failure = self.task, _failure_text(match["detail"])
        elif match := _RECAP_LINE.match(line):
            self.recap = {k: int(v) for k, v in match.groupdict().items()}


def _failure_text(detail: str) -> str:
    """The useful part of ``fatal: [host]: FAILED! => {json}``: stderr or msg."""
    try:
        doc = json.loads(detail)
    except json.JSONDecodeError:
        return detail.strip()[:MAX_FAILURE_CHARS]
    if not isinstance(doc, dict):
        return detail.strip()[:MAX_FAILURE_CHARS]
    parts = [str(doc.get(k, "")).strip() for k in ("msg", "stderr")]
    text = ": ".join(p for p in parts if p) or detail.strip()
    return text[:MAX_FAILURE_CHARS]


def require_root() -> None:
    """The testbed creates network namespaces, links and qdiscs: that takes root."""
    if sys.platform != "linux":
        raise TestbedError("the local testbed needs Linux (network namespaces, tc)")
    if os.geteuid() != 0:
        raise TestbedError(
            "the local testbed creates network namespaces and needs root: "
            "run it as root (e.g. `sudo make testbed`)"
        )


def _ansible_playbook() -> str:
    beside_python = Path(sys.executable).with_name("ansible-playbook")
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("ansible-playbook")
    if found is None:
        raise TestbedError(
            "ansible-playbook not found: install the infra extras "
            "(`.venv/bin/pip install -e '.[infra]'`, or `make venv`)"
        )
    return found


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCALHOST_WARNING="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_playbook(
    playbook: Path,
    extra_vars: Mapping[str, Any],
    log_path: Path,
    *,
    title: str,
    console: Console | None = None,
) -> PlaybookResult:
    """Run ``playbook`` on this host, logging to ``log_path``; show the running task.

    Raises :class:`TestbedError` naming the failing task and the log on failure.
    """
    argv = [
        _ansible_playbook(),
        "-i",
        str(LOCAL_INVENTORY),
        "-e",
        json.dumps(dict(extra_vars)),
        str(playbook),
    ]
    console = console or Console(stderr=True)
    watch = _Watch()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with (
        log_path.open("w", encoding="utf-8") as log,
        Progress(*columns, console=console, transient=True) as progress,
    ):
        shown = progress.add_task(title, total=None)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env=_environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        except OSError as err:
            raise TestbedError(f"{title}: cannot run ansible-playbook ({err})") from err
        returncode = _follow(proc, log, watch, progress, shown, title)
    if returncode != 0 or watch.failure:
        where = f" at task {watch.failed_task!r}" if watch.failed_task else ""
        why = f": {watch.failure}" if watch.failure else f" (ansible-playbook exit {returncode})"
        raise TestbedError(f"{title} failed{where}{why}; full log: {log_path}")
    if not watch.recap:
        raise TestbedError(f"{title}: ansible-playbook printed no play recap; see {log_path}")
    return PlaybookResult(ok=watch.recap["ok"], changed=watch.recap["changed"], log_path=log_path)


def _followed_log(task: str) -> str:
    """For a long task whose name ends in ``log in PATH`` (the Kubernetes build), the
    last line of that log, so the spinner shows where the step is (Ansible polls it)."""
    match = _TASK_LOG.search(task)
    if match is None:
        return ""
    try:
        with Path(match["path"]).open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return f" | {last[:MAX_TAIL_CHARS]}" if last else ""


def _follow(
    proc: subprocess.Popen[str],
    log: IO[str],
    watch: _Watch,
    progress: Progress,
    shown: Any,
    title: str,
) -> int:
    """Copy the child's output to the log, updating the spinner; return its exit code."""
    assert proc.stdout is not None  # stdout=PIPE above
    try:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            watch.feed(line.rstrip("\n"))
            if watch.task:
                progress.update(
                    shown, description=f"{title}: {watch.task}{_followed_log(watch.task)}"
                )
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    return proc.wait()


def up(settings: TestbedSettings, console: Console | None = None) -> PlaybookResult:
    """Bring the testbed up (or make sure it is); idempotent.

    The ansible log is kept in the state dir (``ansible-up.log``).
    """
    require_root()
    settings.check()
    state_dir = settings.state_dir.resolve()
    _check_recorded_settings(state_dir)
    check_socket_paths(settings)
    _check_addresses_free(settings, state_dir)
    return run_playbook(
        UP_PLAYBOOK,
        settings.extra_vars(),
        state_dir / "ansible-up.log",
        title="testbed up",
        console=console,
    )


def check_socket_paths(settings: TestbedSettings) -> None:
    """TestbedError when the state dir is too long for the nodes' Unix sockets: the
    kubelet's pod-resources socket is the deepest under it, and a path past sun_path
    makes the kubelet exit at start (255), so the node never registers."""
    state_dir = settings.state_dir.resolve()
    deepest = state_dir / "nodes" / f"n{settings.node_count}" / DEEPEST_SOCKET
    if len(str(deepest).encode()) > MAX_SOCKET_PATH_BYTES:
        raise TestbedError(
            f"state dir {state_dir}: too long: the kubelet's socket {deepest} would be "
            f"{len(str(deepest).encode())} bytes, past the {MAX_SOCKET_PATH_BYTES} a Unix "
            "socket path may have; use a shorter state dir"
        )


def _check_addresses_free(settings: TestbedSettings, state_dir: Path) -> None:
    """TestbedError naming them when processes of another testbed (or anything else)
    listen on this testbed's bridge address: ``up`` would start a second control plane
    beside theirs and fail late ("certificate signed by unknown authority")."""
    address = f"{settings.net_base}.1"
    foreign = foreign_listeners(address, state_dir)
    if not foreign:
        return
    held = "; ".join(f"port {f.port}: pid {f.pid} ({f.command or '?'})" for f in foreign)
    raise TestbedError(
        f"testbed up: {address} is already in use by processes that are not this "
        f"testbed's ({state_dir}): {held}. Another testbed with net base "
        f"{settings.net_base} is running, or one a killed run left behind: take it down "
        "(`layersched testbed down --state-dir ITS_DIR`, its directory is in the command "
        "lines above), or choose another --net-base"
    )


def down(
    state_dir: Path | None = None,
    prefix: str | None = None,
    console: Console | None = None,
) -> PlaybookResult:
    """Tear the testbed down: processes, mounts, netns, links, state dir. Safe to repeat.

    The network objects to delete are named by the prefix the bring-up recorded in the
    state dir. Without a record, ``prefix`` names them; if that is not given either, only
    the default state dir implies the default prefix, so tearing down an unknown state
    dir never deletes another testbed's network. The log goes to the temp dir, since the
    state dir is removed.
    """
    require_root()
    state_dir = (state_dir or default_state_dir()).resolve()
    recorded = recorded_prefix(state_dir)
    if recorded is not None:
        prefix = recorded
    elif prefix is None:
        prefix = DEFAULT_PREFIX if state_dir == DEFAULT_STATE_DIR.resolve() else ""
    log_path = Path(tempfile.gettempdir()) / f"layersched-testbed-down-{prefix or 'nonet'}.log"
    return run_playbook(
        DOWN_PLAYBOOK,
        {"testbed_state_dir": str(state_dir), "testbed_prefix": prefix},
        log_path,
        title="testbed down",
        console=console,
    )


def _check_recorded_settings(state_dir: Path) -> None:
    """Refuse to bring up over a settings record the playbook could not read.

    The record names the network objects teardown deletes; a damaged one is not
    guessed at (it might belong to another testbed): ``down`` copes with it.
    """
    path = state_dir / SETTINGS_FILE
    if path.exists() and recorded_prefix(state_dir) is None:
        raise TestbedError(
            f"{path}: unreadable or damaged testbed record: tear the testbed down first "
            "(layersched testbed down, or make testbed-down), then bring it up again"
        )


def recorded_prefix(state_dir: Path) -> str | None:
    """The name prefix the bring-up recorded in ``state_dir`` (None: no record)."""
    try:
        doc = json.loads((state_dir / SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    prefix = doc.get("prefix") if isinstance(doc, dict) else None
    return prefix if isinstance(prefix, str) else None
