"""Prometheus metrics of one relay (its own registry, so tests can run several).

Every label has a bounded set of values: ``method`` is one of the CRI methods
the relay knows or ``other``, ``version`` is ``v1alpha2``, ``v1`` or
``other``, ``code`` and ``result`` are gRPC status-code names, ``error`` an
errno name or ``other``. Image names are
never labels (a node pulls an unbounded set of them): they go to the per-pull
log line instead.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Pull durations: a cached image answers in milliseconds, an edge link takes
#: minutes (kubelet's default image-pull deadline is 2 min per progress stall).
PULL_BUCKETS_S = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    90.0, 120.0, 180.0, 300.0, 600.0, 900.0,
)  # fmt: skip
#: The relay's own cost per call (total time in the relay minus the runtime's
#: answer): the target is well under a millisecond.
OVERHEAD_BUCKETS_S = (
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
)  # fmt: skip
#: Runtime answer times for calls other than pulls.
CALL_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class RelayMetrics:
    """The relay's counters and histograms."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.calls = Counter(
            "layersched_relay_calls",
            "CRI calls relayed, by CRI version, method and the status code returned.",
            ["version", "method", "code"],
            registry=r,
        )
        self.call_duration_s = Histogram(
            "layersched_relay_call_duration_seconds",
            "Time from a call's arrival to its answer, runtime included, by method.",
            ["method"],
            buckets=CALL_BUCKETS_S,
            registry=r,
        )
        self.overhead_s = Histogram(
            "layersched_relay_overhead_seconds",
            "Time a unary call spent in the relay itself (total minus the runtime's answer).",
            buckets=OVERHEAD_BUCKETS_S,
            registry=r,
        )
        self.in_flight = Gauge(
            "layersched_relay_calls_in_flight", "Calls being relayed now.", registry=r
        )
        self.pull_duration_s = Histogram(
            "layersched_relay_pull_duration_seconds",
            "PullImage durations as the kubelet waits for them, by result (ok or error).",
            ["result"],
            buckets=PULL_BUCKETS_S,
            registry=r,
        )
        self.pulls = Counter(
            "layersched_relay_pulls",
            "PullImage calls by result: the gRPC status code name, lowercased (ok, not_found…).",
            ["result"],
            registry=r,
        )
        self.annotated_images = Counter(
            "layersched_relay_annotated_images",
            "Images in ListImages/ImageStatus answers given imageLayer annotations.",
            registry=r,
        )
        self.unannotated_images = Counter(
            "layersched_relay_unannotated_images",
            "Images the layer source knew nothing about (answered unchanged).",
            registry=r,
        )
        self.dump_failures = Counter(
            "layersched_relay_dump_failures",
            "Dump records that could not be written (dropped; the call itself went through), "
            "by error: the errno name (ENOSPC, EIO…) or other.",
            ["error"],
            registry=r,
        )
        self.layer_source_errors = Counter(
            "layersched_relay_layer_source_errors",
            "Layer-source failures while annotating (the answer went out unchanged).",
            registry=r,
        )
