"""Replay a trace through a real cluster's kube-schedulers.

The trace is :mod:`layersched_harness.sim.trace`'s, known here by its shape (:class:`Trace`): the
testbed and the simulator are independent packages.

One **run** replays every pod of the trace for one strategy, from a clean state:

1. **Reset** (:meth:`ClusterDriver.reset`): the last run's pods deleted, every image of
   the trace's repositories removed from every node, and the wait until neither
   ``status.images`` nor the agents' inventories list any of them. The registry stays
   warm: every blob is pushed once, each run pulls a tag of its own (the same layers), so
   no node ever listed the name it will pull.
2. **Arrivals**: each pod is created at its ``arrival_s`` (from the run's start) for the
   strategy's scheduler, requesting ``1/containers_per_node`` of a worker, pulling
   ``IfNotPresent`` (a tagged image's default).
3. **Lifetimes**: once a pod runs, its ``activeDeadlineSeconds`` is set so that the kubelet
   ends it ``lifetime_s`` later (``DeadlineExceeded``); a terminal pod frees its slot for
   kube-scheduler and stays in the API, so its timestamps, events and the estimate can
   still be read. The run ends when every pod has ended.
4. **Measures**, per pod: the node and who bound it (the ``Scheduled`` event), start-up
   from the API's timestamps (``creationTimestamp`` to the container's ``startedAt``, 1 s
   resolution) and as seen here (the create call to the first poll that saw it running),
   the kubelet's pull time and its wait in the kubelet's pull queue behind other pulls
   (its ``Pulled`` event: the pull, and the pull "including waiting", to the
   millisecond), when it was bound, pulled, started and Ready (the API's, 1 s), and the
   bytes the registry sent the node for the pod's repository (its access log).

A **burst** (:meth:`Replay.burst`, issue 42) creates one Deployment of many replicas of
one image no node holds, for one scheduler, and measures the time until all are Ready
(the Deployment's ``creationTimestamp`` to the last replica's ``Ready`` condition, and as
seen here) and each replica as above.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from rich.console import Console

from layersched.core.errors import KubeError
from layersched.core.events import (
    PULLED_REASON,
    SCHEDULED_REASON,
    event_time_s,
    involved_uid,
    parse_time_s,
    pull_event_for,
    scheduled_by,
    scheduled_event,
)
from layersched.core.quantity import parse_quantity
from layersched.images.oci import (
    EXECUTABLE_MODE,
    BuiltImage,
    LayerBlob,
    LayerFile,
    build_image,
    push_image,
    random_layer,
)
from layersched.registry import RegistryClient
from layersched_harness.testbed.cluster._measure import pulled_bytes_by_repository
from layersched_harness.testbed.cluster.driver import SCENARIO_LABEL, ClusterDriver, scenario_pod
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.idle_program import idle_program
from layersched_harness.testbed.scenario_images import ENTRYPOINT_PATH, TITLE_LABEL, WORKING_DIR

log = logging.getLogger(__name__)

#: The namespace replayed pods live in (a reset deletes its labelled pods).
REPLAY_NAMESPACE = "layersched-replay"
#: Every trace image is ``REGISTRY/replay/NAME:TAG``.
REPOSITORY_PREFIX = "replay"
#: A tagged image's default pull policy: a node holding the image pulls nothing.
PULL_POLICY = "IfNotPresent"
#: The pod list is polled this often: the resolution of the start-up seen here.
POLL_S = 0.5
#: A run whose pods have not all ended this long after the last arrival is stuck (a pull
#: of the trace's largest image over a loaded 20 Mbit/s link takes well under a minute).
STUCK_AFTER_S = 600.0
#: Pod phases in which the pod has ended.
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
RUNNING = "Running"
#: The burst's Deployment, and the label its replicas carry (the run's tag).
BURST_DEPLOYMENT = "burst"
BURST_LABEL = "layersched.io/replay-burst"
#: A burst whose replicas are not all Ready this long after its creation is stuck.
BURST_STUCK_AFTER_S = 600.0


class TraceLayer(Protocol):
    """A trace's layer (:class:`layersched_harness.sim.trace.TraceLayer`: the testbed and the
    simulator are independent, so the trace is known here by its shape)."""

    @property
    def seed(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...


class TraceImage(Protocol):
    """A trace's image: its name and its layer labels, base first."""

    @property
    def name(self) -> str: ...
    @property
    def layers(self) -> tuple[str, ...]: ...


class TracePod(Protocol):
    """A trace's pod."""

    @property
    def name(self) -> str: ...
    @property
    def image(self) -> str: ...
    @property
    def arrival_s(self) -> float: ...
    @property
    def lifetime_s(self) -> float: ...


class TraceCluster(Protocol):
    """The cluster a trace is replayed on (what the replay reads of it)."""

    @property
    def containers_per_node(self) -> int: ...


class Trace(Protocol):
    """A replay trace (:class:`layersched_harness.sim.trace.Trace`)."""

    @property
    def cluster(self) -> TraceCluster: ...
    @property
    def layers(self) -> Mapping[str, TraceLayer]: ...
    @property
    def images(self) -> Sequence[TraceImage]: ...
    @property
    def pods(self) -> Sequence[TracePod]: ...


def repository(registry: str, image: str) -> str:
    """``REGISTRY/replay/IMAGE``, the repository of a trace image."""
    return f"{registry}/{REPOSITORY_PREFIX}/{image}"


@dataclass(frozen=True, slots=True)
class TraceBuild:
    """The trace's layers (by label) and images (by name), built."""

    layers: Mapping[str, LayerBlob]
    images: Mapping[str, BuiltImage]

    def layer_digests(self) -> list[str]:
        """Every layer's blob digest."""
        return [blob.digest for blob in self.layers.values()]


def build_trace_images(trace: Trace) -> TraceBuild:
    """Every layer and image of ``trace``: seeded content, the idle program in each image's
    base layer (its entrypoint), the image's name as its title label."""
    entrypoint = LayerFile(ENTRYPOINT_PATH.lstrip("/"), idle_program(), EXECUTABLE_MODE)
    bases = {image.layers[0] for image in trace.images}
    blobs = {
        label: random_layer(layer.seed, layer.size_bytes, [entrypoint] if label in bases else [])
        for label, layer in trace.layers.items()
    }
    images = {
        image.name: build_image(
            [blobs[label] for label in image.layers],
            labels={TITLE_LABEL: image.name},
            entrypoint=[ENTRYPOINT_PATH],
            working_dir=WORKING_DIR,
        )
        for image in trace.images
    }
    return TraceBuild(blobs, images)


def push_trace_images(
    registry: str, build: TraceBuild, tags: Sequence[str], push_address: str | None = None
) -> None:
    """Push every image under every one of ``tags`` (blobs once: the registry skips what
    it holds)."""
    via = push_address or registry
    with RegistryClient(insecure_hosts=(via,)) as client:
        for name, image in sorted(build.images.items()):
            for tag in tags:
                push_image(client, f"{repository(via, name)}:{tag}", image, show_progress=False)


def slot_requests(whole: Mapping[str, str], slots: int) -> dict[str, str]:
    """A ``slots``-th of ``whole`` (a worker's free CPU and memory), rounded down: ``slots``
    such pods fit a worker, one more does not.

    >>> slot_requests({"cpu": "2000m", "memory": "8000"}, 4)
    {'cpu': '500m', 'memory': '2000'}
    """
    if slots < 1:
        raise TestbedError(f"containers per node: expected at least 1, got {slots}")
    cpu_milli = parse_quantity(whole["cpu"], "cpu") * 1000 // slots
    memory = parse_quantity(whole["memory"], "memory") // slots
    if cpu_milli < 1 or memory < 1:
        raise TestbedError(f"a worker's free {dict(whole)} cannot be cut into {slots} slots")
    return {"cpu": f"{int(cpu_milli)}m", "memory": str(int(memory))}


def deadline_s(start_time_s: float, now_s: float, lifetime_s: float) -> int:
    """``activeDeadlineSeconds`` that ends a pod ``lifetime_s`` from ``now_s``: counted
    from its ``status.startTime`` (when the kubelet took it, before the pull), whole seconds
    rounded up, at least 1.

    >>> deadline_s(100.0, 112.4, 10.0)   # 12.4 s since startTime, then 10 s more
    23
    """
    return max(1, math.ceil(now_s - start_time_s + lifetime_s))


def _container_started_s(pod: Mapping[str, Any]) -> float | None:
    """When the pod's (first) container started: ``startedAt`` of its running state, or of
    its terminated state once the lifetime ended it."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        for key in ("running", "terminated"):
            started = parse_time_s((state.get(key) or {}).get("startedAt"))
            if started is not None:
                return started
    return None


def is_running(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's containers all run (what "Running" means for start-up)."""
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    return (
        status.get("phase") == RUNNING
        and bool(statuses)
        and all("running" in (s.get("state") or {}) for s in statuses)
    )


@dataclass(slots=True)
class _Live:
    """What the run has seen of one pod."""

    name: str
    image: str
    lifetime_s: float
    uid: str = ""
    created_s: float = 0.0
    created_wall_s: float | None = None
    running_s: float | None = None
    ended: bool = False
    deadline_s: int | None = None
    last: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodResult:
    """One replayed pod, measured."""

    name: str
    image: str
    node: str | None
    scheduler: str | None
    #: ``creationTimestamp`` to the container's ``startedAt`` (the API's, 1 s resolution).
    startup_s: float | None
    #: The create call to the first poll (every :data:`POLL_S`) that saw the pod running.
    observed_startup_s: float | None
    #: The kubelet's pull time (0 when it found the image present), and whether it pulled.
    pull_s: float | None
    pulled: bool | None
    #: The pull with its wait in the kubelet's queue (it pulls one image at a time).
    pull_waited_s: float | None
    #: Bytes of manifests and blobs the registry sent the pod's node for its repository
    #: (the first pod of an image on a node carries them; a later one finds it present).
    bytes: int
    #: ``DeadlineExceeded`` when the lifetime ended it, as expected.
    end_reason: str | None
    #: Its wait in the kubelet's pull queue behind other pulls (the pull with the wait,
    #: less the pull: the kubelet's own, to the millisecond); None when it pulled nothing.
    wait_behind_s: float | None = None
    #: The image's size as the kubelet reports it (compressed, on containerd).
    image_size_bytes: int | None = None
    #: When (epoch seconds) it was created (the API's, 1 s resolution, and the replay's
    #: create call, exact; None for a burst's replicas, which their ReplicaSet creates),
    #: bound (kube-scheduler's Scheduled event, to the microsecond), its pull ended (the
    #: kubelet's Pulled event), its container started and it became Ready (the API's, 1 s).
    created_at_s: float | None = None
    created_wall_s: float | None = None
    scheduled_at_s: float | None = None
    pulled_at_s: float | None = None
    started_at_s: float | None = None
    ready_at_s: float | None = None


class Replay:
    """Replays a trace's pods through one driver's cluster (see the module docstring)."""

    def __init__(
        self,
        driver: ClusterDriver,
        trace: Trace,
        registry: str,
        access_log: Callable[[int], Iterable[str]],
        log_end: Callable[[], int],
        build: TraceBuild,
        *,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.driver = driver
        self.trace = trace
        self.registry = registry
        self._access_log = access_log
        self._log_end = log_end
        self.build = build
        self.console = console or Console(stderr=True)
        self._clock, self._wall, self._sleep = clock, wall, sleep

    def refs(self, tag: str) -> dict[str, str]:
        """Each image's reference under ``tag``."""
        return {
            image.name: f"{repository(self.registry, image.name)}:{tag}"
            for image in self.trace.images
        }

    def reset(self, tag: str) -> float:
        """The clean state: no pod, no trace image or layer on any node; seconds taken."""
        started = self._clock()
        self.driver.reset(list(self.refs(tag).values()))
        return round(self._clock() - started, 1)

    def run(self, strategy: str, tag: str) -> dict[str, Any]:
        """Replay every pod for ``strategy``, pulling ``tag``; the run's record (pods,
        timings). Call :meth:`reset` first."""
        scheduler = self.driver.scheduler_name(strategy)
        requests = slot_requests(
            self.driver.free_requests(), self.trace.cluster.containers_per_node
        )
        refs = self.refs(tag)
        mark = self._log_end()
        pending = list(self.trace.pods)
        live = {pod.name: _Live(pod.name, pod.image, pod.lifetime_s) for pod in pending}
        started = self._clock()
        started_wall = self._wall()
        last_poll = -math.inf
        while True:
            now = self._clock() - started
            while pending and pending[0].arrival_s <= now:
                pod = pending.pop(0)
                document = scenario_pod(
                    pod.name,
                    refs[pod.image],
                    scheduler,
                    requests,
                    self.driver.namespace,
                    pull_policy=PULL_POLICY,
                )
                created_s, created_wall_s = self._clock(), self._wall()
                made = self.driver.create_pod(document)
                live[pod.name].uid = str((made.get("metadata") or {}).get("uid"))
                live[pod.name].created_s = created_s
                live[pod.name].created_wall_s = created_wall_s
            if self._clock() - last_poll >= POLL_S:
                last_poll = self._clock()
                self._observe(live)
            if not pending and all(p.ended for p in live.values()):
                break
            if not pending and now > self.trace.pods[-1].arrival_s + STUCK_AFTER_S:
                stuck = sorted(name for name, p in live.items() if not p.ended)
                raise TestbedError(
                    f"replay ({strategy}): pods {', '.join(stuck[:10])} have not ended "
                    f"{STUCK_AFTER_S:.0f} s after the last arrival: see kubectl -n "
                    f"{self.driver.namespace} describe pod {stuck[0]}"
                )
            # Pacing, not waiting for a condition: sleep until the next arrival or poll.
            next_arrival = pending[0].arrival_s - now if pending else POLL_S
            self._sleep(max(0.0, min(POLL_S, next_arrival)))
        duration_s = self._clock() - started
        pods = self._measure([live[pod.name] for pod in self.trace.pods], mark)
        return {
            "strategy": strategy,
            "scheduler": scheduler,
            "tag": tag,
            "started_at_s": round(started_wall, 3),
            "duration_s": round(duration_s, 1),
            "requests": requests,
            "pods": [asdict(p) for p in pods],
        }

    def _observe(self, live: Mapping[str, _Live]) -> None:
        """One poll: note pods newly running (and set their deadline) and pods ended."""
        for pod in self.driver.pods():
            name = (pod.get("metadata") or {}).get("name")
            seen = live.get(str(name))
            if seen is None or seen.uid != (pod.get("metadata") or {}).get("uid"):
                continue
            seen.last = pod
            status = pod.get("status") or {}
            if seen.running_s is None and (is_running(pod) or status.get("phase") in ENDED_PHASES):
                seen.running_s = self._clock()
                start_time = parse_time_s(status.get("startTime"))
                if start_time is not None and status.get("phase") not in ENDED_PHASES:
                    seen.deadline_s = deadline_s(start_time, self._wall(), seen.lifetime_s)
                    try:
                        self.driver.patch_pod(
                            seen.name, {"spec": {"activeDeadlineSeconds": seen.deadline_s}}
                        )
                    except KubeError as err:
                        raise TestbedError(
                            f"setting pod {seen.name}'s lifetime (activeDeadlineSeconds): {err}"
                        ) from err
            if status.get("phase") in ENDED_PHASES:
                seen.ended = True

    def _measure(self, live: Sequence[_Live], mark: int) -> list[PodResult]:
        """Each pod of ``live`` measured (see the module docstring), from the events and
        the registry's access log since ``mark``."""
        pulled = self.driver.events(PULLED_REASON)
        scheduled = self.driver.events(SCHEDULED_REASON)
        by_repository = pulled_bytes_by_repository(self._access_log(mark))
        addresses: dict[str, str] = {}
        # The bytes a node fetched for a repository go to the pod whose pull fetched them:
        # of the pods of that image on that node that pulled, the longest pull (a pull
        # queued behind it, or waiting for its layers, found them present).
        puller: dict[tuple[str, str], tuple[float, str]] = {}
        for seen in live:
            node = (seen.last.get("spec") or {}).get("nodeName")
            event = pull_event_for(pulled, seen.uid)
            if node and event is not None and event.pulled:
                address = addresses.get(node) or addresses.setdefault(
                    node, self.driver.node_address(node)
                )
                key = (address, f"{REPOSITORY_PREFIX}/{seen.image}")
                took = event.seconds or 0.0
                if key not in puller or took > puller[key][0]:
                    puller[key] = (took, seen.uid)
        charged = {uid: by_repository.get(key, 0) for key, (_, uid) in puller.items()}
        return [measure_pod(seen, pulled, scheduled, charged.get(seen.uid, 0)) for seen in live]

    def burst(
        self, arm: str, tag: str, image: str, replicas: int, slots_per_node: int
    ) -> dict[str, Any]:
        """One Deployment of ``replicas`` pods of ``image`` (pulling ``tag``) for ``arm``'s
        scheduler, each requesting ``1 / slots_per_node`` of a worker; waits until all are
        Ready; the burst's record (time until all Ready, per replica measures). Call
        :meth:`reset` first; the Deployment is deleted afterwards."""
        scheduler = self.driver.scheduler_name(arm)
        requests = slot_requests(self.driver.free_requests(), slots_per_node)
        ref = f"{repository(self.registry, image)}:{tag}"
        document = burst_deployment(ref, scheduler, requests, replicas, tag, self.driver.namespace)
        mark = self._log_end()
        started = self._clock()
        started_wall = self._wall()
        made = self.driver.create_deployment(document)
        created_at = parse_time_s((made.get("metadata") or {}).get("creationTimestamp"))
        seen: dict[str, _Live] = {}
        while True:
            now = self._clock()
            for pod in self.driver.pods():
                meta = pod.get("metadata") or {}
                if (meta.get("labels") or {}).get(BURST_LABEL) != tag:
                    continue
                uid = str(meta.get("uid"))
                one = seen.setdefault(uid, _Live(str(meta.get("name")), image, 0.0, uid=uid))
                one.created_s = one.created_s or started
                one.last = pod
                if one.running_s is None and is_ready(pod):
                    one.running_s = now
            ready = [one for one in seen.values() if one.running_s is not None]
            if len(ready) >= replicas:
                break
            if now - started > BURST_STUCK_AFTER_S:
                raise TestbedError(
                    f"burst ({arm}): {len(ready)} of {replicas} replicas Ready "
                    f"{BURST_STUCK_AFTER_S:.0f} s after the Deployment was created: see "
                    f"kubectl -n {self.driver.namespace} get pods -l {BURST_LABEL}={tag}"
                )
            # Pacing, not waiting for a condition: poll again after POLL_S.
            self._sleep(POLL_S)
        observed_s = max(one.running_s or 0.0 for one in seen.values()) - started
        pods = self._measure(sorted(seen.values(), key=lambda one: one.name), mark)
        self.driver.delete_deployment(BURST_DEPLOYMENT)
        ready_at = [p.ready_at_s for p in pods if p.ready_at_s is not None]
        all_ready_s = (
            None
            if created_at is None or len(ready_at) < replicas
            else round(max(ready_at) - created_at, 3)
        )
        return {
            "arm": arm,
            "scheduler": scheduler,
            "tag": tag,
            "image": image,
            "replicas": replicas,
            "started_at_s": round(started_wall, 3),
            "requests": requests,
            "all_ready_s": all_ready_s,
            "observed_all_ready_s": round(observed_s, 3),
            "pods": [asdict(p) for p in pods],
        }


def _pulled_at(events: Iterable[Mapping[str, Any]], uid: str) -> float | None:
    """When the kubelet reported the pod ``uid``'s pull (its first Pulled event)."""
    times = [
        event_time_s(e)
        for e in events
        if involved_uid(e) == uid and e.get("reason") == PULLED_REASON
    ]
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _scheduled_at(
    scheduled: Sequence[Mapping[str, Any]], uid: str, pod: Mapping[str, Any]
) -> float | None:
    """When the pod ``uid`` was bound: its Scheduled event (kube-scheduler's carry
    microseconds), else its PodScheduled condition (1 s)."""
    found = scheduled_event(scheduled, uid)
    if found is not None and found[2] is not None:
        return round(found[2], 6)
    return _condition_s(pod, "PodScheduled")


def _condition_s(pod: Mapping[str, Any], kind: str) -> float | None:
    """When the pod's condition ``kind`` last turned True (None: it is not True)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return parse_time_s(condition.get("lastTransitionTime"))
    return None


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def measure_pod(
    seen: _Live,
    pulled: Sequence[Mapping[str, Any]],
    scheduled: Sequence[Mapping[str, Any]],
    size: int,
) -> PodResult:
    """One pod's :class:`PodResult` from its last seen document, the namespace's Pulled
    and Scheduled events, and the registry bytes charged to it."""
    document = seen.last
    spec, status = document.get("spec") or {}, document.get("status") or {}
    node = spec.get("nodeName")
    created = parse_time_s((document.get("metadata") or {}).get("creationTimestamp"))
    container_started = _container_started_s(document)
    event = pull_event_for(pulled, seen.uid)
    waited = (
        round(event.waited_seconds - event.seconds, 3)
        if event is not None
        and event.pulled
        and event.waited_seconds is not None
        and event.seconds is not None
        else None
    )
    return PodResult(
        name=seen.name,
        image=seen.image,
        node=str(node) if node else None,
        scheduler=scheduled_by(scheduled, seen.uid),
        startup_s=(
            None
            if created is None or container_started is None
            else round(container_started - created, 3)
        ),
        observed_startup_s=(
            None if seen.running_s is None else round(seen.running_s - seen.created_s, 3)
        ),
        pull_s=None if event is None else event.seconds,
        pulled=None if event is None else event.pulled,
        pull_waited_s=None if event is None else event.waited_seconds,
        bytes=size,
        end_reason=status.get("reason"),
        wait_behind_s=waited,
        image_size_bytes=None if event is None else event.size_bytes,
        created_at_s=created,
        created_wall_s=None if seen.created_wall_s is None else round(seen.created_wall_s, 3),
        scheduled_at_s=_scheduled_at(scheduled, seen.uid, document),
        pulled_at_s=_pulled_at(pulled, seen.uid),
        started_at_s=container_started,
        ready_at_s=_condition_s(document, "Ready"),
    )


def burst_deployment(
    image: str,
    scheduler_name: str,
    requests: Mapping[str, str],
    replicas: int,
    tag: str,
    namespace: str,
) -> dict[str, Any]:
    """The burst's Deployment: ``replicas`` pods as a replay pod is (the scheduler, the
    requests, ``IfNotPresent``), restarted always as a Deployment's must be, labelled with
    the scenario's label (a reset deletes what is left) and the run's ``tag``."""
    pod = scenario_pod(
        "replica", image, scheduler_name, requests, namespace, pull_policy=PULL_POLICY
    )
    labels = {**SCENARIO_LABEL, BURST_LABEL: tag}
    spec = pod["spec"] | {"restartPolicy": "Always"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": BURST_DEPLOYMENT, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {BURST_LABEL: tag}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def plan_runs(strategies: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round from 1, strategy) in run order: every strategy once a round, each round's
    order rotated by one (A B C, B C A, C A B), so no strategy always runs first or after
    the same one.

    >>> plan_runs(["a", "b", "c"], 2)
    [(1, 'a'), (1, 'b'), (1, 'c'), (2, 'b'), (2, 'c'), (2, 'a')]
    """
    if rounds < 1 or not strategies:
        raise TestbedError("a replay needs at least one round and one strategy")
    runs = []
    for r in range(rounds):
        shift = r % len(strategies)
        order = [*strategies[shift:], *strategies[:shift]]
        runs += [(r + 1, strategy) for strategy in order]
    return runs


#: What a step runs: one replay of the trace, or one burst.
REPLAY, BURST = "replay", "burst"


@dataclass(frozen=True, slots=True)
class Step:
    """One run of a replay plan: a replay of the trace or a burst, for one arm, in one
    round, under one pull mode."""

    kind: str
    round: int
    mode: str
    arm: str

    @property
    def key(self) -> tuple[str, int, str, str]:
        """What identifies the step in a results file (a resumed plan skips it)."""
        return (self.kind, self.round, self.mode, self.arm)


def plan_steps(
    arms: Sequence[str],
    modes: Sequence[str],
    rounds: int,
    *,
    burst: bool = True,
    replay: bool = True,
) -> list[Step]:
    """Every step in run order. Each round runs every pull mode once, their order
    alternating round by round (serial, parallel; then parallel, serial; ...), so that the
    kubelets switch mode once a round; within a mode, every arm's replay, then every arm's
    burst, the arms' order rotated by one each round (:func:`plan_runs`). ``burst=False``
    leaves the bursts out, ``replay=False`` the replays.

    >>> [(s.kind[0], s.round, s.mode[0], s.arm) for s in plan_steps(["a", "b"], ["S", "P"], 2)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('r', 1, 'S', 'a'), ('r', 1, 'S', 'b'), ('b', 1, 'S', 'a'), ('b', 1, 'S', 'b'),
     ('r', 1, 'P', 'a'), ('r', 1, 'P', 'b'), ('b', 1, 'P', 'a'), ('b', 1, 'P', 'b'),
     ('r', 2, 'P', 'b'), ('r', 2, 'P', 'a'), ('b', 2, 'P', 'b'), ('b', 2, 'P', 'a'),
     ('r', 2, 'S', 'b'), ('r', 2, 'S', 'a'), ('b', 2, 'S', 'b'), ('b', 2, 'S', 'a')]
    """
    if not modes:
        raise TestbedError("a replay needs at least one pull mode")
    if not (burst or replay):
        raise TestbedError("a plan with neither replays nor bursts has no step to run")
    orders = plan_runs(arms, rounds)
    steps = []
    for r in range(1, rounds + 1):
        order = [arm for number, arm in orders if number == r]
        for mode in modes if r % 2 else modes[::-1]:
            if replay:
                steps += [Step(REPLAY, r, mode, arm) for arm in order]
            if burst:
                steps += [Step(BURST, r, mode, arm) for arm in order]
    return steps
