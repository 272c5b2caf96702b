"""What ``make replay`` measured, summarised and written as docs: pure functions only.

``harness/bench/replay.py`` replays ``harness/bench/replay/trace.json`` through the local testbed's
kube-schedulers (:data:`ARMS`), under the kubelets' serial and parallel pulls, and runs the
burst case; it writes ``harness/results/replay.json``. This module names the arms and what
each is in the simulator, turns the runs into per-arm figures (each round's, then their
mean and range over the rounds), the pods' own records into where the time went (waits
behind other pulls, concurrent pulls, pods per node), puts the simulator's prediction for
the same trace beside them, renders the block ``harness/bench/figures.py`` writes (``make
figures``) and draws the start-up distributions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from layersched.deploy import IN_FLIGHT_WEIGHT, PLUGIN_KEEPS_IMAGE_LOCALITY
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import plot_metadata
from layersched_harness.sim import kube

#: The committed results, their plot, and the block generated from them.
DEFAULT_RESULTS = "harness/results/replay.json"
DEFAULT_PLOT = "harness/results/replay.png"
BLOCK = "replay"
#: Further runs of the same trace, each with its own default-profile row, so that its
#: speedups are taken against the default in its own rounds: the arms the main run left out,
#: the main run's layer-aware arms again, serial and parallel, and its burst again. Each is
#: a block of docs/replay.md, named as the file.
ARMS_RESULTS = "harness/results/replay-arms.json"
SERIAL_RESULTS = "harness/results/replay-serial.json"
PARALLEL_RESULTS = "harness/results/replay-parallel.json"
#: The burst again, three rounds, the replays left out (``--bursts-only``).
BURST_RESULTS = "harness/results/replay-burst.json"
FURTHER_RUNS = (ARMS_RESULTS, SERIAL_RESULTS, PARALLEL_RESULTS, BURST_RESULTS)


def block_of(results_file: str) -> str:
    """The block a further run renders in: its file's name (``replay-arms``)."""
    return Path(results_file).stem


REGENERATE = "make figures"
#: Where the benchmarks were before issue 47 gave the harness one root, and where they are
#: now: results recorded before then name the trace ``bench/replay/trace.json``.
BENCH_BEFORE_47, BENCH = "bench/", "harness/bench/"
#: The results' layout this module reads; older files are named as such in the block.
FORMAT = "layersched-replay-results/2"
#: The pull modes, in run order within a round's first half: the kubelet's default
#: (``serializeImagePulls: true``) and ``maxParallelImagePulls: 3``.
SERIAL, PARALLEL = "serial", "parallel"
MODES = (SERIAL, PARALLEL)
#: Each mode's pull queue in the simulator (``ClusterParams.max_parallel_pulls``); the
#: testbed's parallel kubelets pull ``PARALLEL_IMAGE_PULLS`` at once.
MAX_PARALLEL_PULLS = {SERIAL: 1, PARALLEL: 3}
#: Where a results file says which commit computed its simulator columns when they were
#: recomputed from its recorded runs (``harness/bench/replay.py resimulate``).
SIMULATED_BY = "simulated_by"
#: A simulated start-up this far from the real one (either way) is a disagreement the
#: closing note explains from the per-pod records.
AGREEMENT = 0.10


@dataclass(frozen=True, slots=True)
class Arm:
    """One arm: its key (the testbed inventory's, a pod's ``schedulerName`` comes from
    it), its label in the block, and what it is in the simulator."""

    key: str
    label: str
    profile: kube.Profile
    #: The in-flight strategy's simulated name in each mode (it is told the mode).
    strategy_by_mode: Mapping[str, str] | None = None

    def simulated(self, mode: str) -> kube.Profile:
        """The simulator's profile for this arm under ``mode``."""
        if self.strategy_by_mode is None:
            return self.profile
        return _replace_strategy(self.profile, self.strategy_by_mode[mode])


def _replace_strategy(profile: kube.Profile, strategy: str) -> kube.Profile:
    return kube.Profile(
        profile.name,
        resource_plugins=profile.resource_plugins,
        image_locality_weight=profile.image_locality_weight,
        topology_spread_weight=profile.topology_spread_weight,
        strategy=strategy,
        via=profile.via,
        weight=profile.weight,
        knowledge=profile.knowledge,
        image_quorum=profile.image_quorum,
    )


#: The baseline: kube-scheduler's default profile, as users run it.
BASELINE = "default-scheduler"
#: The layer score the testbed's extender and plugin run: with spread, as installed
#: (issue 45), the simulator's ``layer-locality+spread``.
LAYER_LOCALITY = "layer-locality+spread"
#: ImageLocality's weight in the install's plugin profile (0: replaced by LayerLocality).
INSTALLED_IMAGE_LOCALITY_WEIGHT = kube.IMAGE_LOCALITY_WEIGHT if PLUGIN_KEEPS_IMAGE_LOCALITY else 0
#: The same with spread off (``layer-locality-plugin-no-spread``, issue 42).
LAYER_LOCALITY_NO_SPREAD = "layer-locality"
#: Every arm, in the block's order (the testbed runs each with ``--replay-arms``).
ARMS: tuple[Arm, ...] = (
    Arm(BASELINE, "default profile (the baseline)", kube.Profile(BASELINE)),
    Arm(
        "image-locality",
        "ImageLocality alone (the seed's baseline)",
        kube.Profile("image-locality", resource_plugins=False, topology_spread_weight=0),
    ),
    Arm(
        "layer-locality",
        "default plugins + layer-locality extender (as installed)",
        kube.Profile("layer-locality", strategy=LAYER_LOCALITY, via="extender"),
    ),
    Arm(
        "layer-locality-plugin-replay",
        "default plugins + layer-locality plugin beside ImageLocality",
        kube.Profile(
            "layer-locality-plugin-replay",
            strategy=LAYER_LOCALITY,
            knowledge="registry",
            image_quorum=1,
        ),
    ),
    Arm(
        "layer-locality-plugin-no-imagelocality",
        "default plugins + layer-locality plugin, ImageLocality off (as installed)",
        kube.Profile(
            "layer-locality-plugin-no-imagelocality",
            image_locality_weight=0,
            strategy=LAYER_LOCALITY,
            knowledge="registry",
            image_quorum=1,
        ),
    ),
    Arm(
        "layer-locality-plugin-no-spread",
        "default plugins + layer-locality plugin, ImageLocality off, spread off",
        # the simulator's ``layer-locality`` is spread off (sim/settings.py)
        kube.Profile(
            "layer-locality-plugin-no-spread",
            image_locality_weight=INSTALLED_IMAGE_LOCALITY_WEIGHT,
            strategy=LAYER_LOCALITY_NO_SPREAD,
            knowledge="registry",
            image_quorum=1,
        ),
    ),
    Arm(
        "pull-time",
        "default plugins + pull-time extender",
        kube.Profile("pull-time", strategy="pull-time", via="extender"),
    ),
    Arm(
        "layer-locality-inflight",
        "default plugins + in-flight extender",
        # at its recommended weight, as the testbed runs it (docs/in-flight.md)
        kube.Profile(
            "layer-locality-inflight", strategy="in-flight", via="extender", weight=IN_FLIGHT_WEIGHT
        ),
        # told the kubelets' pull mode (the testbed passes it: --pull-mode)
        strategy_by_mode={SERIAL: "in-flight", PARALLEL: "in-flight+parallel"},
    ),
    Arm(
        "layer-locality-plugin-inflight",
        "default plugins + in-flight plugin",
        # the plugin process's profile (testbed/scheduler_configs.py): at the recommended
        # weight, ImageLocality as the install has it, its ties in node order, an image's
        # layers known from the registry (the plugin waits for its first pod's answer,
        # registry.resolveWaitMilliseconds; the testbed's registry answers within it)
        kube.Profile(
            "layer-locality-plugin-inflight",
            image_locality_weight=INSTALLED_IMAGE_LOCALITY_WEIGHT,
            strategy="in-flight",
            weight=IN_FLIGHT_WEIGHT,
            knowledge="registry",
            image_quorum=1,
        ),
        # told the kubelets' pull mode (the scheduler configuration's pullMode)
        strategy_by_mode={SERIAL: "in-flight", PARALLEL: "in-flight+parallel"},
    ),
)
ARM_KEYS = tuple(arm.key for arm in ARMS)
LABELS = {arm.key: arm.label for arm in ARMS}
#: A pod sent less than this pulled no layer, only manifest and config (a few KiB); the
#: results name their trace's smallest layer, which is used instead.
NOTHING_BYTES = 64 * 1024
MIB = 1024 * 1024
TAIL = 95
#: HotEdge '20's reported range (CONTEXT §1).
HOTEDGE_RANGE = (1.4, 2.3)
#: A kubelet pull this short found its layers present (a pull queued behind another of
#: its image): it moved no bytes and is not counted as a concurrent pull.
CONCURRENT_PULL_MIN_S = 0.5


def arm(key: str) -> Arm:
    """The arm called ``key`` (an unknown one, from a results file, is labelled by its key
    and simulated as the default profile)."""
    for one in ARMS:
        if one.key == key:
            return one
    return Arm(key, key, kube.Profile(key))


def trace_file(recorded: str) -> str:
    """The trace's path in this checkout, from the one a results file recorded: as
    recorded, or under the harness's root for results recorded before issue 47 moved it."""
    if recorded.startswith(BENCH_BEFORE_47):
        return BENCH + recorded.removeprefix(BENCH_BEFORE_47)
    return recorded


def _values(pods: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(p[key]) for p in pods if p.get(key) is not None]


def _round(value: Any, digits: int = 3) -> float:
    return round(float(value), digits)


def _mean(values: Sequence[float]) -> float | None:
    return _round(np.mean(values)) if values else None


def pull_interval(pod: Mapping[str, Any]) -> tuple[float, float] | None:
    """When the pod's own pull ran (epoch seconds): from its Pulled event's time less the
    pull's duration to that time (the event's 1 s resolution); None when it pulled nothing
    or the times are unknown."""
    end, pull = pod.get("pulled_at_s"), pod.get("pull_s")
    if not pod.get("pulled") or end is None or pull is None:
        return None
    return float(end) - float(pull), float(end)


def concurrency(pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Concurrent pulls per node: for each pull of at least
    :data:`CONCURRENT_PULL_MIN_S`, how many of its node's pulls (itself included) were
    running at its midpoint; their mean and the largest, and per node the largest.

    >>> concurrency([
    ...     {"node": "n1", "pulled": True, "pulled_at_s": 10.0, "pull_s": 4.0},
    ...     {"node": "n1", "pulled": True, "pulled_at_s": 11.0, "pull_s": 4.0},
    ...     {"node": "n2", "pulled": True, "pulled_at_s": 10.0, "pull_s": 4.0}])
    {'mean': 1.667, 'max': 2, 'by_node': {'n1': 2, 'n2': 1}}
    """
    by_node: dict[str, list[tuple[float, float]]] = {}
    for pod in pods:
        interval = pull_interval(pod)
        if pod.get("node") and interval and interval[1] - interval[0] >= CONCURRENT_PULL_MIN_S:
            by_node.setdefault(str(pod["node"]), []).append(interval)
    counts: list[int] = []
    most: dict[str, int] = {}
    for node, intervals in sorted(by_node.items()):
        for start, end in intervals:
            middle = (start + end) / 2
            count = sum(1 for a, b in intervals if a <= middle <= b)
            counts.append(count)
            most[node] = max(most.get(node, 0), count)
    return {
        "mean": _mean([float(c) for c in counts]),
        "max": max(counts, default=0),
        "by_node": most,
    }


def pods_per_node(pods: Sequence[Mapping[str, Any]], nodes: Sequence[str]) -> dict[str, int]:
    """How many of the run's pods each node ran."""
    counts = dict.fromkeys(nodes, 0)
    for pod in pods:
        if pod.get("node"):
            counts[str(pod["node"])] = counts.get(str(pod["node"]), 0) + 1
    return counts


def run_figures(
    pods: Sequence[Mapping[str, Any]],
    nothing_below: int = NOTHING_BYTES,
    nodes: Sequence[str] = (),
) -> dict[str, Any]:
    """One run's figures from its pods: start-up (the API's) mean, p50 and p95, the
    start-up seen by the replay, mean pull, total bytes, the share of pods that pulled no
    layer, the wait behind other pulls per pulling pod (mean, p95), concurrent pulls per
    node and pods per node.

    >>> f = run_figures([{"startup_s": 2.0, "observed_startup_s": 2.2, "pull_s": 1.0,
    ...                   "bytes": 10 * MIB, "pulled": True, "wait_behind_s": 0.5},
    ...                  {"startup_s": 4.0, "observed_startup_s": 4.4, "pull_s": 0.0,
    ...                   "bytes": 1000, "pulled": False}])
    >>> f["mean_startup_s"], f["bytes_pulled"], f["pulled_nothing_share"], f["mean_wait_behind_s"]
    (3.0, 10486760, 0.5, 0.5)
    """
    startup = _values(pods, "startup_s")
    observed = _values(pods, "observed_startup_s")
    pulls = _values(pods, "pull_s")
    sizes = [int(p.get("bytes") or 0) for p in pods]
    waits = [
        float(p["wait_behind_s"])
        for p in pods
        if p.get("pulled") and p.get("wait_behind_s") is not None
    ]
    placed = pods_per_node(pods, nodes)
    together = concurrency(pods)
    return {
        "pods": len(pods),
        "measured": len(startup),
        "mean_startup_s": _mean(startup),
        "p50_startup_s": _round(np.percentile(startup, 50)) if startup else None,
        "p95_startup_s": _round(np.percentile(startup, TAIL)) if startup else None,
        "mean_observed_startup_s": _mean(observed),
        "mean_pull_s": _mean(pulls),
        "bytes_pulled": sum(sizes),
        "pulled_nothing_share": _round(sum(1 for s in sizes if s < nothing_below) / len(pods))
        if pods
        else None,
        "pulling_pods": len(waits),
        "mean_wait_behind_s": _mean(waits),
        "p95_wait_behind_s": _round(np.percentile(waits, TAIL)) if waits else None,
        "mean_concurrent_pulls": together["mean"],
        "max_concurrent_pulls": together["max"],
        "min_pods_per_node": min(placed.values(), default=None),
        "max_pods_per_node": max(placed.values(), default=None),
        "pods_per_node": placed,
    }


def spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    """Mean, min and max of the known ``values`` (None when there is none).

    >>> spread([1.0, 3.0, None])
    {'mean': 2.0, 'min': 1.0, 'max': 3.0, 'n': 2}
    """
    known = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not known:
        return None
    return {
        "mean": _round(np.mean(known)),
        "min": _round(min(known)),
        "max": _round(max(known)),
        "n": len(known),
    }


FIGURES = (
    "mean_startup_s",
    "p50_startup_s",
    "p95_startup_s",
    "mean_observed_startup_s",
    "mean_pull_s",
    "bytes_pulled",
    "pulled_nothing_share",
    "mean_wait_behind_s",
    "p95_wait_behind_s",
    "mean_concurrent_pulls",
    "max_concurrent_pulls",
    "min_pods_per_node",
    "max_pods_per_node",
)


def by_round_of(
    runs: Sequence[Mapping[str, Any]], mode: str, figures_of: Any
) -> dict[int, dict[str, Any]]:
    rounds: dict[int, dict[str, Any]] = {}
    for run in runs:
        if run.get("mode") == mode:
            rounds.setdefault(int(run["round"]), {})[run["arm"]] = figures_of(run)
    return rounds


def round_ratio(arms: Mapping[str, Mapping[str, Any]], key: str, figure: str) -> float | None:
    """In one round (``arms``: each arm's figures), the default profile's ``figure`` over
    arm ``key``'s: the one rule every speedup here is taken by, never across rounds; None
    when either is unknown or zero.

    >>> round_ratio({BASELINE: {"s": 6.0}, "a": {"s": 3.0}, "b": {"s": None}}, "a", "s")
    2.0
    >>> round_ratio({BASELINE: {"s": 6.0}, "b": {"s": None}}, "b", "s") is None
    True
    """
    base = (arms.get(BASELINE) or {}).get(figure)
    mine = (arms.get(key) or {}).get(figure)
    return float(base) / float(mine) if base and mine else None


def summarise(
    runs: Sequence[Mapping[str, Any]],
    mode: str,
    nothing_below: int = NOTHING_BYTES,
    nodes: Sequence[str] = (),
) -> dict[str, Any]:
    """Per arm of ``mode``, every figure over its rounds (:func:`spread`), and the speedup
    against the default profile, round by round (the baseline's mean start-up in that
    round over the arm's), then over the rounds; likewise for p95."""
    by_round = by_round_of(runs, mode, lambda run: run_figures(run["pods"], nothing_below, nodes))
    arms = list(dict.fromkeys(run["arm"] for run in runs if run.get("mode") == mode))
    summary: dict[str, Any] = {}
    for key in arms:
        rounds = [r for r in sorted(by_round) if key in by_round[r]]
        figures = [by_round[r][key] for r in rounds]
        entry: dict[str, Any] = {"rounds": len(rounds)}
        for name in FIGURES:
            entry[name] = spread([f[name] for f in figures])
        for name, figure in (("speedup", "mean_startup_s"), ("p95_speedup", "p95_startup_s")):
            entry[name] = spread([round_ratio(by_round[r], key, figure) for r in rounds])
        summary[key] = entry
    return summary


def summarise_bursts(bursts: Sequence[Mapping[str, Any]], mode: str) -> dict[str, Any]:
    """Per arm of ``mode``: the time until all replicas were Ready over the rounds, the
    same as seen here, the speedup against the default profile round by round, the bytes
    pulled and the replicas per node."""
    by_round = by_round_of(bursts, mode, lambda burst: burst)
    arms = list(dict.fromkeys(b["arm"] for b in bursts if b.get("mode") == mode))
    summary: dict[str, Any] = {}
    for key in arms:
        rounds = [r for r in sorted(by_round) if key in by_round[r]]
        mine = [by_round[r][key] for r in rounds]
        ratios = [round_ratio(by_round[r], key, "all_ready_s") for r in rounds]
        placed = [pods_per_node(b["pods"], ()) for b in mine]
        summary[key] = {
            "rounds": len(rounds),
            "all_ready_s": spread([b.get("all_ready_s") for b in mine]),
            "observed_all_ready_s": spread([b.get("observed_all_ready_s") for b in mine]),
            "speedup": spread(ratios),
            "bytes_pulled": spread(
                [sum(int(p.get("bytes") or 0) for p in b["pods"]) for b in mine]
            ),
            "nodes_used": spread([float(len([n for n, c in p.items() if c])) for p in placed]),
            "max_replicas_per_node": spread([float(max(p.values(), default=0)) for p in placed]),
        }
    return summary


#: A pull that moved less than this says little about the link's rate (manifests, a
#: small top layer): it is left out of the link efficiency.
EFFICIENCY_MIN_BYTES = MIB


#: A time the API gives in whole seconds is taken at the middle of its second.
HALF_SECOND = 0.5
#: The share of each end a trimmed mean leaves out.
TRIM = 0.1


def trimmed_mean(values: Sequence[float], cut: float = TRIM) -> float | None:
    """The mean of ``values`` without the lowest and highest ``cut`` of them.

    >>> trimmed_mean([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 100.0])
    1.0
    """
    if not values:
        return None
    ordered = sorted(values)
    drop = int(len(ordered) * cut)
    kept = ordered[drop : len(ordered) - drop] or ordered
    return _round(np.mean(kept))


#: A pod bound this long after its creation waited for room: binding alone takes tens of
#: milliseconds on the testbed.
SLOT_WAIT_MIN_S = 0.5


def slot_release_lags(
    pods: Sequence[Mapping[str, Any]], lifetimes: Mapping[str, float], slots: int
) -> list[float]:
    """For each pod of one run that waited for room (bound :data:`SLOT_WAIT_MIN_S` or more
    after its creation), how long after a slot of its node was nominally free it was
    bound. Of the pods bound to that node before it, all but ``slots - 1`` must have
    ended by then; the last of those to end, by its container's start (the API's whole
    second, taken at its middle) plus its trace lifetime, is the nominal end the
    simulator frees the slot at. The lag is what the kubelet and kube-scheduler add: the
    pod ended, reported terminal, the waiting pod retried and bound. A pod whose node
    was not nominally full (none to wait for) gives none.

    >>> run = [{"name": "a", "node": "n1", "created_wall_s": 0.0, "scheduled_at_s": 0.0,
    ...         "started_at_s": 2.0},
    ...        {"name": "b", "node": "n1", "created_wall_s": 1.0, "scheduled_at_s": 15.0,
    ...         "started_at_s": 16.0}]
    >>> slot_release_lags(run, {"a": 10.0, "b": 10.0}, 1)   # a ends at 12.5, b bound at 15
    [2.5]
    """
    lags = []
    for pod in pods:
        created, bound = pod.get("created_wall_s"), pod.get("scheduled_at_s")
        if created is None or bound is None or float(bound) - float(created) < SLOT_WAIT_MIN_S:
            continue
        ends = sorted(
            float(other["started_at_s"]) + HALF_SECOND + float(lifetimes[str(other["name"])])
            for other in pods
            if other.get("node") == pod.get("node")
            and other.get("scheduled_at_s") is not None
            and float(other["scheduled_at_s"]) < float(bound)
            and other.get("started_at_s") is not None
            and str(other.get("name")) in lifetimes
        )
        must_have_ended = len(ends) - (slots - 1)
        if must_have_ended > 0:
            lags.append(float(bound) - ends[must_have_ended - 1])
    return lags


#: Two pulls of a node overlap only by more than this: the Pulled event's time is kept to
#: the second, so back-to-back serial pulls can seem to overlap by up to a second.
OVERLAP_RESOLUTION_S = 1.0


def alone_on_the_link(pods: Sequence[Mapping[str, Any]]) -> list[bool]:
    """For each pod of one run, whether its own pull ran alone on its node's link: no
    other pull of the node (of at least :data:`CONCURRENT_PULL_MIN_S`) overlapped it by
    more than :data:`OVERLAP_RESOLUTION_S`. Serial pulls always are; parallel ones that
    shared the link moved at a share of its rate, which the simulator models itself.

    >>> alone_on_the_link([
    ...     {"node": "n1", "pulled": True, "pulled_at_s": 10.0, "pull_s": 4.0},
    ...     {"node": "n1", "pulled": True, "pulled_at_s": 12.0, "pull_s": 4.0},
    ...     {"node": "n1", "pulled": True, "pulled_at_s": 16.5, "pull_s": 4.0},
    ...     {"node": "n2", "pulled": True, "pulled_at_s": 10.0, "pull_s": 4.0}])
    [False, False, True, True]
    """
    intervals = [pull_interval(pod) for pod in pods]
    flags = []
    for i, (pod, mine) in enumerate(zip(pods, intervals, strict=True)):
        if mine is None:
            flags.append(False)
            continue
        shared = any(
            other is not None
            and j != i
            and pods[j].get("node") == pod.get("node")
            and other[1] - other[0] >= CONCURRENT_PULL_MIN_S
            and min(mine[1], other[1]) - max(mine[0], other[0]) > OVERLAP_RESOLUTION_S
            for j, other in enumerate(intervals)
        )
        flags.append(not shared)
    return flags


def overheads(
    runs: Sequence[Mapping[str, Any]],
    mode: str,
    rates: Mapping[str, int],
    lifetimes: Mapping[str, float] | None = None,
    slots: int = 1,
) -> dict[str, Any]:
    """What the calibrated simulator takes from the testbed, over every arm's replayed
    pods of ``mode``: how long after the create call kube-scheduler bound a pod (the
    median: a pod waiting for a free slot, which the simulator models, is in the tail;
    the Scheduled event's microseconds); how long after binding its pull was asked for
    (the Pulled event's time less the pull with its wait: the sandbox) and how long after
    the pull its container started (:func:`trimmed_mean` of each, the API's whole seconds
    taken at their middle); the share of its node's link rate a pull achieved (the
    median of bytes over the pull's own time, pulls of at least
    :data:`EFFICIENCY_MIN_BYTES` that ran alone on the link, :func:`alone_on_the_link`:
    the simulator shares the link between parallel pulls itself); and, given the trace's
    ``lifetimes`` (pod name to seconds) and ``slots`` per node, how long after a pod's
    nominal end its slot was taken again (the median of :func:`slot_release_lags`, and
    every one of them, for the simulator to draw each pod's from).
    ``pull_request_delay_s`` is binding plus sandbox: the simulator binds a pod the moment
    it has a slot.

    >>> pod = {"pulled": True, "node": "n1", "bytes": 8 * MIB, "pull_s": 8.0,
    ...        "pull_waited_s": 9.0, "created_wall_s": 0.0, "scheduled_at_s": 1.0,
    ...        "pulled_at_s": 12.0, "started_at_s": 13.0}
    >>> overheads([{"mode": "serial", "pods": [pod]}], "serial", {"n1": 8 * MIB})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'bound_after_s': 1.0, 'sandbox_s': 2.5, 'pull_request_delay_s': 3.5,
     'start_overhead_s': 1.0, 'link_efficiency': 1.0, 'slot_release_s': None,
     'slot_release_samples_s': [], 'slot_waits': 0, 'pods': 1}
    """
    bound, sandbox, start, efficiency, released = [], [], [], [], []
    for run in runs:
        if run.get("mode") != mode:
            continue
        if lifetimes is not None:
            released += slot_release_lags(run["pods"], lifetimes, slots)
        alone = alone_on_the_link(run["pods"])
        for pod, by_itself in zip(run["pods"], alone, strict=True):
            created, scheduled = pod.get("created_wall_s"), pod.get("scheduled_at_s")
            if created is None or scheduled is None:
                continue
            bound.append(float(scheduled) - float(created))
            if not pod.get("pulled") or pod.get("pulled_at_s") is None:
                continue
            pulled_at = float(pod["pulled_at_s"]) + HALF_SECOND
            if pod.get("pull_waited_s") is not None:
                sandbox.append(pulled_at - float(pod["pull_waited_s"]) - float(scheduled))
            if pod.get("started_at_s") is not None:
                start.append(float(pod["started_at_s"]) + HALF_SECOND - pulled_at)
            rate = rates.get(str(pod.get("node")))
            size, took = int(pod.get("bytes") or 0), float(pod.get("pull_s") or 0.0)
            if rate and by_itself and size >= EFFICIENCY_MIN_BYTES and took > 0:
                efficiency.append(min(size * 8 / rate / took, 1.0))
    bound_s = _round(float(np.median(bound))) if bound else None
    sandbox_s = trimmed_mean(sandbox)
    return {
        "bound_after_s": bound_s,
        "sandbox_s": sandbox_s,
        "pull_request_delay_s": (
            None
            if bound_s is None or sandbox_s is None
            else _round(max(bound_s, 0.0) + max(sandbox_s, 0.0))
        ),
        "start_overhead_s": None if not start else max(trimmed_mean(start) or 0.0, 0.0),
        "link_efficiency": _round(float(np.median(efficiency))) if efficiency else None,
        "slot_release_s": _round(max(float(np.median(released)), 0.0)) if released else None,
        # every one measured, for the simulator to draw each pod's from
        "slot_release_samples_s": sorted(_round(max(lag, 0.0)) for lag in released),
        "slot_waits": len(released),
        "pods": len(bound),
    }


def simulation_summary(
    sim: Mapping[str, Sequence[Mapping[str, Any]]], nothing_below: int = NOTHING_BYTES
) -> dict[str, Any]:
    """The simulator's runs (per arm, one per tie-break seed: ``startup_s``,
    ``bytes_pulled`` and ``queue_s`` per pod) summarised as :func:`summarise` does the
    real ones, with the speedup against the default profile seed by seed."""
    figures: dict[str, list[dict[str, Any]]] = {}
    for key, runs in sim.items():
        rows = []
        for run in runs:
            pods = [
                {"startup_s": s, "bytes": b, "pulled": b > 0, "wait_behind_s": q}
                for s, b, q in zip(
                    run["startup_s"],
                    run["bytes_pulled"],
                    run.get("queue_s") or [None] * len(run["startup_s"]),
                    strict=True,
                )
            ]
            rows.append(run_figures(pods, nothing_below))
        figures[key] = rows
    summary: dict[str, Any] = {}
    for key, rows in figures.items():
        entry: dict[str, Any] = {"seeds": len(rows)}
        for name in (
            "mean_startup_s",
            "p50_startup_s",
            "p95_startup_s",
            "bytes_pulled",
            "pulled_nothing_share",
            "mean_wait_behind_s",
        ):
            entry[name] = spread([row[name] for row in rows])
        # seed by seed; a baseline that ties in node order ran one seed, which every
        # seed of an arm that ties at random is compared with
        base_rows = figures.get(BASELINE, [])
        if len(base_rows) == 1:
            base_rows = base_rows * len(rows)
        entry["speedup"] = spread(
            [
                base["mean_startup_s"] / row["mean_startup_s"]
                for base, row in zip(base_rows, rows, strict=False)
                if base["mean_startup_s"] and row["mean_startup_s"]
            ]
        )
        summary[key] = entry
    return summary


def burst_simulation_summary(sim: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Per arm, the simulated time until all replicas start (the largest start-up) over
    the seeds."""
    return {
        key: {"all_ready_s": spread([max(run["startup_s"]) for run in runs])}
        for key, runs in sim.items()
    }


def agreement(real: Mapping[str, Any], simulated: Mapping[str, Any]) -> dict[str, float]:
    """Per arm, simulated over real mean start-up (means over rounds and seeds)."""
    ratios = {}
    for key, entry in real.items():
        mine = (entry.get("mean_startup_s") or {}).get("mean")
        sim = ((simulated.get(key) or {}).get("mean_startup_s") or {}).get("mean")
        if mine and sim:
            ratios[key] = _round(sim / mine)
    return ratios


def estimate_comparison(runs: Sequence[Mapping[str, Any]], mode: str) -> list[dict[str, Any]]:
    """Per round of ``mode``: the bytes ``layersched estimate`` called avoidable after the
    default profile's run, and the bytes each other arm of that round pulled fewer."""
    rows = []
    by_round: dict[int, dict[str, Mapping[str, Any]]] = {}
    for run in runs:
        if run.get("mode") == mode:
            by_round.setdefault(int(run["round"]), {})[run["arm"]] = run
    for number in sorted(by_round):
        base = by_round[number].get(BASELINE)
        if base is None or not isinstance(base.get("estimate"), Mapping):
            continue
        totals = base["estimate"].get("totals") or {}
        pulled = run_figures(base["pods"])["bytes_pulled"]
        saved = {
            key: pulled - run_figures(run["pods"])["bytes_pulled"]
            for key, run in by_round[number].items()
            if key != BASELINE
        }
        rows.append(
            {
                "round": number,
                "baseline_bytes": pulled,
                "estimate_avoidable_bytes": totals.get("avoidable_bytes"),
                "saved_bytes": saved,
            }
        )
    return rows


# ------------------------------------------------------------------ the block


def _cell(entry: Mapping[str, Any] | None, fmt: str, scale: float = 1.0) -> str:
    if not entry:
        return "-"
    mean, low, high = (entry[k] / scale for k in ("mean", "min", "max"))
    if entry.get("n", 1) == 1 or low == high:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ({format(low, fmt)}–{format(high, fmt)})"


def _ratio(entry: Mapping[str, Any] | None) -> str:
    cell = _cell(entry, ".2f")
    return cell if cell == "-" else cell.replace(" (", "× (", 1) if "(" in cell else cell + "×"


def links_text(cluster: Mapping[str, Any]) -> str:
    """The trace's links in words: one rate for all, or each node's, ``n1`` first."""
    rates = cluster.get("link_rates_bits_per_s")
    if rates is None:
        return f"{cluster['link_rate_bits_per_s'] / 1e6:g} Mbit/s links"
    if len(set(rates)) == 1:
        return f"{rates[0] / 1e6:g} Mbit/s links"
    return f"links of {', '.join(f'{r / 1e6:g}' for r in rates)} Mbit/s, n1 first"


def _simulation(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """The simulator's prediction the block shows: calibrated with the runs' measured
    overheads once the run finished, else the nominal one made before it."""
    found: Mapping[str, Any] = (
        results.get("simulation_calibrated") or results.get("simulation") or {}
    )
    return found


def overheads_sentence(results: Mapping[str, Any]) -> str:
    """What the simulator columns took as given, per pull mode, in words."""
    sim = results.get("simulation_calibrated")
    nominal = (
        "The simulator ran with the trace's nominal costs (a 1 s start, the links at their "
        "full rate): "
    )
    if not results["runs"]:
        return nominal + "the overheads are measured on the trace's replays, and this run had none."
    if not sim:
        return nominal + "the runs did not finish, so no measured overheads calibrate it."
    parts = []
    for mode in MODES:
        costs = (sim.get(mode) or {}).get("overheads")
        if costs:
            # a file calibrated before the slot release was measured says nothing of it
            released = (
                ""
                if costs.get("slot_release_s") is None
                else f", a pod's slot taken again {costs['slot_release_s']:.1f} s after its "
                "lifetime ended"
                + (
                    f" (the median; each simulated pod's drawn from the "
                    f"{len(costs['slot_release_samples_s'])} measured)"
                    if costs.get("slot_release_samples_s")
                    else ""
                )
            )
            parts.append(
                f"{mode}: a pull asked for {costs['pull_request_delay_s']:.1f} s after the pod's "
                f"creation, its container started {costs['start_overhead_s']:.1f} s after the "
                f"pull, a pull moved {costs['link_efficiency']:.0%} of the link's rate{released}"
            )
    by = results.get(SIMULATED_BY) or {}
    again = (
        f" They were recomputed from the recorded runs at commit `{str(by['commit'])[:12]}` "
        f"on {by.get('date')} (`harness/bench/replay.py resimulate`"
        + (", with uncommitted changes" if by.get("dirty") else "")
        + ")."
        if by.get("commit")
        else ""
    )
    return (
        "The simulator columns take from the runs what the simulator does not model, "
        "the medians over every arm's pods of each pull mode ("
        + "; ".join(parts)
        + "); placement, the pull queue and the shared links are its own."
        + again
    )


def _legacy(results: Mapping[str, Any]) -> str:
    record = results.get("provenance")
    return "\n".join(
        [
            f"`{DEFAULT_RESULTS}` holds a replay from before issue 42's fair replay: its "
            "baseline was ImageLocality alone, not kube-scheduler's default profile, and it "
            "ran serial pulls only. Its figures are not shown; `make replay RESULTS=commit`, "
            f"then `{REGENERATE}`, measures and renders the fair one.",
            "",
            provenance.describe(record),
        ]
    )


def mode_sentence(mode: str) -> str:
    if mode == SERIAL:
        return "serial pulls (the kubelet's default, `serializeImagePulls: true`)"
    return (
        f"parallel pulls (`serializeImagePulls: false`, `maxParallelImagePulls: "
        f"{MAX_PARALLEL_PULLS[PARALLEL]}`)"
    )


def mode_tables(results: Mapping[str, Any], mode: str) -> list[str]:
    """The two tables of one pull mode: start-up with the simulator beside it, then where
    the time went."""
    trace = results["trace"]
    nothing_below = int(trace.get("smallest_layer_bytes") or NOTHING_BYTES)
    nodes = (results.get("testbed") or {}).get("nodes") or []
    summary = summarise(results["runs"], mode, nothing_below, nodes)
    if not summary:
        return []
    sim = (_simulation(results).get(mode) or {}).get("trace") or {}
    sim_summary = simulation_summary(sim, nothing_below)
    agree = agreement(summary, sim_summary)
    placed = (_simulation(results).get(mode) or {}).get("placed") or {}
    on_real_nodes = agreement(summary, simulation_summary(placed, nothing_below))
    lines = [
        f"**{mode_sentence(mode)[:1].upper()}{mode_sentence(mode)[1:]}**",
        "",
        "| arm | mean start-up (s) | p50 (s) | p95 (s) | speedup vs default (mean) "
        "| speedup (p95) | pulled (MiB) | simulator: mean (s) | simulator: speedup "
        "| simulator / real | on the real nodes / real |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ordered = [k for k in ARM_KEYS if k in summary] + [k for k in summary if k not in ARM_KEYS]
    for key in ordered:
        entry = summary[key]
        simulated = sim_summary.get(key) or {}
        ratio = agree.get(key)
        flag = "" if ratio is None or abs(ratio - 1) <= AGREEMENT else " **off**"
        real_nodes = on_real_nodes.get(key)
        lines.append(
            f"| {arm(key).label} | {_cell(entry['mean_startup_s'], '.1f')} "
            f"| {_cell(entry['p50_startup_s'], '.1f')} | {_cell(entry['p95_startup_s'], '.1f')} "
            f"| {_ratio(entry['speedup'])} | {_ratio(entry['p95_speedup'])} "
            f"| {_cell(entry['bytes_pulled'], ',.0f', MIB)} "
            f"| {_cell(simulated.get('mean_startup_s'), '.1f')} "
            f"| {_ratio(simulated.get('speedup'))} "
            f"| {'-' if ratio is None else f'{ratio:.2f}'}{flag} "
            f"| {'-' if real_nodes is None else f'{real_nodes:.2f}'} |"
        )
    lines += [
        "",
        "| arm | pulled no layer | wait behind other pulls, per pulling pod: mean (s) "
        "| p95 (s) | concurrent pulls per node: mean | most | pods per node: fewest | most "
        "| simulator: wait (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in ordered:
        entry = summary[key]
        simulated = sim_summary.get(key) or {}
        lines.append(
            f"| {arm(key).label} | {_cell(entry['pulled_nothing_share'], '.0%')} "
            f"| {_cell(entry['mean_wait_behind_s'], '.1f')} "
            f"| {_cell(entry['p95_wait_behind_s'], '.1f')} "
            f"| {_cell(entry['mean_concurrent_pulls'], '.2f')} "
            f"| {_cell(entry['max_concurrent_pulls'], '.0f')} "
            f"| {_cell(entry['min_pods_per_node'], '.0f')} "
            f"| {_cell(entry['max_pods_per_node'], '.0f')} "
            f"| {_cell(simulated.get('mean_wait_behind_s'), '.1f')} |"
        )
    off = [arm(k).label for k, r in agree.items() if abs(r - 1) > AGREEMENT]
    lines += [
        "",
        (
            f"Simulated and real mean start-up differ by more than {AGREEMENT:.0%} for: "
            + "; ".join(off)
            + " (docs/replay.md says where to look in the per-pod records)."
            if off
            else f"Simulated and real mean start-up agree within {AGREEMENT:.0%} for every arm."
        ),
        "",
    ]
    if on_real_nodes:
        apart = [arm(k).label for k, r in on_real_nodes.items() if abs(r - 1) > AGREEMENT]
        moved = [int(run.get("unfollowed") or 0) for runs in placed.values() for run in runs]
        lines += [
            "The last column is the simulator on each run's own nodes (a pod goes to the "
            "node the real scheduler chose whenever it has a free slot there, "
            f"{min(moved)}–{max(moved)} of a run's {trace.get('pods', '?')} pods found it "
            "full and went where the arm's scores sent them; the pull queue, links, slots "
            "and overheads its own): "
            + (
                "within " + f"{AGREEMENT:.0%} of the real start-up for every arm, so where "
                "the simulator columns differ more, they differ in placement."
                if not apart
                else f"more than {AGREEMENT:.0%} from the real start-up for: "
                + "; ".join(apart)
                + "."
            ),
            "",
        ]
    return lines


def burst_table(results: Mapping[str, Any]) -> list[str]:
    """The burst: time until all replicas are Ready, per arm and pull mode, against the
    default profile, the simulator beside each."""
    bursts = results.get("bursts") or []
    if not bursts:
        return []
    spec = results.get("burst") or {}
    summaries = {mode: summarise_bursts(bursts, mode) for mode in MODES}
    sims = {
        mode: burst_simulation_summary((_simulation(results).get(mode) or {}).get("burst") or {})
        for mode in MODES
    }
    keys = list(dict.fromkeys(k for mode in MODES for k in summaries[mode]))
    keys = [k for k in ARM_KEYS if k in keys] + [k for k in keys if k not in ARM_KEYS]
    lines = [
        f"**The burst**: a Deployment of {spec.get('replicas', '?')} replicas of "
        f"`{spec.get('image', '?')}` ({(spec.get('image_bytes') or 0) / MIB:,.1f} MiB, on no "
        f"node), each requesting 1/{spec.get('slots_per_node', '?')} of a node, created at "
        "once; the time from its creation to its last replica Ready (the API's timestamps, "
        "1 s), over the rounds.",
        "",
        "| arm | serial: all Ready (s) | vs default | nodes used | parallel: all Ready (s) "
        "| vs default | nodes used | simulator: serial (s) | simulator: parallel (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        serial = summaries[SERIAL].get(key) or {}
        parallel = summaries[PARALLEL].get(key) or {}
        lines.append(
            f"| {arm(key).label} | {_cell(serial.get('all_ready_s'), '.1f')} "
            f"| {_ratio(serial.get('speedup'))} | {_cell(serial.get('nodes_used'), '.1f')} "
            f"| {_cell(parallel.get('all_ready_s'), '.1f')} | {_ratio(parallel.get('speedup'))} "
            f"| {_cell(parallel.get('nodes_used'), '.1f')} "
            f"| {_cell((sims[SERIAL].get(key) or {}).get('all_ready_s'), '.1f')} "
            f"| {_cell((sims[PARALLEL].get(key) or {}).get('all_ready_s'), '.1f')} |"
        )
    return [*lines, ""]


def markdown(results: Mapping[str, Any], source: str = DEFAULT_RESULTS) -> str:
    """The block: per pull mode the arms' start-up (speedups against the default
    profile) with the simulator beside it and where the time went, the burst, the
    estimate check, and where the figures come from (``source``, the results file)."""
    if results.get("format") != FORMAT:
        return _legacy(results)
    trace = results["trace"]
    cluster = trace["cluster"]
    plan = results.get("plan") or {}
    asked = int(plan.get("rounds") or 0)
    steps = [*results["runs"], *(results.get("bursts") or [])]
    done = len({int(step["round"]) for step in steps})
    sim_seeds = (results.get("simulation") or {}).get("seeds_count", 0)
    what = (
        " replayed"
        if results["runs"]
        else ": its burst only (the trace not replayed), the Deployment run"
    )
    lines = [
        f"Generated by `{REGENERATE}` from `{source}` (`make replay`): "
        f"`{trace_file(trace['path'])}` (seed {trace['seed']}: {trace['pods']} pods of "
        f"{trace['images']} images, {trace['layers']} distinct layers, "
        f"{trace['distinct_bytes'] / MIB:,.0f} MiB)"
        f"{what} through the real kube-schedulers of the local testbed "
        f"({cluster['nodes']} nodes × {cluster['containers_per_node']} slots, "
        f"{links_text(cluster)}), {done} round{'s' if done != 1 else ''}, every arm once a "
        "round in each pull mode, the order rotated each round"
        + (f" (**{asked} were asked; the others did not run**)" if asked and done < asked else "")
        + (
            ". Start-up is pod creation to container start from the API's timestamps "
            "(1 s resolution); each cell is the mean over the rounds (their range); speedups "
            "are the default profile's figure over the arm's, round by round. The waits are "
            "the kubelet's own (its Pulled event: the pull with and without its wait in the "
            "pull queue). The simulator columns are `layersched_harness.sim` on the same "
            "trace, each arm as its kube-scheduler profile places pods, "
            f"{sim_seeds} tie-break seeds."
            if results["runs"]
            else ". Speedups are the default profile's time over the arm's, round by round. "
            "The simulator columns are `layersched_harness.sim` on the same burst, each arm "
            f"as its kube-scheduler profile places pods, {sim_seeds} tie-break seeds."
        ),
        "",
    ]
    lines += [overheads_sentence(results), ""]
    for mode in MODES:
        lines += mode_tables(results, mode)
    lines += burst_table(results)
    low, high = HOTEDGE_RANGE
    lines += [f"HotEdge '20 reports {low}–{high}× with dependency-aware scheduling.", ""]
    for mode in MODES:
        estimates = estimate_comparison(results["runs"], mode)
        if not estimates:
            continue
        avoidable = spread([row["estimate_avoidable_bytes"] for row in estimates])
        keys = [k for k in ARM_KEYS if k != BASELINE]
        saved = {k: spread([row["saved_bytes"].get(k) for row in estimates]) for k in keys}
        said = "; ".join(
            f"{arm(k).label} pulled {_cell(entry, ',.0f', MIB)} MiB less"
            for k, entry in saved.items()
            if entry
        )
        lines += [
            f"**`layersched estimate`** ({mode} pulls), run on the live cluster after each "
            f"default-profile run, called {_cell(avoidable, ',.0f', MIB)} MiB of that run's "
            f"pulls avoidable; in the same rounds {said}.",
            "",
        ]
    record = results.get("provenance")
    lines.append(provenance.describe(record))
    why = provenance.why_overloaded(record)
    if why:
        lines.append(f"**Inconclusive as a benchmark: {why}.**")
    return "\n".join(lines)


def _plotted(results: Mapping[str, Any]) -> tuple[str, str]:
    """What the plot draws: the replays (``runs``, simulated as ``trace``), or the bursts
    when the file ran only those."""
    return ("runs", "trace") if results["runs"] else ("bursts", "burst")


def plotted_modes(results: Mapping[str, Any]) -> list[str]:
    """The pull modes the file ran, a panel each (a serial-only run draws one); both when
    it ran none yet."""
    steps = results.get(_plotted(results)[0]) or []
    ran = [m for m in MODES if any(step.get("mode") == m for step in steps)]
    return ran or list(MODES)


def plot_size(results: Mapping[str, Any]) -> tuple[float, float]:
    """The figure's size in inches: 6 wide a panel."""
    return (6.0 * len(plotted_modes(results)), 4.6)


def plot(results: Mapping[str, Any], path: Path) -> None:
    """The start-up distributions (CDF) per pull mode, real (pooled over the rounds) and
    simulated: of the trace's pods, or of the burst's replicas when the file ran only
    bursts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key_of_runs, key_of_sim = _plotted(results)
    modes = plotted_modes(results)
    fig, grid = plt.subplots(1, len(modes), figsize=plot_size(results), sharey=True)
    axes = np.atleast_1d(grid)
    for ax, mode in zip(axes, modes, strict=True):
        colours = {}
        runs = [run for run in results.get(key_of_runs) or [] if run.get("mode") == mode]
        for key in dict.fromkeys(run["arm"] for run in runs):
            values = sorted(
                v for run in runs if run["arm"] == key for v in _values(run["pods"], "startup_s")
            )
            if not values:
                continue
            ys = np.arange(1, len(values) + 1) / len(values)
            (line,) = ax.step(values, ys, where="post", label=f"{key} (testbed)")
            colours[key] = line.get_color()
        sim = (_simulation(results).get(mode) or {}).get(key_of_sim) or {}
        for key, sim_runs in sim.items():
            values = sorted(v for run in sim_runs for v in run["startup_s"])
            if not values or key not in colours:
                continue
            ys = np.arange(1, len(values) + 1) / len(values)
            ax.step(values, ys, where="post", linestyle="--", color=colours[key])
        what = "" if key_of_runs == "runs" else "the burst, "
        ax.set_title(f"{what}{mode} pulls (dashed: simulator)")
        ax.set_xlabel("start-up: pod creation to container start (s)")
        ax.grid(alpha=0.3)
        if colours:
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("share of pods")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata=plot_metadata(results.get("provenance")))
    plt.close(fig)
