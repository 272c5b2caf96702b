"""What kube-scheduler does with the scores, as the simulator places a pod through it.

The scale settings (``make simulate``) place a pod by one strategy's score alone, ties
broken at random. A replayed trace (``make replay``) is placed by real kube-schedulers,
whose profiles add the default score plugins to the layer score and break ties their own
way; :class:`Profile` says which, and :func:`pick` does what ``schedule_one.go`` does with
them. Read from the v1.37.2 module (``k8s.io/kubernetes/pkg/scheduler``):

* **The default profile's score plugins** (``apis/config/v1/default_plugins.go``):
  TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1, PodTopologySpread 2,
  InterPodAffinity 2, NodeResourcesBalancedAllocation 1, ImageLocality 1 (the feature
  gates that add more are off in 1.37: GenericWorkload, TopologyAwareWorkloadScheduling;
  DynamicResources scores pods with claims only). Those that separate the testbed's
  nodes are modelled: NodeResourcesFit's ``LeastAllocated`` (:func:`least_allocated`),
  BalancedAllocation (:func:`balanced_allocation`, 1.37's "improvement" form),
  ImageLocality (the core port, ``layersched.core.strategies.image_locality``) and
  PodTopologySpread's system default constraints (:func:`topology_spread`) for pods a
  controller owns. TaintToleration, NodeAffinity and InterPodAffinity give every node
  the same score here (no taints, no affinities): they change no placement and are left
  out.
* **Extender scores** (``prioritizeNodes``): an extender's 0..10 is multiplied by its
  weight and by ``MaxNodeScore / MaxExtenderPriority`` = 10 and added to the plugins'
  sum; layersched's extender sends a framework score 0..100 as ``score // 10``
  (:func:`extender_points`).
* **Ties** (``prioritizeNodes``, ``framework/sorted_nodes.go``): since 1.35 the best node
  is the top of a ``container/heap`` built over the scored nodes in the order they
  passed the filters, ordered by total score and then by a ``Randomizer`` that only
  nodes an extender scored get (``rand.Int()``); plugin scores alone tie in node order,
  more precisely in the heap's order (:func:`heap_top`). The filters run over the
  snapshot's nodes from ``nextStartNodeIndex`` on, in parallel, and a node joins the list
  as it passes. On the testbed (kube-schedulers started once every node existed, so the
  snapshot holds them in name order) their ``-v=10`` logs showed the nodes scored as a
  rotation of n1..n6 whose start moved now and then during a run (n6 first for most pods
  of one run, n1 for others), and neighbours swapped at times by the parallel filters. So
  the simulator takes the nodes in name order from a start set by the seed (the seed
  modulo the nodes, :attr:`Profile.rotate_node_order`), and a prediction runs every start
  equally often: which node a tie goes to first is the real one's family, not its exact
  draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from layersched.core.errors import InputError

#: Framework scores run 0..100 (``framework.MaxNodeScore``); extenders answer 0..10
#: (``extenderv1.MaxExtenderPriority``).
MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
#: The default profile's weights of the plugins modelled here.
FIT_WEIGHT = 1
BALANCED_WEIGHT = 1
IMAGE_LOCALITY_WEIGHT = 1
TOPOLOGY_SPREAD_WEIGHT = 2
#: PodTopologySpread's system default constraint on ``kubernetes.io/hostname``
#: (``ScheduleAnyway``): the testbed's nodes carry no zone label, so the zone
#: constraint (maxSkew 5) scores nothing.
SYSTEM_DEFAULT_HOSTNAME_MAX_SKEW = 3
#: Go's ``rand.Int()`` draws a non-negative int (63 bits).
_RANDOMIZER_BOUND = 1 << 62

#: How the layer score reaches kube-scheduler: a score plugin in the profile, or an
#: extender of the process.
Via = Literal["plugin", "extender"]
#: What the layer score knows of a pod image's layers: ``registry`` (always: the
#: extender resolves it from the registry within its deadline, and the plugin waits for
#: the first pod's answer up to ``registry.resolveWaitMilliseconds``), ``published`` (only
#: once ``image_quorum`` nodes publish the image: the plugin without a registry) and
#: ``resolved`` (also once an earlier pod of the image was scored: the plugin's background
#: registry resolution without the wait, or a registry slower than it).
Knowledge = Literal["registry", "published", "resolved"]


@dataclass(frozen=True, slots=True)
class Profile:
    """A kube-scheduler profile as the simulator runs it (see the module docstring)."""

    name: str
    #: NodeResourcesFit (LeastAllocated) and NodeResourcesBalancedAllocation, weight 1 each.
    resource_plugins: bool = True
    #: ImageLocality's weight (0: disabled).
    image_locality_weight: int = IMAGE_LOCALITY_WEIGHT
    #: PodTopologySpread's weight (system default constraints; pods with an owner only).
    topology_spread_weight: int = TOPOLOGY_SPREAD_WEIGHT
    #: The layersched strategy scoring beside them (None: none), how and at what weight.
    strategy: str | None = None
    via: Via = "plugin"
    weight: int = 1
    knowledge: Knowledge = "registry"
    #: Nodes that must publish an image before ``published`` knowledge has its layers.
    image_quorum: int = 1
    #: Start the node order at the node the seed names, the seed modulo the nodes
    #: (kube-scheduler's start index over the nodes in name order); False: n1 first.
    rotate_node_order: bool = True

    def __post_init__(self) -> None:
        if self.weight < 1 or self.image_locality_weight < 0 or self.image_quorum < 1:
            raise InputError(
                f"profile {self.name!r}: weights must be at least 1 (ImageLocality 0 to "
                "disable it) and the image quorum at least 1"
            )

    @property
    def random_ties(self) -> bool:
        """Whether nodes get a random tie-breaker: only those an extender scored do."""
        return self.strategy is not None and self.via == "extender"


def least_allocated(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """NodeResourcesFit's ``LeastAllocated`` score (cpu and memory, weight 1 each), in
    int64 arithmetic: per resource ``(allocatable - requested) * 100 // allocatable``
    (0 when over), then their weighted mean. ``requested`` includes the pod's own.

    >>> least_allocated([1000, 1000], [4000, 4000])   # one slot of four taken: 75
    75
    >>> least_allocated([2000, 3000], [4000, 4000])   # (50 + 25) // 2
    37
    """
    total = weights = 0
    for used, have in zip(requested, allocatable, strict=True):
        if have == 0:
            continue
        total += 0 if used > have else (have - used) * MAX_NODE_SCORE // have
        weights += 1
    return total // weights if weights else 0


def _balance(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    fractions = [min(used / have, 1.0) for used, have in zip(requested, allocatable, strict=True)]
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    else:
        std = 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_allocation(
    requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]
) -> int:
    """NodeResourcesBalancedAllocation as of 1.37: the balance with the pod against the
    balance without it, ``50 + (50 + with - without) // 2`` (75 when the pod changes
    nothing; pods asking cpu and memory in the node's proportion always do).

    >>> balanced_allocation([1000, 1000], [0, 0], [4000, 4000])
    75
    >>> balanced_allocation([3000, 1000], [1000, 1000], [4000, 4000])  # 50 + (50 + 75 - 100) // 2
    62
    """
    with_pod = _balance(requested, allocatable)
    without = _balance(allocated, allocatable)
    return MAX_NODE_SCORE // 2 + _go_div(MAX_NODE_SCORE // 2 + with_pod - without, 2)


def _go_div(a: int, b: int) -> int:
    """Go's integer division, which truncates toward zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def topology_spread(
    matching: Sequence[int], max_skew: int = SYSTEM_DEFAULT_HOSTNAME_MAX_SKEW
) -> list[int]:
    """PodTopologySpread's normalised scores under the hostname system default constraint,
    for candidates holding ``matching`` pods of the pod's owner each: a node's raw score
    is ``round(count * ln(candidates + 2) + max_skew - 1)``, then ``100 * (max + min -
    raw) // max`` (fewest matching pods best).

    >>> topology_spread([0, 0, 0])
    [100, 100, 100]
    >>> topology_spread([2, 0, 1])   # raw 5, 2, 4 (ln 5 = 1.61); 100 * (5 + 2 - raw) // 5
    [40, 100, 60]
    """
    weight = math.log(len(matching) + 2)
    raw = [_go_round(count * weight + max_skew - 1) for count in matching]
    high, low = max(raw, default=0), min(raw, default=0)
    if high == 0:
        return [MAX_NODE_SCORE] * len(raw)
    return [MAX_NODE_SCORE * (high + low - score) // high for score in raw]


def _go_round(value: float) -> int:
    """Go's ``math.Round``: half away from zero (Python's round() goes to even)."""
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def extender_points(score: int, weight: int = 1) -> int:
    """What an extender's framework score (0..100) adds to a node's total: layersched
    answers ``score // 10``, kube-scheduler multiplies by the weight and by 10.

    >>> extender_points(87)
    80
    """
    answer = score // (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
    return answer * weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)


def heap_top(totals: Sequence[int], randomizers: Sequence[int]) -> int:
    """The position ``sortedNodeScores.Pop()`` returns: ``container/heap``'s ``Init`` over
    the nodes in the given order, less-than meaning a higher total, or an equal total and
    a higher randomizer; then its root. Among equal totals without randomizers this is
    usually, not always, the first (Init sifts a later equal node up only past a lower
    one).

    >>> heap_top([5, 7, 7], [0, 0, 0])
    1
    >>> heap_top([5, 3, 7, 7], [0, 0, 0, 0])  # the heap's order, not the first 7
    3
    """
    order = list(range(len(totals)))

    def less(i: int, j: int) -> bool:
        a, b = order[i], order[j]
        return totals[a] > totals[b] or (totals[a] == totals[b] and randomizers[a] > randomizers[b])

    n = len(order)
    for start in range(n // 2 - 1, -1, -1):
        i = start
        while True:
            j = 2 * i + 1
            if j >= n:
                break
            if j + 1 < n and less(j + 1, j):
                j += 1
            if not less(j, i):
                break
            order[i], order[j] = order[j], order[i]
            i = j
    if not order:
        raise InputError("kube-scheduler picks among no nodes")
    return order[0]


def randomizers(count: int, rng: np.random.Generator, random_ties: bool) -> list[int]:
    """One ``rand.Int()`` per node an extender scored, else zeros."""
    if not random_ties:
        return [0] * count
    return [int(v) for v in rng.integers(0, _RANDOMIZER_BOUND, size=count)]


def pick(totals: Sequence[int], rng: np.random.Generator, random_ties: bool) -> int:
    """The position of the node kube-scheduler binds: :func:`heap_top` over ``totals``
    with the tie-breakers :func:`randomizers` gives."""
    return heap_top(totals, randomizers(len(totals), rng, random_ties))
