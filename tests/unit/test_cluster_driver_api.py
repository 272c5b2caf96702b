"""The cluster scenario driver's conversation with the Kubernetes API (a stand-in over
HTTPS): which objects it creates, lists, reads and deletes, with which selectors and
grace periods, and what it makes of the answers. The testbed's own side (registry bytes,
scores, image removal) is a recording backend; the real cluster runs in tests/e2e."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from layersched.kube import (
    ALL_PODS_PATH,
    NAMESPACES_PATH,
    NODE_LAYERS_PATH,
    NODES_PATH,
    VERSION_PATH,
    events_path,
    node_path,
    pod_path,
    pods_path,
)
from layersched_harness.testbed.cluster import driver as driver_module
from layersched_harness.testbed.cluster.driver import (
    SCENARIO_NAMESPACE,
    ClusterDriver,
    PodRun,
    Submitted,
    held_layers,
    listed_repository,
    still_running,
)
from layersched_harness.testbed.errors import TestbedError
from tests.fixtures.kube_api import Answer, Request, StandInApi, items, ok, status

NS = SCENARIO_NAMESPACE
IMAGE = "reg.test/img1:v1"
SCHEDULER = "layer-locality"
UID = "uid-2"


def _node(name: str, address: str, images: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "2", "memory": "4Gi"},
            "addresses": [{"type": "InternalIP", "address": address}],
            "images": [{"names": [image], "sizeBytes": 1000} for image in images],
            "nodeInfo": {
                "kubeletVersion": "v1.20.2",
                "containerRuntimeVersion": "containerd://1.6.20",
            },
        },
    }


def _event(reason: str, uid: str, when: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p1.{uid}.{reason.lower()}"},
        "involvedObject": {"kind": "Pod", "name": "p1", "uid": uid},
        "reason": reason,
        "firstTimestamp": when,
        **extra,
    }


@dataclass
class RecordingBackend:
    """The testbed side: fixed answers, and what the driver asked of it."""

    name: str = "stand-in"
    schedulers: Mapping[str, str] = field(default_factory=lambda: {SCHEDULER: SCHEDULER})
    asked: list[tuple[str, Any]] = field(default_factory=list)

    def mark(self) -> str:
        return "mark-1"

    def registry_bytes(self, mark: str, address: str) -> int:
        self.asked.append(("registry_bytes", (mark, address)))
        return 4321

    def scores(self, run: PodRun) -> dict[str, int]:
        self.asked.append(("scores", run))
        return {"w1": 3, "w2": 10}

    def remove_images(self, node: str, images: Sequence[str], namespace: str) -> None:
        self.asked.append(("remove_images", (node, tuple(images), namespace)))

    def components(self) -> dict[str, str]:
        return {"etcd": "3.4.23"}


#: The namespace's default ServiceAccount, which the driver waits for.
ACCOUNT_PATH = f"{NAMESPACES_PATH}/{NS}/serviceaccounts/default"


@pytest.fixture
def api(kube_api: StandInApi) -> StandInApi:
    kube_api.route("POST", NAMESPACES_PATH, ok({"metadata": {"name": NS}}))
    kube_api.route("GET", ACCOUNT_PATH, ok({"metadata": {"name": "default", "namespace": NS}}))
    return kube_api


def _driver(api: StandInApi, backend: RecordingBackend | None = None) -> ClusterDriver:
    return ClusterDriver(str(api.kubeconfig), backend or RecordingBackend(), (IMAGE,))


@pytest.mark.parametrize(
    "answer",
    [ok({"metadata": {"name": NS}}), status(409, "AlreadyExists", "namespaces exists")],
    ids=["created", "exists-already"],
)
def test_the_scenario_namespace_is_made_sure_of(answer: Answer, api: StandInApi) -> None:
    api.route("POST", NAMESPACES_PATH, answer)
    _driver(api)
    [sent] = api.sent("POST", NAMESPACES_PATH)
    assert sent.json()["metadata"] == {"name": NS}


def test_a_namespace_refused_is_a_testbed_error_saying_why(api: StandInApi) -> None:
    api.route("POST", NAMESPACES_PATH, status(403, "Forbidden", "user cannot create"))
    with pytest.raises(TestbedError, match=rf"creating namespace {NS}: .*403 user cannot create"):
        _driver(api)


def test_the_driver_waits_for_the_namespaces_default_service_account(
    api: StandInApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the controller-manager makes it a moment after the namespace; until then the API
    # refuses every pod there (the CI failure of a5f2fc1)
    monkeypatch.setattr(driver_module, "STOP_POLL_S", 0.01)
    reads = []

    def account(request: Request) -> Answer:
        reads.append(request)
        if len(reads) < 3:
            return status(404, "NotFound", 'serviceaccounts "default" not found')
        return ok({"metadata": {"name": "default", "namespace": NS}})

    api.route("GET", ACCOUNT_PATH, account)
    _driver(api)
    assert len(reads) == 3


def test_a_namespace_with_no_default_service_account_is_an_error_naming_the_controller(
    api: StandInApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver_module, "STOP_POLL_S", 0.01)
    monkeypatch.setattr(driver_module, "DEFAULT_ACCOUNT_TIMEOUT_S", 0.1)
    api.route("GET", ACCOUNT_PATH, status(404, "NotFound", "not found"))
    with pytest.raises(TestbedError, match=rf"namespace {NS} has no ServiceAccount 'default'.*"
                       r"kube-controller-manager runs"):  # fmt: skip
        _driver(api)


def test_an_unreadable_default_service_account_is_an_error_saying_why(api: StandInApi) -> None:
    api.route("GET", ACCOUNT_PATH, status(403, "Forbidden", "user cannot get"))
    with pytest.raises(TestbedError, match=rf"reading {ACCOUNT_PATH}: .*403 user cannot get"):
        _driver(api)


def test_components_come_from_the_api_and_the_backend(api: StandInApi) -> None:
    api.route("GET", VERSION_PATH, ok({"gitVersion": "v1.20.2", "major": "1"}))
    api.route("GET", NODES_PATH, items([_node("w1", "10.0.0.1")]))
    assert _driver(api).components() == {
        "containerd": "1.6.20",
        "etcd": "3.4.23",
        "kubelet": "v1.20.2",
        "kubernetes": "v1.20.2",
    }


def test_schedule_submits_waits_and_measures(api: StandInApi) -> None:
    nodes = [_node("w1", "10.0.0.1"), _node("w2", "10.0.0.2", [IMAGE])]
    api.route("GET", NODES_PATH, items(nodes))
    api.route("GET", node_path("w2"), ok(nodes[1]))
    # a pod of another namespace holds 500m of w1: the scenario pod asks for what is left
    other = {
        "metadata": {"name": "dns", "namespace": "kube-system"},
        "spec": {
            "nodeName": "w1",
            "containers": [{"resources": {"requests": {"cpu": "500m"}}}],
        },
        "status": {"phase": "Running"},
    }
    api.route("GET", ALL_PODS_PATH, items([other]))
    api.route("POST", pods_path(NS), lambda r: ok({**r.json(), "metadata": {"uid": UID}}))
    api.route("GET", pod_path(NS, "p1"), ok({"spec": {"nodeName": "w2"}}))

    def events(request: Request) -> Answer:
        # An earlier trial's p1 (another uid) pulled too: only this pod's event counts.
        pulled = 'Successfully pulled image "reg.test/img1:v1" in 1.5s'
        found = {
            "Pulled": [
                _event("Pulled", "uid-1", "2026-11-23T04:00:00Z", message=pulled),
                _event("Pulled", UID, "2026-11-23T04:50:02Z", message=pulled),
            ],
            "Scheduled": [
                _event("Scheduled", UID, "2026-11-23T04:50:01Z", reportingComponent=SCHEDULER)
            ],
        }
        reason = request.query["fieldSelector"].rpartition("reason=")[2]
        return items(found[reason])

    api.route("GET", events_path(NS), events)
    backend = RecordingBackend()
    driver = _driver(api, backend)

    placement = driver.schedule("P1", IMAGE, SCHEDULER)

    assert (placement.node, placement.scheduler) == ("w2", SCHEDULER)
    assert (placement.pull.bytes, placement.pull.seconds) == (4321, 1.5)
    assert placement.scores == {"w1": 3, "w2": 10}
    [created] = api.sent("POST", pods_path(NS))
    spec = created.json()["spec"]
    assert spec["schedulerName"] == SCHEDULER
    # 2 CPUs less the other namespace's 500m on w1; the memory of the smallest node
    assert spec["containers"][0]["resources"]["requests"] == {
        "cpu": "1500m",
        "memory": str(4 << 30),
    }
    selectors = [r.query["fieldSelector"] for r in api.sent("GET", events_path(NS))]
    assert "involvedObject.name=p1,reason=Pulled" in selectors
    assert "involvedObject.name=p1,reason=Scheduled" in selectors
    # the registry's bytes were counted for the node's InternalIP, since the pod's mark
    assert ("registry_bytes", ("mark-1", "10.0.0.2")) in backend.asked
    [(_, run)] = [a for a in backend.asked if a[0] == "scores"]
    assert (run.key, run.uid, [c["metadata"]["name"] for c in run.candidates]) == (
        f"{NS}/p1",
        UID,
        ["w1", "w2"],
    )
    # w2 listed the image from the start: the status lag is (close to) nothing
    assert 0 <= driver.settle("P1") < 1
    assert 0 <= driver.settle("P1", "image-locality") < 1


def _bound_on_w2(api: StandInApi, name: str) -> None:
    """Two workers; pod ``name`` is created, bound to w2, pulled in 1.5 s and Scheduled by
    the strategy's scheduler (events of its uid)."""
    nodes = [_node("w1", "10.0.0.1"), _node("w2", "10.0.0.2")]
    api.route("GET", NODES_PATH, items(nodes))
    api.route("GET", node_path("w2"), ok(nodes[1]))
    api.route("GET", ALL_PODS_PATH, items([]))
    api.route("POST", pods_path(NS), lambda r: ok({**r.json(), "metadata": {"uid": UID}}))
    api.route("GET", pod_path(NS, name), ok({"spec": {"nodeName": "w2"}}))
    pulled = 'Successfully pulled image "reg.test/img1:v1" in 1.5s'
    found = {
        "Pulled": [_event("Pulled", UID, "2026-11-23T04:50:02Z", message=pulled)],
        "Scheduled": [
            _event("Scheduled", UID, "2026-11-23T04:50:01Z", reportingComponent=SCHEDULER)
        ],
    }
    api.route(
        "GET",
        events_path(NS),
        lambda r: items(found[r.query["fieldSelector"].rpartition("reason=")[2]]),
    )


def test_settle_waits_for_status_images_only_where_the_strategy_reads_it(
    api: StandInApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # w2 never lists the image in status.images (a kubelet that lags)
    monkeypatch.setattr("layersched_harness.testbed.cluster.driver.IMAGE_LISTED_TIMEOUT_S", 3.0)
    _bound_on_w2(api, "p1")
    driver = _driver(api)
    driver.schedule("P1", IMAGE, SCHEDULER)
    # layer-locality scores from the agents' inventory: status.images is not waited for
    assert driver.settle("P1", "layer-locality") is None
    # image-locality reads status.images: waited for, and the kubelet's lag is the error
    with pytest.raises(TestbedError, match=re.escape(f"does not list {IMAGE} in status.images")):
        driver.settle("P1", "image-locality")


def test_reset_deletes_the_scenario_pods_and_empties_the_workers(api: StandInApi) -> None:
    api.route(
        "GET", pods_path(NS), items([{"metadata": {"name": "p1"}}, {"metadata": {"name": "p2"}}])
    )
    api.route("DELETE", pod_path(NS, "p1"), ok({}))  # then gone: GET answers 404
    api.route("DELETE", pod_path(NS, "p2"), status(404, "NotFound", "pods not found"))
    api.route("GET", NODES_PATH, items([_node("w1", "10.0.0.1"), _node("w2", "10.0.0.2")]))
    backend = RecordingBackend()

    _driver(api, backend).reset()

    [listed] = api.sent("GET", pods_path(NS))
    assert listed.query["labelSelector"] == "app.kubernetes.io/part-of=layersched-scenario"
    # a short grace period (the pod's program exits on SIGTERM), not a forced deletion
    deletions = [(r.path.rpartition("/")[2], r.query) for r in api.sent("DELETE")]
    assert deletions == [("p1", {"gracePeriodSeconds": "1"}), ("p2", {"gracePeriodSeconds": "1"})]
    # p1 was waited for until the API no longer had it; p2 was gone already
    assert [r.path for r in api.sent("GET") if "/pods/" in r.path] == [pod_path(NS, "p1")]
    assert [a[1] for a in backend.asked] == [("w1", (IMAGE,), NS), ("w2", (IMAGE,), NS)]


def test_reset_empties_every_image_the_run_pulled_and_waits_for_the_inventory(
    api: StandInApi,
) -> None:
    # w1 still lists an earlier trial's tag in status.images (the kubelet lags): no
    # matter, the next trial uses another name; the inventory drops it after one look
    trial_ref = "reg.test/img1:trial-r-02"
    api.route("GET", pods_path(NS), items([]))
    api.route("GET", NODES_PATH, items([_node("w1", "10.0.0.1", ["reg.test/img1:trial-r-01"])]))
    backend = InventoryBackend(
        inventory=[["reg.test/img1@sha256:" + "a" * 64, "pause:3.4"], ["pause:3.4"]]
    )
    driver = _driver(api, backend)
    driver._used.append("reg.test/img1:trial-r-01")  # what the last trial's pods pulled

    driver.reset([trial_ref])

    [(_, removed)] = [a for a in backend.asked if a[0] == "remove_images"]
    assert removed == ("w1", (IMAGE, trial_ref, "reg.test/img1:trial-r-01"), NS)
    # asked twice: the first answer still held an image of the repository
    assert [a for a in backend.asked if a[0] == "inventory_images"] == [
        ("inventory_images", "w1"),
        ("inventory_images", "w1"),
    ]


@dataclass
class InventoryBackend(RecordingBackend):
    """A backend whose extender inventory answers these image lists, one per look."""

    inventory: list[list[str]] = field(default_factory=list)

    def inventory_images(self, node: str) -> list[str]:
        self.asked.append(("inventory_images", node))
        return self.inventory.pop(0) if len(self.inventory) > 1 else self.inventory[0]


#: A container the kubelet is creating from its pulled image.
_CREATING = {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}


@pytest.mark.parametrize(
    ("statuses", "phase", "running", "creating_is_stopped"),
    [
        # the kubelet has not reported the container yet: it may be starting
        ([{"name": "main"}], None, ["main"], False),
        ([{"name": "main", "state": {"running": {}}}], "Running", ["main"], True),
        ([{"name": "main", "state": {"terminated": {"exitCode": 0}}}], "Succeeded", [], False),
        # will never start (its pull failed): holds nothing
        (
            [{"name": "main", "state": {"waiting": {"reason": "ErrImagePull"}}}],
            "Pending",
            [],
            False,
        ),
        # being created from its pulled image: may start, pins the layers (a reset waits)
        ([_CREATING], "Pending", ["main"], False),
        # ... unless the caller keeps the image anyway (deleting P2)
        ([_CREATING], "Pending", [], True),
        # kubelet 1.20 fails a pod deleted mid-creation and leaves it "creating" for a minute
        ([_CREATING], "Failed", [], False),
        # a waiting state without a reason: treated as being created
        ([{"name": "main", "state": {"waiting": {}}}], None, ["main"], False),
        (
            [
                {"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                {"name": "b", "state": {"running": {}}},
            ],
            "Running",
            ["b"],
            False,
        ),
        ([], None, [], False),  # no container status at all: nothing runs
    ],
    ids=[
        "unreported",
        "running",
        "terminated",
        "pull-failed",
        "creating",
        "creating-image-kept",
        "failed-while-creating",
        "waiting-no-reason",
        "mixed",
        "none",
    ],
)
def test_still_running(
    statuses: list[dict[str, Any]], phase: str | None, running: list[str], creating_is_stopped: bool
) -> None:
    assert still_running(statuses, phase, creating_is_stopped=creating_is_stopped) == running


@pytest.mark.parametrize(
    ("name", "repository"),
    [
        ("reg:5000/s/img1:trial-r-01", "reg:5000/s/img1"),  # a port is no tag
        ("reg:5000/s/img1@sha256:" + "a" * 64, "reg:5000/s/img1"),  # the runtime's digest name
        ("pause:3.4", "pause"),
    ],
    ids=["tag", "digest", "short"],
)
def test_listed_repository(name: str, repository: str) -> None:
    assert listed_repository(name) == repository


#: The container states the table below names: a waiting container's reason matters.
_STATES: dict[str, dict[str, Any]] = {
    "terminated": {"terminated": {"exitCode": 0}},
    "running": {"running": {}},
    "waiting": {"waiting": {"reason": "ErrImagePull"}},
    "creating": {"waiting": {"reason": "ContainerCreating"}},
}


def _terminating(*states: str) -> dict[str, Any]:
    """A deleted pod the API still holds, its containers in these states."""
    return {
        "metadata": {"name": "p1", "deletionTimestamp": "2026-11-24T00:00:00Z"},
        "status": {
            "containerStatuses": [
                {"name": f"c{i}", "state": _STATES[s]} for i, s in enumerate(states)
            ]
        },
    }


@pytest.mark.parametrize(
    "states",
    [
        # kubelet 1.20 keeps a deleted pod until the once-a-minute collector removes its
        # sandbox: once every container has terminated the driver stops waiting for that
        ("terminated",),
        ("terminated", "terminated"),
        # a container that will never start (its pull failed) holds nothing: the kubelet
        # starts nothing for a deleted pod
        ("waiting",),
        ("terminated", "waiting"),
        # a container still running is waited for (here past the timeout: then forced too)
        ("terminated", "running"),
        # so is one being created from its pulled image: it pins the image's layers
        ("creating",),
    ],
    ids=[
        "stopped",
        "all-stopped",
        "never-started",
        "stopped-and-never-started",
        "one-running",
        "being-created",
    ],
)
def test_a_deleted_pod_whose_containers_stopped_is_not_waited_for(
    states: tuple[str, ...], api: StandInApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("layersched_harness.testbed.cluster.driver.DELETE_TIMEOUT_S", 2.0)
    deleted: list[str] = []

    def delete(request: Request) -> Answer:
        deleted.append(request.query["gracePeriodSeconds"])
        return ok({})

    def get(request: Request) -> Answer:
        # gone only after the forced deletion
        if "0" in deleted:
            return status(404, "NotFound", "pods not found")
        return ok(_terminating(*states))

    api.route("DELETE", pod_path(NS, "p1"), delete)
    api.route("GET", pod_path(NS, "p1"), get)
    _driver(api).delete_by_name("p1")
    assert deleted == ["1", "0"]
    polls = api.sent("GET", pod_path(NS, "p1"))
    if not {"running", "creating"} & set(states):
        assert len(polls) <= 2  # seen stopped at once, forced, gone: no minute-long wait


def test_a_pod_gone_after_its_graceful_deletion_is_not_forced(api: StandInApi) -> None:
    deleted: list[str] = []

    def delete(request: Request) -> Answer:
        deleted.append(request.query["gracePeriodSeconds"])
        return ok({})

    api.route("DELETE", pod_path(NS, "p1"), delete)  # then GET answers 404: gone
    _driver(api).delete_by_name("p1")
    assert deleted == ["1"]


L1, L3, PAUSE = ("sha256:" + c * 64 for c in "13p")


def _inventory(node: str, *digests: str) -> dict[str, Any]:
    return {"metadata": {"name": node}, "layers": [{"digest": d, "sizeBytes": 1} for d in digests]}


@pytest.mark.parametrize(
    ("node", "held"),
    [
        # n1 lists L1 and L3 with no image naming them: pinned, a pull would skip them
        ("n1", [L1, L3]),
        ("n2", []),  # only the pause image's layer: not the scenario's
        ("n3", []),  # no inventory published for it: nothing known to be held
    ],
    ids=["pinned", "clean", "no-inventory"],
)
def test_held_layers(node: str, held: list[str]) -> None:
    inventories = [_inventory("n1", L3, PAUSE, L1), _inventory("n2", PAUSE)]
    assert held_layers(inventories, node, [L1, L3]) == held


def test_reset_waits_until_no_agent_lists_a_scenario_layer(
    api: StandInApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a container created from the image while it was removed pins its layers: the reset
    # fails, naming the node and the layers, rather than let the next pull skip them
    monkeypatch.setattr("layersched_harness.testbed.cluster.driver.IMAGE_GONE_TIMEOUT_S", 1.0)
    api.route("GET", pods_path(NS), items([]))
    api.route("GET", NODES_PATH, items([_node("w1", "10.0.0.1")]))
    api.route("GET", NODE_LAYERS_PATH, items([_inventory("w1", L3)]))
    driver = ClusterDriver(str(api.kubeconfig), RecordingBackend(), (IMAGE,), layer_digests=[L3])
    with pytest.raises(
        TestbedError, match=rf"node w1's agent still lists scenario layers \['{L3}'\]"
    ):
        driver.reset()


def _submit_pinned(
    api: StandInApi, pins: Mapping[str, str], backend: RecordingBackend | None = None
) -> tuple[ClusterDriver, Submitted]:
    backend = backend or RecordingBackend()
    pod = "P2"
    _bound_on_w2(api, "p2")
    driver = ClusterDriver(str(api.kubeconfig), backend, (IMAGE,), pins=pins)
    return driver, driver.submit(pod, IMAGE, SCHEDULER)


def test_a_pinned_pod_is_still_the_strategys_to_bind_on_its_one_node(api: StandInApi) -> None:
    # --pin P2=w2: a required node affinity on metadata.name, the strategy's scheduler
    # (not spec.nodeName, which would bypass it), and w2 the only candidate scored
    backend = RecordingBackend()
    driver, submitted = _submit_pinned(api, {"P2": "w2"}, backend)
    [created] = api.sent("POST", pods_path(NS))
    spec = created.json()["spec"]
    assert spec["schedulerName"] == SCHEDULER and "nodeName" not in spec
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["w2"]}]}
        ]
    }
    # one feasible node: kube-scheduler binds without scoring, so none are waited for
    placement = driver.complete(submitted)
    assert (placement.node, placement.scores, placement.pull.bytes) == ("w2", {}, 4321)
    assert [a for a in backend.asked if a[0] == "scores"] == []


def test_an_unpinned_pods_scores_are_waited_for(api: StandInApi) -> None:
    backend = RecordingBackend()
    driver, submitted = _submit_pinned(api, {"P1": "w1"}, backend)
    assert driver.complete(submitted).scores == {"w1": 3, "w2": 10}


def test_an_unpinned_pod_has_no_affinity(api: StandInApi) -> None:
    _submit_pinned(api, {"P1": "w1"})
    [created] = api.sent("POST", pods_path(NS))
    assert "affinity" not in created.json()["spec"]


def test_a_pin_to_no_worker_names_the_workers(api: StandInApi) -> None:
    with pytest.raises(
        TestbedError, match=r"--pin P2=n9: no worker is named n9 \(the workers are w1, w2\)"
    ):
        _submit_pinned(api, {"P2": "n9"})
    assert api.sent("POST", pods_path(NS)) == []
