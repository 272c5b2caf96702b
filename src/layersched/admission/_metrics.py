"""The admission guard's Prometheus metrics (its own registry, so tests can run several):
reviews by operation and result, refusals by reason, requests rejected unanswered, review
latency, reviews in progress, TLS reloads, and the lookups' API calls, cache hits and
cache sizes.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from layersched.admission._lookup import ApiLookup

LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class AdmissionMetrics:
    """Prometheus metrics of one server (its own registry, so tests can run several)."""

    def __init__(self, lookup: ApiLookup | None = None) -> None:
        self.registry = CollectorRegistry()
        self.reviews = Counter(
            "layersched_admission_reviews",
            "AdmissionReviews answered, by operation and result (allowed, refused: the "
            "per-node rule said no, error: it could not be checked).",
            ["operation", "result"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "layersched_admission_refusals",
            "Writes refused, by why (other-node, node-missing, unbound-token, ...).",
            ["reason"],
            registry=self.registry,
        )
        self.rejected_requests = Counter(
            "layersched_admission_rejected_requests",
            "HTTP requests not answered with a review (overloaded, too large, malformed, "
            "slow body), by HTTP status.",
            ["code"],
            registry=self.registry,
        )
        self.latency_s = Histogram(
            "layersched_admission_review_seconds",
            "Time to answer one AdmissionReview, body read included.",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.in_progress = Gauge(
            "layersched_admission_reviews_in_progress",
            "Reviews being worked on.",
            registry=self.registry,
        )
        self.tls_reloads = Counter(
            "layersched_admission_tls_reloads",
            "Times the serving certificate was re-read after its files changed.",
            registry=self.registry,
        )
        if lookup is not None:
            lookups = Gauge(
                "layersched_admission_lookups",
                "API lookups (source=api) and cache hits (source=cache), by kind.",
                ["kind", "source"],
                registry=self.registry,
            )
            for kind in ("pod", "node"):
                lookups.labels(kind, "api").set_function(
                    lambda k=kind: lookup.stats.api_calls[k]  # type: ignore[misc]
                )
                lookups.labels(kind, "cache").set_function(
                    lambda k=kind: lookup.stats.cache_hits[k]  # type: ignore[misc]
                )
            cached = Gauge(
                "layersched_admission_cached",
                "Entries in the lookup caches, by kind.",
                ["kind"],
                registry=self.registry,
            )
            cached.labels("pod").set_function(lambda: lookup.sizes()[0])
            cached.labels("node").set_function(lambda: lookup.sizes()[1])
