"""The second scheduler's Deployment: kube-scheduler with its ``KubeSchedulerConfiguration``
(the extender on loopback, or the LayerLocality plugin; its text hashed into the pod
template so a changed config rolls the pods), and, unless the plugin scores, the extender
as a sidecar with a credential of its own; each container's probes, resources and
credential volume."""

from __future__ import annotations

import hashlib
from typing import Any

from layersched.core.strategies.args import InFlightArgs
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY_STRATEGY
from layersched.deploy._plugin_config import PluginArgs, PluginRegistryArgs, plugin_scheduler_config
from layersched.deploy._scheduler_config import (
    ExtenderSpec,
    LeaderElectionSpec,
    extender_scheduler_config,
)
from layersched.deploy._spec import (
    KUBE_SCHEDULER_IMAGE,
    LAYERSCHED_IMAGE,
    SCHEDULER_PLUGIN,
    StackSpec,
)
from layersched.deploy._versions import scheduler_probe_paths
from layersched.deploy._workloads import (
    CREDENTIAL_FILE_MODE,
    EXTENDER_HEALTH_PORT,
    EXTENDER_PORT,
    EXTENDER_RESOURCES,
    KUBE_SCHEDULER_SECURE_PORT,
    LIVENESS_FAILURES,
    LIVEZ_PATH,
    NONROOT_UID,
    PROBE_PERIOD_S,
    READY_PERIOD_S,
    READYZ_PATH,
    SCHEDULER_CONFIG_DIR,
    SCHEDULER_CONFIG_FILE,
    SCHEDULER_RESOURCES,
    SERVICE_ACCOUNT_VOLUME,
    STARTUP_FAILURES,
    STARTUP_PERIOD_S,
    bound_token_volume,
    credentials_mount,
    http_get,
    labels,
    object_meta,
    one_pod_at_a_time,
    restricted,
    spread_over_nodes,
)
from layersched.deploy._yaml import to_yaml

#: The extender sidecar: kube-scheduler calls it on loopback.
EXTENDER_URL = f"http://127.0.0.1:{EXTENDER_PORT}"


#: The scheduler pod template's hash of its ``KubeSchedulerConfiguration`` (the
#: ConfigMap's text): a changed weight, quorum or plugin arg changes the template, so the
#: Deployment rolls by itself (kube-scheduler reads its config at start only), with
#: ``kubectl apply -k`` and ``helm upgrade`` alike.
CONFIG_CHECKSUM_ANNOTATION = "layersched.io/config-sha256"


def scheduler_config(spec: StackSpec) -> dict[str, Any]:
    """The ``KubeSchedulerConfiguration``: the extender on loopback, sent node names only
    (its ``--watch`` inventory has the layers), or the LayerLocality plugin (its watch
    runs as the pod's service account); leader election on."""
    if spec.plugin:
        return plugin_scheduler_config(
            PluginArgs(
                image_quorum=spec.image_quorum,
                spread=spec.spread,
                in_flight=InFlightArgs(pull_mode=spec.pull_mode) if spec.in_flight else None,
                registry=PluginRegistryArgs(allow_registries=spec.allowed_registries),
            ),
            scheduler_name=spec.scheduler_name,
            weight=spec.score_weight,
            api_version=spec.scheduler_api_version,
            leader_election=LeaderElectionSpec(spec.scheduler_name, spec.namespace),
        )
    return extender_scheduler_config(
        ExtenderSpec(EXTENDER_URL, weight=spec.score_weight, node_cache_capable=True),
        scheduler_name=spec.scheduler_name,
        api_version=spec.scheduler_api_version,
        leader_election=LeaderElectionSpec(spec.scheduler_name, spec.namespace),
    )


def scheduler_config_text(spec: StackSpec) -> str:
    """The ConfigMap's ``KubeSchedulerConfiguration``, as the file kube-scheduler reads."""
    return to_yaml(scheduler_config(spec))


def config_checksum(text: str) -> str:
    """:data:`CONFIG_CHECKSUM_ANNOTATION`'s value: the hex sha256 of the config's text (what
    helm's ``sha256sum`` gives of the same text)."""
    return hashlib.sha256(text.encode()).hexdigest()


def plugin_readme_block() -> str:
    """The plugin README's ready-to-use configuration: the plugin install's (in a pod
    of the ``layersched`` namespace, leader election on its own Lease)."""
    config = scheduler_config(StackSpec(scheduler=SCHEDULER_PLUGIN))
    return f"```yaml\n{to_yaml(config)}```"


#: The scheduler pod's two credential volumes.
SCHEDULER_CREDENTIALS_VOLUME = SERVICE_ACCOUNT_VOLUME
EXTENDER_CREDENTIALS_VOLUME = "extender-api-access"


def scheduler_container(spec: StackSpec) -> dict[str, Any]:
    probe_port = KUBE_SCHEDULER_SECURE_PORT
    live, ready = scheduler_probe_paths(spec.kubernetes_version)
    return {
        "name": "kube-scheduler",
        "image": KUBE_SCHEDULER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "/usr/local/bin/kube-scheduler",
            f"--config={SCHEDULER_CONFIG_DIR}/{SCHEDULER_CONFIG_FILE}",
            f"--v={spec.scheduler_verbosity}",
        ],
        "ports": [{"name": "metrics", "containerPort": KUBE_SCHEDULER_SECURE_PORT}],
        "startupProbe": {
            "httpGet": http_get(live, probe_port, "HTTPS"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": http_get(live, probe_port, "HTTPS"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": http_get(ready, probe_port, "HTTPS"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": SCHEDULER_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [
            {"name": "config", "mountPath": SCHEDULER_CONFIG_DIR, "readOnly": True},
            # kube-scheduler writes its self-signed serving certificate here.
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 (an emptyDir)
            credentials_mount(SCHEDULER_CREDENTIALS_VOLUME),
        ],
    }


def extender_args(spec: StackSpec) -> list[str]:
    """The extender's arguments: ``--watch`` (node names only), the strategy, the allowed
    registries, then ``spec.extender_args``."""
    argv = ["extender", "--host", "127.0.0.1", "--port", str(EXTENDER_PORT)]
    argv += ["--health-host", "$(POD_IP)", "--health-port", str(EXTENDER_HEALTH_PORT)]
    # info: what changed and what failed, never a line per node per pod (debug)
    argv += ["--watch", "--strategy", spec.strategy, "--log-level", "info"]
    argv += ["--image-quorum", str(spec.image_quorum)]
    if spec.strategy == LAYER_LOCALITY_STRATEGY:
        # said either way, so that the install never rests on the CLI's default
        argv += ["--spread" if spec.spread else "--no-spread"]
    if spec.in_flight:
        argv += ["--pull-mode", spec.pull_mode]
    for registry in spec.allowed_registries:
        argv += ["--allow-registry", registry]
    if spec.pull_secret_namespaces:
        argv += ["--pull-secrets"]  # the Roles of pull_secret_roles let it read them
    return [*argv, *spec.extender_args]


def extender_container(spec: StackSpec) -> dict[str, Any]:
    return {
        "name": "extender",
        "image": LAYERSCHED_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": extender_args(spec),
        # the verbs answer on loopback only (kube-scheduler is in the same pod); the
        # kubelet probes the health port on the pod's IP
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "health", "containerPort": EXTENDER_HEALTH_PORT}],
        "startupProbe": {
            "httpGet": http_get(READYZ_PATH, "health"),
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "livenessProbe": {
            "httpGet": http_get(LIVEZ_PATH, "health"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "readinessProbe": {
            "httpGet": http_get(READYZ_PATH, "health"),
            "periodSeconds": READY_PERIOD_S,
        },
        "resources": EXTENDER_RESOURCES,
        "securityContext": restricted(),
        "volumeMounts": [
            # its own: kube-scheduler's /tmp holds its serving key (issue 30: the two
            # containers shared one writable /tmp)
            {"name": "extender-tmp", "mountPath": "/tmp"},  # noqa: S108 (an emptyDir)
            credentials_mount(EXTENDER_CREDENTIALS_VOLUME),
        ],
    }


def credential_volumes(spec: StackSpec) -> list[dict[str, Any]]:
    """kube-scheduler's token (projected: the pod's account, bound to the pod, expiring)
    and, unless the plugin scores, the extender's (its own account's token Secret), each
    with the CA and namespace, laid out as the service-account directory every in-cluster
    client reads."""
    volumes = [bound_token_volume(SCHEDULER_CREDENTIALS_VOLUME)[0]]
    if spec.plugin:  # no extender: kube-scheduler's plugin reads as the pod's account
        return volumes
    return [
        *volumes,
        {
            "name": EXTENDER_CREDENTIALS_VOLUME,
            "secret": {
                "secretName": spec.extender_token_secret,
                "defaultMode": CREDENTIAL_FILE_MODE,
                # Named keys: the kubelet waits until the token controller has filled
                # them in rather than start the extender without a token.
                "items": [{"key": key, "path": key} for key in ("token", "ca.crt", "namespace")],
            },
        },
    ]


def scheduler_deployment(spec: StackSpec) -> dict[str, Any]:
    """kube-scheduler and its extender sidecar (none with the plugin), ``spec.replicas``
    pods, one leader."""
    containers = [scheduler_container(spec)]
    if not spec.plugin:
        containers.append(extender_container(spec))
    selector = labels(spec.scheduler_name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(spec.scheduler_name, spec.scheduler_name, spec.namespace),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector},
            # Replace one pod at a time: the other keeps (or takes) the lease.
            "strategy": one_pod_at_a_time(),
            "template": {
                "metadata": {
                    "labels": selector,
                    "annotations": {
                        CONFIG_CHECKSUM_ANNOTATION: config_checksum(scheduler_config_text(spec))
                    },
                },
                "spec": {
                    "serviceAccountName": spec.scheduler_name,
                    # No token for the whole pod: each container mounts its own
                    # (credential_volumes), so the extender never sees kube-scheduler's.
                    "automountServiceAccountToken": False,
                    # Scheduling the scheduler must not depend on itself.
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": True, "fsGroup": NONROOT_UID},
                    "affinity": spread_over_nodes(selector),
                    "containers": containers,
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{spec.scheduler_name}-config"}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                        *(
                            [
                                {
                                    "name": "extender-tmp",
                                    "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"},
                                }
                            ]
                            if any(c["name"] == "extender" for c in containers)
                            else []
                        ),
                        *credential_volumes(spec),
                    ],
                },
            },
        },
    }


#: The agent's health port (``--health-port``): ``/livez`` (the publish loop goes round)
