"""The kind scenario driver: the seed's scenario on a real kind + CRI-O cluster.

Unlike the local driver, nothing is played here: kube-scheduler schedules, the
kubelet and CRI-O pull. The driver only submits pods through the Kubernetes
API and reads back what happened:

* **Placement**: ``spec.nodeName`` once the pod is bound.
* **Scores**: for ``layer-locality``, the extender's own ``/prioritize`` answer
  for the same pod and nodes, asked through the API server's service proxy;
  for ``image-locality``, the core's exact port of upstream ImageLocality on
  the same Node snapshot the default scheduler saw (both as 0..10, the
  extender scale).
* **Pull time**: the kubelet's ``Pulled`` event (``Successfully pulled image … in …``)
  about this very pod (its uid: names repeat across trials, events outlive pods).
* **Bytes**: the registry container's access log, bytes sent to the node's IP.

After each pull the driver waits until the node lists the image in
``status.images``: kube-scheduler and the extender score from Node status,
which the kubelet refreshes only about every 30 s, so without the wait the next
pod (P1 again) could be scored against a node whose cache looks empty.

Each pod requests (almost) a whole worker, so there is one scenario pod per
node, as in the seed. Scenario images carry no runnable program, so a pod
never becomes Running: the pull is what is measured, and the pod keeps its
node's resources until it is deleted.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import tenacity

from layersched.core.errors import TestbedError
from layersched.core.inventory import ClusterInventory, nodes_from_json
from layersched.core.pod import pod_from_json
from layersched.core.strategies import get_strategy
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.testbed.kind._cluster_config import CRIO_SOCKET
from layersched.testbed.kind._measure import (
    PULLED_REASON,
    PullEvent,
    node_reports_image,
    pull_event_for,
    pulled_bytes,
)
from layersched.testbed.kind._scheduler_config import DEFAULT_SCHEDULER, LAYER_LOCALITY_SCHEDULER
from layersched.testbed.kind._workloads import EXTENDER_NAME, EXTENDER_PORT, NAMESPACE
from layersched.testbed.quantity import parse_quantity
from layersched.testbed.scenario import Placement, Pull

log = logging.getLogger(__name__)

DRIVER_NAME = "kind"
SCENARIO_NAMESPACE = "layersched-scenario"
#: Label on every scenario pod, so reset() finds them all.
SCENARIO_LABEL = {"app.kubernetes.io/part-of": "layersched-scenario"}
#: Resources a scenario pod claims a whole node of.
WHOLE_NODE_RESOURCES = ("cpu", "memory")
#: Upstream framework scores (0..100) over the extender's MaxExtenderPriority (10).
FRAMEWORK_PER_EXTENDER_SCORE = 10
#: A pull of tens of MiB over a 20 Mbit/s link takes tens of seconds; five minutes
#: bounds even a slow laptop without hiding a stuck pull forever.
PULL_TIMEOUT_S = 300.0
#: Binding happens within a scheduling cycle; a minute means the scheduler is not running.
BIND_TIMEOUT_S = 60.0
#: Pod deletion with grace 0 still waits for CRI-O to stop the sandbox.
DELETE_TIMEOUT_S = 120.0
#: The kubelet refreshes its image list about every 30 s and posts node status
#: every 10 s; two refreshes and a status update is when a removed image is gone.
IMAGE_GONE_TIMEOUT_S = 90.0
#: The same refresh the other way: a pulled image appears in status.images within
#: one image-list refresh (~30 s) plus a status post (~10 s); 90 s allows two.
IMAGE_LISTED_TIMEOUT_S = 90.0
POLL_S = 1.0
#: The registry logs a request when its response completes, just before the
#: kubelet reports the pull; give the log a moment to catch up.
LOG_SETTLE_TIMEOUT_S = 10.0
#: docker logs --since has one-second resolution: start counting a second early.
_LOG_SLACK = timedelta(seconds=1)
#: Subprocess budget for one docker CLI call against a local daemon.
DOCKER_TIMEOUT_S = 60.0
_API_TIMEOUT_S = 30.0

_T = TypeVar("_T")


class _NotYet(TestbedError):
    """A wait condition is not met yet; after the timeout its message is the error."""


def _wait(check: Callable[[], _T], timeout_s: float, poll_s: float = POLL_S) -> _T:
    """Call ``check`` until it stops raising :class:`_NotYet` (tenacity, re-raising the last)."""
    waiter = tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(poll_s),
        retry=tenacity.retry_if_exception_type(_NotYet),
        reraise=True,
    )
    return waiter(check)()


def pod_name(scenario_pod: str) -> str:
    """The scenario's pod label (``P1-again``) as a Kubernetes name (``p1-again``)."""
    return scenario_pod.lower()


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
    extender_namespace: str = NAMESPACE
    extender_service: str = EXTENDER_NAME
    extender_port: int = EXTENDER_PORT


def whole_node_requests(
    nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """Requests that fill the emptiest-but-smallest worker: for each resource, the
    least free allocatable over ``nodes`` after the requests of ``pods`` already
    bound there (DaemonSets, the testbed's own pods). On identical nodes a second
    such pod never fits beside the first."""
    free: dict[str, Decimal] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        allocatable = node["status"].get("allocatable") or {}
        for resource in WHOLE_NODE_RESOURCES:
            used = Decimal(0)
            for pod in pods:
                if pod.get("spec", {}).get("nodeName") != name:
                    continue
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                for container in pod["spec"].get("containers") or []:
                    requests = (container.get("resources") or {}).get("requests") or {}
                    if resource in requests:
                        used += parse_quantity(
                            str(requests[resource]), f"pod {pod['metadata']['name']} {resource}"
                        )
            have = parse_quantity(
                str(allocatable.get(resource, "0")), f"node {name} allocatable.{resource}"
            )
            free[resource] = min(free.get(resource, have - used), have - used)
    if not free or any(value <= 0 for value in free.values()):
        raise TestbedError(
            f"no free {', '.join(WHOLE_NODE_RESOURCES)} on the workers ({free}): "
            "give the Docker VM more CPU/memory or use fewer testbed pods"
        )
    return {"cpu": f"{int(free['cpu'] * 1000)}m", "memory": str(int(free["memory"]))}


def scenario_pod(
    name: str, image: str, scheduler_name: str, requests: Mapping[str, str], namespace: str
) -> dict[str, Any]:
    """A scenario pod: one container, whole-node requests, the strategy's scheduler."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(SCENARIO_LABEL)},
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    # Always pull: the node's cache state is the experiment, never a shortcut.
                    "imagePullPolicy": "Always",
                    "resources": {"requests": dict(requests), "limits": dict(requests)},
                }
            ],
        },
    }


class KindDriver:
    """:class:`layersched.testbed.scenario.Driver` on a kind + CRI-O cluster."""

    name = DRIVER_NAME

    def __init__(self, testbed: KindTestbed) -> None:
        if not testbed.docker.is_absolute():
            raise TestbedError(f"docker CLI path {testbed.docker} must be absolute")
        from kubernetes import client, config

        self.testbed = testbed
        self._api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(testbed.kubeconfig)
        )
        self._core = client.CoreV1Api(self._api_client)
        self._ensure_namespace()

    # ------------------------------------------------------------------ plumbing
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

    def _json(self, obj: Any) -> Any:
        return self._api_client.sanitize_for_serialization(obj)

    def _ensure_namespace(self) -> None:
        from kubernetes.client.exceptions import ApiException

        body: Any = {"metadata": {"name": self.testbed.namespace}}
        try:
            self._core.create_namespace(body, _request_timeout=_API_TIMEOUT_S)
        except ApiException as err:
            if err.status != 409:  # 409: it exists already, which is fine
                raise TestbedError(
                    f"creating namespace {self.testbed.namespace}: {err.reason}"
                ) from err

    def _nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self._json(self._core.list_node().items)
        return nodes

    def _workers(self, nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            n
            for n in nodes
            if "node-role.kubernetes.io/control-plane" not in (n["metadata"].get("labels") or {})
        ]

    def _scenario_pods(self) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in SCENARIO_LABEL.items())
        pods: list[dict[str, Any]] = self._json(
            self._core.list_namespaced_pod(self.testbed.namespace, label_selector=selector).items
        )
        return pods

    # ------------------------------------------------------------------ Driver
    def reset(self) -> None:
        """Delete every scenario pod, then remove the scenario images from every worker."""
        for pod in self._scenario_pods():
            self.delete_by_name(pod["metadata"]["name"])
        workers = [n["metadata"]["name"] for n in self._workers(self._nodes())]
        for node in workers:
            for image in self.testbed.scenario_images:
                # crictl rmi fails for an absent image; which images exist is not worth a call.
                # The endpoint is explicit: a prebuilt node image may lack /etc/crictl.yaml.
                argv = [
                    str(self.testbed.docker), "exec", node,
                    "crictl", "--runtime-endpoint", CRIO_SOCKET, "rmi", image,
                ]  # fmt: skip
                subprocess.run(argv, capture_output=True, timeout=DOCKER_TIMEOUT_S, check=False)
        _wait(self._check_images_gone, IMAGE_GONE_TIMEOUT_S)

    def _check_images_gone(self) -> None:
        for node in self._workers(self._nodes()):
            left = [i for i in self.testbed.scenario_images if node_reports_image(node, i)]
            if left:
                raise _NotYet(
                    f"node {node['metadata']['name']} still reports {sorted(left)} in "
                    "status.images: is its kubelet running?"
                )

    def schedule(self, pod: str, image: str, strategy: str) -> Placement:
        """Submit ``pod`` for ``strategy``'s scheduler, wait for its pull, measure it."""
        try:
            scheduler = self.testbed.schedulers[strategy]
        except KeyError:
            raise TestbedError(
                f"strategy {strategy!r} has no scheduler in this testbed: "
                f"choose one of {', '.join(self.testbed.schedulers)}"
            ) from None
        name = pod_name(pod)
        nodes = self._nodes()
        workers = self._workers(nodes)
        all_pods: list[dict[str, Any]] = self._json(self._core.list_pod_for_all_namespaces().items)
        scenario = [p for p in all_pods if p["metadata"].get("namespace") == self.testbed.namespace]
        others = [p for p in all_pods if p["metadata"].get("namespace") != self.testbed.namespace]
        requests = whole_node_requests(workers, others)
        busy = {p["spec"].get("nodeName") for p in scenario}
        candidates = [n for n in workers if n["metadata"]["name"] not in busy]
        document = scenario_pod(name, image, scheduler, requests, self.testbed.namespace)
        scores = self._scores(strategy, document, nodes, candidates)
        started = datetime.now(UTC)
        body: Any = document  # the client serialises plain dicts as they are
        created: Any = self._core.create_namespaced_pod(self.testbed.namespace, body)
        uid = str(created.metadata.uid)
        node = _wait(lambda: self._bound_node(name), BIND_TIMEOUT_S)
        event = _wait(lambda: self._pull_event(name, uid), PULL_TIMEOUT_S)
        address = self._node_address(node)
        size_bytes = 0
        if event.pulled:
            size_bytes = _wait(lambda: self._pulled_bytes(started, address), LOG_SETTLE_TIMEOUT_S)
        log.info("%s -> %s: %d bytes in %.2fs", pod, node, size_bytes, event.seconds)
        # The next pod is scored from Node status: wait until it shows this pull.
        _wait(lambda: self._check_image_listed(node, image), IMAGE_LISTED_TIMEOUT_S)
        return Placement(
            node=node,
            scores=scores,
            pull=Pull(pod=pod, node=node, bytes=size_bytes, seconds=event.seconds),
        )

    def delete(self, pod: str) -> None:
        """Delete ``pod``; CRI-O keeps its image (and layers) in the node's store."""
        self.delete_by_name(pod_name(pod))

    def delete_by_name(self, name: str) -> None:
        """Delete the pod called ``name`` with no grace period and wait until it is gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.delete_namespaced_pod(name, self.testbed.namespace, grace_period_seconds=0)
        except ApiException as err:
            if err.status == 404:  # already gone
                return
            raise TestbedError(f"deleting pod {name}: {err.reason}") from err
        _wait(lambda: self._check_gone(name), DELETE_TIMEOUT_S)

    # ------------------------------------------------------------------ checks
    def _check_gone(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.read_namespaced_pod(name, self.testbed.namespace)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        raise _NotYet(f"pod {name} is still terminating: check its node's kubelet and CRI-O")

    def _bound_node(self, name: str) -> str:
        pod: dict[str, Any] = self._json(
            self._core.read_namespaced_pod(name, self.testbed.namespace)
        )
        spec = pod.get("spec") or {}
        if not spec.get("nodeName"):
            raise _NotYet(
                f"pod {name} is not bound to a node (scheduler {spec.get('schedulerName')}): "
                "is that scheduler running? kubectl -n layersched get pods"
            )
        return str(spec["nodeName"])

    def _pull_event(self, name: str, uid: str) -> PullEvent:
        events = self._core.list_namespaced_event(
            self.testbed.namespace,
            field_selector=f"involvedObject.name={name},reason={PULLED_REASON}",
        ).items
        documents: list[dict[str, Any]] = self._json(events)
        # The name selects this trial's pod and every earlier one called the same:
        # only the uid tells them apart.
        parsed = pull_event_for(documents, uid)
        if parsed is None:
            raise _NotYet(
                f"pod {name} (uid {uid}) has no Pulled event yet: see "
                f"kubectl -n {self.testbed.namespace} describe pod {name}"
            )
        return parsed

    def _check_image_listed(self, node: str, image: str) -> None:
        document: dict[str, Any] = self._json(self._core.read_node(node))
        if not node_reports_image(document, image):
            raise _NotYet(
                f"node {node} does not list {image} in status.images yet: is its kubelet "
                "running? (it refreshes the image list about every 30 s)"
            )

    def _node_address(self, node: str) -> str:
        document: dict[str, Any] = self._json(self._core.read_node(node))
        for address in (document.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
        raise TestbedError(f"node {node} reports no InternalIP: cannot attribute registry traffic")

    def _pulled_bytes(self, since: datetime, address: str) -> int:
        text = self._docker(
            "logs", "--since", (since - _LOG_SLACK).isoformat(), self.testbed.registry_container
        )
        size_bytes = pulled_bytes(text.splitlines(), address)
        if size_bytes == 0:
            raise _NotYet(
                f"registry {self.testbed.registry_container} logged no pull from {address}"
            )
        return size_bytes

    # ------------------------------------------------------------------ scores
    def _scores(
        self,
        strategy: str,
        pod: dict[str, Any],
        nodes: Sequence[dict[str, Any]],
        candidates: Sequence[dict[str, Any]],
    ) -> dict[str, int]:
        """The scores behind the decision, on the extender's 0..10 scale."""
        if strategy == IMAGE_LOCALITY:
            return image_locality_scores(pod, nodes, candidates)
        return self._extender_scores(pod, candidates)

    def _extender_scores(
        self, pod: dict[str, Any], candidates: Sequence[dict[str, Any]]
    ) -> dict[str, int]:
        path = (
            f"/api/v1/namespaces/{self.testbed.extender_namespace}/services/"
            f"{self.testbed.extender_service}:{self.testbed.extender_port}/proxy/prioritize"
        )
        body = {"Pod": pod, "Nodes": {"items": list(candidates)}, "NodeNames": None}
        answer = self._api_client.call_api(
            path,
            "POST",
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=_API_TIMEOUT_S,
        )
        if not isinstance(answer, list):
            raise TestbedError(
                f"extender /prioritize answered {answer!r}, expected a HostPriorityList"
            )
        return {str(item["Host"]): int(item["Score"]) for item in answer}


def image_locality_scores(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    candidates: Sequence[Mapping[str, Any]],
) -> dict[str, int]:
    """Upstream ImageLocality (the core's exact port) on the scheduler's Node snapshot,
    as 0..10 like an extender answer. ``nodes`` is every node (upstream's spread
    factor counts them all); ``candidates`` are the ones the pod fits."""
    inventory = ClusterInventory.build(nodes_from_json(list(nodes), "node snapshot"))
    indices, missing = inventory.indices_of([c["metadata"]["name"] for c in candidates])
    if missing:
        raise TestbedError(f"candidate nodes {missing} are not in the node snapshot")
    scores = get_strategy(IMAGE_LOCALITY).score(
        pod_from_json(dict(pod), "scenario pod"), inventory, np.asarray(indices), None
    )
    return {
        node: score // FRAMEWORK_PER_EXTENDER_SCORE
        for node, score in scores.as_dict(inventory).items()
    }
