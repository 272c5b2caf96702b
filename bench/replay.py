"""``make replay``: replay one trace through each of the local testbed's kube-schedulers.

    python3 bench/replay.py trace      # (re)write bench/replay/trace.json from its seed
    python3 bench/replay.py simulate   # the simulator's prediction for it (no testbed)
    python3 bench/replay.py up-args    # `layersched testbed up`'s arguments for its cluster
    python3 bench/replay.py run        # the live replay (root; the testbed up, its nodes
                                       # and links as the trace says): bench/results/replay.json

``run`` builds the trace's images (seeded layers, :mod:`layersched.testbed.replay`) and
pushes them once under one tag per run, then replays every scheduler the testbed runs,
alternated, ``--rounds`` rounds, each run from a clean state (no pod, no trace image or
layer on any node; the registry warm). After each image-locality run it asks
``layersched estimate`` what that run could have saved. The results file is rewritten after
every run, so an interrupted replay keeps what ran; it records its provenance
(``layersched.evidence.provenance``) and the simulator's prediction for the same trace.
``make figures`` renders the README block from it; the plot is
``bench/results/replay.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import replay_report
from rich.console import Console

from layersched.core.errors import LayerschedError, TestbedError
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.evidence import provenance
from layersched.evidence.results import destination, write_json
from layersched.sim.trace import (
    DEFAULT_TRACE,
    Trace,
    TraceParams,
    generate_trace,
    read_trace,
    simulate_trace,
    write_trace,
)
from layersched.testbed.cluster import ClusterDriver
from layersched.testbed.hosts import file_end, lines_since
from layersched.testbed.local import default_state_dir, load_state, require_root
from layersched.testbed.local._cluster import LocalBackend
from layersched.testbed.replay import (
    REPLAY_NAMESPACE,
    Replay,
    build_trace_images,
    plan_runs,
    push_trace_images,
)
from layersched.testbed.scheduler_configs import (
    LAYER_LOCALITY_PLUGIN_SCHEDULER as LAYER_LOCALITY_PLUGIN,
)

ROOT = Path(__file__).resolve().parents[1]
#: The issue this replay answers (#36): the trace's seed.
DEFAULT_SEED = 36
DEFAULT_ROUNDS = 3
#: The schedulers replayed, in a round's first order (those the testbed runs).
STRATEGIES = (IMAGE_LOCALITY, LAYER_LOCALITY, LAYER_LOCALITY_PLUGIN, "pull-time")
#: Tie-break seeds of the simulator's prediction (its spread).
SIM_SEEDS = tuple(range(10))
#: The window ``layersched estimate`` looks back over, beyond the run itself.
ESTIMATE_SLACK_S = 60
ESTIMATE_TIMEOUT_S = 300.0


def _trace_summary(trace: Trace, path: str) -> dict[str, Any]:
    raw = (ROOT / path).read_bytes() if (ROOT / path).exists() else b""
    return {
        "path": path,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "seed": trace.seed,
        "pods": len(trace.pods),
        "images": len(trace.images),
        "layers": len(trace.layers),
        "distinct_bytes": trace.distinct_bytes(),
        "smallest_layer_bytes": trace.smallest_layer_bytes(),
        "byte_scale": trace.params.get("byte_scale"),
        "cluster": {
            "nodes": trace.cluster.nodes,
            "containers_per_node": trace.cluster.containers_per_node,
            "link_rates_bits_per_s": list(trace.cluster.link_rates_bits_per_s),
            "start_overhead_s": trace.cluster.start_overhead_s,
        },
    }


def simulation(trace: Trace, strategies: list[str]) -> dict[str, Any]:
    """The simulator on ``trace``, per simulated strategy and tie-break seed."""
    mapping = {s: replay_report.SIMULATED_AS.get(s, s) for s in strategies}
    wanted = list(dict.fromkeys(mapping.values()))
    runs: dict[str, list[dict[str, Any]]] = {}
    for run in simulate_trace(trace, wanted, SIM_SEEDS):
        runs.setdefault(run.strategy, []).append(
            {
                "seed": run.seed,
                "startup_s": list(run.startup_s),
                "bytes_pulled": list(run.bytes_pulled),
            }
        )
    return {"seeds_count": len(SIM_SEEDS), "simulated_as": mapping, "runs": runs}


def _estimate(kubeconfig: str, registry: str, since_s: float) -> dict[str, Any]:
    """``layersched estimate`` on the live cluster, the replay's namespace, as JSON."""
    argv = [
        str(Path(sys.executable).with_name("layersched")),
        "estimate",
        "--kubeconfig",
        kubeconfig,
        "-n",
        REPLAY_NAMESPACE,
        "--since",
        f"{int(since_s)}s",
        "--insecure-registry",
        registry,
        "--output",
        "json",
        "--partial",
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=ESTIMATE_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-600:]}"}
    try:
        document: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        return {"error": f"not JSON: {err}"}
    document.pop("pods", None)  # per-pod rows: the totals are what is compared
    return document


def _write(results: dict[str, Any], path: Path) -> None:
    write_json(replay_report.DEFAULT_RESULTS, results, output=path)


def cmd_trace(args: argparse.Namespace) -> int:
    trace = generate_trace(args.seed, TraceParams())
    write_trace(trace, ROOT / args.trace)
    print(
        f"{args.trace}: {len(trace.pods)} pods, {len(trace.images)} images, "
        f"{len(trace.layers)} layers, {trace.distinct_bytes() / replay_report.MIB:,.0f} MiB"
    )
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    trace = read_trace(ROOT / args.trace)
    sim = simulation(trace, list(STRATEGIES))
    for strategy, entry in replay_report.simulation_summary(sim["runs"]).items():
        mean = entry["mean_startup_s"]
        speedup = entry[f"speedup_vs_{replay_report.BASELINE}"]
        print(
            f"{strategy:16s} mean start-up {mean['mean']:.2f} s "
            f"({mean['min']:.2f}-{mean['max']:.2f}); "
            f"speedup {speedup['mean']:.2f}x ({speedup['min']:.2f}-{speedup['max']:.2f})"
        )
    return 0


def up_arguments(trace: Trace) -> list[str]:
    """``layersched testbed up``'s arguments for the trace's cluster: its nodes, each
    node's link rate (Mbit/s) and the pull-time scheduler."""
    argv = ["--nodes", str(trace.cluster.nodes), "--pull-time"]
    for node, rate in trace.cluster.node_rates_bits_per_s().items():
        argv += ["--node-rate", f"{node}={rate / 1e6:g}"]
    return argv


def check_rates(trace: Trace, testbed_rates: dict[str, int], state_dir: Path) -> None:
    """Raise unless the testbed's nodes and their link rates are the trace's, node by node."""
    wanted = trace.cluster.node_rates_bits_per_s()
    if testbed_rates != wanted:
        raise TestbedError(
            f"the testbed at {state_dir} has links {testbed_rates} (bit/s); the trace wants "
            f"{wanted}: layersched testbed down, then layersched testbed up "
            + " ".join(up_arguments(trace))
        )


def cmd_up_args(args: argparse.Namespace) -> int:
    print(" ".join(up_arguments(read_trace(ROOT / args.trace))))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    require_root()
    console = Console(stderr=True)
    begun = time.monotonic()
    trace = read_trace(ROOT / args.trace)
    state_dir = args.state_dir or default_state_dir()
    inventory = load_state(state_dir)
    check_rates(trace, {n.name: n.link_rate_bits_per_s for n in inventory.nodes}, state_dir)
    backend = LocalBackend(inventory)
    strategies = [s for s in (args.strategy or STRATEGIES) if s in backend.schedulers]
    # The testbed's daemons (API server, etcd, kubelets, runtimes, schedulers, extenders,
    # agents, registry) were started by `testbed up`, outside this process's tree; each
    # names the state directory, so they count as the benchmark's own, not as others.
    record = provenance.start(inventory.cluster.kubernetes_version, own_commands=[str(state_dir)])
    console.print(f"building {len(trace.layers)} layers, {len(trace.images)} images")
    build = build_trace_images(trace)
    plan = plan_runs(strategies, args.rounds)
    run_id = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    tags = [f"run-{run_id}-{k:02d}" for k in range(1, len(plan) + 1)]
    registry = inventory.registry.host
    console.print(f"pushing to {registry} under {len(tags)} tags")
    push_trace_images(registry, build, tags)
    driver = ClusterDriver(
        inventory.cluster.kubeconfig,
        backend,
        (),
        namespace=REPLAY_NAMESPACE,
        layer_digests=build.layer_digests(),
    )
    access_log = Path(inventory.registry.access_log)
    replay = Replay(
        driver,
        trace,
        registry,
        access_log=lambda offset: lines_since(access_log, offset),
        log_end=lambda: file_end(access_log),
        build=build,
        console=console,
    )
    results: dict[str, Any] = {
        "provenance": record,
        "trace": _trace_summary(trace, args.trace),
        "testbed": {
            "driver": backend.name,
            "nodes": [n.name for n in inventory.nodes],
            "link_rates_bits_per_s": {n.name: n.link_rate_bits_per_s for n in inventory.nodes},
            "components": driver.components(),
            "blob_bytes": sum(b.size_bytes for b in build.layers.values()),
        },
        "rounds_asked": args.rounds,
        "strategies": strategies,
        "simulation": simulation(trace, strategies),
        "runs": [],
    }
    # a run directory unless asked (LAYERSCHED_RESULTS=commit): the clone stays clean
    out = ROOT / args.results if args.results else destination(replay_report.DEFAULT_RESULTS)
    try:
        for (number, strategy), tag in zip(plan, tags, strict=True):
            reset_s = replay.reset(tag)
            console.print(f"round {number}: {strategy} (clean in {reset_s:.0f} s)")
            run = replay.run(strategy, tag)
            run.update({"round": number, "reset_s": reset_s})
            if strategy == IMAGE_LOCALITY:
                run["estimate"] = _estimate(
                    inventory.cluster.kubeconfig, registry, run["duration_s"] + ESTIMATE_SLACK_S
                )
            provenance.sample_load(record)
            results["runs"].append(run)
            figures = replay_report.run_figures(run["pods"], trace.smallest_layer_bytes())
            console.print(
                f"  {run['duration_s']:.0f} s: mean start-up {figures['mean_startup_s']} s, "
                f"{figures['bytes_pulled'] / replay_report.MIB:,.0f} MiB, "
                f"{figures['pulled_nothing_share']:.0%} pulled no layer; "
                f"load {provenance.load_1m()}"
            )
            results["run_time_s"] = round(time.monotonic() - begun, 1)
            _write(results, out)
    finally:
        replay.reset(tags[-1])  # leave no image on the nodes: the host's disk is shared
        backend.close()
    results["provenance"] = provenance.finish(record)
    results["summary"] = replay_report.summarise(results["runs"], trace.smallest_layer_bytes())
    results["run_time_s"] = round(time.monotonic() - begun, 1)
    _write(results, out)
    replay_report.plot(results, out.with_suffix(".png"))
    console.print(f"results: {out} (make figures renders the blocks of committed results)")
    console.print(replay_report.markdown(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trace", default=DEFAULT_TRACE, help="trace path, from the repository root"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    trace = sub.add_parser("trace", help="write the trace from its seed")
    trace.add_argument("--seed", type=int, default=DEFAULT_SEED)
    trace.set_defaults(handler=cmd_trace)
    sub.add_parser("simulate", help="the simulator's prediction").set_defaults(handler=cmd_simulate)
    sub.add_parser(
        "up-args", help="layersched testbed up's arguments for the trace's nodes and links"
    ).set_defaults(handler=cmd_up_args)
    run = sub.add_parser("run", help="the live replay on the local testbed (root)")
    run.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    run.add_argument(
        "--strategy", action="append", help="repeatable; default: every one the testbed runs"
    )
    run.add_argument("--state-dir", type=Path, default=None)
    run.add_argument(
        "--results",
        help=f"results path from the repository root (default: {replay_report.DEFAULT_RESULTS} "
        "under this run's directory, runs/<UTC time>/, or itself with LAYERSCHED_RESULTS=commit)",
    )
    run.set_defaults(handler=cmd_run)
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except LayerschedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
