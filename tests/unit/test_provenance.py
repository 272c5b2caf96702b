"""What every results file records of where it comes from (bench/provenance.py), and what
is said of a file measured on another commit or on a machine busier than its cores."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import provenance  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository of two commits."""
    _git(tmp_path, "init", "-q")
    for n in (1, 2):
        (tmp_path / "f").write_text(str(n))
        _git(tmp_path, "add", "f")
        _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", str(n))
    return tmp_path


def test_a_record_names_commit_date_machine_load_and_release(repo: Path) -> None:
    record = provenance.finish(provenance.start("v1.37.2", root=repo))
    assert record["commit"] == _git(repo, "rev-parse", "HEAD") and record["dirty"] is False
    assert record["date"].endswith("+00:00")
    assert record["machine"]["cpus"] >= 1 and record["machine"]["memory_gib"] > 0
    assert record["machine"]["model"]
    assert record["kubernetes_version"] == "v1.37.2"
    assert record["load_average_1m_max"] >= max(
        record["load_average_1m_at_start"], record["load_average_1m_at_end"]
    )


@pytest.mark.parametrize(
    ("loads", "overloaded"),
    [
        # 2 cores: 1.9 at every sample is within them
        ((0.5, 1.9, 1.0), False),
        # one sample over the cores (the highest) is enough
        ((0.5, 2.1, 1.0), True),
        # over at the end only
        ((0.5, 1.0, 3.0), True),
    ],
    ids=["within", "peak-over", "end-over"],
)
def test_overloaded_when_any_sample_exceeds_the_cores(
    loads: tuple[float, float, float], overloaded: bool
) -> None:
    record: dict[str, Any] = {
        "machine": {"cpus": 2},
        "load_average_1m_at_start": loads[0],
        "load_average_1m_max": loads[1],
        "load_average_1m_at_end": loads[2],
    }
    assert provenance.overloaded(record) is overloaded


@pytest.mark.parametrize(
    ("start_load", "others", "overloaded"),
    [
        # the benchmark's own processes load 2 cores to 3.6: not what decides
        (0.6, 0.05, False),
        # something else used 0.4 of a core on average
        (0.6, 0.4, True),
        # the machine was busy before the benchmark began
        (2.5, 0.05, True),
    ],
    ids=["own-load-only", "others-busy", "busy-before"],
)
def test_a_run_is_overloaded_by_what_else_ran_not_by_its_own_load(
    start_load: float, others: float, overloaded: bool
) -> None:
    record: dict[str, Any] = {
        "machine": {"cpus": 2},
        "load_average_1m_at_start": start_load,
        "load_average_1m_max": 3.6,
        "load_average_1m_at_end": 3.1,
        "other_processes_cores": others,
    }
    assert provenance.overloaded(record) is overloaded
    why = provenance.why_overloaded(record)
    assert (why is not None) is overloaded
    if overloaded:
        assert ("0.4 of the 2 cores" in why) if others > 0.25 else ("2.5 on 2 cores" in why)


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_the_benchmarks_own_children_are_not_counted_as_other_processes() -> None:
    """A child of the benchmark that burns a core is the benchmark's own; a process outside
    its tree (started through a detached grandchild whose parent exits) is another's."""
    record = provenance.start(None)
    own = subprocess.run([sys.executable, "-c", SPIN % 1.5], check=True)
    assert own.returncode == 0
    provenance.sample_load(record)
    own_only = record["other_processes_cores"]
    # the intermediate shell exits at once: the spinner is re-parented outside our tree
    subprocess.run(["sh", "-c", f"{sys.executable} -c '{SPIN % 1.5}' & exit 0"], check=True)
    _spin(1.6)  # the spinner runs meanwhile (2 cores: both run)
    provenance.sample_load(record)
    assert own_only is not None and own_only < provenance.OTHER_CORES_LIMIT, record
    assert record["other_processes_cores"] > own_only + 0.15, (own_only, record)


SPIN = "import time; e = time.monotonic() + %s\nwhile time.monotonic() < e: pass"


def test_staleness_against_head(repo: Path) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    first = _git(repo, "rev-parse", "HEAD~1")
    assert provenance.staleness({"commit": head}, root=repo) is None
    assert provenance.staleness({"commit": first}, root=repo) == (
        f"measured at {first[:12]}, 1 commits before HEAD ({head[:12]})"
    )
    assert provenance.staleness({}, root=repo) == "records no commit"
    assert provenance.staleness(None, root=repo) == "records no commit"
    assert "not in this checkout's history" in str(
        provenance.staleness({"commit": "0" * 40}, root=repo)
    )


def test_a_file_without_provenance_is_described_as_unverified() -> None:
    assert "records no commit, date, machine or load" in provenance.describe(None)
    text = provenance.describe(
        {
            "commit": "abcdef0123456789",
            "dirty": True,
            "date": "2026-11-27T09:00:00+00:00",
            "machine": {"cpus": 2, "model": "X", "memory_gib": 23.5},
            "load_average_1m_at_start": 1.0,
            "load_average_1m_at_end": 2.0,
            "load_average_1m_max": 3.0,
            "kubernetes_version": "v1.37.2",
        }
    )
    assert text.startswith("Measured at commit `abcdef012345` with uncommitted changes")
    assert "2 CPUs (X), 23.5 GiB" in text and "3.0 at most; Kubernetes v1.37.2." in text
