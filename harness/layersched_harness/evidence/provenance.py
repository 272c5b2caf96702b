"""Where a measurement comes from: what every results file records, and what is said of it.

Each benchmark calls :func:`start` before it measures and :func:`finish` after, and keeps
the result under ``"provenance"`` in its results file (written by
:func:`layersched_harness.evidence.results.write_json`, which refuses a document without one):

* ``commit`` (full hash of HEAD, ``dirty`` when the tree had uncommitted changes outside
  the results directories, :data:`RESULTS_DIRS`) and ``date`` (UTC, ISO 8601);
* ``machine``: logical CPUs, memory (GiB, ``/proc/meminfo``), CPU model
  (``/proc/cpuinfo``), kernel;
* the 1-minute load average at the start and at the end, and the highest one sampled
  in between (:func:`sample_load`);
* ``other_processes_cores``: the CPU that user processes *outside* the benchmark's own
  process tree used at normal priority while it ran, in cores on average (their
  ``/proc/PID/stat`` times), at every sample; ``other_processes_cores_all`` beside it is
  every busy cycle that was not the benchmark's (``/proc/stat``'s busy time less the
  benchmark's tree), low-priority work and the kernel's own included;
* the Kubernetes release the measurement ran (``None`` when it ran none).

:func:`overloaded` says whether other processes shared the machine: other processes at
normal priority used more than :data:`OTHER_CORES_LIMIT` of a core on average while it ran
(such a run is inconclusive: its ratios measure the other processes too). The benchmark's
own processes (API server, etcd, kube-scheduler, the pod creator) do raise the load average
past 2 cores on a 2-core machine; that load is the same for every profile of a round, so it
does not decide. Nor does the load average, which counts low-priority work as well. A record
from before ``other_processes_cores`` existed is judged by its load
average at every sample, as it was then; and
:func:`staleness` compares a results file's commit with the checkout's HEAD, for
whatever prints the file's figures. :func:`problems` says what a record lacks to count
as provenance at all (``tests/unit/test_results_provenance.py`` holds every committed
results file to it).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from layersched.builds import REPO_ROOT
from layersched.core.errors import InputError

ROOT = REPO_ROOT
#: Where committed results live (relative to the checkout), all in one place: a tree whose
#: only changes are here (the run's own earlier results) is not dirty.
RESULTS_DIRS = ("harness/results",)
KIB_PER_GIB = 1024 * 1024
LOAD_DIGITS = 2
#: Cores that processes outside the benchmark may use on average before a run is
#: inconclusive (the kernel's own threads here use about 0.01).
OTHER_CORES_LIMIT = 0.25
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: ``/proc/PID/stat`` fields after the command: state is 0, ppid 1, utime..cstime 11..14.
_PPID, _UTIME, _CSTIME, _NICE, _START = 1, 11, 14, 16, 19
#: How often the CPU watch samples every process (a process born and reaped between two
#: samples is still counted, in its parent's reaped children's time).
SAMPLE_S = 2.0
_KTHREADD = 2
_INIT = 1
#: Processes at this niceness or above get CPU only when the benchmark leaves a core idle
#: (CFS weighs nice 19 at 15 against nice 0's 1024): recorded, but they do not decide.
LOW_PRIORITY_NICE = 10


#: Memory (a tmpfs on most Linux machines) and the disk fallback for a benchmark's etcd.
#: Names under either are the benchmark's fixed ones, as they were under /tmp before.
MEMORY_DIR = Path("/dev/shm")  # noqa: S108 - the tmpfs itself, not a file in it
DISK_DIR = Path(tempfile.gettempdir())


def filesystem_of(path: Path, mounts: str | None = None) -> str | None:
    """The type of the filesystem ``path`` is on (the longest mount point above it in
    ``mounts``, default ``/proc/mounts``: ``tmpfs``, ``ext4``...), or None when unknown."""
    try:
        text = mounts if mounts is not None else Path("/proc/mounts").read_text()
    except OSError:
        return None
    resolved = path.resolve() if mounts is None else path
    best, kind = -1, None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(fields[1].replace("\\040", " "))
        if (resolved == point or point in resolved.parents) and len(str(point)) > best:
            best, kind = len(str(point)), fields[2]
    return kind


def memory_dir(mounts: str | None = None) -> Path:
    """:data:`MEMORY_DIR` when it is a tmpfs, else the temporary directory: where a
    benchmark keeps etcd's data, so that no write waits on a disk's fsync (whose latency
    on a shared virtual disk is noise in a scheduling benchmark)."""
    return MEMORY_DIR if filesystem_of(MEMORY_DIR, mounts) == "tmpfs" else DISK_DIR


def memory_backed(name: str, mounts: str | None = None) -> Path:
    """``name`` in :func:`memory_dir`."""
    return memory_dir(mounts) / name


def _git(*args: str, root: Path = ROOT) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / KIB_PER_GIB, 1)
    except OSError:
        pass
    return None


def load_1m() -> float:
    return round(os.getloadavg()[0], LOAD_DIGITS)


def _busy_seconds() -> float | None:
    """CPU time every core spent busy since boot (``/proc/stat``: all but idle, iowait)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(f) for f in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICKS


#: A process as one sample sees it: its start time (ticks since boot: a reused pid
#: differs), its parent, its own CPU seconds, its reaped children's, and whose it is.
Seen = tuple[int, int, float, float, str]
OWN, COMPETING, LOW, KERNEL = "own", "competing", "low", "kernel"


def snapshot(
    root_pid: int, proc: Path = Path("/proc"), own_commands: Sequence[str] = ()
) -> dict[int, Seen]:
    """Every process now, classed: :data:`OWN` (``root_pid``'s tree, and any process whose
    command line holds one of ``own_commands`` with its tree: the benchmark's daemons, left
    to init by their starter), :data:`KERNEL` (kernel threads, which serve everyone),
    :data:`COMPETING` (other processes at normal priority, :func:`_priority_nice` below
    :data:`LOW_PRIORITY_NICE`) or :data:`LOW`."""
    stats: dict[int, tuple[int, int, int, float, float]] = {}
    roots = [root_pid]
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            rest = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        used = (int(rest[_UTIME]) + int(rest[_UTIME + 1])) / _TICKS
        reaped = (int(rest[_CSTIME - 1]) + int(rest[_CSTIME])) / _TICKS
        stats[int(entry.name)] = (
            int(rest[_PPID]),
            int(rest[_NICE]),
            int(rest[_START]),
            used,
            reaped,
        )
        if own_commands and _command_holds(entry, own_commands):
            roots.append(int(entry.name))
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), roots
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    kernel = {_KTHREADD, *children.get(_KTHREADD, ())}
    mine = _autogroup(proc / str(root_pid))
    seen: dict[int, Seen] = {}
    for pid, (ppid, nice, started, used, reaped) in stats.items():
        if pid in tree:
            whose = OWN
        elif pid in kernel:
            whose = KERNEL
        elif _priority_nice(proc / str(pid), nice, mine) < LOW_PRIORITY_NICE:
            whose = COMPETING
        else:
            whose = LOW
        seen[pid] = (started, ppid, used, reaped, whose)
    return seen


def spent(before: Mapping[int, Seen], after: Mapping[int, Seen]) -> dict[str, float]:
    """CPU seconds each class spent between two snapshots, process by process, each in the
    class it is in at the later one. A process born since counts whole. A child that ended
    meanwhile is in its parent's reaped children's time, less what the earlier snapshot
    had already counted of it (without that, init, which reaps every orphan, would be
    charged again with all an orphan ever spent); one reaped by nobody that lived is lost
    for its last interval only."""
    out = dict.fromkeys((OWN, COMPETING, LOW, KERNEL), 0.0)
    counted: dict[int, float] = {}  # parent -> what `before` counted of its ended children
    for pid, (started, ppid, used, reaped, _) in before.items():
        later = after.get(pid)
        if later is None or later[0] != started:
            counted[ppid] = counted.get(ppid, 0.0) + used + reaped
            if ppid not in after:  # orphaned on the way: init reaped it
                counted[_INIT] = counted.get(_INIT, 0.0) + used + reaped
    for pid, (started, _, used, reaped, whose) in after.items():
        earlier = before.get(pid)
        if earlier and earlier[0] == started:
            used, reaped = used - earlier[2], reaped - earlier[3]
        out[whose] += max(used, 0.0) + max(reaped - counted.get(pid, 0.0), 0.0)
    return out


def _autogroup(entry: Path) -> tuple[str, int] | None:
    """``(group, nice)`` of the process's scheduling autogroup, or None without them."""
    try:
        name, _, nice = (entry / "autogroup").read_text().split()
        return name, int(nice)
    except (OSError, ValueError):
        return None


def _priority_nice(entry: Path, nice: int, benchmarks: tuple[str, int] | None) -> int:
    """The niceness that weighs a process against the benchmark. With autogroups (each
    session its own group, the kernel's default here) CFS shares the CPU between groups by
    the group's nice first, so a process in another group counts by its group's nice;
    within the benchmark's own group, or without autogroups, by its own."""
    group = _autogroup(entry)
    if group is None or benchmarks is None or group[0] == benchmarks[0]:
        return nice
    return group[1]


def _command_holds(entry: Path, needles: Sequence[str]) -> bool:
    try:
        command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(needle in command for needle in needles)


class _CpuWatch:
    """Samples every process each :data:`SAMPLE_S` on a daemon thread and adds up what
    each class spent (:func:`spent`), with ``/proc/stat``'s busy time for the whole."""

    def __init__(self, own_commands: Sequence[str]) -> None:
        self.own_commands = list(own_commands)
        self.began = time.monotonic()
        self.busy0 = _busy_seconds()
        self.last = snapshot(os.getpid(), own_commands=self.own_commands)
        self.totals = dict.fromkeys((OWN, COMPETING, LOW, KERNEL), 0.0)
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._run, name="provenance-cpu", daemon=True).start()

    def _run(self) -> None:
        while not self.stopped.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> dict[str, float] | None:
        """``{"competing": cores, "all": cores}`` on average since the start."""
        with self.lock:
            now = snapshot(os.getpid(), own_commands=self.own_commands)
            for whose, seconds in spent(self.last, now).items():
                self.totals[whose] += seconds
            self.last = now
            elapsed, busy = time.monotonic() - self.began, _busy_seconds()
            if elapsed <= 0 or busy is None or self.busy0 is None:
                return None
            others = (busy - self.busy0) - self.totals[OWN]
            return {
                "competing": round(self.totals[COMPETING] / elapsed, 3),
                "all": round(max(others, 0.0) / elapsed, 3),
            }


#: Live watches by record. A record is a plain dict, written to JSON as it is, and the
#: benchmarks pass shallow copies of it around: the key is its ``machine`` dict, which
#: every copy shares.
_WATCHES: dict[int, _CpuWatch] = {}


def source(root: Path = ROOT) -> dict[str, Any]:
    """The code now: its commit, whether the tree has changes outside the results
    directories, and the date (what a computation over recorded measurements, not a
    measurement, records of itself)."""
    dirty = bool(
        _git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            *(f":(exclude){d}" for d in RESULTS_DIRS),
            root=root,
        )
    )
    return {
        "commit": _git("rev-parse", "HEAD", root=root),
        "dirty": dirty,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def start(
    kubernetes_version: str | None, root: Path = ROOT, own_commands: Sequence[str] = ()
) -> dict[str, Any]:
    """The provenance of a measurement starting now. ``own_commands``: substrings of the
    command lines of processes the benchmark starts as daemons (outside its own process
    tree: e.g. its state directory, which every such command names), counted as its own.

    When the run writes the committed results (``LAYERSCHED_RESULTS=commit``, see
    :mod:`layersched_harness.evidence.results`), a tree with uncommitted changes is refused now,
    before anything is measured (its file could name no commit), and a HEAD that is not on
    ``main`` yet is warned about (a rebase would take the commit out of main's history)."""
    code = source(root)
    commit, dirty = code["commit"], bool(code["dirty"])
    if committing():
        _committable(commit, dirty, root)
    watch = _CpuWatch(own_commands)
    load = load_1m()
    record = {
        "commit": commit,
        "dirty": dirty,
        "date": code["date"],
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": _memory_gib(),
            "model": _cpu_model(),
            "kernel": platform.release(),
        },
        "kubernetes_version": kubernetes_version,
        "load_average_1m_at_start": load,
        "load_average_1m_max": load,
        "other_processes_cores": None,
        "other_processes_cores_all": None,
    }
    _WATCHES[id(record["machine"])] = watch
    return record


#: ``commit`` writes a run's results over the committed files; unset (or ``run``) writes
#: them under the run's directory (:mod:`layersched_harness.evidence.results`).
RESULTS_ENV = "LAYERSCHED_RESULTS"
COMMIT, RUN = "commit", "run"
#: The branch whose history a committed results file's commit must be in.
MAIN = "main"


def committing() -> bool:
    """Whether this run writes the committed results files (``LAYERSCHED_RESULTS``)."""
    value = os.environ.get(RESULTS_ENV, "") or RUN
    if value not in (COMMIT, RUN):
        raise InputError(
            f"{RESULTS_ENV}={value!r}: expected {COMMIT!r} (write harness/results/ and "
            f"harness/results/, to be committed) or {RUN!r} (the default: a run directory under "
            "runs/)"
        )
    return value == COMMIT


def _committable(commit: str | None, dirty: bool, root: Path) -> None:
    if commit is None:
        raise InputError(
            f"{RESULTS_ENV}={COMMIT}: {root} is no git checkout: a committed results file "
            "names the commit it measured"
        )
    if dirty:
        raise InputError(
            f"{RESULTS_ENV}={COMMIT}: {root} has uncommitted changes outside "
            f"{' and '.join(RESULTS_DIRS)} (git status): commit them first, or run without "
            f"{RESULTS_ENV}={COMMIT} (the results then go to a run directory)"
        )
    if _git("rev-parse", "--verify", "--quiet", MAIN, root=root) and not in_history(
        commit, root, MAIN
    ):
        print(
            f"warning: HEAD {commit[:12]} is not on {MAIN} yet: land it before committing "
            "these results, or a rebase takes the commit they name out of main's history",
            file=sys.stderr,
        )


def sample_load(record: MutableMapping[str, Any]) -> float:
    """Note the load now (the run's highest so far is kept); return it."""
    load = load_1m()
    record["load_average_1m_max"] = max(record.get("load_average_1m_max") or 0.0, load)
    watch = _WATCHES.get(id(record.get("machine")))
    cores = watch.sample() if watch else None
    if cores:
        record["other_processes_cores"] = cores["competing"]
        record["other_processes_cores_all"] = cores["all"]
    return load


def finish(record: MutableMapping[str, Any]) -> dict[str, Any]:
    """The record with the load at the end."""
    record["load_average_1m_at_end"] = sample_load(record)
    return dict(record)


def competing_cores(record: Mapping[str, Any]) -> float | None:
    """Other processes' cores at normal priority, bounded by every busy cycle that was not
    the benchmark's (``/proc/stat``, exact): adding up processes one by one can charge a
    subreaper again with what its adopted children were already charged, never less."""
    others = record.get("other_processes_cores")
    whole = record.get("other_processes_cores_all")
    if others is None or whole is None:
        return others
    return float(min(others, whole))


def overloaded(record: Mapping[str, Any]) -> bool:
    """Whether other processes shared the machine (see the module's docstring)."""
    cpus = (record.get("machine") or {}).get("cpus") or 1
    others = competing_cores(record)
    if others is not None:
        return bool(others > OTHER_CORES_LIMIT)
    loads = [
        record.get(key)
        for key in ("load_average_1m_at_start", "load_average_1m_max", "load_average_1m_at_end")
    ]
    return any(load is not None and load > cpus for load in loads)


def why_overloaded(record: Mapping[str, Any] | None) -> str | None:
    """Why a run is inconclusive by what else ran (None when nothing else did)."""
    if not record or not overloaded(record):
        return None
    cpus = (record.get("machine") or {}).get("cpus")
    others = competing_cores(record)
    if others is not None:
        return (
            f"processes outside the benchmark used {others:g} of the {cpus} cores on "
            "average at normal priority while it ran"
        )
    return (
        f"the load average reached {record.get('load_average_1m_max')} on {cpus} cores "
        "(other processes shared the machine)"
    )


def describe(record: Mapping[str, Any] | None) -> str:
    """One sentence for a generated block: commit, date, machine, load, release."""
    if not record:
        return (
            "This results file records no commit, date, machine or load: where it comes "
            "from is unknown, so treat its figures as unverified until it is measured again."
        )
    machine = record.get("machine") or {}
    commit = (record.get("commit") or "unknown")[:12]
    dirty = " with uncommitted changes" if record.get("dirty") else ""
    if record.get("other_processes_cores") is None and "load_average_1m_at_start" not in record:
        # a record from before start() (a commit and a date kept by hand)
        return (
            f"Measured at commit `{commit}`{dirty} on {record.get('date', 'an unknown date')}; "
            "the file records neither the machine's load nor what else ran, so treat its "
            "figures as unverified until it is measured again."
        )
    release = record.get("kubernetes_version")
    return (
        f"Measured at commit `{commit}`{dirty} on {record.get('date', 'an unknown date')}, "
        f"{machine.get('cpus', '?')} CPUs ({machine.get('model', 'unknown model')}), "
        f"{machine.get('memory_gib', '?')} GiB; load average "
        f"{record.get('load_average_1m_at_start', '?')} at the start, "
        f"{record.get('load_average_1m_at_end', '?')} at the end, "
        f"{record.get('load_average_1m_max', '?')} at most"
        + (
            f" (the benchmark's own processes included); other processes used "
            f"{competing_cores(record):g} cores on average at normal priority"
            + (
                f", {record['other_processes_cores_all']:g} with low-priority work and the kernel's"
                if record.get("other_processes_cores_all") is not None
                else ""
            )
            if record.get("other_processes_cores") is not None
            else ""
        )
        + (f"; Kubernetes {release}." if release else ".")
    )


def staleness(record: Mapping[str, Any] | None, root: Path = ROOT) -> str | None:
    """How the measured commit relates to HEAD, when it is not HEAD: None when current."""
    commit = (record or {}).get("commit")
    if not commit:
        return "records no commit"
    head = _git("rev-parse", "HEAD", root=root)
    if head is None or commit == head:
        return None
    # an existing commit off HEAD's history (a branch rebased after its run) is no ancestor
    behind = _git("rev-list", "--count", f"{commit}..HEAD", root=root)
    if behind is None or _git("merge-base", "--is-ancestor", commit, "HEAD", root=root) is None:
        return f"measured at {commit[:12]}, which is not in this checkout's history"
    return f"measured at {commit[:12]}, {behind} commits before HEAD ({head[:12]})"


#: What a record must hold to count as provenance (:func:`problems`).
MACHINE_KEYS = ("cpus", "memory_gib", "model", "kernel")
NUMBER_KEYS = (
    "load_average_1m_at_start",
    "load_average_1m_at_end",
    "other_processes_cores",
)
_HEX = frozenset("0123456789abcdef")
_FULL_HASH_CHARS = 40


def problems(record: Mapping[str, Any] | None) -> list[str]:
    """What ``record`` lacks to say where a results file comes from (empty when nothing):
    the full commit of a clean tree, an ISO 8601 date with its zone, the machine
    (:data:`MACHINE_KEYS`), the loads and other processes' cores (:data:`NUMBER_KEYS`), as
    :func:`start` and :func:`finish` write them. Whether the commit is in main's history
    is the caller's to ask (:func:`in_history`): it depends on the checkout."""
    if not isinstance(record, Mapping):
        return ['no "provenance" record']
    found = []
    commit = record.get("commit")
    if not (isinstance(commit, str) and len(commit) == _FULL_HASH_CHARS and set(commit) <= _HEX):
        found.append(f"commit {commit!r} is no full commit hash")
    if record.get("dirty") is not False:
        found.append(
            f"dirty is {record.get('dirty')!r}: measured with uncommitted changes (or unknown)"
        )
    try:
        date = datetime.fromisoformat(str(record.get("date")))
        if date.tzinfo is None:
            found.append(f"date {record.get('date')!r} has no time zone")
    except ValueError:
        found.append(f"date {record.get('date')!r} is no ISO 8601 date")
    machine = record.get("machine")
    missing = [k for k in MACHINE_KEYS if not isinstance(machine, Mapping) or k not in machine]
    if missing:
        found.append(f"machine lacks {', '.join(missing)}")
    for key in NUMBER_KEYS:
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            found.append(f"{key} is {value!r}, not a number")
    if "kubernetes_version" not in record:
        found.append("kubernetes_version is missing (null when the run ran no Kubernetes)")
    return found


def in_history(commit: str, root: Path = ROOT, ref: str = "HEAD") -> bool:
    """Whether ``commit`` is ``ref`` or one of its ancestors in the checkout at ``root``."""
    return _git("merge-base", "--is-ancestor", commit, ref, root=root) is not None


def record_of(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """A results file's provenance: its ``provenance`` record, or, for a file from before
    records existed that kept a ``commit`` and ``date`` at its top level (live-minors,
    index-memory), those, so that what prints its figures names its commit."""
    record = results.get("provenance")
    if isinstance(record, Mapping):
        return dict(record)
    if isinstance(results.get("commit"), str):
        legacy = {k: results[k] for k in ("commit", "date", "machine") if k in results}
        return legacy
    return None
