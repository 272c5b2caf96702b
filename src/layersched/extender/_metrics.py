"""Prometheus metrics of one extender (its own registry, so tests can run several)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from layersched import __version__
from layersched.core.layerindex import LayerIndexView
from layersched.core.layers import LayerSource
from layersched.extender._resolver import DeadlineResolver

#: Latency buckets: the NodeNames target is 5 ms, the full-Nodes one 60 ms, and
#: kube-scheduler gives up at httpTimeout (seconds).
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip

#: Layer-source counters exported when the source has them (the registry source does).
SOURCE_COUNTERS = (
    ("registry_errors", "layersched_registry_errors", "Failed registry conversations."),
    ("fetches", "layersched_registry_manifest_fetches", "Images resolved at the registry."),
    ("digest_checks", "layersched_registry_digest_checks", "Tag digests checked (HEAD)."),
)
#: The layer cache's counters (the default platform's resolver).
CACHE_COUNTERS = (
    ("hits", "layersched_layer_cache_hits", "Layer-cache hits (fresh or stale)."),
    ("misses", "layersched_layer_cache_misses", "Layer-cache misses."),
    ("evictions", "layersched_layer_cache_evictions", "Entries dropped past a cache bound."),
    (
        "unchanged",
        "layersched_layer_cache_unchanged_revalidations",
        "Tag revalidations a digest check answered without a manifest fetch.",
    ),
)


class _SourceCollector(Collector):
    """Reads the layer source's and resolver's counters at scrape time."""

    def __init__(
        self,
        source: LayerSource,
        resolver: DeadlineResolver,
        index: Callable[[], LayerIndexView | None],
    ) -> None:
        self._source = source
        self._resolver = resolver
        self._index = index

    def collect(self) -> Iterator[Metric]:
        for attribute, name, documentation in SOURCE_COUNTERS:
            value = getattr(self._source, attribute, None)
            if isinstance(value, int | float):
                yield _one(CounterMetricFamily, name, documentation, value)
        cache = self._resolver.cache
        for attribute, name, documentation in CACHE_COUNTERS:
            yield _one(CounterMetricFamily, name, documentation, getattr(cache, attribute))
        yield _one(
            GaugeMetricFamily,
            "layersched_layer_cache_bytes",
            "Bytes the default platform's layer cache holds, as charged to the budget.",
            cache.held_bytes,
        )
        yield _one(
            GaugeMetricFamily,
            "layersched_layer_cache_entries",
            "Answers the default platform's layer cache holds (failures included).",
            len(cache),
        )
        yield _one(
            GaugeMetricFamily,
            "layersched_layer_cache_failures",
            "Failures the default platform's layer cache remembers (until their TTL).",
            cache.failures,
        )
        budget = cache.budget
        yield _one(
            GaugeMetricFamily,
            "layersched_extender_cache_budget_held_bytes",
            "Bytes every platform's layer cache and the registries refused hold, as "
            "measured (at most layersched_extender_cache_budget_bytes).",
            budget.held_bytes,
        )
        yield _one(
            GaugeMetricFamily,
            "layersched_extender_cache_budget_bytes",
            "The budget of every cache a request can fill (--max-cache-bytes).",
            budget.max_bytes,
        )
        yield _one(
            CounterMetricFamily,
            "layersched_extender_cache_budget_evictions",
            "Cached answers dropped to keep the caches within --max-cache-bytes.",
            budget.evictions,
        )
        yield _one(
            CounterMetricFamily,
            "layersched_extender_resolve_timeouts",
            "Pods whose layers were not resolved within --resolve-timeout-s.",
            self._resolver.timeouts,
        )
        yield _one(
            CounterMetricFamily,
            "layersched_extender_resolve_rejected",
            "Pod-image resolutions not queued because the worker pool was saturated.",
            self._resolver.rejected,
        )
        yield _one(
            CounterMetricFamily,
            "layersched_extender_revalidations",
            "Tag entries answered again by the layer source after their TTL (default platform).",
            self._resolver.revalidations,
        )
        index = self._index()
        if index is not None:
            yield _one(
                GaugeMetricFamily,
                "layersched_extender_inventory_nodes",
                "Nodes in the held inventory.",
                index.node_count,
            )
            yield _one(
                GaugeMetricFamily,
                "layersched_extender_inventory_unresolved_node_images",
                "Images of the held inventory whose layers are unknown (ignored).",
                index.unresolved_images,
            )


def _one(
    kind: type[CounterMetricFamily | GaugeMetricFamily],
    name: str,
    documentation: str,
    value: float,
) -> Metric:
    """A metric family of one unlabelled sample."""
    family = kind(name, documentation)
    family.add_metric([], float(value))
    return family


def process_registry() -> CollectorRegistry:
    """A registry of its own with what the default registry has (``process_*``,
    ``python_gc_*``, ``python_info``: stateless readers, shared safely), and
    ``layersched_build_info``."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, GC_COLLECTOR, PLATFORM_COLLECTOR):
        registry.register(collector)
    build_info = Gauge(
        "layersched_build_info",
        "Always 1: the layersched version and Python implementation serving.",
        ["version", "python"],
        registry=registry,
    )
    build_info.labels(__version__, platform.python_version()).set(1)
    return registry


class ExtenderMetrics:
    """The extender's metrics, in a registry of their own: the verbs' requests (how many
    at once, how long, how answered), then what the answers were made of, then what the
    layer source and the held inventory say at scrape time."""

    def __init__(
        self,
        source: LayerSource,
        resolver: DeadlineResolver,
        index: Callable[[], LayerIndexView | None],
    ) -> None:
        self.registry = process_registry()
        self.in_progress = Gauge(
            "layersched_extender_requests_in_progress",
            "Verb requests being answered now: 'working' (under --max-concurrent-requests) "
            "or 'shedding' (answered neutrally because the limit was reached).",
            ["state"],
            registry=self.registry,
        )
        self.latency_s = Histogram(
            "layersched_extender_request_duration_seconds",
            "Time to answer an extender request, by verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.requests = self._counter(
            "layersched_extender_requests",
            "Extender requests, by verb and HTTP status code.",
            ("verb", "code"),
        )
        self.overloaded = self._counter(
            "layersched_extender_overloaded_requests",
            "Requests answered at once without work (neutral scores, or every node passing) "
            "because --max-concurrent-requests were already being answered, by verb.",
            ("verb",),
        )
        self.neutral = self._counter(
            "layersched_extender_neutral_answers",
            "Prioritize answers of all zeros, by reason.",
            ("reason",),
        )
        self.unresolved_node_images = self._counter(
            "layersched_extender_unresolved_node_images",
            "Node images of full-Nodes requests whose layers were unknown (ignored).",
        )
        self.invalid_node_data = self._counter(
            "layersched_extender_invalid_node_data",
            "Malformed node images or imageLayer annotations in full-Nodes requests (ignored).",
        )
        self.unknown_nodes = self._counter(
            "layersched_extender_unknown_nodes",
            "NodeNames absent from the held inventory (scored 0).",
        )
        self.pod_images_from_inventory = self._counter(
            "layersched_extender_pod_images_from_inventory",
            "Pod images whose layers came from the watched inventory (no registry call).",
        )
        self.pod_images_disputed = self._counter(
            "layersched_extender_pod_images_disputed",
            "Digest-pinned pod images whose layers the nodes agreed on but the registry "
            "gave otherwise (the registry's answer is used): lying nodes show here.",
        )
        self.registry.register(_SourceCollector(source, resolver, index))

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)
