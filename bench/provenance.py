"""Where a measurement comes from: what every results file records, and what is said of it.

Each benchmark calls :func:`start` before it measures and :func:`finish` after, and keeps
the result under ``"provenance"`` in its results file:

* ``commit`` (full hash of HEAD, ``dirty`` when the tree had uncommitted changes) and
  ``date`` (UTC, ISO 8601);
* ``machine``: logical CPUs, memory (GiB, ``/proc/meminfo``), CPU model
  (``/proc/cpuinfo``), kernel;
* the 1-minute load average at the start and at the end, and the highest one sampled
  in between (:func:`sample_load`);
* the Kubernetes release the measurement ran (``None`` when it ran none).

:func:`overloaded` says whether the machine was busier than its cores at any sample (a
run that is, is inconclusive: its ratios measure the other processes too), and
:func:`staleness` compares a results file's commit with the checkout's HEAD, for
whatever prints the file's figures.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KIB_PER_GIB = 1024 * 1024
LOAD_DIGITS = 2


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


def start(kubernetes_version: str | None, root: Path = ROOT) -> dict[str, Any]:
    """The provenance of a measurement starting now."""
    commit = _git("rev-parse", "HEAD", root=root)
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", root=root))
    load = load_1m()
    return {
        "commit": commit,
        "dirty": dirty,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": _memory_gib(),
            "model": _cpu_model(),
            "kernel": platform.release(),
        },
        "kubernetes_version": kubernetes_version,
        "load_average_1m_at_start": load,
        "load_average_1m_max": load,
    }


def sample_load(record: MutableMapping[str, Any]) -> float:
    """Note the load now (the run's highest so far is kept); return it."""
    load = load_1m()
    record["load_average_1m_max"] = max(record.get("load_average_1m_max") or 0.0, load)
    return load


def finish(record: MutableMapping[str, Any]) -> dict[str, Any]:
    """The record with the load at the end."""
    record["load_average_1m_at_end"] = sample_load(record)
    return dict(record)


def overloaded(record: Mapping[str, Any]) -> bool:
    """Whether the load average exceeded the machine's cores at any sample."""
    cpus = (record.get("machine") or {}).get("cpus") or 1
    loads = [
        record.get(key)
        for key in ("load_average_1m_at_start", "load_average_1m_max", "load_average_1m_at_end")
    ]
    return any(load is not None and load > cpus for load in loads)


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
    release = record.get("kubernetes_version")
    return (
        f"Measured at commit `{commit}`{dirty} on {record.get('date', 'an unknown date')}, "
        f"{machine.get('cpus', '?')} CPUs ({machine.get('model', 'unknown model')}), "
        f"{machine.get('memory_gib', '?')} GiB; load average "
        f"{record.get('load_average_1m_at_start', '?')} at the start, "
        f"{record.get('load_average_1m_at_end', '?')} at the end, "
        f"{record.get('load_average_1m_max', '?')} at most"
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
    behind = _git("rev-list", "--count", f"{commit}..HEAD", root=root)
    if behind is None:
        return f"measured at {commit[:12]}, which is not in this checkout's history"
    return f"measured at {commit[:12]}, {behind} commits before HEAD ({head[:12]})"
