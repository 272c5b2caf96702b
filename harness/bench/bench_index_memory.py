"""Memory of the Go plugin's layer index under issue 30's hostile objects, before and after.

Runs ``BenchmarkIndexMemoryUnderHostileObjects`` once (``src/kube-scheduler/pkg/layers/
memory_bench_test.go``, ``-benchtime 1x``) on this tree ("after") and on the package as it was at
``--before`` (default 2de96fd, the commit the issue's review measured; its ``pkg/layers``
imports the standard library only, so it is copied into a scratch module with the same
measurement file), alternating before/after ``--repeats`` times. Each run loads 5,000
honest nodes' objects (the extender benchmark's shape), then the issue's object from 1,
2 and 3 nodes, the same object made legal (1,000 distinct layers per image) from 3 nodes,
a flood of objects just under the per-object cap from ``--flood`` nodes (3 for the
before side: at 2de96fd 100 such objects hold some 15 GiB), and the honest objects again.
Per phase: the live heap once collected (settled) and the largest heap seen while the
phase's objects were applied (peak), in MiB above the process's start.

Writes ``index_memory.json`` with its provenance (commit, date, machine, load, other
processes' cores) under this run's directory (``runs/<UTC time>/harness/results/``), or
``harness/results/index_memory.json`` with ``LAYERSCHED_RESULTS=commit``.

    python harness/bench/bench_index_memory.py [--repeats 2] [--flood 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from layersched.builds import REPO_ROOT
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json
from layersched_harness.testbed.builds import find_go, kubernetes_build

ROOT = REPO_ROOT
PACKAGE = "src/kube-scheduler/pkg/layers"
MEASUREMENT = f"{PACKAGE}/memory_bench_test.go"
#: What the measurement calls by a name issue 31 gave it, and the name before (an older
#: commit's package is measured by the same file, under its own names).
RENAMED = {"DecodeNodeLayerInventory": "DecodeInventory"}
#: The measurement: a benchmark run once (today's file, copied into an older package too).
BENCHMARK = "BenchmarkIndexMemoryUnderHostileObjects"
OUT_ENV = "LAYERSCHED_INDEX_MEMORY_OUT"
FLOOD_ENV = "LAYERSCHED_INDEX_MEMORY_FLOOD"
RESULTS = "harness/results/index_memory.json"
#: The before side's flood: 100 objects at 2de96fd would hold ~15 GiB of a shared box.
BEFORE_FLOOD = 3
#: The budget the docs state (docs/kube-scheduler-plugin.md, "Memory"): the index's
#: charge is held under MaxIndexBytes, and the heap under the charge.
BUDGET_MIB = 128
RUN_TIMEOUT_S = 1800


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _before_module(commit: str, scratch: Path) -> Path:
    """``pkg/layers`` at ``commit`` in a module of its own, with today's measurement (which
    calls the package's functions by their names at ``commit``: see :data:`RENAMED`)."""
    package = scratch / "pkg/layers"
    package.mkdir(parents=True)
    for path in _git("ls-tree", "--name-only", commit, f"{PACKAGE}/").splitlines():
        (package / Path(path).name).write_text(_git("show", f"{commit}:{path}") + "\n")
    source = "".join(path.read_text() for path in package.glob("*.go"))
    measurement = (ROOT / MEASUREMENT).read_text()
    for new, old in RENAMED.items():
        if f"func {new}(" not in source:
            measurement = measurement.replace(new, old)
    (package / Path(MEASUREMENT).name).write_text(measurement)
    (scratch / "go.mod").write_text("module layersched.io/kube-scheduler\n\ngo 1.26.0\n")
    return scratch


def _run(module: Path, flood: int, out: Path) -> dict[str, Any]:
    build = kubernetes_build()
    go, _ = find_go(build.go_version_needed())
    env = {**os.environ, **build.go_env(), OUT_ENV: str(out), FLOOD_ENV: str(flood)}
    argv = [
        go, "test", "-count=1", "-timeout", "30m", "-run", "^$",
        "-bench", f"^{BENCHMARK}$", "-benchtime", "1x", "-benchmem", "./pkg/layers",
    ]  # fmt: skip
    done = subprocess.run(
        argv, cwd=module, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} in {module}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _spread(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase and figure: every run's value, and the min and max."""
    phases: dict[str, Any] = {}
    for name in runs[0]["phases"]:
        figures: dict[str, Any] = {}
        for key in ("settled_mib", "peak_mib", "charged_mib", "seconds", "nodes", "accepted"):
            values = [run["phases"][name].get(key) for run in runs]
            if all(v is None for v in values):
                continue
            if all(isinstance(v, float) for v in values):
                figures[key] = {
                    "runs": [round(v, 1) for v in values],
                    "min": round(min(values), 1),
                    "max": round(max(values), 1),
                }
            else:
                figures[key] = values
        phases[name] = figures
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="2de96fd", help="the commit to compare with")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side, alternated")
    parser.add_argument("--flood", type=int, default=100, help="flooding nodes (after side)")
    args = parser.parse_args()
    record = provenance.start(None)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="layersched-index-memory-") as tmp:
        before = _before_module(args.before, Path(tmp) / "before")
        after = ROOT / "src/kube-scheduler"
        for repeat in range(args.repeats):
            for side, module, flood in (
                ("before", before, BEFORE_FLOOD),
                ("after", after, args.flood),
            ):
                begin = time.monotonic()
                runs[side].append(_run(module, flood, Path(tmp) / f"{side}-{repeat}.json"))
                print(f"{side} #{repeat + 1}: {time.monotonic() - begin:.0f} s", flush=True)
                provenance.sample_load(record)
    after_runs = runs["after"]
    worst = max(phase["settled_mib"] for run in after_runs for phase in run["phases"].values())
    results = {
        "pass": worst <= BUDGET_MIB,
        "budget_mib": BUDGET_MIB,
        "before_commit": _git("rev-parse", args.before),
        "go": after_runs[0]["go"],
        "repeats": args.repeats,
        "flooding_nodes": {"before": BEFORE_FLOOD, "after": args.flood},
        "before": _spread(runs["before"]),
        "after": _spread(after_runs),
        "note": (
            "MiB of Go heap above the test process's start (runtime.MemStats.HeapAlloc "
            "after runtime.GC for settled; the largest /memory/classes/heap/objects:bytes "
            "sampled after each object for peak, the decoding of the object and the test's "
            "own generation of it included). Phases: honest = 5,000 nodes of 50 images "
            "each; hostile_k = the issue's object (620 images x 8 one-letter names, index 0 "
            "a thousand times, 1.26 MiB) from k nodes; distinct_3 = that object made legal "
            "(290 images of 1,000 distinct layers) from 3 nodes; flood = objects of 150 "
            "such images (just under the per-object cap) from the flooding nodes; "
            "republished = the honest objects again. charged_mib = the index's own charge "
            "(after only)."
        ),
    }
    results["provenance"] = provenance.finish(record)
    written = write_json(RESULTS, results)
    print(json.dumps(results, indent=2))
    print(f"results: {written}")


if __name__ == "__main__":
    main()
