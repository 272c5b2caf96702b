"""One scenario driver over the Kubernetes API, for every real cluster (local, kind, cloud).

:class:`ClusterDriver` submits the scenario's pods and reads placements, pull events,
binding events and ``status.images`` through the API; a :class:`Backend` supplies what
only a testbed can see (its registry's access log, where scores are logged, how to empty
a node's image cache). Parsers for what the cluster writes are in ``_measure``.
"""

from layersched_harness.testbed.cluster._measure import (
    PULLED_REASON,
    SCHEDULED_REASON,
    PullEvent,
    extender_decision,
    go_duration_seconds,
    node_reports_image,
    parse_pull_event,
    plugin_scores,
    pull_event_for,
    pulled_bytes,
    pulled_bytes_by_repository,
    scheduled_by,
)
from layersched_harness.testbed.cluster.driver import (
    SCENARIO_NAMESPACE,
    Backend,
    ClusterDriver,
    NotYet,
    PodRun,
    image_locality_scores,
    pod_name,
    scenario_pod,
    wait_for,
    whole_node_requests,
)

__all__ = [
    "PULLED_REASON",
    "SCENARIO_NAMESPACE",
    "SCHEDULED_REASON",
    "Backend",
    "ClusterDriver",
    "NotYet",
    "PodRun",
    "PullEvent",
    "extender_decision",
    "go_duration_seconds",
    "image_locality_scores",
    "node_reports_image",
    "parse_pull_event",
    "plugin_scores",
    "pod_name",
    "pull_event_for",
    "pulled_bytes",
    "pulled_bytes_by_repository",
    "scenario_pod",
    "scheduled_by",
    "wait_for",
    "whole_node_requests",
]
