"""Known fields of the upstream config formats the kind testbed generates.

Each set lists the fields the upstream Go types (or TOML spec) accept; a
generated document using anything else would be rejected (kind, kube-scheduler
strict decoding) or silently ignored (registries.conf), so tests check against these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# sigs.k8s.io/kind/pkg/apis/config/v1alpha4: Cluster, Node, Mount
KIND_CLUSTER = {
    "kind", "apiVersion", "name", "nodes", "networking", "featureGates", "runtimeConfig",
    "kubeadmConfigPatches", "kubeadmConfigPatchesJSON6902", "containerdConfigPatches",
    "containerdConfigPatchesJSON6902",
}  # fmt: skip
KIND_NODE = {
    "role", "image", "labels", "extraMounts", "extraPortMappings", "kubeadmConfigPatches",
    "kubeadmConfigPatchesJSON6902",
}  # fmt: skip
KIND_MOUNT = {"containerPath", "hostPath", "readOnly", "selinuxRelabel", "propagation"}
KIND_ROLES = {"control-plane", "worker"}
# kubeadm v1beta3/v1beta4 kinds a kind patch may target, and the fields we set in them
KUBEADM_KINDS = {
    "InitConfiguration", "JoinConfiguration", "ClusterConfiguration", "KubeletConfiguration",
    "KubeProxyConfiguration",
}  # fmt: skip
KUBEADM_NODE_REGISTRATION = {
    "name", "criSocket", "taints", "kubeletExtraArgs", "ignorePreflightErrors", "imagePullPolicy",
}  # fmt: skip
KUBEADM_CLUSTER_CONFIGURATION = {
    "kind", "apiVersion", "kubernetesVersion", "imageRepository", "controlPlaneEndpoint",
    "networking", "apiServer", "controllerManager", "scheduler", "etcd", "dns", "featureGates",
    "clusterName", "certificatesDir",
}  # fmt: skip

# k8s.io/kube-scheduler/config/v1: KubeSchedulerConfiguration, Profile, Extender, LeaderElection
SCHEDULER_CONFIG = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
    "healthzBindAddress", "metricsBindAddress", "enableProfiling", "enableContentionProfiling",
    "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles",
    "extenders", "delayCacheUntilActive",
}  # fmt: skip
SCHEDULER_PROFILE = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
SCHEDULER_EXTENDER = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}  # fmt: skip
LEADER_ELECTION = {
    "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
    "resourceName", "resourceNamespace",
}  # fmt: skip
PLUGIN_EXTENSION_POINTS = {
    "preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
    "reserve", "permit", "preBind", "bind", "postBind", "multiPoint",
}  # fmt: skip

# containers-registries.conf(5), version 2
REGISTRIES_TOP = {
    "unqualified-search-registries", "registry", "short-name-mode", "aliases",
    "credential-helpers",
}  # fmt: skip
REGISTRIES_REGISTRY = {
    "prefix", "location", "insecure", "blocked", "mirror-by-digest-only", "mirror",
    "pull-from-mirror",
}  # fmt: skip


def unknown(document: Mapping[str, Any], known: Iterable[str]) -> set[str]:
    """Fields of ``document`` outside ``known``."""
    return set(document) - set(known)
