"""The scenario driver for any real Kubernetes cluster: local, kind or cloud.

Nothing is played here: kube-scheduler schedules, the kubelet and the runtime pull.
The driver submits pods through the Kubernetes API and reads back what happened:

* **Placement**: ``spec.nodeName`` once the pod is bound, and **who bound it**: the
  ``Scheduled`` event's reporting controller (the scheduler profile's name).
* **Pull time**: the kubelet's ``Pulled`` event (``Successfully pulled image … in …``)
  about this very pod (its uid: names repeat across trials, events outlive pods).
* **Bytes**: the registry's access log, bytes sent to the node's address.
* **Scores** and the other things only a testbed can see (a registry log, a scheduler
  log, how to empty a node's image cache) come from a :class:`Backend`.
* **Status lag**: :meth:`ClusterDriver.settle` waits until a pod's node lists its image
  where the strategy looks, and says how long ``status.images`` took after the pull.
  kube-scheduler's ImageLocality scores from Node status, which the kubelet refreshes
  about every 30 s, so without the wait an image-locality P1-again could be scored
  against a node whose cache looks empty; the layer-aware strategies read the agents'
  inventory instead (a fraction of a second), and wait for that only.
* **Reset**: every image of the scenario's repositories is removed from every worker
  (CRI), and the driver waits until the extender's inventory lists none of them and
  no node's ``status.images`` lists the next trial's references. A trial with a tag of
  its own (:func:`layersched_harness.testbed.scenario.trial_images`) never waits for the
  kubelet to notice a removal: no node ever listed that name.

Each pod requests a whole node (the least free allocatable over the workers), so there
is one scenario pod per node, as in the seed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, TypeVar

import numpy as np
import tenacity

from layersched.core.errors import KubeError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.nodeindexing import node_info
from layersched.core.objects import decode_pod, nodes_from_document, pod_images
from layersched.core.quantity import parse_quantity
from layersched.core.reference import parse_or_none
from layersched.core.strategies import get_strategy
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.kube import (
    ALL_PODS_PATH,
    HTTP_CONFLICT,
    HTTP_NOT_FOUND,
    NAMESPACES_PATH,
    NODE_LAYERS_PATH,
    NODES_PATH,
    VERSION_PATH,
    KubeClient,
    deployment_path,
    deployments_path,
    events_path,
    load_kubeconfig,
    namespace_path,
    node_path,
    pod_path,
    pods_path,
    selector,
)
from layersched_harness.testbed.cluster._measure import (
    PULLED_REASON,
    SCHEDULED_REASON,
    PullEvent,
    node_reports_image,
    pull_event_for,
    scheduled_by,
)
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.scenario import Placement, Pull, repository_of

log = logging.getLogger(__name__)

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
#: Seconds a deleted scenario pod gets to stop (its program exits on SIGTERM at once).
DELETE_GRACE_S = 1
#: The strategies that read ``status.images`` to score (kube-scheduler's ImageLocality);
#: the others read the agents' NodeLayerInventory.
READS_NODE_STATUS = frozenset({IMAGE_LOCALITY})
#: The ``waiting`` reason of a container the kubelet is creating right now (its image
#: pulled): it may still start, and its snapshot pins the image's layers.
CREATING_REASON = "ContainerCreating"
#: Pod phases in which nothing of the pod runs any more.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
#: Pod deletion waits for the kubelet and the runtime to stop the sandbox (a second or
#: two); past this the pod is deleted with no grace period (see delete_by_name).
DELETE_TIMEOUT_S = 60.0
#: The kubelet refreshes its image list every 30 s (1.20: a fixed period) and posts
#: node status on change; 90 s allows two refreshes and a slow status post.
IMAGE_GONE_TIMEOUT_S = 90.0
IMAGE_LISTED_TIMEOUT_S = 90.0
POLL_S = 1.0
#: Status lag is measured at this resolution.
STATUS_POLL_S = 0.25
#: A stopping pod and an emptied cache are polled this often: a kubelet stops a pod's
#: containers in about a second, an agent republishes within 0.2 s, and each poll
#: a second late cost every trial that second.
STOP_POLL_S = 0.25
#: The extender inventory's lag is measured at this resolution.
INVENTORY_POLL_S = 0.05
#: The registry logs a request when its response completes, just before the
#: kubelet reports the pull; give the log a moment to catch up.
LOG_SETTLE_TIMEOUT_S = 10.0
#: The scheduler's score lines and Scheduled event trail the binding slightly.
SCORES_TIMEOUT_S = 15.0

#: The ServiceAccount the controller-manager makes in every namespace; pods that name
#: none run as it, and are refused until it exists.
DEFAULT_ACCOUNT = "default"
#: The serviceaccount controller makes it within a second or two of the namespace.
DEFAULT_ACCOUNT_TIMEOUT_S = 60.0

_T = TypeVar("_T")


class NotYet(TestbedError):
    """A wait condition is not met yet; after the timeout its message is the error."""


def wait_for(check: Callable[[], _T], timeout_s: float, poll_s: float = POLL_S) -> _T:
    """Call ``check`` until it stops raising :class:`NotYet` (tenacity, re-raising the last)."""
    waiter = tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(poll_s),
        retry=tenacity.retry_if_exception_type(NotYet),
        reraise=True,
    )
    return waiter(check)()


def pod_name(scenario_pod: str) -> str:
    """The scenario's pod label (``P1-again``) as a Kubernetes name (``p1-again``)."""
    return scenario_pod.lower()


def still_running(
    statuses: Sequence[Mapping[str, Any]],
    phase: str | None = None,
    *,
    creating_is_stopped: bool = False,
) -> list[str]:
    """The containers of a deleted pod that may still run, or still pin its image's layers:
    those ``running``, with no state reported yet, or ``waiting`` as ``ContainerCreating``
    (the kubelet may be creating it from the pulled image this moment; a reset that
    removed the image meanwhile would leave the layers' snapshots behind, pinned by it)
    unless ``creating_is_stopped``. ``terminated`` ones have ended; ``waiting`` for any
    other reason (``ErrImagePull``, ``ImagePullBackOff``, ``CreateContainerError``) never
    starts: the kubelet starts nothing for a pod being deleted.

    A pod in a terminal ``phase`` (``Succeeded``, ``Failed``) runs nothing, whatever its
    container statuses say: kubelet 1.20 fails a pod deleted while its container was
    being created and leaves that container ``waiting`` as ``ContainerCreating`` until
    its sandbox is collected, up to a minute later.
    """
    if phase in FINISHED_PHASES:
        return []
    running = []
    for status in statuses:
        state = status.get("state") or {}
        if "terminated" in state:
            continue
        waiting = state.get("waiting")
        if waiting is not None and "running" not in state:
            creating = (waiting or {}).get("reason", CREATING_REASON) == CREATING_REASON
            if not creating or creating_is_stopped:
                continue
        running.append(str(status.get("name", "?")))
    return running


def listed_repository(name: str) -> str:
    """The repository of an image name as a runtime lists it (``repo:tag`` or
    ``repo@sha256:…``), for matching every tag of the scenario's images."""
    parsed = parse_or_none(name)
    return name if parsed is None else name.removesuffix(parsed.suffix())


def held_layers(
    inventories: Sequence[Mapping[str, Any]], node: str, digests: Sequence[str]
) -> list[str]:
    """Which of ``digests`` the agent's NodeLayerInventory of ``node`` still lists (among
    ``inventories``, the listed objects): layers no image names any more, pinned by a
    container created from them, are still there, and a pull would skip them."""
    wanted = set(digests)
    for inventory in inventories:
        if (inventory.get("metadata") or {}).get("name") != node:
            continue
        listed = {str(layer.get("digest")) for layer in inventory.get("layers") or []}
        return sorted(wanted & listed)
    return []


@dataclass(frozen=True, slots=True)
class Submitted:
    """A pod :meth:`ClusterDriver.submit` created and saw bound, and the thread waiting
    for its ``Pulled`` event (``pulled`` holds the event, or the error)."""

    pod: str
    image: str
    node: str
    run: PodRun
    watcher: threading.Thread
    pulled: dict[str, PullEvent | BaseException]


@dataclass(frozen=True, slots=True)
class PodRun:
    """What the driver knows of one submitted pod when it asks its backend for more."""

    #: ``NAMESPACE/NAME``, as kube-scheduler and the extender log it.
    key: str
    uid: str
    strategy: str
    #: The pod as submitted, and the nodes and candidates it was submitted against.
    document: Mapping[str, Any]
    nodes: Sequence[Mapping[str, Any]]
    candidates: Sequence[Mapping[str, Any]]
    #: The backend's own marker, taken just before the pod was created.
    mark: Any


class Backend(Protocol):
    """What differs between clusters: how to see the registry, scores and image caches."""

    @property
    def name(self) -> str:
        """``"local"``, ``"kind"``, ``"cloud"``: the report's ``driver``."""
        ...

    @property
    def schedulers(self) -> Mapping[str, str]:
        """strategy -> the ``schedulerName`` a pod sets to be scheduled by it."""
        ...

    def mark(self) -> Any:
        """A marker taken before a pod is created: what "since" means for the logs."""
        ...

    def registry_bytes(self, mark: Any, address: str) -> int:
        """Bytes of manifests and blobs the registry sent to ``address`` since ``mark``.

        Raise :class:`NotYet` while the registry has logged nothing for it.
        """
        ...

    def scores(self, run: PodRun) -> dict[str, int]:
        """The scores behind ``run``'s placement (raise :class:`NotYet` until they are known)."""
        ...

    def remove_images(self, node: str, images: Sequence[str], namespace: str) -> None:
        """Remove ``images``, and every other tag of their repositories, from ``node``'s
        runtime (absent ones are fine).

        The pods of ``namespace`` are already deleted through the API, but their dead
        containers (which the kubelet garbage-collects only every minute) still pin the
        images' layer snapshots: remove those pods' sandboxes first, so that the layers
        really go and the next pull downloads them again.
        """
        ...

    def components(self) -> dict[str, str]:
        """Versions of the testbed's own components the API does not report (e.g. etcd)."""
        ...


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
            "give the nodes more CPU/memory or run fewer pods beside the scenario"
        )
    return {"cpu": f"{int(free['cpu'] * 1000)}m", "memory": str(int(free["memory"]))}


def scenario_pod(
    name: str,
    image: str,
    scheduler_name: str,
    requests: Mapping[str, str],
    namespace: str,
    *,
    pull_policy: str = "Always",
    node: str | None = None,
) -> dict[str, Any]:
    """A scenario pod: one container, ``requests`` (the seed scenario's: a whole node), the
    strategy's scheduler. The seed scenario always pulls (the node's cache is the
    experiment); a replay pulls ``IfNotPresent``, as a tagged image is pulled by default.

    ``node`` pins the pod to that node by a required node affinity on ``metadata.name``
    (as DaemonSets pin theirs): the strategy's scheduler still places and binds it,
    with that node the only feasible one."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(SCENARIO_LABEL)},
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": pull_policy,
                    "resources": {"requests": dict(requests), "limits": dict(requests)},
                }
            ],
        },
    }
    if node is not None:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    return pod


def image_locality_scores(
    pod: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    candidates: Sequence[Mapping[str, Any]],
) -> dict[str, int]:
    """Upstream ImageLocality (the core's port) on the scheduler's Node snapshot, 0..100.

    For clusters whose scheduler does not log its plugin scores (kind's default
    scheduler runs at ``-v=2``). ``nodes`` is every node (upstream's spread factor
    counts them all); ``candidates`` are the ones the pod fits.
    """
    origin = "node snapshot"
    inventory = build_layer_index(
        node_info(node, f"{origin}: items[{i}]")
        for i, node in enumerate(nodes_from_document(list(nodes), origin))
    )
    indices, missing = inventory.indices_of([c["metadata"]["name"] for c in candidates])
    if missing:
        raise TestbedError(f"candidate nodes {missing} are not in the node snapshot")
    scores = get_strategy(IMAGE_LOCALITY).score(
        pod_images(decode_pod(dict(pod), "scenario pod"), "scenario pod"),
        (),
        inventory,
        np.asarray(indices),
    )
    return dict(scores.as_dict(inventory))


class ClusterDriver:
    """:class:`layersched_harness.testbed.scenario.Driver` over the Kubernetes API of a real
    cluster.

    ``scenario_images`` are the references reset() removes from every worker;
    ``is_worker`` says which nodes take scenario pods (not kind's control-plane node).
    """

    def __init__(
        self,
        kubeconfig: str,
        backend: Backend,
        scenario_images: Sequence[str],
        *,
        namespace: str = SCENARIO_NAMESPACE,
        is_worker: Callable[[Mapping[str, Any]], bool] | None = None,
        layer_digests: Sequence[str] = (),
        pins: Mapping[str, str] | None = None,
    ) -> None:
        self.backend = backend
        #: pod -> the node it is pinned to (``scenario --pin P2=n3``): a way to choose which
        #: node's runtime holds what P1-again is scored on. Unpinned pods go where the
        #: strategy puts them.
        self.pins = dict(pins or {})
        #: The scenario's layers: a reset waits until no agent's inventory lists one.
        self.layer_digests = tuple(layer_digests)
        self.name = backend.name
        self.scenario_images = tuple(scenario_images)
        self.namespace = namespace
        self.is_worker = is_worker or (lambda node: True)
        #: Shared by the scenario's thread and the listing timers' threads (httpx's Client
        #: "can be shared between threads", its docstring says).
        self._kube = KubeClient(load_kubeconfig(str(kubeconfig)))
        #: pod -> the thread timing its node's listing of its image, and its result.
        self._listing: dict[str, tuple[threading.Thread, dict[str, float | BaseException]]] = {}
        #: Images of the pods submitted since the last reset (reset removes them).
        self._used: list[str] = []
        #: pod -> the thread timing the extender inventory's listing of its image.
        self._inventory_listing: dict[
            str, tuple[threading.Thread, dict[str, float | BaseException]]
        ] = {}
        self._ensure_namespace()

    # ------------------------------------------------------------------ plumbing
    def _ensure_namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        try:
            self._kube.create(NAMESPACES_PATH, body)
        except KubeError as err:
            if err.status != HTTP_CONFLICT:  # it exists already, which is fine
                raise TestbedError(f"creating namespace {self.namespace}: {err}") from err
        self._wait_default_account()

    def _wait_default_account(self) -> None:
        """Wait until the namespace's ``default`` ServiceAccount exists. The controller-
        manager's serviceaccount controller makes it a moment after the namespace, and
        until then the ServiceAccount admission plugin refuses every pod there (403
        "error looking up service account")."""
        path = f"{namespace_path(self.namespace)}/serviceaccounts/{DEFAULT_ACCOUNT}"

        def made() -> None:
            try:
                self._kube.get(path)
            except KubeError as err:
                if err.status != HTTP_NOT_FOUND:
                    raise TestbedError(f"reading {path}: {err}") from err
                raise NotYet(
                    f"namespace {self.namespace} has no ServiceAccount {DEFAULT_ACCOUNT!r} "
                    f"after {DEFAULT_ACCOUNT_TIMEOUT_S:.0f} s: the controller-manager's "
                    "serviceaccount controller makes it; check that kube-controller-manager "
                    "runs (its log, or kubectl get pods -n kube-system)"
                ) from err

        wait_for(made, DEFAULT_ACCOUNT_TIMEOUT_S, STOP_POLL_S)

    def _nodes(self) -> list[dict[str, Any]]:
        return self._kube.list(NODES_PATH)[0]

    def _workers(self, nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [n for n in nodes if self.is_worker(n)]

    def _scenario_pods(self) -> list[dict[str, Any]]:
        pods_here = pods_path(self.namespace)
        return self._kube.list(pods_here, label_selector=selector(SCENARIO_LABEL))[0]

    def node_runtimes(self) -> dict[str, str]:
        """Each worker's runtime as its kubelet reports it (``containerd://2.1.9``,
        ``cri-o://1.36.3``): a mixed cluster's scenario is reported per runtime."""
        runtimes = {}
        for node in self._workers(self._nodes()):
            info = (node.get("status") or {}).get("nodeInfo") or {}
            name = str((node.get("metadata") or {}).get("name") or "")
            runtimes[name] = str(info.get("containerRuntimeVersion") or "")
        return dict(sorted(runtimes.items()))

    def components(self) -> dict[str, str]:
        """Versions of what runs the scenario: the API server, kubelets, runtimes, and the
        backend's own (etcd, for example)."""
        versions: dict[str, str] = {}
        versions["kubernetes"] = str(self._kube.get(VERSION_PATH).get("gitVersion"))
        for node in self._workers(self._nodes()):
            info = (node.get("status") or {}).get("nodeInfo") or {}
            runtime = str(info.get("containerRuntimeVersion") or "")
            if "://" in runtime:
                kind, _, number = runtime.partition("://")
                versions.setdefault(kind, number)
            if info.get("kubeletVersion"):
                versions.setdefault("kubelet", str(info["kubeletVersion"]))
        versions.update(self.backend.components())
        return dict(sorted(versions.items()))

    # ------------------------------------------------------------------ Driver
    def reset(self, images: Sequence[str] | None = None) -> None:
        """Delete every scenario pod, remove every image of the scenario's repositories
        from every worker, and wait until the extender's inventory lists none of them and
        no node lists ``images`` (the next trial's; default: the driver's) in
        ``status.images``."""
        upcoming = self.scenario_images if images is None else tuple(images)
        started = time.monotonic()
        pods = [pod["metadata"]["name"] for pod in self._scenario_pods()]
        self.delete_all(pods)
        deleted = time.monotonic()
        removed = tuple(dict.fromkeys((*self.scenario_images, *upcoming, *self._used)))
        for node in self._workers(self._nodes()):
            self.backend.remove_images(node["metadata"]["name"], removed, self.namespace)
        emptied = time.monotonic()
        repositories = {repository_of(ref) for ref in removed}
        wait_for(
            lambda: self._check_images_gone(upcoming, repositories),
            IMAGE_GONE_TIMEOUT_S,
            STOP_POLL_S,
        )
        self._used.clear()
        log.info(
            "reset: %d pods deleted in %.1f s, caches emptied in %.1f s, seen empty after %.1f s",
            len(pods),
            deleted - started,
            emptied - deleted,
            time.monotonic() - emptied,
        )

    def _check_images_gone(self, upcoming: Sequence[str], repositories: set[str]) -> None:
        listed = getattr(self.backend, "inventory_images", None)
        inventories = self._kube.list(NODE_LAYERS_PATH)[0] if self.layer_digests else []
        for node in self._workers(self._nodes()):
            name = node["metadata"]["name"]
            left = [i for i in upcoming if node_reports_image(node, i)]
            if left:
                raise NotYet(
                    f"node {name} still reports {sorted(left)} in "
                    "status.images: is its kubelet running?"
                )
            held = [
                i
                for i in (listed(name) if listed is not None else ())
                if listed_repository(i) in repositories
            ]
            if held:
                raise NotYet(
                    f"the extender's inventory still lists {sorted(held)} on node {name}: "
                    "is its layersched agent running?"
                )
            layers = held_layers(inventories, name, self.layer_digests)
            if layers:
                raise NotYet(
                    f"node {name}'s agent still lists scenario layers {layers} after their "
                    "images were removed: a container created from them pins them (see "
                    f"crictl ps -a on {name}), and a pull there would skip them"
                )

    # ------------------------------------------------------- many pods at once (replay)
    def scheduler_name(self, strategy: str) -> str:
        """The ``schedulerName`` a pod sets to be scheduled by ``strategy``."""
        try:
            return self.backend.schedulers[strategy]
        except KeyError:
            raise TestbedError(
                f"strategy {strategy!r} has no scheduler in this testbed: "
                f"choose one of {', '.join(self.backend.schedulers)}"
            ) from None

    def worker_names(self) -> list[str]:
        """The workers' names."""
        return [n["metadata"]["name"] for n in self._workers(self._nodes())]

    def free_requests(self) -> dict[str, str]:
        """What one pod may request to fill the emptiest-but-smallest worker
        (:func:`whole_node_requests`), pods of this namespace not counted."""
        others = [
            p
            for p in self._kube.list(ALL_PODS_PATH)[0]
            if p["metadata"].get("namespace") != self.namespace
        ]
        return whole_node_requests(self._workers(self._nodes()), others)

    def create_pod(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Create a pod of this namespace (not waiting for anything); the pod as created."""
        created = self._kube.create(pods_path(self.namespace), document)
        self._used.extend(c["image"] for c in document["spec"]["containers"])
        return created

    def pods(self) -> list[dict[str, Any]]:
        """Every pod of this namespace carrying the scenario label."""
        return self._scenario_pods()

    def patch_pod(self, name: str, document: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch ``document`` into the pod ``name``."""
        return self._kube.patch(pod_path(self.namespace, name), document)

    def events(self, reason: str) -> list[dict[str, Any]]:
        """This namespace's events of ``reason`` (``Pulled``, ``Scheduled``, ...)."""
        fields = selector({"reason": reason})
        return self._kube.list(events_path(self.namespace), field_selector=fields)[0]

    def node_address(self, node: str) -> str:
        """``node``'s InternalIP (what the registry's access log names it by)."""
        return self._node_address(node)

    def node_allocatable(self) -> dict[str, dict[str, str]]:
        """Each worker's ``status.allocatable`` (what kube-scheduler's resource scores
        divide by)."""
        return {
            str(n["metadata"]["name"]): dict((n.get("status") or {}).get("allocatable") or {})
            for n in self._workers(self._nodes())
        }

    def kubelet_config(self, node: str) -> dict[str, Any]:
        """The configuration ``node``'s kubelet runs with, as it says itself (its
        ``/configz``, through the API server's node proxy)."""
        found = self._kube.get(f"{node_path(node)}/proxy/configz")
        config = found.get("kubeletconfig")
        if not isinstance(config, dict):
            raise TestbedError(f"node {node}: its kubelet's /configz has no kubeletconfig")
        return config

    def create_deployment(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Create an apps/v1 Deployment of this namespace; the object as created."""
        created = self._kube.create(deployments_path(self.namespace), document)
        for container in document["spec"]["template"]["spec"]["containers"]:
            self._used.append(container["image"])
        return created

    def deployment(self, name: str) -> dict[str, Any]:
        """The Deployment ``name`` of this namespace, as it is now."""
        return self._kube.get(deployment_path(self.namespace, name))

    def delete_deployment(self, name: str) -> bool:
        """Delete the Deployment ``name`` (its ReplicaSets and pods go after it: apps/v1's
        default is background deletion); False when it was gone."""
        return self._kube.delete(deployment_path(self.namespace, name))

    def schedule(self, pod: str, image: str, strategy: str) -> Placement:
        """Submit ``pod`` for ``strategy``'s scheduler, wait for its pull, measure it."""
        return self.complete(self.submit(pod, image, strategy))

    def submit(self, pod: str, image: str, strategy: str) -> Submitted:
        """Create ``pod`` for ``strategy``'s scheduler and wait until it is bound."""
        scheduler = self.scheduler_name(strategy)
        name = pod_name(pod)
        nodes = self._nodes()
        workers = self._workers(nodes)
        all_pods = self._kube.list(ALL_PODS_PATH)[0]
        scenario = [p for p in all_pods if p["metadata"].get("namespace") == self.namespace]
        others = [p for p in all_pods if p["metadata"].get("namespace") != self.namespace]
        requests = whole_node_requests(workers, others)
        busy = {p["spec"].get("nodeName") for p in scenario}
        candidates = [n for n in workers if n["metadata"]["name"] not in busy]
        pinned = self.pins.get(pod)
        if pinned is not None:
            if pinned not in {n["metadata"]["name"] for n in workers}:
                raise TestbedError(
                    f"--pin {pod}={pinned}: no worker is named {pinned} (the workers are "
                    f"{', '.join(sorted(n['metadata']['name'] for n in workers))})"
                )
            if pinned in busy:
                raise TestbedError(
                    f"--pin {pod}={pinned}: a scenario pod runs on {pinned} already (each "
                    "requests a whole node): pin the other pods elsewhere"
                )
            candidates = [n for n in candidates if n["metadata"]["name"] == pinned]
        document = scenario_pod(name, image, scheduler, requests, self.namespace, node=pinned)
        mark = self.backend.mark()
        created = self._kube.create(pods_path(self.namespace), document)
        uid = str((created.get("metadata") or {}).get("uid"))
        run = PodRun(
            key=f"{self.namespace}/{name}",
            uid=uid,
            strategy=strategy,
            document=document,
            nodes=nodes,
            candidates=candidates,
            mark=mark,
        )
        self._used.append(image)
        node = wait_for(lambda: self._bound_node(name), BIND_TIMEOUT_S)
        pulled: dict[str, PullEvent | BaseException] = {}

        def watch_pull() -> None:
            # Polled from here, not from complete(): while another pod's pull is waited
            # for, this one's listing lags are still timed from its own Pulled event.
            try:
                pulled["event"] = wait_for(
                    lambda: self._pull_event(name, uid), PULL_TIMEOUT_S, STATUS_POLL_S
                )
            except Exception as err:  # noqa: BLE001 - handed to complete(), raised there
                pulled["error"] = err
                return
            self._watch_listing(pod, node, image)

        watcher = threading.Thread(target=watch_pull, name=f"pull-{pod}", daemon=True)
        watcher.start()
        return Submitted(pod, image, node, run, watcher, pulled)

    def complete(self, submitted: Submitted) -> Placement:
        """Wait for the pull of a pod :meth:`submit` bound; measure it and its scores."""
        pod, node, run = submitted.pod, submitted.node, submitted.run
        name, uid, mark = pod_name(pod), run.uid, run.mark
        submitted.watcher.join()
        event = submitted.pulled.get("event")
        if not isinstance(event, PullEvent):
            error = submitted.pulled.get("error")
            raise (
                error
                if isinstance(error, BaseException)
                else TestbedError(f"pod {name}: its pull was not watched")
            )
        if event.seconds is None:
            raise TestbedError(
                f"pod {name}: the kubelet's Pulled event gives no duration (kubelets before "
                "1.19): the scenario needs a kubelet that times its pulls"
            )
        address = self._node_address(node)
        size_bytes = 0
        if event.pulled:
            size_bytes = wait_for(
                lambda: self.backend.registry_bytes(mark, address), LOG_SETTLE_TIMEOUT_S
            )
        bound_by = wait_for(lambda: self._scheduled_by(name, uid), SCORES_TIMEOUT_S)
        if pod in self.pins:
            # one feasible node: kube-scheduler binds it without scoring (no plugin Score,
            # no extender /prioritize), so there are no scores to wait for
            scores: dict[str, int] = {}
        else:
            scores = wait_for(lambda: self.backend.scores(run), SCORES_TIMEOUT_S)
        log.info(
            "%s -> %s by %s: %d bytes in %.2fs", pod, node, bound_by, size_bytes, event.seconds
        )
        return Placement(
            node=node,
            scores=scores,
            pull=Pull(pod=pod, node=node, bytes=size_bytes, seconds=event.seconds),
            scheduler=bound_by,
        )

    def _watch_listing(self, pod: str, node: str, image: str) -> None:
        """Start timing, in the background, how long ``node`` takes to list ``image``.

        The clock starts when the pull's ``Pulled`` event is seen (polled every 0.25 s)
        and stops when ``status.images`` shows the image, whatever the scenario does
        meanwhile (deleting the pod can take a while): :meth:`settle` collects it.
        """
        started_s = time.monotonic()
        result: dict[str, float | BaseException] = {}

        def watch() -> None:
            try:
                wait_for(
                    lambda: self._check_image_listed(node, image),
                    IMAGE_LISTED_TIMEOUT_S,
                    STATUS_POLL_S,
                )
                result["lag_s"] = time.monotonic() - started_s
            except Exception as err:  # noqa: BLE001 - handed to settle(), raised there
                result["error"] = err

        thread = threading.Thread(target=watch, name=f"listing-{pod}", daemon=True)
        thread.start()
        self._listing[pod] = (thread, result)
        holds = getattr(self.backend, "inventory_holds", None)
        if holds is None:
            return
        held: dict[str, float | BaseException] = {}

        def check_held() -> None:
            if not holds(node, image):
                raise NotYet(f"the extender's inventory does not list {image} on {node} yet")

        def watch_inventory() -> None:
            try:
                wait_for(check_held, IMAGE_LISTED_TIMEOUT_S, INVENTORY_POLL_S)
                held["lag_s"] = time.monotonic() - started_s
            except Exception as err:  # noqa: BLE001 - handed to inventory_lag(), raised there
                held["error"] = err

        inventory_thread = threading.Thread(target=watch_inventory, daemon=True)
        inventory_thread.start()
        self._inventory_listing[pod] = (inventory_thread, held)

    def inventory_lag(self, pod: str) -> float | None:
        """Seconds from ``pod``'s ``Pulled`` event (seen within 0.25 s) until the extender's
        live inventory listed its image on its node (the agent read containerd, applied its
        NodeLayerInventory, the extender's watch applied it); None if the backend cannot
        tell."""
        entry = self._inventory_listing.get(pod)
        if entry is None:
            return None
        thread, result = entry
        thread.join()
        error = result.get("error")
        if isinstance(error, BaseException):
            raise error
        lag_s = result["lag_s"]
        assert isinstance(lag_s, float)
        return round(lag_s, 2)

    def settle(self, pod: str, strategy: str | None = None) -> float | None:
        """Wait until ``pod``'s node lists its image where ``strategy`` looks; the seconds
        from the pull's ``Pulled`` event (seen within 0.25 s) until ``status.images``
        listed it.

        image-locality (and no strategy named) waits for ``status.images``. The
        layer-aware strategies score from the extender's inventory, which
        :meth:`inventory_lag` waits for: the status lag is returned only if already
        measured, else None (not waited for).
        """
        try:
            thread, result = self._listing[pod]
        except KeyError:
            raise TestbedError(f"pod {pod} was not scheduled by this driver") from None
        if strategy is not None and strategy not in READS_NODE_STATUS and thread.is_alive():
            return None  # not what this strategy reads: not waited for
        thread.join()
        error = result.get("error")
        if isinstance(error, BaseException):
            raise error
        lag_s = result["lag_s"]
        assert isinstance(lag_s, float)
        return round(lag_s, 2)

    def delete(self, pod: str) -> None:
        """Delete ``pod``; the runtime keeps its image (and layers) in the node's store.

        A container still being created is not waited for: the image stays either way,
        which is all the scenario keeps of the pod (the next reset removes the sandbox).
        """
        self.delete_by_name(pod_name(pod), creating_is_stopped=True)

    def delete_all(self, names: Sequence[str]) -> None:
        """Delete the pods called ``names`` at once, then wait for each (as
        :meth:`delete_by_name`): their kubelets stop them in parallel."""
        deleted = [name for name in names if self._delete_gracefully(name)]
        for name in deleted:
            self._finish_delete(name)

    def delete_by_name(self, name: str, *, creating_is_stopped: bool = False) -> None:
        """Delete the pod called ``name`` and wait until it is gone.

        A short grace period first, not 0: with 0 the API forgets the pod at once while its
        kubelet is still stopping it. But kubelet 1.20 keeps a deleted pod in the API until
        its containers *and sandbox* are removed (``PodResourcesAreReclaimed``), and only the
        container garbage collector removes sandboxes, once a minute (``ContainerGCPeriod``,
        not configurable): so a graceful deletion took up to 60 s, every time. Once every
        container of the pod reports terminated, the pod holds no resources any more and
        what is left is that wait: the pod is then deleted with no grace period, and the
        collector removes its sandbox later. A kubelet that has not stopped the containers
        within ``DELETE_TIMEOUT_S`` also gets a forced deletion, logged.
        """
        if self._delete_gracefully(name):
            self._finish_delete(name, creating_is_stopped=creating_is_stopped)

    def _delete_gracefully(self, name: str) -> bool:
        """Ask for ``name``'s deletion with the short grace period; False if it was gone."""
        try:
            return self._kube.delete(pod_path(self.namespace, name), grace_period_s=DELETE_GRACE_S)
        except KubeError as err:
            raise TestbedError(f"deleting pod {name}: {err}") from err

    def _finish_delete(self, name: str, *, creating_is_stopped: bool = False) -> None:
        """Wait until ``name``'s containers stopped, then delete it with no grace period."""
        path = pod_path(self.namespace, name)
        started = time.monotonic()
        try:
            stopped = wait_for(
                lambda: self._check_stopped(name, creating_is_stopped),
                DELETE_TIMEOUT_S,
                STOP_POLL_S,
            )
        except NotYet:
            log.warning(
                "pod %s: containers still running %.0f s after its deletion: deleting it "
                "with no grace period",
                name,
                DELETE_TIMEOUT_S,
            )
            stopped = False
        halted = time.monotonic()
        if not stopped:  # else gone already (its sandbox was collected meanwhile)
            try:
                self._kube.delete(path, grace_period_s=0)
            except KubeError as err:
                raise TestbedError(f"deleting pod {name} with no grace period: {err}") from err
            wait_for(lambda: self._check_gone(name), DELETE_TIMEOUT_S, STOP_POLL_S)
        log.info(
            "pod %s: stopped %.1f s after its deletion, gone %.1f s later",
            name,
            halted - started,
            time.monotonic() - halted,
        )

    def _check_stopped(self, name: str, creating_is_stopped: bool = False) -> bool:
        """True when the pod is gone, False when it is still there but none of its
        containers runs (:func:`still_running`); NotYet while one does."""
        try:
            pod = self._kube.get(pod_path(self.namespace, name))
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return True
            raise
        status = pod.get("status") or {}
        running = still_running(
            status.get("containerStatuses") or [],
            status.get("phase"),
            creating_is_stopped=creating_is_stopped,
        )
        if running:
            raise NotYet(
                f"pod {name} is still stopping (containers {running or 'unreported'}): check "
                "its node's kubelet and runtime"
            )
        return False

    # ------------------------------------------------------------------ checks
    def _check_gone(self, name: str) -> None:
        try:
            self._kube.get(pod_path(self.namespace, name))
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return
            raise
        raise NotYet(f"pod {name} is still terminating: check its node's kubelet and runtime")

    def _bound_node(self, name: str) -> str:
        spec = self._kube.get(pod_path(self.namespace, name)).get("spec") or {}
        if not spec.get("nodeName"):
            raise NotYet(
                f"pod {name} is not bound to a node (scheduler {spec.get('schedulerName')}): "
                f"is that scheduler running? kubectl -n {self.namespace} describe pod {name}"
            )
        return str(spec["nodeName"])

    def _events(self, name: str, reason: str) -> list[dict[str, Any]]:
        fields = selector({"involvedObject.name": name, "reason": reason})
        return self._kube.list(events_path(self.namespace), field_selector=fields)[0]

    def _pull_event(self, name: str, uid: str) -> PullEvent:
        # The name selects this trial's pod and every earlier one called the same:
        # only the uid tells them apart.
        parsed = pull_event_for(self._events(name, PULLED_REASON), uid)
        if parsed is None:
            raise NotYet(
                f"pod {name} (uid {uid}) has no Pulled event yet: see "
                f"kubectl -n {self.namespace} describe pod {name}"
            )
        return parsed

    def _scheduled_by(self, name: str, uid: str) -> str:
        found = scheduled_by(self._events(name, SCHEDULED_REASON), uid)
        if found is None:
            raise NotYet(f"pod {name} (uid {uid}) has no Scheduled event naming its scheduler")
        return found

    def _check_image_listed(self, node: str, image: str) -> None:
        if not node_reports_image(self._kube.get(node_path(node)), image):
            raise NotYet(
                f"node {node} does not list {image} in status.images yet: is its kubelet "
                "running? (it refreshes the image list about every 30 s)"
            )

    def _node_address(self, node: str) -> str:
        document = self._kube.get(node_path(node))
        for address in (document.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
        raise TestbedError(f"node {node} reports no InternalIP: cannot attribute registry traffic")
