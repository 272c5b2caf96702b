"""The agent's Prometheus metrics, read from its publisher's counters at scrape time.

Served on the health port at ``/metrics`` (with ``--health-port``). Labels have bounded
values: ``cause`` is one of :data:`~layersched.agent._publisher.REPAIR_CAUSES`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from layersched.agent._publisher import REPAIR_CAUSES, PublishStats

#: Counters taken as they are from :class:`PublishStats`: (attribute, name, help).
_COUNTERS = (
    ("reads", "layersched_agent_reads", "Reads of the node's runtime."),
    ("applies", "layersched_agent_applies", "Server-side applies of the node's object."),
    ("unchanged", "layersched_agent_unchanged", "Reads whose object was already published."),
    ("api_failures", "layersched_agent_api_failures", "Failed calls to the API server."),
)


class _StatsCollector(Collector):
    def __init__(self, stats: PublishStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        for attribute, name, documentation in _COUNTERS:
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], float(getattr(self._stats, attribute)))
            yield family
        repairs = CounterMetricFamily(
            "layersched_agent_repairs",
            "Republishes of the node's object after another writer changed it, set it "
            "stale or deleted it, by cause.",
            labels=["cause"],
        )
        for cause in REPAIR_CAUSES:
            repairs.add_metric([cause], float(self._stats.repairs.get(cause, 0)))
        yield repairs


class AgentMetrics:
    """One agent's metrics (a registry of its own, so tests can run several)."""

    def __init__(self, stats: PublishStats) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StatsCollector(stats))

    def render(self) -> bytes:
        """The Prometheus text page."""
        return generate_latest(self.registry)
