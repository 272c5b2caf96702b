"""install/charts/layersched on the local testbed's real Kubernetes 1.37: helm install, the seed
scenario's layer-locality placement, upgrade, rollback, uninstall (nothing left).

helm is the one ``make tools`` builds from its Go module. The images are the install's
own, built without Docker and pushed to the testbed's registry (as the install/kustomize/ e2e does);
the chart takes them by digest (``image``, ``kubeScheduler.image``). The testbed's nodes are
network namespaces on one host, so a post-renderer applies the same patches as its
overlay of install/kustomize/
(``layersched_harness.testbed.deploy_stack.write_helm_post_renderer``); the
testbed holds the CRD already (``crd.install=false``). The testbed's own host-side
``layer-locality`` scheduler is paused while the chart's serves that name.
``LAYERSCHED_E2E_HELM_TRIALS`` sets the scenario's trials (default 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.deploy import (
    AGENT_NAME,
    CHART_DIR,
    LAYER_LOCALITY_SCHEDULER,
    LAYER_LOCALITY_WEIGHT,
    NAMESPACE,
    SCHEDULER_CONFIG_FILE,
    ImageRef,
)
from layersched.images.push import build_and_push
from layersched_harness.testbed.builds import kubernetes_build
from layersched_harness.testbed.deploy_stack import (
    Kubectl,
    wait_rollout,
    write_helm_post_renderer,
)
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import TestbedState, require_root
from tests.e2e._checks import check_layer_locality
from tests.e2e.test_deploy_stack import (
    _deployed_scenario,
    _host_scheduler_pid,
    _node_state,
    _ours,
    _scheduler_pods,
)
from tests.fixtures import prereq
from tests.fixtures.go_tools import tool
from tests.fixtures.testbed import testbed_settings, testbed_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / CHART_DIR
RELEASE = "layersched"
#: The release's record lives here; the stack goes into the chart's namespace.
RELEASE_NAMESPACE = "default"
TRIALS_ENV = "LAYERSCHED_E2E_HELM_TRIALS"
HELM_TIMEOUT = "5m"
HELM_TIMEOUT_S = 400
#: What the upgrade changes: the weight (the ConfigMap) and the extender's CPU request
#: (the Deployment's pod template: a rollout).
UPGRADED_WEIGHT = 5
UPGRADED_CPU = "50m"
#: helm's output is printed (the run's record), a release's manifest (status -o json) not.
PRINTED_CHARS = 2000


@dataclass
class Helm:
    """helm against the testbed's cluster, its own config and cache dirs."""

    binary: Path
    kubeconfig: str
    home: Path
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True) -> str:
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
        }
        argv = [str(self.binary), "--kubeconfig", self.kubeconfig, "-n", RELEASE_NAMESPACE]
        started = time.monotonic()
        try:
            done = subprocess.run(
                [*argv, *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=HELM_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise TestbedError(f"helm {' '.join(args)}: {err}") from err
        self.timings[args[0]] = round(time.monotonic() - started, 1)
        shown = done.stdout if len(done.stdout) <= PRINTED_CHARS else "(long output)\n"
        print(f"$ helm {' '.join(args)}  (exit {done.returncode})\n{shown}{done.stderr}")
        if check:
            assert done.returncode == 0, f"helm {args[0]}: {done.stderr}"
        return done.stdout


@dataclass
class Installed:
    inventory: TestbedState
    kubectl: Kubectl
    helm: Helm
    install_args: list[str]
    ours_before: set[str]
    nodes_before: dict[str, Any]
    measurements: dict[str, Any] = field(default_factory=dict)
    removed: bool = False
    #: The chart installed (the committed one, or a copy pinned to a release's record).
    chart: Path = CHART


def _trials() -> int:
    return int(os.environ.get(TRIALS_ENV, "1"))


def _values(registry: str, layersched: ImageRef, kube_scheduler: ImageRef) -> dict[str, Any]:
    return {
        "image": {"repository": layersched.name, "digest": layersched.digest},
        "kubeScheduler": {
            "image": {"repository": kube_scheduler.name, "digest": kube_scheduler.digest}
        },
        "extender": {
            "allowedRegistries": [registry],
            "extraArgs": ["--insecure-registry", registry],
        },
        "crd": {"install": False},
    }


def _scheduler_objects(kubectl: Kubectl) -> tuple[int, dict[str, Any]]:
    """The ConfigMap's extender weight and the extender container's resources."""
    config = json.loads(
        kubectl.run(
            "-n", NAMESPACE, "get", "configmap", f"{LAYER_LOCALITY_SCHEDULER}-config", "-o", "json"
        )
    )
    [extender] = yaml.safe_load(config["data"][SCHEDULER_CONFIG_FILE])["extenders"]
    deployment = json.loads(
        kubectl.run("-n", NAMESPACE, "get", "deployment", LAYER_LOCALITY_SCHEDULER, "-o", "json")
    )
    [sidecar] = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    return int(extender["weight"]), sidecar["resources"]


def _rolled_out(kubectl: Kubectl) -> float:
    return wait_rollout(
        kubectl,
        NAMESPACE,
        [f"deployment/{LAYER_LOCALITY_SCHEDULER}", f"daemonset/{AGENT_NAME}"],
    )


@dataclass(frozen=True)
class HelmTestbed:
    """The local testbed, helm for it, and what is there before a chart is installed."""

    inventory: TestbedState
    kubectl: Kubectl
    helm: Helm
    #: ``HOST:PORT`` of its registry (plain HTTP).
    registry: str
    ours_before: set[str]
    nodes_before: dict[str, Any]


@contextlib.contextmanager
def helm_testbed(work: Path) -> Iterator[HelmTestbed]:
    """The local testbed (brought up when it is not), with no install of ours on it."""
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    helm_bin = tool("helm")
    with testbed_up(testbed_settings(), refresh=False, shared=True) as inventory:
        kubectl = Kubectl(inventory.cluster.kubectl, inventory.cluster.kubeconfig)
        ours_before = set(_ours(kubectl))
        assert f"namespace/{NAMESPACE}" not in ours_before, "a previous install is still there"
        yield HelmTestbed(
            inventory,
            kubectl,
            Helm(helm_bin, inventory.cluster.kubeconfig, work / "home"),
            f"{inventory.registry.address}:{inventory.registry.port}",
            ours_before,
            _node_state(kubectl),
        )


@contextlib.contextmanager
def helm_release(
    bed: HelmTestbed,
    chart: Path,
    install_args: list[str],
    measurements: dict[str, Any],
    name: str = "helm",
) -> Iterator[Installed]:
    """``helm install --wait`` of ``chart`` while the testbed's own host-side
    ``layer-locality`` scheduler is paused, the rollout timed. Uninstalled at the end unless
    a test did (``Installed.removed``), a failed install too; the host's scheduler resumes
    after; ``measurements`` printed as ``NAME measurements:``."""
    stack = Installed(
        bed.inventory, bed.kubectl, bed.helm, install_args, bed.ours_before, bed.nodes_before,
        measurements, chart=chart,
    )  # fmt: skip
    host_scheduler = _host_scheduler_pid(bed.inventory)
    os.kill(host_scheduler, signal.SIGSTOP)
    try:
        try:
            bed.helm.run("install", RELEASE, str(chart), *install_args,
                         "--wait", "--timeout", HELM_TIMEOUT)  # fmt: skip
            measurements["rollout_s"] = round(_rolled_out(bed.kubectl), 1)
            yield stack
            measurements["helm_s"] = bed.helm.timings
            print(f"\n{name} measurements: {json.dumps(measurements)}")
        finally:
            if not stack.removed:
                bed.helm.run("uninstall", RELEASE, "--wait", "--timeout", HELM_TIMEOUT,
                             check=False)  # fmt: skip
    finally:
        os.kill(host_scheduler, signal.SIGCONT)


def check_uninstall_leaves_nothing(installed: Installed) -> None:
    """``helm uninstall --wait``, then: no object of ours but what was there before, the
    nodes as before, the namespace gone, no release record."""
    helm, kubectl = installed.helm, installed.kubectl
    helm.run("uninstall", RELEASE, "--wait", "--timeout", HELM_TIMEOUT)
    installed.removed = True
    assert set(_ours(kubectl)) == installed.ours_before
    assert _node_state(kubectl) == installed.nodes_before
    # gone, not unreadable: any other kubectl error fails here (check=True)
    assert kubectl.run("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name") == ""
    # no release record either
    assert helm.run("list", "-a", "-q").strip() == ""
    secrets = kubectl.run("-n", RELEASE_NAMESPACE, "get", "secret", "-l", "owner=helm", "-o",
                          "name")  # fmt: skip
    assert secrets.strip() == ""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("helm")
    with contextlib.ExitStack() as undo:
        bed = undo.enter_context(helm_testbed(work))
        started = time.monotonic()
        pushed = build_and_push(
            bed.registry, kubernetes_build().require("kube-scheduler") / "kube-scheduler"
        )
        measurements: dict[str, Any] = {
            "images_build_and_push_s": round(time.monotonic() - started, 1)
        }
        post_renderer = write_helm_post_renderer(work / "post-render", bed.inventory, pushed)
        values = work / "values.json"
        values.write_text(
            json.dumps(_values(bed.registry, pushed.layersched.ref, pushed.kube_scheduler.ref))
        )
        yield undo.enter_context(
            helm_release(bed, CHART, ["-f", str(values), "--post-renderer", str(post_renderer)],
                         measurements)
        )  # fmt: skip


def _assert_stack_ready(installed: Installed) -> None:
    """Both scheduler replicas with each container ready, and an agent ready per node."""
    pods = _scheduler_pods(installed.kubectl)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        ready = {c["name"]: c["ready"] for c in pod["status"].get("containerStatuses") or []}
        assert ready == {"kube-scheduler": True, "extender": True}, pod["metadata"]["name"]
    agents = json.loads(
        installed.kubectl.run("-n", NAMESPACE, "get", "daemonset", AGENT_NAME, "-o", "json")
    )
    assert agents["status"]["numberReady"] == len(installed.inventory.nodes)


def test_install_rolls_out_the_stack(installed: Installed) -> None:
    status = json.loads(installed.helm.run("status", RELEASE, "-o", "json"))
    assert status["info"]["status"] == "deployed" and status["version"] == 1
    _assert_stack_ready(installed)
    # the chart's defaults: layer-locality at its weight, 1 (issue 42: in-flight is asked
    # for by name)
    assert _scheduler_objects(installed.kubectl)[0] == LAYER_LOCALITY_WEIGHT == 1
    deployment = json.loads(
        installed.kubectl.run(
            "-n", NAMESPACE, "get", "deployment", LAYER_LOCALITY_SCHEDULER, "-o", "json"
        )
    )
    [sidecar] = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    args = sidecar["args"]
    assert args[args.index("--strategy") + 1] == "layer-locality", args
    assert "--spread" in args and "--pull-mode" not in args, args


def test_the_scenarios_layer_locality_placement_holds(installed: Installed) -> None:
    trials = _trials()
    doc = _deployed_scenario(installed.inventory, installed.kubectl, trials)
    runs = doc["strategies"][LAYER_LOCALITY]["trials"]
    installed.measurements["scenario"] = {
        "trials": trials,
        "placements": [t["placements"] for t in runs],
        "scores_t3": [t["scores_t3"] for t in runs],
    }
    assert len(runs) == trials
    for i, t in enumerate(runs):
        # the chart's scheduler bound every pod
        assert set(t["scheduler"].values()) == {LAYER_LOCALITY_SCHEDULER}, f"trial {i}"
    check_layer_locality(doc)


def test_upgrade_then_rollback(installed: Installed) -> None:
    helm, kubectl = installed.helm, installed.kubectl
    weight, resources = _scheduler_objects(kubectl)
    helm.run("upgrade", RELEASE, str(CHART), *installed.install_args,
             "--set", f"weight={UPGRADED_WEIGHT}",
             "--set", f"resources.extender.requests.cpu={UPGRADED_CPU}",
             "--wait", "--timeout", HELM_TIMEOUT)  # fmt: skip
    _rolled_out(kubectl)
    upgraded_weight, upgraded = _scheduler_objects(kubectl)
    assert upgraded_weight == UPGRADED_WEIGHT
    assert upgraded["requests"]["cpu"] == UPGRADED_CPU
    assert upgraded["limits"] == resources["limits"]

    helm.run("rollback", RELEASE, "1", "--wait", "--timeout", HELM_TIMEOUT)
    _rolled_out(kubectl)
    assert _scheduler_objects(kubectl) == (weight, resources)
    history = json.loads(helm.run("history", RELEASE, "-o", "json"))
    assert [(h["revision"], h["status"]) for h in history] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]
    assert "Rollback to 1" in history[-1]["description"]
    # the rolled-back stack is whole again: every container of both replicas ready, and
    # the agents
    _assert_stack_ready(installed)


def test_uninstall_leaves_nothing(installed: Installed) -> None:
    check_uninstall_leaves_nothing(installed)
