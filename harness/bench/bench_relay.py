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

Writes ``relay.json`` under this run's directory (``runs/<UTC time>/harness/results/``), or
``harness/results/relay.json`` with ``LAYERSCHED_RESULTS=commit`` (or ``--output``), and
prints it. On a local testbed whose kubelets go through the relay
(``harness/playbooks/testbed-relay.yml``, docs/relay.md) and have pulled through it (the seed
scenario), ``--state-dir`` finds everything: the first node's runtime and relay sockets
and the relay's pid, and every node's dump:

    sudo .venv/bin/python harness/bench/bench_relay.py --state-dir .testbed
    python harness/bench/bench_relay.py --runtime unix:///…/containerd.sock \\
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

from layersched.cri import CRIClient
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json
from layersched_harness.testbed.local import load_state

#: The committed results file (a run writes it under its run directory unless committing).
RESULTS = "harness/results/relay.json"
#: What the testbed's relay role keeps in each node's directory
#: (harness/playbooks/roles/testbed_relay).
RELAY_SOCKET, RELAY_PIDFILE, RELAY_DUMP = "relay.sock", "relay.pid", "relay-dump.jsonl"
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


def _from_testbed(args: argparse.Namespace) -> list[str]:
    """Fill the endpoints, dumps and pid from the local testbed at ``--state-dir``; return
    what the CPU watch counts as the benchmark's own (the testbed's daemons)."""
    state_dir = args.state_dir.resolve()
    nodes = load_state(state_dir).nodes
    first = Path(nodes[0].dir)
    args.runtime = args.runtime or nodes[0].cri_endpoint
    args.relay = args.relay or f"unix://{first / RELAY_SOCKET}"
    args.dump = args.dump or [
        Path(n.dir) / RELAY_DUMP for n in nodes if (Path(n.dir) / RELAY_DUMP).is_file()
    ]
    if args.pid is None:
        try:
            args.pid = int((first / RELAY_PIDFILE).read_text().strip())
        except (OSError, ValueError) as err:
            raise SystemExit(
                f"{first / RELAY_PIDFILE}: {err}: is the relay up? "
                "(harness/playbooks/testbed-relay.yml, docs/relay.md)"
            ) from err
    return [str(state_dir)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--state-dir", type=Path, help="a local testbed with the relay role")
    parser.add_argument("--runtime", help="the runtime's CRI endpoint")
    parser.add_argument("--relay", help="the relay's endpoint")
    parser.add_argument("--dump", type=Path, action="append", default=[], help="dump file(s)")
    parser.add_argument("--pid", type=int, help="the relay's pid (memory)")
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument(
        "--output",
        type=Path,
        help=f"results file (default: {RESULTS} under this run's directory, runs/<UTC "
        f"time>/, or {RESULTS} itself with LAYERSCHED_RESULTS=commit)",
    )
    args = parser.parse_args()
    own = _from_testbed(args) if args.state_dir else []
    if not (args.runtime and args.relay):
        parser.error("give --state-dir, or --runtime and --relay")
    record = provenance.start(None, own_commands=own)
    report: dict[str, Any] = {"paired": paired(args.runtime, args.relay, args.calls)}
    for path in args.dump:
        report.setdefault("dump", {})[str(path)] = from_dump(path)
    if args.pid:
        report["memory"] = memory(args.pid)
    report["provenance"] = provenance.finish(record)
    written = write_json(RESULTS, report, output=args.output)
    print(json.dumps(report, indent=2))
    print(f"results: {written}", file=sys.stderr)


if __name__ == "__main__":
    main()
