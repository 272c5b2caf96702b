"""The kind + CRI-O testbed's side of the cluster scenario driver.

The scenario itself runs through the Kubernetes API in
:class:`layersched_harness.testbed.cluster.driver.ClusterDriver`, the same driver every
cluster uses. What only a kind testbed can see comes from Docker:

* **Bytes**: the registry container's access log (``docker logs``), bytes sent to
  the node's IP.
* **Emptying a node's cache**: ``crictl rmi`` inside the node container.
* **Scores**: for ``layer-locality``, the decision the extender logged for the pod: the
  extender is the sidecar of ``install/kustomize/``'s scheduler pods, its log read through the API
  (``kubectl logs -c extender``) from the pod's mark on; for ``image-locality``, the
  core's port of upstream ImageLocality on the Node snapshot the scheduler saw (0..100:
  kind's scheduler does not log its plugin scores).
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from layersched.core.errors import KubeError
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.deploy import DEFAULT_SCHEDULER, LAYER_LOCALITY_SCHEDULER, NAMESPACE, labels
from layersched.kube import KubeClient, load_kubeconfig, pod_log_path, pods_path, selector
from layersched_harness.testbed.cluster._measure import extender_decision, pulled_bytes
from layersched_harness.testbed.cluster.driver import (
    SCENARIO_NAMESPACE,
    ClusterDriver,
    NotYet,
    PodRun,
    image_locality_scores,
    pod_name,
    scenario_pod,
    whole_node_requests,
)
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.kind._cluster_config import CRIO_SOCKET

__all__ = [
    "DRIVER_NAME",
    "SCORE_SOURCES",
    "KindBackend",
    "KindTestbed",
    "image_locality_scores",
    "kind_driver",
    "pod_name",
    "scenario_pod",
    "whole_node_requests",
]

DRIVER_NAME = "kind"
#: Where each strategy's scores come from, and their scale (the report says so).
SCORE_SOURCES = {
    LAYER_LOCALITY: "deployed layersched extender (scheduler sidecar): its logged decision (0-10)",
    IMAGE_LOCALITY: "layersched's port of ImageLocality on the scheduler's Node snapshot (0-100)",
}
#: docker logs --since has one-second resolution: start counting a second early.
_LOG_SLACK = timedelta(seconds=1)
#: Subprocess budget for one docker CLI call against a local daemon.
DOCKER_TIMEOUT_S = 60.0
_CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


@dataclass(frozen=True, slots=True)
class KindTestbed:
    """What the driver needs to know about a running kind testbed (the Pulumi outputs)."""

    kubeconfig: Path
    #: Docker container name of the testbed registry (its access log is read).
    registry_container: str
    #: Absolute path of the docker CLI (never looked up on PATH at run time).
    docker: Path
    #: Image references the scenario uses; reset() removes them from every worker.
    scenario_images: Sequence[str]
    #: strategy -> ``schedulerName`` a pod sets to be scheduled by it.
    schedulers: Mapping[str, str] = field(
        default_factory=lambda: {
            LAYER_LOCALITY: LAYER_LOCALITY_SCHEDULER,
            IMAGE_LOCALITY: DEFAULT_SCHEDULER,
        }
    )
    namespace: str = SCENARIO_NAMESPACE
    #: Where install/kustomize/'s scheduler pods run, and the name of their extender sidecar.
    scheduler_namespace: str = NAMESPACE
    scheduler_deployment: str = LAYER_LOCALITY_SCHEDULER
    extender_container: str = "extender"


def is_worker(node: Mapping[str, Any]) -> bool:
    """kind's control-plane node takes no scenario pod."""
    return _CONTROL_PLANE_LABEL not in ((node.get("metadata") or {}).get("labels") or {})


class KindBackend:
    """:class:`layersched_harness.testbed.cluster.driver.Backend` of a kind + CRI-O testbed."""

    name = DRIVER_NAME

    def __init__(self, testbed: KindTestbed) -> None:
        if not testbed.docker.is_absolute():
            raise TestbedError(f"docker CLI path {testbed.docker} must be absolute")
        self.testbed = testbed
        self.schedulers = dict(testbed.schedulers)
        self._kube = KubeClient(load_kubeconfig(str(testbed.kubeconfig)))

    def _docker(self, *args: str) -> str:
        argv = [str(self.testbed.docker), *args]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise TestbedError(f"running {' '.join(argv)}: {err}") from err
        if done.returncode != 0:
            raise TestbedError(
                f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}"
            )
        # The registry logs requests to stdout and its own messages to stderr.
        return done.stdout + done.stderr

    def mark(self) -> datetime:
        return datetime.now(UTC)

    def registry_bytes(self, mark: datetime, address: str) -> int:
        text = self._docker(
            "logs", "--since", (mark - _LOG_SLACK).isoformat(), self.testbed.registry_container
        )
        size_bytes = pulled_bytes(text.splitlines(), address)
        if size_bytes == 0:
            raise NotYet(
                f"registry {self.testbed.registry_container} logged no pull from {address}"
            )
        return size_bytes

    def remove_images(self, node: str, images: Sequence[str], namespace: str) -> None:
        # The deleted pods' sandboxes first: their containers pin the layers.
        sandboxes = [
            str(self.testbed.docker), "exec", node, "crictl", "--runtime-endpoint", CRIO_SOCKET,
            "pods", "--namespace", namespace, "--quiet",
        ]  # fmt: skip
        listed = subprocess.run(
            sandboxes, capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
        )
        for sandbox in listed.stdout.split():
            argv = [
                str(self.testbed.docker), "exec", node,
                "crictl", "--runtime-endpoint", CRIO_SOCKET, "rmp", "--force", sandbox,
            ]  # fmt: skip
            subprocess.run(argv, capture_output=True, timeout=DOCKER_TIMEOUT_S, check=False)
        for image in images:
            # crictl rmi fails for an absent image; which images exist is not worth a call.
            # The endpoint is explicit: a prebuilt node image may lack /etc/crictl.yaml.
            argv = [
                str(self.testbed.docker), "exec", node,
                "crictl", "--runtime-endpoint", CRIO_SOCKET, "rmi", image,
            ]  # fmt: skip
            subprocess.run(argv, capture_output=True, timeout=DOCKER_TIMEOUT_S, check=False)

    def components(self) -> dict[str, str]:
        return {}

    def scores(self, run: PodRun) -> dict[str, int]:
        """The scores behind the decision (see the module docstring for their sources)."""
        if run.strategy == IMAGE_LOCALITY:
            return image_locality_scores(run.document, run.nodes, run.candidates)
        return self._extender_scores(run)

    def _extender_scores(self, run: PodRun) -> dict[str, int]:
        """The extender's logged decision for ``run``'s pod, from any scheduler pod's sidecar
        (only the leader's is called; a failover may split a run between two)."""
        namespace = self.testbed.scheduler_namespace
        elapsed_s = (datetime.now(UTC) - run.mark + _LOG_SLACK).total_seconds()
        since_s = max(1, math.ceil(elapsed_s))
        pods, _ = self._kube.list(
            pods_path(namespace),
            label_selector=selector(labels(self.testbed.scheduler_deployment)),
        )
        errors: list[str] = []
        for pod in pods:
            name = (pod.get("metadata") or {}).get("name")
            if not name or (pod.get("status") or {}).get("phase") != "Running":
                continue
            try:
                text = self._kube.read_log(
                    pod_log_path(namespace, str(name)),
                    container=self.testbed.extender_container,
                    since_s=since_s,
                )
            except KubeError as err:  # a sidecar (re)starting has no log yet
                if not err.status:  # no answer at all: not a sidecar's state
                    raise
                errors.append(f"{name}: {err}")
                continue
            found = extender_decision(text.splitlines(), run.key)
            if found is not None:
                return found
        raise NotYet(
            f"no extender sidecar of {namespace}/{self.testbed.scheduler_deployment} "
            f"({len(pods)} pods) logged a decision for pod {run.key} yet"
            + (f" ({'; '.join(errors)})" if errors else "")
        )


def kind_driver(testbed: KindTestbed) -> ClusterDriver:
    """The cluster scenario driver on a kind testbed."""
    return ClusterDriver(
        str(testbed.kubeconfig),
        KindBackend(testbed),
        testbed.scenario_images,
        namespace=testbed.namespace,
        is_worker=is_worker,
    )
