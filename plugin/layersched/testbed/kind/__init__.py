"""The kind + CRI-O testbed: pure generators for its configuration files and
in-cluster objects (used by the Pulumi program in ``infra/kind/`` and the
tests), and the kind scenario driver (:mod:`layersched.testbed.kind.driver`,
which needs the ``kubernetes`` client from the ``infra`` extra)."""

from layersched.testbed.kind._cluster_config import (
    CRIO_SOCKET,
    KIND_API_VERSION,
    REGISTRIES_DROPIN_NODE_PATH,
    ClusterSpec,
    check_cluster_name,
    kind_cluster_config,
    node_names,
    to_yaml,
)
from layersched.testbed.kind._measure import (
    PullEvent,
    go_duration_seconds,
    parse_pull_event,
    pulled_bytes,
)
from layersched.testbed.kind._rbac import (
    AUTH_READER_NAMESPACE,
    AUTH_READER_ROLE,
    SCHEDULER_CLUSTER_ROLES,
)
from layersched.testbed.kind._registries import check_registry_host, registries_dropin
from layersched.testbed.kind._scheduler_config import (
    DEFAULT_SCHEDULER,
    INTREE_SCHEDULER,
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    LAYER_LOCALITY_SCHEDULER,
    RYAX_PLUGIN_NAME,
    ExtenderSpec,
    extender_scheduler_config,
    go_duration,
    intree_scheduler_config,
)
from layersched.testbed.kind._shaping import tbf_command
from layersched.testbed.kind._workloads import (
    AGENT_NAME,
    CRIO_SOCKET_PATH,
    EXTENDER_NAME,
    EXTENDER_PORT,
    HEALTHZ_PATH,
    NAMESPACE,
    SCHEDULER_CONFIG_FILE,
    agent_daemonset_spec,
    extender_deployment_spec,
    extender_service_spec,
    extender_url,
    labels,
    scheduler_deployment_spec,
)

__all__ = [
    "AGENT_NAME",
    "AUTH_READER_NAMESPACE",
    "AUTH_READER_ROLE",
    "CRIO_SOCKET",
    "CRIO_SOCKET_PATH",
    "DEFAULT_SCHEDULER",
    "EXTENDER_NAME",
    "EXTENDER_PORT",
    "HEALTHZ_PATH",
    "INTREE_SCHEDULER",
    "KIND_API_VERSION",
    "KUBE_SCHEDULER_CONFIG_V1",
    "KUBE_SCHEDULER_CONFIG_V1BETA2",
    "LAYER_LOCALITY_SCHEDULER",
    "NAMESPACE",
    "REGISTRIES_DROPIN_NODE_PATH",
    "RYAX_PLUGIN_NAME",
    "SCHEDULER_CLUSTER_ROLES",
    "SCHEDULER_CONFIG_FILE",
    "ClusterSpec",
    "ExtenderSpec",
    "PullEvent",
    "agent_daemonset_spec",
    "check_cluster_name",
    "check_registry_host",
    "extender_deployment_spec",
    "extender_scheduler_config",
    "extender_service_spec",
    "extender_url",
    "go_duration",
    "go_duration_seconds",
    "intree_scheduler_config",
    "kind_cluster_config",
    "labels",
    "node_names",
    "parse_pull_event",
    "pulled_bytes",
    "registries_dropin",
    "scheduler_deployment_spec",
    "tbf_command",
    "to_yaml",
]
