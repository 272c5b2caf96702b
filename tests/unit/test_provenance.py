"""What every results file records of where it comes from
(layersched_harness.evidence.provenance), and what is said of a file measured on another
commit or on a machine busier than its cores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import InputError
from layersched_harness.evidence import provenance


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
        # a load average of 2.5 at the start (low-priority work counts there) does not
        (2.5, 0.05, False),
    ],
    ids=["own-load-only", "others-busy", "busy-before-at-low-priority"],
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
    if why is not None:
        assert "0.4 of the 2 cores" in why


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _stat(
    proc: Path,
    pid: int,
    comm: str,
    ppid: int,
    nice: int,
    ticks: int,
    started: int = 7,
    reaped: int = 0,
) -> None:
    """A ``/proc/PID/stat`` line: utime carries the ticks, cutime the reaped children's;
    stime and cstime are 0."""
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", str(reaped), "0", "20", str(nice)]
    fields += ["1", "0", str(started)]
    directory = proc / str(pid)
    directory.mkdir(exist_ok=True)
    (directory / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields + ["1"] * 30))


def _classes(proc: Path, root: int = 100, **kwargs: Any) -> dict[int, str]:
    return {pid: seen[-1] for pid, seen in provenance.snapshot(root, proc, **kwargs).items()}


def test_a_snapshot_classes_the_tree_its_daemons_others_and_the_kernel(tmp_path: Path) -> None:
    _stat(tmp_path, 1, "init", 0, 0, 0)
    _stat(tmp_path, 2, "kthreadd", 0, 0, 0)
    _stat(tmp_path, 3, "kworker/0:1 (x)", 2, -20, 5)
    _stat(tmp_path, 100, "python", 1, 0, 2)  # the benchmark
    _stat(tmp_path, 101, "etcd", 100, 0, 3)
    _stat(tmp_path, 102, "kube) scheduler", 101, 0, 4)  # a ')' in its name
    _stat(tmp_path, 200, "pytest", 1, 0, 7)  # competes
    _stat(tmp_path, 300, "go", 1, 19, 11)  # low priority
    _stat(tmp_path, 400, "etcd", 1, 0, 13)  # the benchmark's daemon, left to init
    (tmp_path / "400" / "cmdline").write_bytes(b"etcd\0--data-dir=/tmp/bench-state/etcd\0")
    _stat(tmp_path, 401, "etcd-child", 400, 0, 17)
    (tmp_path / "self").mkdir()
    own, comp, low, kern = provenance.OWN, provenance.COMPETING, provenance.LOW, "kernel"
    assert _classes(tmp_path) == {
        1: comp, 2: kern, 3: kern, 100: own, 101: own, 102: own,
        200: comp, 300: low, 400: comp, 401: comp,
    }  # fmt: skip
    classes = _classes(tmp_path, own_commands=["/tmp/bench-state"])
    assert classes[400] == classes[401] == own


def test_with_autogroups_a_process_counts_by_its_groups_nice(tmp_path: Path) -> None:
    """CFS shares the CPU between autogroups (sessions) by the group's nice: a process at
    nice 19 in a group at nice 0 competes; one at nice 0 in a group at nice 19 does not."""
    for pid, comm, ppid, nice, group in (
        (100, "bench", 1, 0, "/autogroup-1 nice 0"),
        (102, "niced-beside-it", 1, 19, "/autogroup-1 nice 0"),  # its group: own nice
        (200, "pytest", 1, 19, "/autogroup-2 nice 0"),  # competes: group at 0
        (300, "go", 1, 0, "/autogroup-3 nice 19"),  # does not: group at 19
    ):
        _stat(tmp_path, pid, comm, ppid, nice, 1)
        (tmp_path / str(pid) / "autogroup").write_text(group + "\n")
    assert _classes(tmp_path) == {100: "own", 102: "low", 200: "competing", 300: "low"}


def test_cpu_is_added_up_process_by_process_in_the_class_of_the_later_sample(
    tmp_path: Path,
) -> None:
    """A session reniced in the middle of a run does not take its earlier CPU with it (a
    difference of class totals would go negative); a process born since counts whole; a
    reused pid starts afresh."""
    tick = provenance._TICKS
    _stat(tmp_path, 100, "bench", 1, 0, 10 * tick)
    _stat(tmp_path, 200, "pytest", 1, 0, 1000 * tick)  # long-lived, competing
    _stat(tmp_path, 300, "old", 1, 0, 50 * tick, started=7)
    before = provenance.snapshot(100, tmp_path)
    _stat(tmp_path, 100, "bench", 1, 0, 14 * tick)
    _stat(tmp_path, 200, "pytest", 1, 19, 1003 * tick)  # reniced: now low, +3 s
    _stat(tmp_path, 300, "new", 1, 0, 2 * tick, started=99)  # the pid reused: 2 s
    _stat(tmp_path, 400, "born", 1, 0, 5 * tick)  # born since: 5 s
    after = provenance.snapshot(100, tmp_path)
    spent = provenance.spent(before, after)
    assert spent == {"own": 4.0, "competing": 7.0, "low": 3.0, "kernel": 0.0}


def test_an_ended_child_is_not_charged_twice(tmp_path: Path) -> None:
    """A child seen before it ended was counted as it ran: its parent's reaped time adds
    only what it spent since; init, which reaps every orphan, is not charged with all
    an orphan ever spent."""
    tick = provenance._TICKS
    _stat(tmp_path, 1, "init", 0, 0, 0)
    _stat(tmp_path, 100, "bench", 1, 0, 0)
    _stat(tmp_path, 101, "scheduler", 100, 0, 500 * tick)  # the bench's, 500 s so far
    _stat(tmp_path, 200, "bash", 1, 0, 0)
    _stat(tmp_path, 201, "kubelet", 200, 0, 900 * tick)  # another's; its parent will go
    _stat(tmp_path, 300, "short", 1, 0, 0)  # a parent whose unseen child lives 3 s
    before = provenance.snapshot(100, tmp_path)
    for pid in (101, 200, 201):
        shutil.rmtree(tmp_path / str(pid))
    _stat(tmp_path, 100, "bench", 1, 0, 0, reaped=502 * tick)  # 2 s more, then reaped
    _stat(tmp_path, 1, "init", 0, 0, 0, reaped=901 * tick)  # the orphan: 1 s more
    _stat(tmp_path, 300, "short", 1, 0, 0, reaped=3 * tick)
    after = provenance.snapshot(100, tmp_path)
    spent = provenance.spent(before, after)
    assert spent["own"] == 2.0 and spent["competing"] == 1.0 + 3.0


def test_a_child_of_the_benchmark_is_counted_as_its_own() -> None:
    """Whatever CPU a child burns (it reports its own) is the benchmark's after."""
    burn = "import time\nfor _ in range(10**7): pass\nprint(time.process_time())"
    before = provenance.snapshot(os.getpid())
    done = subprocess.run([sys.executable, "-c", burn], check=True, capture_output=True)
    after = provenance.snapshot(os.getpid())
    child = float(done.stdout)
    own = provenance.spent(before, after)["own"]
    assert child > 0.05 and own >= child - 0.02, (own, child)


def test_a_sample_records_both_measures_of_other_processes() -> None:
    record = provenance.start(None)
    _spin(0.3)
    copy = dict(record)  # the benchmarks sample shallow copies too
    provenance.sample_load(copy)
    assert copy["other_processes_cores"] is not None
    assert copy["other_processes_cores_all"] is not None


SPIN = "import time\ne = time.monotonic() + %s\nwhile time.monotonic() < e: pass"


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
    # a commit that exists but is off HEAD's history (the replay's dba54d5, rebased away)
    _git(repo, "checkout", "-q", "-b", "side", "HEAD~1")
    (repo / "f").write_text("side")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "side")
    side = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-")
    assert provenance.staleness({"commit": side}, root=repo) == (
        f"measured at {side[:12]}, which is not in this checkout's history"
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


def test_other_processes_never_count_above_every_cycle_not_the_benchmarks() -> None:
    record: dict[str, Any] = {
        "machine": {"cpus": 2},
        "other_processes_cores": 0.873,  # a subreaper charged twice
        "other_processes_cores_all": 0.12,
    }
    assert provenance.competing_cores(record) == 0.12
    assert not provenance.overloaded(record)
    record["other_processes_cores_all"] = 0.9
    assert provenance.why_overloaded(record) == (
        "processes outside the benchmark used 0.873 of the 2 cores on average at normal "
        "priority while it ran"
    )


def test_a_record_from_start_and_finish_lacks_nothing(repo: Path) -> None:
    record = provenance.finish(provenance.start(None, root=repo))
    assert provenance.problems(record) == []
    assert provenance.in_history(record["commit"], repo)


@pytest.mark.parametrize(
    ("change", "lacking"),
    [
        ({"commit": "be55df8"}, "commit 'be55df8' is no full commit hash"),
        ({"dirty": None}, "dirty is None"),
        ({"date": "2026-11-27 10:14 UTC"}, "is no ISO 8601 date"),
        ({"date": "2026-11-27T10:14:00"}, "has no time zone"),
        ({"machine": {"cpus": 2}}, "machine lacks memory_gib, model, kernel"),
        ({"other_processes_cores": None}, "other_processes_cores is None, not a number"),
    ],
    ids=["short-commit", "dirty-unknown", "date-by-hand", "naive-date", "machine", "no-cores"],
)
def test_problems_names_what_a_record_lacks(
    repo: Path, change: dict[str, Any], lacking: str
) -> None:
    # scenario-crio.json's hand-typed record had a commit but dirty None and no cores
    record = provenance.finish(provenance.start(None, root=repo)) | change
    assert any(lacking in problem for problem in provenance.problems(record))
    assert provenance.problems(None) == ['no "provenance" record']


def test_a_commit_kept_at_the_top_level_is_the_files_record() -> None:
    # harness/results/live-minors.json kept its commit beside its figures: make figures once said
    # it "records no commit"
    legacy = {"commit": "385bf2a651481f45b2bd770fad8c216be7ea2e49", "date": "d", "minors": {}}
    assert provenance.record_of(legacy) == {"commit": legacy["commit"], "date": "d"}
    assert provenance.record_of({"provenance": {"commit": "x"}}) == {"commit": "x"}
    assert provenance.record_of({"commit_new": "be55df8"}) is None
    text = provenance.describe(provenance.record_of(legacy))
    assert text.startswith("Measured at commit `385bf2a65148` on d;")
    assert "unverified" in text


def test_committing_refuses_a_dirty_tree_before_measuring(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(provenance.RESULTS_ENV, provenance.COMMIT)
    (repo / "harness" / "results").mkdir(parents=True)
    (repo / "harness" / "results" / "r.json").write_text("{}")
    _git(repo, "add", "harness/results/r.json")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "r")
    # an earlier result of the same run is no uncommitted code
    (repo / "harness" / "results" / "r.json").write_text('{"new": 1}')
    assert provenance.start(None, root=repo)["dirty"] is False
    (repo / "f").write_text("edited")
    with pytest.raises(InputError, match=r"uncommitted changes outside harness/results \("):
        provenance.start(None, root=repo)
    monkeypatch.setenv(provenance.RESULTS_ENV, "commits")
    with pytest.raises(InputError, match=r"LAYERSCHED_RESULTS='commits': expected 'commit'"):
        provenance.committing()
    monkeypatch.delenv(provenance.RESULTS_ENV)
    assert provenance.start(None, root=repo)["dirty"] is True  # a user's run is written
