"""deploy/ on the local testbed's real cluster: install, the seed scenario, failover, removal.

Seed 003's "install, health-check and remove cleanly", through the exact commands of
docs/deploy.md: ``layersched deploy overlay --local-testbed --out DIR`` (builds the
images without Docker, pushes them, writes the overlay), ``kubectl apply -k DIR``,
``kubectl rollout status``, then ``kubectl delete -k DIR``. Needs root on Linux, else
it skips with the reason. Uses the testbed at ``$LAYERSCHED_TESTBED_DIR`` (default
``.testbed/``), bringing it up (and down again) when it is not up.

The testbed's own host-side ``layer-locality`` kube-scheduler serves the same scheduler
name, so it is paused (SIGSTOP) while the deployed one is installed, and resumed after.
``LAYERSCHED_E2E_DEPLOY_TRIALS`` sets the scenario's trials (default 2).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity

from layersched.core.errors import TestbedError
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.deploy import AGENT_NAME, LAYER_LOCALITY_SCHEDULER, NAMESPACE
from layersched.testbed.cluster.driver import ClusterDriver
from layersched.testbed.deploy_stack import (
    DEPLOYED_SCORE_SOURCE,
    DeployedBackend,
    Kubectl,
    install,
    uninstall,
    wait_rollout,
)
from layersched.testbed.local import (
    TestbedInventory,
    TestbedSettings,
    default_state_dir,
    down,
    inventory_path,
    load_inventory,
    require_root,
    up,
)
from layersched.testbed.local._cluster import extender_requests
from layersched.testbed.scenario import report, run_scenario
from layersched.testbed.scenario_images import build_and_push_scenario
from tests.e2e._checks import check_layer_locality

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRIALS_ENV = "LAYERSCHED_E2E_DEPLOY_TRIALS"
DEFAULT_TRIALS = 2
PART_OF = "app.kubernetes.io/part-of=layersched"
#: Cluster-scoped kinds and the kube-system RoleBinding the install creates.
CLUSTER_KINDS = "namespace,customresourcedefinition,clusterrole,clusterrolebinding"
HOST_SCHEDULER = "scheduler-layer-locality"
#: kube-scheduler 1.20's plain-HTTP metrics (in the node's network: hostNetwork).
SCHEDULER_METRICS_PORT = 10251
EXTENDER_PORT = 8888
_MASTER = re.compile(
    r'^leader_election_master_status\{name="(?P<name>[^"]+)"\} (?P<value>\S+)$', re.M
)
HA_NAMESPACE = "layersched-ha"
HA_PODS = 30
HA_POD_INTERVAL_S = 0.5
HA_KILL_AFTER_PODS = 8
#: A killed leader's lease expires after leaseDuration (15 s); the standby retries every 2 s.
FAILOVER_TIMEOUT_S = 60.0
BIND_TIMEOUT_S = 120.0
POLL_S = 0.2
UNINSTALL_TIMEOUT_S = 180.0
REPORT_NAME = "deploy.json"


def _trials() -> int:
    return int(os.environ.get(TRIALS_ENV, DEFAULT_TRIALS))


@dataclass
class Stack:
    """The installed stack and what the fixture measured."""

    inventory: TestbedInventory
    kubectl: Kubectl
    overlay: Path
    nodes_before: dict[str, Any]
    ours_before: set[str]
    measurements: dict[str, Any] = field(default_factory=dict)
    removed: bool = False


def _get(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl.run("get", *args, "-o", "json"))


def _node_state(kubectl: Kubectl) -> dict[str, Any]:
    """What "the nodes are as before" compares: labels, annotations, taints, allocatable."""
    return {
        n["metadata"]["name"]: {
            "labels": n["metadata"].get("labels"),
            "annotations": n["metadata"].get("annotations"),
            "taints": n["spec"].get("taints"),
            "unschedulable": n["spec"].get("unschedulable"),
            "allocatable": n["status"].get("allocatable"),
        }
        for n in _get(kubectl, "nodes")["items"]
    }


def _ours(kubectl: Kubectl) -> list[str]:
    """Every object of ours the cluster holds: labelled ones and the CRD's own objects."""
    names = kubectl.run("get", CLUSTER_KINDS, "-l", PART_OF, "-o", "name").split()
    names += kubectl.run(
        "-n", "kube-system", "get", "rolebinding", "-l", PART_OF, "-o", "name"
    ).split()
    crds = kubectl.run("get", "crd", "-o", "name").split()
    if any("layersched.io" in crd for crd in crds):
        names += kubectl.run("get", "nodelayerinventories.layersched.io", "-o", "name").split()
    return names


def _host_scheduler_pid(inventory: TestbedInventory) -> int:
    [daemon] = [d for d in inventory.cluster.control_plane if d.name == HOST_SCHEDULER]
    return int(Path(daemon.pidfile).read_text().strip())


def _scheduler_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    pods = _get(
        kubectl, "-n", NAMESPACE, "pods", "-l", f"app.kubernetes.io/name={LAYER_LOCALITY_SCHEDULER}"
    )
    return [
        p
        for p in pods["items"]
        if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
    ]


def _is_leader(pod: dict[str, Any]) -> bool:
    url = f"http://{pod['status']['podIP']}:{SCHEDULER_METRICS_PORT}/metrics"
    try:
        text = httpx.get(url, timeout=2.0).text
    except httpx.HTTPError:
        return False
    # kube-scheduler 1.20 labels its elector "kube-scheduler" whatever the Lease's name;
    # there is one elector per process
    return any(float(m["value"]) == 1 for m in _MASTER.finditer(text))


def _extender_url(pod: dict[str, Any]) -> str:
    return f"http://{pod['status']['podIP']}:{EXTENDER_PORT}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        require_root()
    except TestbedError as err:
        pytest.skip(f"local testbed unavailable: {err}")
    state_dir = default_state_dir()
    was_up = inventory_path(state_dir).exists()
    if not was_up:
        result = up(TestbedSettings(state_dir=state_dir))
        assert result.ok, f"testbed up failed: see {result.log_path}"
    inventory = load_inventory(state_dir)
    kubectl = Kubectl(inventory.cluster.kubectl, inventory.cluster.kubeconfig)
    # the testbed's own layersched objects (its CRD, agents' RBAC and objects) stay
    ours_before = set(_ours(kubectl))
    assert f"namespace/{NAMESPACE}" not in ours_before, "a previous install is still there"
    overlay = tmp_path_factory.mktemp("deploy") / "overlay"
    measurements: dict[str, Any] = {}
    started = time.monotonic()
    # the documented install: build and push the images, write the overlay
    cmd = [sys.executable, "-m", "layersched.cli.main", "deploy", "overlay", "--local-testbed"]
    cmd += ["--state-dir", str(state_dir), "--out", str(overlay), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr
    measurements["images"] = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    measurements["images_build_and_push_s"] = round(time.monotonic() - started, 1)
    stack = Stack(inventory, kubectl, overlay, _node_state(kubectl), ours_before, measurements)
    host_scheduler = _host_scheduler_pid(inventory)
    os.kill(host_scheduler, signal.SIGSTOP)
    try:
        measurements["install_s"] = round(install(kubectl, overlay), 2)
        measurements["rollout_s"] = round(
            wait_rollout(
                kubectl,
                NAMESPACE,
                [f"deployment/{LAYER_LOCALITY_SCHEDULER}", f"daemonset/{AGENT_NAME}"],
            ),
            1,
        )
        yield stack
    finally:
        if not stack.removed:
            uninstall(kubectl, overlay)
        os.kill(host_scheduler, signal.SIGCONT)
        out = Path(os.environ.get("LAYERSCHED_E2E_REPORT_DIR") or tmp_path_factory.mktemp("report"))
        out.mkdir(parents=True, exist_ok=True)
        (out / REPORT_NAME).write_text(json.dumps(measurements, indent=2) + "\n")
        print(f"\ndeploy measurements ({out / REPORT_NAME}):\n{json.dumps(measurements, indent=2)}")
        if not was_up:
            down(state_dir)


def test_rolled_out_with_one_leader(stack: Stack) -> None:
    pods = _scheduler_pods(stack.kubectl)
    assert len(pods) == 2
    for pod in pods:
        ready = {c["name"]: c["ready"] for c in pod["status"]["containerStatuses"]}
        assert ready == {"kube-scheduler": True, "extender": True}, pod["metadata"]["name"]

    @tenacity.retry(
        stop=tenacity.stop_after_delay(FAILOVER_TIMEOUT_S),
        wait=tenacity.wait_fixed(1),
        reraise=True,
    )
    def one_leader() -> None:
        leaders = [p["metadata"]["name"] for p in _scheduler_pods(stack.kubectl) if _is_leader(p)]
        assert len(leaders) == 1, f"leaders: {leaders}"

    one_leader()
    lease = _get(stack.kubectl, "-n", NAMESPACE, "lease", LAYER_LOCALITY_SCHEDULER)
    assert lease["spec"]["holderIdentity"]
    # the default scheduler's lease is not ours to touch
    agents = _get(stack.kubectl, "-n", NAMESPACE, "daemonset", AGENT_NAME)["status"]
    assert agents["numberReady"] == len(stack.inventory.nodes)


def test_agents_publish_every_nodes_layers(stack: Stack) -> None:
    @tenacity.retry(stop=tenacity.stop_after_delay(60), wait=tenacity.wait_fixed(2), reraise=True)
    def published() -> dict[str, Any]:
        items = _get(stack.kubectl, "nodelayerinventories.layersched.io")["items"]
        names = {i["metadata"]["name"] for i in items}
        assert names == {n.name for n in stack.inventory.nodes}, names
        return {i["metadata"]["name"]: i for i in items}

    objects = published()
    for name, obj in objects.items():
        # each node holds at least the stack's own images, read from containerd's store
        assert obj["source"] == "content-store", name
        assert obj["layers"], name


def test_seed_scenario_through_the_deployed_stack(stack: Stack) -> None:
    inventory = stack.inventory
    images = build_and_push_scenario(inventory.registry.host)
    backend = DeployedBackend(
        inventory, lambda: [_extender_url(p) for p in _scheduler_pods(stack.kubectl)]
    )
    driver = ClusterDriver(inventory.cluster.kubeconfig, backend, (images.img1, images.img2))
    trials = _trials()
    results = run_scenario(driver, images, [LAYER_LOCALITY], trials)
    rates = {n.name: n.link_rate_bits_per_s for n in inventory.nodes}
    doc = report(
        backend.name,
        min(rates.values()),
        images,
        results,
        rates,
        components=driver.components(),
        score_sources={LAYER_LOCALITY: DEPLOYED_SCORE_SOURCE},
    )
    stack.measurements["scenario"] = {
        "trials": trials,
        "placements": [t["placements"] for t in doc["strategies"][LAYER_LOCALITY]["trials"]],
        "scores_t3": [t["scores_t3"] for t in doc["strategies"][LAYER_LOCALITY]["trials"]],
    }
    runs = doc["strategies"][LAYER_LOCALITY]["trials"]
    assert len(runs) == trials
    for i, t in enumerate(runs):
        # the deployed scheduler bound every pod
        assert set(t["scheduler"].values()) == {LAYER_LOCALITY_SCHEDULER}, (
            f"trial {i}: {t['scheduler']}"
        )
    check_layer_locality(doc)


def _ha_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": HA_NAMESPACE},
        "spec": {
            "schedulerName": LAYER_LOCALITY_SCHEDULER,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "pause",
                    "image": "layersched.local/pause:3.4",
                    "imagePullPolicy": "Never",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def test_leader_failover_during_a_stream_of_pods(stack: Stack) -> None:
    kubectl = stack.kubectl
    kubectl.run("create", "namespace", HA_NAMESPACE)
    try:
        pods = _scheduler_pods(kubectl)
        [leader] = [p for p in pods if _is_leader(p)]
        [standby] = [p for p in pods if p is not leader]
        ok_before = extender_requests(_extender_url(leader))
        names = [f"ha-{i:03d}" for i in range(HA_PODS)]
        killed = threading.Event()
        timings: dict[str, float] = {}

        def stream() -> None:
            for i, name in enumerate(names):
                kubectl.create(_ha_pod(name))
                if i + 1 == HA_KILL_AFTER_PODS:
                    killed.set()
                time.sleep(HA_POD_INTERVAL_S)

        streamer = threading.Thread(target=stream)
        streamer.start()
        assert killed.wait(timeout=120), "the stream did not start"
        ok_at_kill = extender_requests(_extender_url(leader))
        timings["kill"] = time.monotonic()
        kubectl.run(
            "-n",
            NAMESPACE,
            "delete",
            "pod",
            leader["metadata"]["name"],
            "--grace-period=0",
            "--force",
        )

        @tenacity.retry(
            stop=tenacity.stop_after_delay(FAILOVER_TIMEOUT_S),
            wait=tenacity.wait_fixed(POLL_S),
            reraise=True,
        )
        def standby_leads() -> None:
            assert _is_leader(standby), "standby not leading yet"

        standby_leads()
        timings["new_leader"] = time.monotonic()
        # the standby's extender is never called before it leads
        ok_standby_start = 0
        streamer.join(timeout=120)

        @tenacity.retry(
            stop=tenacity.stop_after_delay(BIND_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            reraise=True,
        )
        def all_bound() -> list[dict[str, Any]]:
            items = _get(kubectl, "-n", HA_NAMESPACE, "pods")["items"]
            unbound = [p["metadata"]["name"] for p in items if not p["spec"].get("nodeName")]
            assert len(items) == HA_PODS and not unbound, f"{len(items)} pods, unbound {unbound}"
            return items

        items = all_bound()
        ok_standby_end = extender_requests(_extender_url(standby))
        events = _get(kubectl, "-n", HA_NAMESPACE, "events")["items"]
        scheduled: dict[str, list[str]] = {}
        for event in events:
            if event.get("reason") == "Scheduled":
                uid = event["involvedObject"]["uid"]
                scheduled.setdefault(uid, []).append(event.get("reportingComponent") or "")
        for pod in items:
            # bound exactly once, by the deployed scheduler
            assert len(scheduled.get(pod["metadata"]["uid"], [])) == 1, pod["metadata"]["name"]
        scored = (ok_at_kill - ok_before) + (ok_standby_end - ok_standby_start)
        stack.measurements["failover"] = {
            "pods": HA_PODS,
            "pods_bound": len(items),
            "failover_s": round(timings["new_leader"] - timings["kill"], 2),
            "prioritize_answered": int(scored),
            "pods_without_extender_scores": max(0, HA_PODS - int(scored)),
        }
        assert timings["new_leader"] - timings["kill"] < FAILOVER_TIMEOUT_S
    finally:
        kubectl.run(
            "delete",
            "namespace",
            HA_NAMESPACE,
            "--wait=true",
            timeout_s=UNINSTALL_TIMEOUT_S,
            check=False,
        )
    wait_rollout(kubectl, NAMESPACE, [f"deployment/{LAYER_LOCALITY_SCHEDULER}"])


def test_uninstall_leaves_nothing_and_the_default_scheduler_works(stack: Stack) -> None:
    kubectl = stack.kubectl
    stack.measurements["uninstall_s"] = round(uninstall(kubectl, stack.overlay), 1)
    stack.removed = True
    # nothing of the install is left; what the testbed had before is still there
    assert set(_ours(kubectl)) == stack.ours_before
    assert _node_state(kubectl) == stack.nodes_before
    # the default scheduler still schedules
    probe = _ha_pod("default-scheduler-probe")
    probe["metadata"]["namespace"] = "default"
    del probe["spec"]["schedulerName"]
    kubectl.create(probe)
    try:

        @tenacity.retry(
            stop=tenacity.stop_after_delay(BIND_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            reraise=True,
        )
        def bound() -> None:
            pod = _get(kubectl, "-n", "default", "pod", "default-scheduler-probe")
            assert pod["spec"].get("nodeName"), "not bound yet"

        bound()
    finally:
        kubectl.run(
            "-n",
            "default",
            "delete",
            "pod",
            "default-scheduler-probe",
            "--grace-period=0",
            "--force",
            check=False,
        )
