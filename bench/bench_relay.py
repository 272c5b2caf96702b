"""Measure what the CRI relay adds to each call, on a running runtime and relay.

Two views (issue 14, "Measure"):

* ``dump``: the relay's own per-call time (``relay_s``: the call's time in the relay
  minus the runtime's answer) of every call in a relay dump file, e.g. the testbed's
  ``NODE_DIR/relay-dump.jsonl`` written while a real kubelet used it; p50/p99 by method;
* ``paired``: the client-observed latency of the same calls made directly to the
  runtime and through the relay, interleaved (``--calls`` of each: Version,
  ListImages, ListPodSandbox), with the project's CRI client; p50/p99 and the
  difference. This includes what ``relay_s`` cannot see (the relay's gRPC server and
  the second unix-socket hop).

Writes ``--output`` (JSON) and prints it.

    python bench/bench_relay.py --runtime unix:///…/containerd.sock \\
        --relay unix:///…/relay.sock --dump …/relay-dump.jsonl --pid RELAY_PID
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layersched.cri import CRIClient
from layersched.evidence import provenance

DEFAULT_CALLS = 300
WARMUP_CALLS = 20
US_PER_S = 1e6


def _percentiles_us(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    array = np.asarray(values) * US_PER_S
    return {
        "n": len(values),
        "p50_us": round(float(np.percentile(array, 50)), 1),
        "p99_us": round(float(np.percentile(array, 99)), 1),
        "max_us": round(float(array.max()), 1),
    }


def from_dump(path: Path) -> dict[str, Any]:
    """``relay_s`` percentiles per method and over all calls, from a dump file."""
    by_method: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "relay_s" in record:
            method = record["method"].rsplit("/", 1)[-1]
            by_method.setdefault(method, []).append(record["relay_s"])
    every = [value for values in by_method.values() for value in values]
    return {
        "all": _percentiles_us(every),
        "by_method": {m: _percentiles_us(v) for m, v in sorted(by_method.items())},
    }


def paired(runtime: str, relay: str, calls: int) -> dict[str, Any]:
    """Client latency direct vs through the relay, interleaved call by call."""
    results: dict[str, Any] = {}
    with CRIClient(runtime) as direct, CRIClient(relay) as via:
        cases: dict[str, Callable[[CRIClient], object]] = {
            "Version": lambda c: c.version(),
            "ListImages": lambda c: c.list_images(),
            "ListPodSandbox": lambda c: c.list_pod_sandboxes(),
        }
        for name, call in cases.items():
            timings: dict[str, list[float]] = {"direct": [], "relay": []}
            for index in range(WARMUP_CALLS + calls):
                for label, client in (("direct", direct), ("relay", via)):
                    started = time.perf_counter()
                    call(client)
                    if index >= WARMUP_CALLS:
                        timings[label].append(time.perf_counter() - started)
            d, r = _percentiles_us(timings["direct"]), _percentiles_us(timings["relay"])
            results[name] = {
                "direct": d,
                "relay": r,
                "added_p50_us": round(r["p50_us"] - d["p50_us"], 1),
                "added_p99_us": round(r["p99_us"] - d["p99_us"], 1),
            }
    return results


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of the relay process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[f"{key}_bytes"] = int(value.split()[0]) * 1024
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runtime", required=True, help="the runtime's CRI endpoint")
    parser.add_argument("--relay", required=True, help="the relay's endpoint")
    parser.add_argument("--dump", type=Path, action="append", default=[], help="dump file(s)")
    parser.add_argument("--pid", type=int, help="the relay's pid (memory)")
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--output", type=Path, default=Path("bench/results/relay.json"))
    args = parser.parse_args()
    record = provenance.start(None)
    report: dict[str, Any] = {"paired": paired(args.runtime, args.relay, args.calls)}
    for path in args.dump:
        report.setdefault("dump", {})[str(path)] = from_dump(path)
    if args.pid:
        report["memory"] = memory(args.pid)
    report["provenance"] = provenance.finish(record)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
