"""The kind + CRI-O testbed: pure generators for its configuration files (layersched
itself is installed from ``install/kustomize/`` through its overlay, :func:`kind_overlay`; the
names and scheduler configs it shares with :mod:`layersched.deploy` and
:mod:`layersched_harness.testbed.scheduler_configs` are re-exported here for the Pulumi program
in ``harness/infra/kind/`` and the tests), and the kind scenario driver
(:mod:`layersched_harness.testbed.kind.driver`, which talks to the cluster through
:mod:`layersched.kube`)."""

from layersched.deploy import (
    AGENT_NAME,
    AUTH_READER_NAMESPACE,
    AUTH_READER_ROLE,
    CRIO_SOCKET_PATH,
    DEFAULT_SCHEDULER,
    EXTENDER_PORT,
    HEALTHZ_PATH,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    KUBE_SCHEDULER_CONFIG_V1BETA3,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    SCHEDULER_CLUSTER_ROLES,
    SCHEDULER_CONFIG_FILE,
    ExtenderSpec,
    extender_scheduler_config,
    go_duration,
    kubernetes_minor,
    labels,
    scheduler_api_version_for,
    scheduler_deployment_spec,
    to_yaml,
)
from layersched_harness.testbed.cluster._measure import (
    PullEvent,
    go_duration_seconds,
    node_reports_image,
    parse_pull_event,
    pull_event_for,
    pulled_bytes,
)
from layersched_harness.testbed.kind._cluster_config import (
    CRIO_SOCKET,
    KIND_API_VERSION,
    REGISTRIES_DROPIN_NODE_PATH,
    ClusterSpec,
    check_cluster_name,
    check_kind_version,
    kind_cluster_config,
    node_names,
)
from layersched_harness.testbed.kind._overlay import (
    KIND_KUBERNETES_VERSION,
    KindTarget,
    admission_change,
    kind_overlay,
    version_patches,
)
from layersched_harness.testbed.kind._registries import check_registry_host, registries_dropin
from layersched_harness.testbed.kind._shaping import tbf_command
from layersched_harness.testbed.scheduler_configs import (
    INTREE_SCHEDULER,
    RYAX_PLUGIN_NAME,
    intree_scheduler_config,
)

__all__ = [
    "AGENT_NAME",
    "AUTH_READER_NAMESPACE",
    "AUTH_READER_ROLE",
    "CRIO_SOCKET",
    "CRIO_SOCKET_PATH",
    "DEFAULT_SCHEDULER",
    "EXTENDER_PORT",
    "HEALTHZ_PATH",
    "INTREE_SCHEDULER",
    "KIND_API_VERSION",
    "KIND_KUBERNETES_VERSION",
    "KUBE_SCHEDULER_CONFIG_V1",
    "KUBE_SCHEDULER_CONFIG_V1BETA1",
    "KUBE_SCHEDULER_CONFIG_V1BETA2",
    "KUBE_SCHEDULER_CONFIG_V1BETA3",
    "LAYER_LOCALITY_SCHEDULER",
    "NAMESPACE",
    "REGISTRIES_DROPIN_NODE_PATH",
    "RYAX_PLUGIN_NAME",
    "SCHEDULER_CLUSTER_ROLES",
    "SCHEDULER_CONFIG_FILE",
    "ClusterSpec",
    "ExtenderSpec",
    "KindTarget",
    "PullEvent",
    "admission_change",
    "check_cluster_name",
    "check_kind_version",
    "check_registry_host",
    "extender_scheduler_config",
    "go_duration",
    "go_duration_seconds",
    "intree_scheduler_config",
    "kind_cluster_config",
    "kind_overlay",
    "kubernetes_minor",
    "labels",
    "node_names",
    "node_reports_image",
    "parse_pull_event",
    "pull_event_for",
    "pulled_bytes",
    "registries_dropin",
    "scheduler_api_version_for",
    "scheduler_deployment_spec",
    "tbf_command",
    "to_yaml",
    "version_patches",
]
