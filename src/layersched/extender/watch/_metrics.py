"""The live inventory's metrics: a prometheus_client collector read at each scrape.

The Go port's ``layerlocality/metrics.go`` counts what its watch did; this reports the
same for the extender's two watches, from the parts that keep it: each
:class:`~layersched.extender.watch._watch.Watch`'s state, the
:class:`~layersched.extender.watch._store.Store`, the pools' charge, the votes, the warm-up's
registry calls and the allocator. Nothing is counted here: every value is read when
``/metrics`` is scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from layersched.core.budget import IndexPools
from layersched.core.votes import ImageVotes
from layersched.extender import _memory
from layersched.extender.watch._store import Store
from layersched.extender.watch._warmup import Warmup
from layersched.extender.watch._watch import WatchState

#: (name, help, value) of one unlabelled sample.
_Sample = tuple[str, str, float]


class WatchMetrics:
    """``layersched_extender_watch_*`` (and the allocator's heap) at each scrape."""

    def __init__(
        self,
        states: Mapping[str, WatchState],
        store: Store,
        pools: IndexPools,
        votes: ImageVotes,
        warmup: Warmup,
        trim: _memory.ChurnTrim,
        node_deadlines: Callable[[], int],
    ) -> None:
        self._states = states
        self._store = store
        self._pools = pools
        self._votes = votes
        self._warmup = warmup
        self._trim = trim
        self._node_deadlines = node_deadlines

    def collect(self) -> Iterator[Metric]:
        yield from self._watch_families()
        yield self._ignored_family()
        for name, documentation, value in self._gauges():
            gauge = GaugeMetricFamily(name, documentation)
            gauge.add_metric([], float(value))
            yield gauge
        for name, documentation, value in self._counters():
            counter = CounterMetricFamily(name, documentation)
            counter.add_metric([], float(value))
            yield counter
        yield from _malloc_family()

    def _watch_families(self) -> Iterable[Metric]:
        """Each watch's events, relists, failures and connection, by resource."""
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "events": CounterMetricFamily(
                "layersched_extender_watch_events",
                "Watch events received, by resource.",
                labels=["resource"],
            ),
            "relists": CounterMetricFamily(
                "layersched_extender_watch_relists",
                "Full lists after a 410 Gone, by resource.",
                labels=["resource"],
            ),
            "failures": CounterMetricFamily(
                "layersched_extender_watch_failures",
                "Failed lists and watches (retried), by resource.",
                labels=["resource"],
            ),
            "connected": GaugeMetricFamily(
                "layersched_extender_watch_connected",
                "1 while the resource's watch is connected, 0 while re-syncing.",
                labels=["resource"],
            ),
        }
        for kind, state in self._states.items():
            families["events"].add_metric([kind], float(state.events))
            families["relists"].add_metric([kind], float(state.relists))
            families["failures"].add_metric([kind], float(state.failures))
            families["connected"].add_metric([kind], 1.0 if state.connected else 0.0)
        return families.values()

    def _ignored_family(self) -> Metric:
        ignored = CounterMetricFamily(
            "layersched_extender_watch_ignored_objects",
            "Objects ignored, by resource and reason: malformed, too_large (over the byte, "
            "image or layer caps), over_budget (--max-inventory-bytes), unknown_node (no "
            "such Node), stale (observedAt older than --inventory-max-age-s).",
            labels=["resource", "reason"],
        )
        for (kind, reason), count in self._store.ignored.items():
            ignored.add_metric([kind, reason], float(count))
        return ignored

    def _gauges(self) -> Iterable[_Sample]:
        yield (
            "layersched_extender_watch_nodes_with_layers",
            "Nodes whose layers come from their agent's NodeLayerInventory.",
            len(self._store.layers),
        )
        yield (
            "layersched_extender_watch_stale_inventories",
            "Nodes whose NodeLayerInventory is older than --inventory-max-age-s (scored "
            "as if they had no agent).",
            len(self._store.stale),
        )
        yield (
            "layersched_extender_watch_held_bytes",
            "Estimated bytes the watched objects hold (bounded by --max-inventory-bytes).",
            self._pools.held_bytes,
        )
        yield (
            "layersched_extender_watch_pooled_layers",
            "Distinct layers held for the watched objects.",
            self._pools.layers,
        )
        yield (
            "layersched_extender_watch_pooled_images",
            "Distinct image entries held for the watched objects.",
            self._pools.images,
        )
        yield (
            "layersched_extender_watch_timers",
            "Nodes' deadlines pending (agent grace, staleness), all on one thread.",
            self._node_deadlines(),
        )

    def _counters(self) -> Iterable[_Sample]:
        yield (
            "layersched_extender_watch_node_image_resolutions",
            "Node images resolved through the layer source because their node published "
            "no NodeLayerInventory (0 when every node runs the agent).",
            self._warmup.node_image_resolutions,
        )
        yield (
            "layersched_extender_watch_expired_inventories",
            "NodeLayerInventory objects that went stale while held.",
            self._store.expired,
        )
        yield (
            "layersched_extender_watch_memory_trims",
            "Times glibc was told to return freed pages after a burst of objects.",
            self._trim.trims,
        )
        yield (
            "layersched_extender_watch_pod_images_without_quorum",
            "Pod images some node published whose layers fewer than --image-quorum nodes "
            "agree on (or two answers did): resolved through the registry.",
            self._votes.without_quorum,
        )


def _malloc_family() -> Iterator[Metric]:
    """glibc's heaps (nothing where the C library is not glibc)."""
    heap = _memory.malloc_bytes()
    if heap is not None:
        malloc = GaugeMetricFamily(
            "layersched_extender_malloc_bytes",
            "glibc's heaps: bytes in use (what the process holds) and free but kept "
            "(returned to the system by malloc_trim after a burst).",
            labels=["state"],
        )
        malloc.add_metric(["in_use"], float(heap[0]))
        malloc.add_metric(["free"], float(heap[1]))
        yield malloc
