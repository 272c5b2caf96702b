"""The event-driven cluster model, scheduled by the production strategies.

**Scheduling.** Pods wait in one FIFO queue. Whenever a pod is at its head and
some node has a free container slot, the candidates are the nodes with a free
slot; the strategy scores them through the *core* ``Strategy.score`` against the
*core* :class:`LayerIndex`; the highest score wins and ties are broken by
a seeded random choice. ``random`` scores every candidate 0, so it is pure
tie-breaking. Given a kube-scheduler :class:`~layersched_harness.sim.kube.Profile` instead
(a replayed trace), the candidates are scored as that profile does: the default
plugins' resource and topology spreading and ImageLocality beside the strategy's score
(as a plugin or through an extender), ties broken as kube-scheduler breaks them
(:mod:`layersched_harness.sim.kube`).

**Nodes.** Each node has ``containers_per_node`` slots (a pod holds one from
binding to exit, pulling included), an image store of ``store_capacity_bytes``
and a link of ``bandwidth_bits_per_s``.

**Pulling.** A pod bound to a node whose image the node does not hold asks the node
for a pull (``pull_request_delay_s`` after binding: the kubelet creates the pod's
sandbox first). A pull fetches the layers of the image the node holds neither on disk
nor in flight, as one job, and waits for those another pull is already fetching
(containerd fetches a blob once). Concurrent jobs on one node share its link equally
(processor sharing): two equal pulls that start together both finish after twice the
time of one. A node's rate is what a pull alone achieves; given ``lone_pull_efficiency``
(the measured share of the link a lone pull moves), pulls at once share the whole link,
as the replay's parallel runs did. ``max_parallel_pulls`` bounds the pulls a node runs at
once, as the kubelet's pull queue does: 1 is its default ``serializeImagePulls`` (one pull at a
time, first come first served, and a pull queued behind another of the same image then
finds it present), N its ``maxParallelImagePulls``, 0 no bound. A pulling pod's wait
behind other pulls is the time its request spent queued.
``startup = queue wait + pull wait + start_overhead_s``.

**Ends.** A pod holds its slot for its duration after it started, and then for
``slot_release_delay_s`` more: the time a real cluster takes from a pod's end to a pod
waiting for room being bound there (the kubelet ending the pod, its container stopped, the
pod reported terminal, kube-scheduler retrying the pods that waited). Given measured
delays instead (``slot_release_delays_s``), each pod's is one of them drawn at random
(seeded, a stream of its own beside the tie-breaks'): a queue's waits grow faster than its
delays, so their spread matters, not only their middle. Its owner's PodTopologySpread
count and its image's use last as long.

**What the scheduler sees.** A layer enters the inventory when its pull
completes; an image *name* (what ``image-locality`` uses) when every layer of the
image is on disk. Both leave it on eviction. A strategy that counts the pulls in flight
(``in-flight``, :class:`~layersched.core.strategies.base.InFlightAware`) is told of each
pod from its binding until it starts (its image's layers, and its bind time in whole
seconds, :data:`BIND_TIME_RESOLUTION_S`: the extender and the Go plugin read a bound pod's
``PodScheduled`` condition, whose ``lastTransitionTime`` the API keeps to the second), and
reads the simulated clock. The kubelet's ~30 s status lag is
not modelled: every strategy sees the same, fresher state.

**Eviction.** Like the kubelet's image GC: when a new pull would overflow the
store, images no container uses are removed - least recently used first (``lru``)
or least frequently used first (``lfu``, ties: least recent) - until usage is at
most ``gc_target_fraction`` of the capacity minus the incoming pull. A layer is
freed with the last image on the node that references it. If every image is in
use the store is overcommitted and the run counts it.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from layersched.core.errors import InputError
from layersched.core.indexstorage import IndexArray
from layersched.core.inflight import PendingPull, PendingPulls
from layersched.core.layerindex import LayerIndex, LayerIndexView
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeInfo
from layersched.core.pod import PodImages
from layersched.core.strategies import NodeScores, Strategy, get_strategy
from layersched.core.strategies.base import InFlightAware, PerNodeStrategy, zeros
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.pull_time import BANDWIDTH_KEY
from layersched_harness.sim import kube
from layersched_harness.sim.corpus import Corpus
from layersched_harness.sim.workload import Workload

FloatArray = npt.NDArray[np.float64]

GIB = 1024**3
BITS_PER_BYTE = 8
#: Pull completion is detected in floating-point virtual time; a job whose
#: remaining bytes are below this is done (far below any layer size).
_DONE_EPSILON_BYTES = 1e-3
#: How often (in arrivals) the progress callback is told the simulated time.
_PROGRESS_EVERY = 2000
#: An event version marking a pod's delayed pull request (not a node's pull progress).
_ASK = -1
#: The resolution of the bind time in-flight scoring reads (``core.boundpod.bound_at_s``:
#: the ``PodScheduled`` condition's ``lastTransitionTime``, whole seconds).
BIND_TIME_RESOLUTION_S = 1.0

Eviction = Literal["lru", "lfu"]


@dataclass(frozen=True, slots=True)
class ClusterParams:
    """The simulated cluster. Defaults: the ``hotedge20`` setting.

    That is depsched's (HotEdge '20) cluster plus two things depsched did not
    model, both our choices (``docs/simulator.md``): a 1 Gbit/s link per node
    shared by its concurrent pulls, and a 1 s start overhead.
    """

    #: Number of nodes.
    nodes: int = 200
    #: Container slots per node.
    containers_per_node: int = 16
    #: Image store capacity per node (compressed bytes).
    store_capacity_bytes: int = 32 * GIB
    #: Image eviction order when the store is full.
    eviction: Eviction = "lfu"
    #: Eviction frees down to this fraction of the capacity (depsched: 0.9).
    gc_target_fraction: float = 0.9
    #: Link bandwidth range; nodes get log-uniform draws in it (equal ends: homogeneous).
    bandwidth_bits_per_s: tuple[float, float] = (1e9, 1e9)
    #: Each node's bandwidth, given (a replay trace's links): one per node, no draw.
    node_bandwidth_bits_per_s: tuple[float, ...] = ()
    #: Fixed cost of creating and starting a container once its layers are present.
    start_overhead_s: float = 1.0
    #: Pulls a node runs at once, the rest queued first come first served: 1 as a kubelet
    #: with ``serializeImagePulls: true`` (its default), N with ``maxParallelImagePulls:
    #: N``; 0: no bound (every pull starts at once). Concurrent pulls share the link
    #: equally.
    max_parallel_pulls: int = 0
    #: The share of its node's rate (``bandwidth_bits_per_s``) a pull alone on the link
    #: moves: a node's rate is what a lone pull achieves (its own round trips and
    #: unpacking), and two or more pulls at once share ``rate / lone_pull_efficiency``, the
    #: whole link, each overlapping its fixed costs with the others' transfer. 1: a lone
    #: pull fills the link.
    lone_pull_efficiency: float = 1.0
    #: From binding to the pod's pull request (the kubelet creates the sandbox first).
    pull_request_delay_s: float = 0.0
    #: From a pod's end (its duration after its start) to its slot being free for the
    #: scheduler again (see the module docstring: Ends).
    slot_release_delay_s: float = 0.0
    #: Measured such delays, one drawn per pod (seeded); empty: ``slot_release_delay_s``.
    slot_release_delays_s: tuple[float, ...] = ()
    #: A node's allocatable cpu and memory, and what each pod requests, in any one unit
    #: per resource (kube-scheduler's resource scores read them); empty: the node is
    #: ``containers_per_node`` units of each and a pod requests one.
    node_allocatable: tuple[int, int] | None = None
    pod_requests: tuple[int, int] | None = None

    def allocatable_and_requests(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """``node_allocatable`` and ``pod_requests``, or the slots as units."""
        if self.node_allocatable is not None and self.pod_requests is not None:
            return self.node_allocatable, self.pod_requests
        return (self.containers_per_node, self.containers_per_node), (1, 1)


class RandomPlacement(PerNodeStrategy):
    """``random``: every candidate scores 0, so placement is the seeded tie-break."""

    name: ClassVar[str] = "random"
    needs_layers: ClassVar[bool] = False

    def score(
        self,
        pod: PodImages,
        layers: Sequence[Layer],
        index: LayerIndexView,
        candidates: IndexArray,
    ) -> NodeScores:
        return NodeScores(candidates, zeros(candidates), zeros(candidates), 0)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one strategy achieved on one workload."""

    strategy: str
    #: Startup time of every measured pod (arrived after the warm-up), seconds.
    startup_s: FloatArray
    #: The same pods' queue + pull wait: startup minus the fixed start overhead, seconds.
    wait_s: FloatArray
    #: Bytes pulled over the whole run.
    bytes_pulled: int
    #: Mean over scheduling decisions of max(node load) / mean(node load).
    load_imbalance: float
    #: Wall-clock time of each ``Strategy.score`` call, seconds.
    decision_time_s: FloatArray
    #: Pods that found no free slot on arrival and queued.
    queued_pods: int
    #: Images evicted, and pulls that overcommitted a store with every image in use.
    evicted_images: int
    overcommitted_pulls: int
    #: Simulated time at which the last pod exited.
    end_s: float
    #: Per request (arrival order, warm-up included): the node index it ran on, its
    #: startup (seconds) and the bytes its own pull fetched (0 when it found every layer on
    #: the node or in flight for another pod).
    pod_node: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    pod_startup_s: FloatArray = field(default_factory=lambda: np.zeros(0, np.float64))
    pod_bytes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Per request: its pull's wait in the node's pull queue behind other pulls, and the
    #: pull itself (from leaving the queue to its layers all present); NaN: no pull (the
    #: image was on the node when the pod asked).
    pod_queue_s: FloatArray = field(default_factory=lambda: np.zeros(0, np.float64))
    pod_pull_s: FloatArray = field(default_factory=lambda: np.zeros(0, np.float64))
    #: Given placements to follow: the pods whose node had no free slot when the pod was
    #: placed, and went where the scores sent it instead.
    unfollowed: int = 0


# --------------------------------------------------------------------- state
@dataclass(slots=True)
class _Image:
    in_use: int = 0
    uses: int = 0
    last_used_s: float = 0.0
    present: bool = False


@dataclass(slots=True, eq=False)
class _Job:
    size_bytes: int
    layers: list[int]
    finish_v: float = 0.0
    waiters: list[_Pod] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Pod:
    request: int
    image: int
    node: int = -1
    #: Jobs its pull waits for.
    pending: int = 0
    #: When it asked for a pull and when the pull left the queue (NaN: not yet).
    asked_s: float = math.nan
    began_s: float = math.nan
    #: Whether its pull holds one of the node's pull slots.
    pulling: bool = False
    #: Whether it ended (a delayed pull request of an ended pod is void).
    ended: bool = False


@dataclass(slots=True, eq=False)
class _Node:
    index: int
    bytes_per_s: float
    present: set[int] = field(default_factory=set)
    inflight: dict[int, _Job] = field(default_factory=dict)
    refs: dict[int, int] = field(default_factory=dict)
    images: dict[int, _Image] = field(default_factory=dict)
    used_bytes: int = 0
    # processor sharing in virtual time: every active job receives service at
    # bytes_per_s / len(active); a job ends when vtime reaches its finish_v
    vtime: float = 0.0
    vtime_at_s: float = 0.0
    active: list[tuple[float, int, _Job]] = field(default_factory=list)
    #: Pull requests waiting for a pull slot (``max_parallel_pulls``), and those holding one.
    waiting: deque[_Pod] = field(default_factory=deque)
    pulls: int = 0
    #: Bound pods not ended, by owner (PodTopologySpread's count).
    owned: dict[int, int] = field(default_factory=dict)
    version: int = 0


def node_bandwidths(params: ClusterParams, seed: int) -> FloatArray:
    """Seeded per-node bandwidths, log-uniform over ``params.bandwidth_bits_per_s``, or
    ``params.node_bandwidth_bits_per_s`` when given (the same for every seed)."""
    given = params.node_bandwidth_bits_per_s
    if given:
        if len(given) != params.nodes or min(given) <= 0:
            raise InputError(
                f"node bandwidths {list(given)}: give one positive rate per node ({params.nodes})"
            )
        return np.asarray(given, dtype=np.float64)
    lo, hi = params.bandwidth_bits_per_s
    if not 0 < lo <= hi:
        raise InputError(f"bandwidth range {lo}..{hi} bit/s must satisfy 0 < low <= high")
    rng = np.random.default_rng(seed)
    draws: FloatArray = np.exp(rng.uniform(np.log(lo), np.log(hi), size=params.nodes))
    return draws


class _Simulation:
    def __init__(
        self,
        corpus: Corpus,
        workload: Workload,
        cluster: ClusterParams,
        strategy: Strategy | None,
        seed: int,
        warmup_s: float,
        profile: kube.Profile | None = None,
        follow: Sequence[int] | None = None,
    ) -> None:
        self.corpus = corpus
        #: Each request's node, to place it there when that node has a free slot.
        self.follow = None if follow is None else [int(node) for node in follow]
        self.unfollowed = 0
        self.workload = workload
        self.cluster = cluster
        self.strategy = strategy
        self.profile = profile
        self.image_locality = (
            get_strategy(IMAGE_LOCALITY)
            if profile is not None and profile.image_locality_weight
            else None
        )
        self.rng = np.random.default_rng(seed)
        #: The slots' release delays drawn per pod, from a stream the tie-breaks do not use.
        self.release_rng = np.random.default_rng([seed, 1])
        self.release_delays = np.asarray(cluster.slot_release_delays_s, dtype=np.float64)
        #: The node kube-scheduler's filtering starts from (its ``nextStartNodeIndex`` over
        #: the nodes in name order), when the profile says so: ``seed`` modulo the nodes,
        #: so that any run of as many seeds as nodes starts from each node once (a few
        #: random draws leave starts out: ten seeds drew three of six nodes).
        self.first_node = (
            seed % cluster.nodes if profile is not None and profile.rotate_node_order else 0
        )
        self.warmup_s = warmup_s
        # corpus as dense ids
        layer_ids: dict[str, int] = {}
        self.layers: list[Layer] = []
        self.image_layers: list[tuple[int, ...]] = []
        for image in corpus.images:
            ids = []
            for layer in image.layers:
                lid = layer_ids.get(layer.digest)
                if lid is None:
                    lid = layer_ids[layer.digest] = len(self.layers)
                    self.layers.append(layer)
                ids.append(lid)
            self.image_layers.append(tuple(dict.fromkeys(ids)))
        self.image_size = [image.size_bytes for image in corpus.images]
        self.image_name = [image.name for image in corpus.images]
        self.pods = [PodImages.of(name, name=f"pod-{i}") for i, name in enumerate(self.image_name)]
        #: Each image's distinct layers, resolved once: what the strategy scores a pod with.
        needs_layers = strategy is not None and strategy.needs_layers
        self.pod_layers = [
            tuple(self.layers[lid] for lid in ids) if needs_layers else ()
            for ids in self.image_layers
        ]
        #: Nodes holding each image whole, and images some pod of was scored already (what
        #: the plugin's knowledge of an image's layers depends on).
        self.holders = [0] * len(corpus.images)
        self.scored_images: set[int] = set()
        self.allocatable, self.requests = cluster.allocatable_and_requests()
        # nodes
        bandwidths = node_bandwidths(cluster, seed)
        self.layer_index = LayerIndex()
        self.nodes: list[_Node] = []
        for i, bits in enumerate(bandwidths):
            info = NodeInfo(f"node-{i:05d}", labels={BANDWIDTH_KEY: f"{bits:.0f}"})
            self.layer_index.add_node(info)
            self.nodes.append(_Node(i, float(bits) / BITS_PER_BYTE))
        self.free = np.full(cluster.nodes, cluster.containers_per_node, dtype=np.int64)
        self.total_free = cluster.nodes * cluster.containers_per_node
        # bookkeeping
        # (time, tie-break sequence, node whose pull may end | pod that exits or asks for
        # its pull (version -1), node version)
        self.events: list[tuple[float, int, _Node | _Pod, int]] = []
        self.seq = itertools.count()
        self.queue: deque[_Pod] = deque()
        self.wait_s: list[float] = []
        self.decision_s: list[float] = []
        self.imbalance: list[float] = []
        self.bytes_pulled = 0
        n = len(workload)
        self.pod_node = np.full(n, -1, dtype=np.int64)
        self.pod_startup_s = np.full(n, np.nan, dtype=np.float64)
        self.pod_bytes = np.zeros(n, dtype=np.int64)
        self.pod_queue_s = np.full(n, np.nan, dtype=np.float64)
        self.pod_pull_s = np.full(n, np.nan, dtype=np.float64)
        self.queued = 0
        self.evicted = 0
        self.overcommitted = 0
        self.now = 0.0
        #: An in-flight strategy's pending pulls, kept here; None for the others.
        self.pending: PendingPulls | None = None
        if isinstance(strategy, InFlightAware):
            self.pending = strategy.pending
            strategy.clock = lambda: self.now

    # ------------------------------------------------------------- the loop
    def run(self, on_progress: Callable[[float], None] | None) -> None:
        arrivals = self.workload.arrival_s
        images = self.workload.image
        n = len(arrivals)
        i = 0
        while i < n or self.events:
            next_arrival = float(arrivals[i]) if i < n else np.inf
            if self.events and self.events[0][0] <= next_arrival:
                self.now, _, target, version = heapq.heappop(self.events)
                if isinstance(target, _Pod):
                    if version == _ASK:
                        self._ask(target)
                    else:
                        self._finish(target)
                elif version == target.version:  # else superseded by a later reschedule
                    self._pull_progress(target)
                continue
            self.now = next_arrival
            if self.total_free == 0 or self.queue:
                self.queued += 1
            self.queue.append(_Pod(i, int(images[i])))
            i += 1
            self._drain()
            if on_progress is not None and i % _PROGRESS_EVERY == 0:
                on_progress(self.now)

    def _push(self, at_s: float, target: _Node | _Pod, version: int = 0) -> None:
        heapq.heappush(self.events, (at_s, next(self.seq), target, version))

    # ------------------------------------------------------------ scheduling
    def _drain(self) -> None:
        while self.queue and self.total_free > 0:
            self._schedule(self.queue.popleft())

    def _schedule(self, pod: _Pod) -> None:
        if self.follow is not None:
            wanted = self.follow[pod.request]
            if self.free[wanted] > 0:
                self._place(pod, self.nodes[wanted])
                return
            self.unfollowed += 1
        candidates = np.flatnonzero(self.free > 0)
        if self.profile is not None and self.first_node:
            # kube-scheduler filters nodes from its start index on (kube.py)
            candidates = np.roll(candidates, -int(np.searchsorted(candidates, self.first_node)))
        started = time.perf_counter()
        if self.profile is None:
            assert self.strategy is not None  # simulate() checks
            result = self.strategy.score(
                self.pods[pod.image], self.pod_layers[pod.image], self.layer_index, candidates
            )
            scores = result.scores
            best = np.flatnonzero(scores == scores.max())
            pick = int(best[0] if len(best) == 1 else best[self.rng.integers(len(best))])
        else:
            pick = kube.pick(
                self._profile_totals(pod, candidates), self.rng, self.profile.random_ties
            )
        self.decision_s.append(time.perf_counter() - started)
        if self.workload.arrival_s[pod.request] >= self.warmup_s:
            per_node = self.cluster.containers_per_node
            busy = per_node * len(self.free) - self.total_free
            if busy:
                most = per_node - int(self.free.min())
                self.imbalance.append(most * len(self.free) / busy)
        self._place(pod, self.nodes[int(candidates[pick])])

    def _profile_totals(self, pod: _Pod, candidates: IndexArray) -> list[int]:
        """Each candidate's total score under :attr:`profile` (see :mod:`.kube`)."""
        profile = self.profile
        assert profile is not None
        totals = [0] * len(candidates)
        if profile.resource_plugins:
            slots = self.cluster.containers_per_node
            for k, node in enumerate(candidates):
                bound = slots - int(self.free[node])
                before = [bound * r for r in self.requests]
                after = [(bound + 1) * r for r in self.requests]
                totals[k] += kube.FIT_WEIGHT * kube.least_allocated(after, self.allocatable)
                totals[k] += kube.BALANCED_WEIGHT * kube.balanced_allocation(
                    after, before, self.allocatable
                )
        owner = self.workload.owner_of(pod.request)
        if profile.topology_spread_weight and owner is not None:
            matching = [self.nodes[int(node)].owned.get(owner, 0) for node in candidates]
            for k, score in enumerate(kube.topology_spread(matching)):
                totals[k] += profile.topology_spread_weight * score
        if self.image_locality is not None:
            located = self.image_locality.score(
                self.pods[pod.image], (), self.layer_index, candidates
            )
            for k, score in enumerate(located.scores):
                totals[k] += profile.image_locality_weight * int(score)
        if self.strategy is not None and self._knows(pod.image):
            layered = self.strategy.score(
                self.pods[pod.image], self.pod_layers[pod.image], self.layer_index, candidates
            )
            for k, score in enumerate(layered.scores):
                totals[k] += (
                    kube.extender_points(int(score), profile.weight)
                    if profile.via == "extender"
                    else profile.weight * int(score)
                )
        self.scored_images.add(pod.image)
        return totals

    def _knows(self, image: int) -> bool:
        """Whether the profile's layer score knows ``image``'s layers now."""
        profile = self.profile
        assert profile is not None
        if profile.knowledge == "registry":
            return True
        if self.holders[image] >= profile.image_quorum:
            return True
        return profile.knowledge == "resolved" and image in self.scored_images

    def _place(self, pod: _Pod, node: _Node) -> None:
        pod.node = node.index
        self.pod_node[pod.request] = node.index
        self.free[node.index] -= 1
        self.total_free -= 1
        owner = self.workload.owner_of(pod.request)
        if owner is not None:
            node.owned[owner] = node.owned.get(owner, 0) + 1
        entry = node.images.get(pod.image)
        if entry is None:
            entry = node.images[pod.image] = _Image()
            for lid in self.image_layers[pod.image]:
                node.refs[lid] = node.refs.get(lid, 0) + 1
        entry.in_use += 1
        entry.uses += 1
        entry.last_used_s = self.now
        if self.pending is not None:  # bound, not started: what in-flight scoring counts
            name = self.layer_index.nodes[node.index].name
            bound_s = math.floor(self.now / BIND_TIME_RESOLUTION_S) * BIND_TIME_RESOLUTION_S
            pull = PendingPull(f"pod-{pod.request}", bound_s, self.pod_layers[pod.image])
            self.pending.put(name, pull)
        delay_s = self.cluster.pull_request_delay_s
        if delay_s > 0:
            self._push(self.now + delay_s, pod, _ASK)
        else:
            self._ask(pod)

    def _ask(self, pod: _Pod) -> None:
        """The kubelet checks the pod's image: present, the pod starts; else it asks for
        a pull, which waits for a pull slot."""
        if pod.ended:
            return
        node = self.nodes[pod.node]
        if node.images[pod.image].present:
            self._started(pod, node)
            return
        pod.asked_s = self.now
        limit = self.cluster.max_parallel_pulls
        if limit and node.pulls >= limit:
            node.waiting.append(pod)
            return
        self._begin(pod, node)

    def _begin(self, pod: _Pod, node: _Node) -> None:
        """The pod's pull leaves the queue: it fetches what is neither on the node nor in
        flight, and waits for what is in flight."""
        pod.began_s = self.now
        pod.pulling = True
        node.pulls += 1
        waits: set[_Job] = set()
        missing: list[int] = []
        for lid in self.image_layers[pod.image]:
            job = node.inflight.get(lid)
            if job is not None:
                waits.add(job)
            elif lid not in node.present:
                missing.append(lid)
        if missing:
            need = sum(self.layers[lid].size_bytes for lid in missing)
            self._make_room(node, need)
            node.used_bytes += need
            self.bytes_pulled += need
            self.pod_bytes[pod.request] = need
            job = _Job(need, missing)
            for lid in missing:
                node.inflight[lid] = job
            self._start_job(node, job)
            waits.add(job)
        pod.pending = len(waits)
        for job in waits:
            job.waiters.append(pod)
        if not waits:
            self._pulled(pod, node)

    def _pulled(self, pod: _Pod, node: _Node) -> None:
        """The pod's pull is done: its slot goes to the next queued pull, the pod starts."""
        pod.pulling = False
        node.pulls -= 1
        self.pod_queue_s[pod.request] = pod.began_s - pod.asked_s
        self.pod_pull_s[pod.request] = self.now - pod.began_s
        self._started(pod, node)
        while node.waiting and (
            not self.cluster.max_parallel_pulls or node.pulls < self.cluster.max_parallel_pulls
        ):
            self._begin(node.waiting.popleft(), node)

    def _started(self, pod: _Pod, node: _Node) -> None:
        if self.pending is not None:
            self.pending.discard(f"pod-{pod.request}")
        entry = node.images[pod.image]
        if not entry.present:
            entry.present = True
            self.holders[pod.image] += 1
            self.layer_index.add_image_name(
                node.index, self.image_name[pod.image], self.image_size[pod.image]
            )
        ready_s = self.now + self.cluster.start_overhead_s
        arrival_s = float(self.workload.arrival_s[pod.request])
        self.pod_startup_s[pod.request] = ready_s - arrival_s
        if arrival_s >= self.warmup_s:
            self.wait_s.append(self.now - arrival_s)
        ends_s = ready_s + float(self.workload.pod_duration_s[pod.request])
        self._push(ends_s + self._release_delay_s(), pod)

    def _release_delay_s(self) -> float:
        """How long after a pod's end its slot is free again (see Ends)."""
        if len(self.release_delays):
            return float(self.release_delays[self.release_rng.integers(len(self.release_delays))])
        return self.cluster.slot_release_delay_s

    def _finish(self, pod: _Pod) -> None:
        node = self.nodes[pod.node]
        pod.ended = True
        node.images[pod.image].in_use -= 1
        owner = self.workload.owner_of(pod.request)
        if owner is not None:
            node.owned[owner] -= 1
        self.free[pod.node] += 1
        self.total_free += 1
        self._drain()

    # --------------------------------------------------------------- pulling
    def _job_rate(self, node: _Node) -> float:
        """Bytes a second each of the node's active jobs moves: a lone job the node's
        rate, concurrent ones an equal share of the whole link (``lone_pull_efficiency``),
        never more than a lone job."""
        jobs = len(node.active)
        if jobs <= 1:
            return node.bytes_per_s
        link = node.bytes_per_s / self.cluster.lone_pull_efficiency
        return min(node.bytes_per_s, link / jobs)

    def _advance(self, node: _Node) -> None:
        if node.active:
            node.vtime += (self.now - node.vtime_at_s) * self._job_rate(node)
        node.vtime_at_s = self.now

    def _reschedule(self, node: _Node) -> None:
        node.version += 1
        if node.active:
            remaining = node.active[0][0] - node.vtime
            at_s = self.now + max(remaining, 0.0) / self._job_rate(node)
            self._push(at_s, node, node.version)

    def _start_job(self, node: _Node, job: _Job) -> None:
        self._advance(node)
        job.finish_v = node.vtime + job.size_bytes
        heapq.heappush(node.active, (job.finish_v, next(self.seq), job))
        self._reschedule(node)

    def _pull_progress(self, node: _Node) -> None:
        self._advance(node)
        done = []
        while node.active and node.active[0][0] - node.vtime <= _DONE_EPSILON_BYTES:
            done.append(heapq.heappop(node.active)[2])
        self._reschedule(node)
        for job in done:
            for lid in job.layers:
                del node.inflight[lid]
                node.present.add(lid)
            self.layer_index.add_layers(node.index, [self.layers[lid] for lid in job.layers])
            if self.pending is not None:
                self.pending.node_changed(self.layer_index.nodes[node.index].name)
            for pod in job.waiters:
                pod.pending -= 1
                if pod.pending == 0:
                    self._pulled(pod, node)

    # -------------------------------------------------------------- eviction
    def _make_room(self, node: _Node, need: int) -> None:
        capacity = self.cluster.store_capacity_bytes
        if node.used_bytes + need <= capacity:
            return
        target = self.cluster.gc_target_fraction * capacity - need
        idle = [(img, e) for img, e in node.images.items() if e.in_use == 0]
        if self.cluster.eviction == "lru":
            idle.sort(key=lambda item: item[1].last_used_s)
        else:
            idle.sort(key=lambda item: (item[1].uses, item[1].last_used_s))
        for img, _ in idle:
            if node.used_bytes <= target:
                break
            self._evict(node, img)
        if node.used_bytes + need > capacity:
            self.overcommitted += 1

    def _evict(self, node: _Node, img: int) -> None:
        entry = node.images.pop(img)
        if entry.present:
            self.holders[img] -= 1
        self.evicted += 1
        self.layer_index.remove_image_name(node.index, self.image_name[img])
        freed = []
        for lid in self.image_layers[img]:
            left = node.refs[lid] - 1
            if left:
                node.refs[lid] = left
                continue
            del node.refs[lid]
            node.present.discard(lid)
            node.used_bytes -= self.layers[lid].size_bytes
            freed.append(self.layers[lid].digest)
        if freed:
            self.layer_index.remove_layers(node.index, freed)
            if self.pending is not None:
                self.pending.node_changed(self.layer_index.nodes[node.index].name)

    def result(self) -> RunResult:
        wait_s = np.asarray(self.wait_s, dtype=np.float64)
        return RunResult(
            strategy=self._label(),
            startup_s=wait_s + self.cluster.start_overhead_s,
            wait_s=wait_s,
            bytes_pulled=self.bytes_pulled,
            load_imbalance=float(np.mean(self.imbalance)) if self.imbalance else 1.0,
            decision_time_s=np.asarray(self.decision_s, dtype=np.float64),
            queued_pods=self.queued,
            evicted_images=self.evicted,
            overcommitted_pulls=self.overcommitted,
            end_s=self.now,
            pod_node=self.pod_node,
            pod_startup_s=self.pod_startup_s,
            pod_bytes=self.pod_bytes,
            pod_queue_s=self.pod_queue_s,
            pod_pull_s=self.pod_pull_s,
            unfollowed=self.unfollowed,
        )

    def _label(self) -> str:
        if self.profile is not None:
            return self.profile.name
        assert self.strategy is not None
        return self.strategy.name


def simulate(
    corpus: Corpus,
    workload: Workload,
    cluster: ClusterParams,
    strategy: Strategy | None,
    *,
    seed: int = 0,
    warmup_s: float = 0.0,
    on_progress: Callable[[float], None] | None = None,
    profile: kube.Profile | None = None,
    follow: Sequence[int] | None = None,
) -> RunResult:
    """Run ``workload`` on a fresh, empty ``cluster`` scheduled by ``strategy``, alone
    (ties at random) or, with ``profile``, inside that kube-scheduler profile (the
    strategy its layer score, None for a profile without one).

    Pods arriving before ``warmup_s`` run but are not measured (their caches
    warm the cluster). ``on_progress`` is called with the simulated time now
    and then. The same seed gives the same result. ``follow`` (a node index per
    request: where a real run placed it) places each pod on its node when that node has
    a free slot, and where the scores say otherwise (``RunResult.unfollowed`` counts
    them): the time model alone, without the placement model.
    """
    if cluster.nodes < 1 or cluster.containers_per_node < 1:
        raise InputError("a simulated cluster needs at least one node with one container slot")
    if cluster.eviction not in ("lru", "lfu"):
        raise InputError(f"eviction {cluster.eviction!r} is unknown: choose 'lru' or 'lfu'")
    if (
        cluster.max_parallel_pulls < 0
        or cluster.pull_request_delay_s < 0
        or cluster.slot_release_delay_s < 0
        or any(not 0 <= d < math.inf for d in cluster.slot_release_delays_s)
    ):
        raise InputError(
            "max_parallel_pulls (0: no bound), pull_request_delay_s and slot_release_delay_s "
            "(and every slot_release_delays_s) must not be negative"
        )
    if not 0 < cluster.lone_pull_efficiency <= 1:
        raise InputError(
            f"lone_pull_efficiency {cluster.lone_pull_efficiency}: give the share of the "
            "link a lone pull moves, within (0, 1]"
        )
    if strategy is None and profile is None:
        raise InputError("simulate: give a strategy, a kube-scheduler profile, or both")
    if follow is not None and (
        len(follow) != len(workload) or not all(0 <= int(n) < cluster.nodes for n in follow)
    ):
        raise InputError(
            f"simulate: follow gives {len(follow)} placements for {len(workload)} pods: give "
            f"one node index (0..{cluster.nodes - 1}) per pod"
        )
    sim = _Simulation(corpus, workload, cluster, strategy, seed, warmup_s, profile, follow)
    sim.run(on_progress)
    return sim.result()
