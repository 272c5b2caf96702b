"""``make replay``: replay one trace through each of the local testbed's kube-schedulers,
under the kubelets' serial and parallel pulls, and the burst case (issue 42).

    python3 harness/bench/replay.py trace      # (re)write harness/bench/replay/trace.json from its
    seed
    python3 harness/bench/replay.py simulate   # the simulator's prediction for it (no testbed)
    python3 harness/bench/replay.py up-args    # `layersched testbed up`'s arguments for its cluster
    python3 harness/bench/replay.py estimate   # how long `run` takes with these options
    python3 harness/bench/replay.py run        # the live replay (root; the testbed up, its nodes
                                       # and links as the trace says): replay.json

``run`` builds the trace's images (seeded layers, :mod:`layersched_harness.testbed.replay`), then
runs the plan (:func:`~layersched_harness.testbed.replay.plan_steps`): ``--rounds`` rounds, each
running every pull mode once (the testbed's kubelets switched between them by ``layersched
testbed up [--parallel-pulls]``, their running configuration checked through ``/configz``),
and within a mode every arm's replay of the trace, then every arm's burst (a Deployment of
20 replicas of the trace's largest image), the arms' order rotated each round
(``--no-burst`` leaves the bursts out, ``--bursts-only`` the replays). Each step
pushes its images under a tag of its own and starts from a clean state (no pod, no trace
image or layer on any node; the registry warm). After each default-profile replay it asks
``layersched estimate`` what that run could have saved.

The results file is rewritten after every step. A ``run`` that finds its results file
holding an unfinished run of the same plan, trace and commit continues it (``--fresh``
starts over): a crash loses the step it was in, not the rounds before. It records its
provenance (``layersched_harness.evidence.provenance``, one record per invocation, merged) and the
simulator's prediction for the same trace and burst, per arm and pull mode.
``make figures`` renders the blocks from it; the plot is ``replay.png`` beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import replay_report
from replay_report import ARM_KEYS, BASELINE, FORMAT, MAX_PARALLEL_PULLS, MODES
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from layersched.builds import REPO_ROOT
from layersched.core.errors import LayerschedError
from layersched.core.quantity import parse_quantity
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import destination, write_json
from layersched_harness.sim.trace import (
    DEFAULT_TRACE,
    BurstParams,
    Overheads,
    Resources,
    Trace,
    TraceParams,
    burst_image,
    generate_trace,
    read_trace,
    simulate_burst,
    simulate_placed,
    simulate_trace,
    write_trace,
)
from layersched_harness.testbed.cluster import ClusterDriver
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.hosts import file_end, lines_since
from layersched_harness.testbed.local import default_state_dir, load_state, require_root
from layersched_harness.testbed.local._ansible import SETTINGS_FILE
from layersched_harness.testbed.local._cluster import LocalBackend
from layersched_harness.testbed.replay import (
    BURST,
    REPLAY,
    REPLAY_NAMESPACE,
    Replay,
    Step,
    TraceBuild,
    build_trace_images,
    plan_steps,
    push_trace_images,
    slot_requests,
)

ROOT = REPO_ROOT
#: The issue this replay answers (#36): the trace's seed.
DEFAULT_SEED = 36
DEFAULT_ROUNDS = 3
#: Seeds of the simulator's prediction (its spread) per node of the trace: an extender's
#: random ties, each pod's slot release drawn from the measured ones, and for every arm
#: the start of kube-scheduler's node order (``sim.kube``: the seed modulo the nodes), so
#: that every node starts the order equally often. Four: the draws' noise in an arm's mean
#: start-up stays near a hundredth of it (two gave twice that on the committed replay).
SIM_SEEDS_PER_NODE = 4


def sim_seeds(trace: Trace) -> tuple[int, ...]:
    """The simulator's seeds for ``trace``: :data:`SIM_SEEDS_PER_NODE` per node."""
    return tuple(range(SIM_SEEDS_PER_NODE * trace.cluster.nodes))


#: The window ``layersched estimate`` looks back over, beyond the run itself.
ESTIMATE_SLACK_S = 60
ESTIMATE_TIMEOUT_S = 300.0
#: What the plan's duration is estimated with (``estimate``; the smoke run's, on a loaded
#: machine: a replay step's push, clean state, 50 pods' arrivals over 72 s and their
#: lifetimes; a burst step's; a pull-mode switch, an idempotent `testbed up`).
REPLAY_STEP_S = 150.0
BURST_STEP_S = 75.0
SWITCH_S = 240.0
#: ``layersched testbed up`` as a command (the one bring-up path, switching modes too).
LAYERSCHED = str(Path(sys.executable).with_name("layersched"))
#: What the testbed's playbooks start and stop its daemons with.
DAEMON_TOOL = ROOT / "harness" / "playbooks" / "tools" / "local_testbed_daemon.py"


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


def _sim_runs(runs: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        out.setdefault(run.strategy, []).append(
            {
                "seed": run.seed,
                "node": list(run.node),
                "startup_s": list(run.startup_s),
                "bytes_pulled": list(run.bytes_pulled),
                "queue_s": [None if q != q else q for q in run.queue_s],  # NaN: no pull
                "unfollowed": run.unfollowed,
            }
        )
    return out


def simulation(
    trace: Trace,
    arms: Sequence[str],
    burst: BurstParams,
    replay_resources: Resources | None = None,
    burst_resources: Resources | None = None,
    costs: Mapping[str, Overheads] | None = None,
    placements: Mapping[str, Mapping[str, Sequence[Sequence[int]]]] | None = None,
) -> dict[str, Any]:
    """The simulator on ``trace`` and on the burst, per pull mode, per arm (as its
    kube-scheduler profile places pods) and tie-break seed (each node starting
    kube-scheduler's node order equally often); with ``costs``, each mode's measured
    overheads; with ``placements`` (mode, then arm: the real runs' nodes, an index per
    pod in trace order), also the trace on those nodes (``placed``: the time model
    alone)."""
    seeds = sim_seeds(trace)
    doc: dict[str, Any] = {"seeds_count": len(seeds)}
    for mode in MODES:
        trace_runs, burst_runs = [], []
        overheads = (costs or {}).get(mode)
        # what each arm was in the simulator, recorded with its runs
        profiles = {key: replay_report.arm(key).simulated(mode) for key in arms}
        for key in arms:
            profile = profiles[key]
            trace_runs += simulate_trace(
                trace,
                [profile],
                seeds,
                max_parallel_pulls=MAX_PARALLEL_PULLS[mode],
                overheads=overheads,
                resources=replay_resources,
            )
            burst_runs += simulate_burst(
                trace,
                burst,
                [profile],
                seeds,
                max_parallel_pulls=MAX_PARALLEL_PULLS[mode],
                overheads=overheads,
                resources=burst_resources,
            )
        doc[mode] = {
            "profiles": {key: asdict(profile) for key, profile in profiles.items()},
            "trace": _sim_runs(trace_runs),
            "burst": _sim_runs(burst_runs),
        }
        placed = (placements or {}).get(mode) or {}
        if placed:
            doc[mode]["placed"] = _sim_runs(
                [
                    run
                    for key, nodes in placed.items()
                    if key in profiles
                    for run in simulate_placed(
                        trace,
                        profiles[key],
                        nodes,
                        max_parallel_pulls=MAX_PARALLEL_PULLS[mode],
                        overheads=overheads,
                        resources=replay_resources,
                    )
                ]
            )
        if overheads is not None:
            doc[mode]["overheads"] = asdict(overheads)
    return doc


def calibrated(results: Mapping[str, Any], trace: Trace) -> dict[str, Any]:
    """The simulation again, each pull mode with the overheads its runs measured
    (:func:`replay_report.overheads`: the same for every arm of the mode, the slots
    released as late after a pod's lifetime as the trace's lifetimes say they were), where
    they measured any."""
    rates = results["testbed"]["link_rates_bits_per_s"]
    lifetimes = {pod.name: pod.lifetime_s for pod in trace.pods}
    costs = {}
    for mode in MODES:
        found = replay_report.overheads(
            results["runs"], mode, rates, lifetimes, trace.cluster.containers_per_node
        )
        if found["pull_request_delay_s"] is None:
            continue
        costs[mode] = Overheads(
            pull_request_delay_s=found["pull_request_delay_s"],
            start_overhead_s=found["start_overhead_s"],
            link_efficiency=found["link_efficiency"] or 1.0,
            slot_release_s=found["slot_release_s"] or 0.0,
            slot_release_samples_s=tuple(found["slot_release_samples_s"]),
        )
    spec = results["burst"]
    burst = BurstParams(spec["replicas"], spec["slots_per_node"])
    resources = results.get("resources") or {}
    return simulation(
        trace,
        list(results["plan"]["arms"]),
        burst,
        _stored_resources(resources.get("replay")),
        _stored_resources(resources.get("burst")),
        costs,
        real_placements(results, trace),
    )


def real_placements(
    results: Mapping[str, Any], trace: Trace
) -> dict[str, dict[str, list[list[int]]]]:
    """Per pull mode and arm, each run's nodes as the simulator numbers them (the testbed's
    nodes in order), a node per trace pod; a run with a pod on no known node is left out."""
    index = {name: i for i, name in enumerate((results.get("testbed") or {}).get("nodes") or [])}
    found: dict[str, dict[str, list[list[int]]]] = {}
    for run in results["runs"]:
        nodes = {str(pod.get("name")): index.get(str(pod.get("node"))) for pod in run["pods"]}
        placed = [nodes.get(pod.name) for pod in trace.pods]
        if all(node is not None for node in placed):
            by_arm = found.setdefault(run["mode"], {})
            by_arm.setdefault(run["arm"], []).append([int(n) for n in placed if n is not None])
    return found


def _stored_resources(doc: Mapping[str, Any] | None) -> Resources | None:
    if not doc:
        return None
    (cpu, memory), (cpu_asked, memory_asked) = doc["allocatable"], doc["requests"]
    return Resources((int(cpu), int(memory)), (int(cpu_asked), int(memory_asked)))


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
    sim = simulation(trace, args.arm or ARM_KEYS, BurstParams())
    for mode in MODES:
        trace_summary = replay_report.simulation_summary(sim[mode]["trace"])
        burst_summary = replay_report.burst_simulation_summary(sim[mode]["burst"])
        print(f"{mode} pulls:")
        for key, entry in trace_summary.items():
            mean, speedup = entry["mean_startup_s"], entry["speedup"]
            ready = burst_summary[key]["all_ready_s"]
            print(
                f"  {key:40s} mean start-up {mean['mean']:.2f} s "
                f"({mean['min']:.2f}-{mean['max']:.2f}); vs default {speedup['mean']:.2f}x; "
                f"burst all Ready {ready['mean']:.1f} s"
            )
    return 0


def up_arguments(trace: Trace, mode: str = replay_report.SERIAL) -> list[str]:
    """``layersched testbed up``'s arguments for the trace's cluster under ``mode``: its
    nodes, each node's link rate (Mbit/s), every arm's scheduler and the kubelets' pulls."""
    argv = ["--nodes", str(trace.cluster.nodes), "--replay-arms"]
    for node, rate in trace.cluster.node_rates_bits_per_s().items():
        argv += ["--node-rate", f"{node}={rate / 1e6:g}"]
    if mode == replay_report.PARALLEL:
        argv.append("--parallel-pulls")
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
    print(" ".join(up_arguments(read_trace(ROOT / args.trace), args.mode)))
    return 0


# ------------------------------------------------------------------ the plan


def _plan(args: argparse.Namespace, arms: Sequence[str]) -> tuple[dict[str, Any], list[Step]]:
    modes = list(dict.fromkeys(args.mode or MODES))
    burst, replays = not args.no_burst, not args.bursts_only
    plan = {"rounds": args.rounds, "modes": modes, "arms": list(arms), "burst": burst}
    if not replays:
        plan["replays"] = False  # absent: the replays ran (every plan before --bursts-only)
    return plan, plan_steps(arms, modes, args.rounds, burst=burst, replay=replays)


def _switches(steps: Sequence[Step], mode: str | None) -> int:
    count = 0
    for step in steps:
        if step.mode != mode:
            count, mode = count + 1, step.mode
    return count


def duration_s(steps: Sequence[Step], current_mode: str | None) -> float:
    """How long ``steps`` take, estimated (:data:`REPLAY_STEP_S`, :data:`BURST_STEP_S`,
    :data:`SWITCH_S` for each pull-mode switch from ``current_mode``)."""
    replays = sum(1 for step in steps if step.kind == REPLAY)
    return (
        replays * REPLAY_STEP_S
        + (len(steps) - replays) * BURST_STEP_S
        + _switches(steps, current_mode) * SWITCH_S
    )


def cmd_estimate(args: argparse.Namespace) -> int:
    _, steps = _plan(args, args.arm or ARM_KEYS)
    replays = sum(1 for step in steps if step.kind == REPLAY)
    total = duration_s(steps, None)
    print(
        f"{len(steps)} steps ({replays} replays, {len(steps) - replays} bursts, "
        f"{_switches(steps, None)} pull-mode settings): about {total / 3600:.1f} h "
        f"({REPLAY_STEP_S:g} s a replay, {BURST_STEP_S:g} s a burst, {SWITCH_S:g} s a switch)"
    )
    return 0


# ------------------------------------------------------------------ the testbed


def _recorded_settings(state_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((state_dir / SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TestbedError(
            f"{state_dir / SETTINGS_FILE}: no testbed settings ({err}): bring the testbed up "
            "first (make replay does)"
        ) from err
    return doc if isinstance(doc, dict) else {}


def restart_schedulers(state_dir: Path, console: Console) -> None:
    """Stop the testbed's kube-schedulers (by pidfile, with the tool its playbook stops
    them with), for the next ``testbed up`` to start them again. A kube-scheduler scores
    the nodes in the order its cache took them in, from a start index it moves: started
    by ``testbed up`` before the kubelets registered, each process took them in
    registration order, which differs from one bring-up (and one process) to the next;
    started once every node exists, each holds them in name order (the API's), as the
    simulator does (from a start it draws per seed: ``layersched_harness.sim.kube``)."""
    inventory = load_state(state_dir)
    for daemon in inventory.cluster.control_plane:
        if not daemon.name.startswith("scheduler-"):
            continue
        argv = [
            sys.executable,
            str(DAEMON_TOOL),
            "stop",
            f"--name=kube-scheduler {daemon.name}",
            f"--pidfile={daemon.pidfile}",
            f"--match={Path(daemon.pidfile).with_suffix('.yaml')}",
            "--executable=kube-scheduler",
        ]
        done = subprocess.run(argv, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise TestbedError(
                f"stopping {daemon.name} to restart it failed: {done.stderr.strip()[-400:]}"
            )
    console.print("kube-schedulers stopped: testbed up starts them with every node listed")


def ensure_mode(
    trace: Trace, mode: str, state_dir: Path, console: Console, *, force: bool = False
) -> None:
    """The testbed's kubelets pulling as ``mode`` says: ``layersched testbed up`` with the
    trace's arguments (``--parallel-pulls`` or not) unless the inventory says so already
    (``force``: in any case); then each kubelet's running configuration checked."""
    want = MAX_PARALLEL_PULLS[mode]
    inventory = load_state(state_dir)
    if force or any(node.max_parallel_image_pulls != want for node in inventory.nodes):
        settings = _recorded_settings(state_dir)
        argv = [LAYERSCHED, "testbed", "up", "--state-dir", str(state_dir)]
        argv += [
            "--prefix",
            str(settings.get("prefix")),
            "--net-base",
            str(settings.get("net_base")),
        ]
        argv += up_arguments(trace, mode)
        console.print(f"the kubelets to {mode} pulls: {' '.join(argv[1:])}")
        done = subprocess.run(argv, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise TestbedError(
                f"switching the testbed to {mode} pulls failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-800:]}"
            )
        inventory = load_state(state_dir)
    backend = LocalBackend(inventory)
    try:
        driver = ClusterDriver(
            inventory.cluster.kubeconfig, backend, (), namespace=REPLAY_NAMESPACE
        )
        for node in inventory.nodes:
            check_pulls(node.name, driver.kubelet_config(node.name), want)
    finally:
        backend.close()


def check_pulls(node: str, config: Mapping[str, Any], want: int) -> None:
    """Raise unless a kubelet's running configuration pulls ``want`` images at once (1:
    ``serializeImagePulls``)."""
    serial = config.get("serializeImagePulls", True)
    running = 1 if serial else int(config.get("maxParallelImagePulls") or 0)
    if running != want:
        raise TestbedError(
            f"node {node}'s kubelet pulls {running or 'unboundedly many'} image(s) at once "
            f"(serializeImagePulls {serial}, maxParallelImagePulls "
            f"{config.get('maxParallelImagePulls')}), the replay wants {want}: layersched "
            "testbed up with the replay's arguments (python3 harness/bench/replay.py up-args)"
        )


def _resources(allocatable: Mapping[str, str], requests: Mapping[str, str]) -> Resources:
    """A node's allocatable cpu (millicores) and memory (bytes), and a pod's requests."""

    def pair(doc: Mapping[str, str]) -> tuple[int, int]:
        cpu = parse_quantity(str(doc["cpu"]), "cpu") * 1000
        return int(cpu), int(parse_quantity(str(doc["memory"]), "memory"))

    return Resources(pair(allocatable), pair(requests))


# ------------------------------------------------------------------ the results


def _merged(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One provenance record for a run made of several invocations: the first's commit,
    date, machine and starting load, the last's end, the highest load, and the other
    processes' cores weighted by each invocation's duration."""
    first, last = records[0], records[-1]
    merged = dict(first)
    merged["load_average_1m_at_end"] = last.get("load_average_1m_at_end")
    merged["load_average_1m_max"] = max(
        (r.get("load_average_1m_max") or 0.0 for r in records), default=None
    )
    merged["dirty"] = any(r.get("dirty") for r in records)
    for key in ("other_processes_cores", "other_processes_cores_all"):
        weighted = [
            (float(r[key]), float(r.get("duration_s") or 0.0))
            for r in records
            if r.get(key) is not None
        ]
        total = sum(w for _, w in weighted)
        merged[key] = (
            round(sum(v * w for v, w in weighted) / total, 3)
            if total
            else (weighted[-1][0] if weighted else None)
        )
    merged.pop("duration_s", None)
    return merged


def resumable(
    found: Mapping[str, Any], plan: Mapping[str, Any], trace_sha: str, commit: str | None
) -> str | None:
    """Why ``found`` (a results file) cannot be continued by this run, or None when it can:
    an unfinished run of the same plan, trace and commit."""
    if found.get("format") != FORMAT or found.get("complete", True):
        return "it is not an unfinished run"
    if found.get("plan") != plan:
        return f"it ran another plan ({found.get('plan')})"
    if (found.get("trace") or {}).get("sha256") != trace_sha:
        return "it replayed another trace"
    if (found.get("provenance") or {}).get("commit") != commit:
        return (
            f"it was measured at another commit ({(found.get('provenance') or {}).get('commit')})"
        )
    return None


def _load(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return found if isinstance(found, dict) else None


def _write(results: dict[str, Any], path: Path, segment: Mapping[str, Any], begun: float) -> None:
    record = dict(segment) | {"duration_s": round(time.monotonic() - begun, 1)}
    segments = [*results.get("segments_done", []), record]
    results["segments"] = segments
    results["provenance"] = _merged(segments)
    results["run_time_s"] = round(sum(float(r["duration_s"]) for r in segments), 1)
    write_json(
        replay_report.DEFAULT_RESULTS,
        {k: v for k, v in results.items() if k != "segments_done"},
        output=path,
        compact=True,
    )


def _step_line(step: Step, record: Mapping[str, Any], trace: Trace, nodes: Sequence[str]) -> str:
    if step.kind == BURST:
        return (
            f"all {record['replicas']} Ready after {record['all_ready_s']} s "
            f"(seen {record['observed_all_ready_s']} s)"
        )
    figures = replay_report.run_figures(record["pods"], trace.smallest_layer_bytes(), nodes)
    return (
        f"{record['duration_s']:.0f} s: mean start-up {figures['mean_startup_s']} s, "
        f"{figures['bytes_pulled'] / replay_report.MIB:,.0f} MiB, wait behind other pulls "
        f"{figures['mean_wait_behind_s']} s a pulling pod"
    )


def cmd_run(args: argparse.Namespace) -> int:
    require_root()
    console = Console(stderr=True)
    begun = time.monotonic()
    trace = read_trace(ROOT / args.trace)
    trace_doc = _trace_summary(trace, args.trace)
    state_dir = (args.state_dir or default_state_dir()).resolve()
    inventory = load_state(state_dir)
    check_rates(trace, {n.name: n.link_rate_bits_per_s for n in inventory.nodes}, state_dir)
    available = set(inventory.cluster.schedulers)
    arms = [key for key in (args.arm or ARM_KEYS) if key in available]
    missing = [key for key in (args.arm or ARM_KEYS) if key not in available]
    if missing:
        console.print(f"not run, the testbed has no scheduler for: {', '.join(missing)}")
    if BASELINE not in arms:
        raise TestbedError(f"the baseline, {BASELINE}, is not among the arms: the speedups need it")
    plan, steps = _plan(args, arms)
    # a run directory unless asked (LAYERSCHED_RESULTS=commit): the clone stays clean
    out = ROOT / args.results if args.results else destination(replay_report.DEFAULT_RESULTS)
    # The testbed's daemons (API server, etcd, kubelets, runtimes, schedulers, extenders,
    # agents, registry) were started by `testbed up`, outside this process's tree; each
    # names the state directory, so they count as the benchmark's own, not as others.
    record = provenance.start(inventory.cluster.kubernetes_version, own_commands=[str(state_dir)])
    found = None if args.fresh else _load(out)
    why = None if found is None else resumable(found, plan, trace_doc["sha256"], record["commit"])
    if found is not None and why is not None and not found.get("complete", True):
        raise TestbedError(
            f"{out} holds an unfinished replay this run cannot continue ({why}): "
            "run with --fresh to start over, or move the file away"
        )
    build = build_trace_images(trace)
    burst = BurstParams()
    burst_name = burst_image(trace)
    registry = inventory.registry.host
    backend = LocalBackend(inventory)
    driver = ClusterDriver(
        inventory.cluster.kubeconfig,
        backend,
        (),
        namespace=REPLAY_NAMESPACE,
        layer_digests=build.layer_digests(),
    )
    if found is not None and why is None:
        results = found
        results["segments_done"] = list(found.get("segments") or [])
        console.print(
            f"continuing {out}: {len(results['runs']) + len(results['bursts'])} steps done"
        )
    else:
        free = driver.free_requests()
        allocatable = next(iter(driver.node_allocatable().values()))
        replay_resources = _resources(
            allocatable, slot_requests(free, trace.cluster.containers_per_node)
        )
        burst_resources = _resources(allocatable, slot_requests(free, burst.slots_per_node))
        console.print("simulating the trace and the burst per arm and pull mode")
        results = {
            "format": FORMAT,
            "complete": False,
            "trace": trace_doc,
            "burst": {
                "image": burst_name,
                "image_bytes": trace.image_size_bytes(burst_name),
                "replicas": burst.replicas,
                "slots_per_node": burst.slots_per_node,
            },
            "testbed": {
                "driver": backend.name,
                "nodes": [n.name for n in inventory.nodes],
                "link_rates_bits_per_s": {n.name: n.link_rate_bits_per_s for n in inventory.nodes},
                "allocatable": allocatable,
                "components": driver.components(),
                "blob_bytes": sum(b.size_bytes for b in build.layers.values()),
            },
            "plan": plan,
            "baseline": BASELINE,
            "resources": {
                "replay": asdict(replay_resources),
                "burst": asdict(burst_resources),
            },
            "simulation": simulation(trace, arms, burst, replay_resources, burst_resources),
            "runs": [],
            "bursts": [],
            "segments_done": [],
        }
    done = {
        (kind, int(r["round"]), r["mode"], r["arm"])
        for kind, key in ((REPLAY, "runs"), (BURST, "bursts"))
        for r in results[key]
    }
    todo = [step for step in steps if step.key not in done]
    modes = [n.max_parallel_image_pulls for n in inventory.nodes]
    current = next((m for m, n in MAX_PARALLEL_PULLS.items() if modes == [n] * len(modes)), None)
    console.print(
        f"{len(todo)} of {len(steps)} steps to run, about "
        f"{(duration_s(todo, current) + SWITCH_S) / 60:.0f} min with the schedulers' restart; "
        f"results: {out}"
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
    run_id = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    nodes = [n.name for n in inventory.nodes]
    tag = ""
    if todo:
        restart_schedulers(state_dir, console)
        ensure_mode(trace, todo[0].mode, state_dir, console, force=True)
    current = todo[0].mode if todo else None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=console) as progress:
            shown = progress.add_task("replay", total=len(todo))
            for k, step in enumerate(todo, start=1):
                progress.update(
                    shown,
                    description=f"round {step.round} {step.mode} {step.kind} {step.arm}",
                )
                if step.mode != current:
                    ensure_mode(trace, step.mode, state_dir, console)
                    current = step.mode
                tag = f"run-{run_id}-{k:03d}"
                _push(registry, build, tag, burst_name if step.kind == BURST else None)
                reset_s = replay.reset(tag)
                if step.kind == REPLAY:
                    one = replay.run(step.arm, tag)
                    if step.arm == BASELINE:
                        one["estimate"] = _estimate(
                            inventory.cluster.kubeconfig,
                            registry,
                            one["duration_s"] + ESTIMATE_SLACK_S,
                        )
                else:
                    one = replay.burst(
                        step.arm, tag, burst_name, burst.replicas, burst.slots_per_node
                    )
                one.update(
                    {"round": step.round, "mode": step.mode, "arm": step.arm, "reset_s": reset_s}
                )
                results["runs" if step.kind == REPLAY else "bursts"].append(one)
                provenance.sample_load(record)
                progress.console.print(
                    f"round {step.round} {step.mode} {step.kind} {step.arm}: "
                    f"{_step_line(step, one, trace, nodes)}; load {provenance.load_1m()}"
                )
                progress.advance(shown)
                _write(results, out, record, begun)
    finally:
        if tag:
            replay.reset(tag)  # leave no image on the nodes: the host's disk is shared
        backend.close()
    results["complete"] = True
    console.print("simulating again with the overheads the runs measured")
    results["simulation_calibrated"] = calibrated(results, trace)
    _write(results, out, provenance.finish(record), begun)
    replay_report.plot(results, out.with_suffix(".png"))
    console.print(f"results: {out} (make figures renders the blocks of committed results)")
    console.print(replay_report.markdown(results))
    return 0


def cmd_resimulate(args: argparse.Namespace) -> int:
    """The simulator's columns of a results file again (a changed model, the same runs):
    the nominal prediction and the calibrated one, written back in place with the
    commit that computed them (``simulated_by``), and its plot drawn again; the runs and
    their provenance untouched."""
    path = Path(args.results)
    found = _load(path)
    if found is None or found.get("format") != FORMAT:
        raise TestbedError(f"{path}: not a {FORMAT} results file (make replay writes one)")
    trace_path = ROOT / replay_report.trace_file(found["trace"]["path"])
    trace = read_trace(trace_path)
    recorded_sha = found["trace"].get("sha256")
    if recorded_sha and hashlib.sha256(trace_path.read_bytes()).hexdigest() != recorded_sha:
        raise TestbedError(
            f"{path}: its runs replayed another trace than {trace_path} holds now (sha256 "
            f"differs): check out the commit the file records to resimulate it"
        )
    spec = found["burst"]
    resources = found.get("resources") or {}
    found["simulation"] = simulation(
        trace,
        list(found["plan"]["arms"]),
        BurstParams(spec["replicas"], spec["slots_per_node"]),
        _stored_resources(resources.get("replay")),
        _stored_resources(resources.get("burst")),
    )
    found["simulation_calibrated"] = calibrated(found, trace)
    # the runs keep their provenance; the simulator's columns say what computed them
    found[replay_report.SIMULATED_BY] = provenance.source()
    write_json(replay_report.DEFAULT_RESULTS, found, output=path, compact=True)
    # the plot beside it draws the simulated distributions too
    replay_report.plot(found, path.with_suffix(".png"))
    print(f"{path}: simulator columns rewritten at {found[replay_report.SIMULATED_BY]['commit']}")
    return 0


def _push(registry: str, build: TraceBuild, tag: str, only: str | None) -> None:
    """Every trace image under ``tag`` (a replay), or only the burst's (a burst)."""
    images = build.images if only is None else {only: build.images[only]}
    push_trace_images(registry, TraceBuild(build.layers, images), [tag])


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
    simulate = sub.add_parser("simulate", help="the simulator's prediction")
    simulate.add_argument("--arm", action="append", choices=ARM_KEYS)
    simulate.set_defaults(handler=cmd_simulate)
    up_args = sub.add_parser(
        "up-args", help="layersched testbed up's arguments for the trace's nodes and links"
    )
    up_args.add_argument("--mode", choices=MODES, default=replay_report.SERIAL)
    up_args.set_defaults(handler=cmd_up_args)
    again = sub.add_parser(
        "resimulate", help="rewrite a results file's simulator columns (the runs unchanged)"
    )
    again.add_argument("results", help="a replay.json")
    again.set_defaults(handler=cmd_resimulate)
    for name, handler, text in (
        ("run", cmd_run, "the live replay on the local testbed (root)"),
        ("estimate", cmd_estimate, "how long run takes with these options"),
    ):
        run = sub.add_parser(name, help=text)
        run.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
        run.add_argument(
            "--arm",
            action="append",
            choices=ARM_KEYS,
            help="repeatable; default: every arm (the testbed must run it)",
        )
        run.add_argument("--mode", action="append", choices=MODES, help="repeatable; default: both")
        only = run.add_mutually_exclusive_group()
        only.add_argument("--no-burst", action="store_true", help="replays only")
        only.add_argument("--bursts-only", action="store_true", help="bursts only, no replay")
        run.set_defaults(handler=handler)
        if name == "run":
            run.add_argument("--state-dir", type=Path, default=None)
            run.add_argument(
                "--results",
                help="results path from the repository root (default: "
                f"{replay_report.DEFAULT_RESULTS} under this run's directory, runs/<UTC "
                "time>/, or itself with LAYERSCHED_RESULTS=commit)",
            )
            run.add_argument(
                "--fresh",
                action="store_true",
                help="start over even when the results file holds an unfinished run of this plan",
            )
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except LayerschedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
