"""The seed's two-image, three-node scenario on the local testbed's real cluster.

Real registry, real containerd nodes behind rate-limited links, a real Kubernetes
control plane of the release ``make kubernetes`` builds (three kube-schedulers: upstream
image-locality, the default plugins plus the layersched extender, and the default plugins
plus layersched's LayerLocality score plugin) and real kubelets; nothing is simulated. Needs
root on Linux, else it skips with the reason. ``LAYERSCHED_E2E_TRIALS`` sets the trials
per strategy (default 5). The report and plot go to a temp dir (see conftest.py), never
over the committed ``harness/results/``; the table is printed at the end of the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity
import yaml

from layersched.core.errors import KubeError
from layersched.cri import CRIClient
from layersched.kube import (
    NODE_LAYERS_PATH,
    KubeClient,
    KubeConfig,
    load_kubeconfig,
    node_layers_path,
    pod_path,
    pods_path,
)
from layersched_harness.testbed.cluster import ClusterDriver
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import TestbedState, require_root, up
from layersched_harness.testbed.local._agent_tokens import (
    token_lifetime,
    token_request,
    token_request_path,
)
from layersched_harness.testbed.local._cluster import LocalBackend
from layersched_harness.testbed.pause_image import DEFAULT_PAUSE_IMAGE
from layersched_harness.testbed.scenario import P1_AGAIN, P2, ScenarioImages, run_trial
from tests.e2e import _checks as checks
from tests.e2e._checks import (
    LAYER_LOCALITY,
    LAYER_LOCALITY_PLUGIN,
    LOCAL_STRATEGIES,
    check_image_locality_tie,
    check_layer_locality,
    check_plugin_scores_are_the_cores,
    check_pull_bytes,
    check_pull_times_against_the_link,
    check_real_cluster,
    check_report,
    trials_from_env,
)
from tests.fixtures import prereq
from tests.fixtures.testbed import testbed_settings, testbed_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: (report, the testbed's node names, trials per strategy, inventory)
Run = tuple[dict[str, Any], set[str], int, TestbedState]

#: The scenario runs K trials x 3 strategies, each pulling ~100 MiB at 20 Mbit/s.
SCENARIO_TIMEOUT_S = 40 * 60


@pytest.fixture(scope="module")
def scenario_run(
    scenario_report_dir: Path,
    record_scenario_report: Callable[[Path, Mapping[str, Any]], None],
) -> Iterator[tuple[dict[str, Any], set[str], int, TestbedState]]:
    """(report, the testbed's node names, trials per strategy, inventory) of one run."""
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    trials = trials_from_env()
    report_path = scenario_report_dir / "scenario.json"
    with testbed_up(testbed_settings()) as inventory:
        nodes = {node.name for node in inventory.nodes}
        cmd = [sys.executable, "-m", "layersched.cli.main", "scenario"]
        cmd += ["--trials", str(trials), "--report", str(report_path)]
        done = subprocess.run(cmd, timeout=SCENARIO_TIMEOUT_S, check=False)
        assert done.returncode == 0, "layersched scenario failed (its output is above)"
        report = json.loads(report_path.read_text())
        record_scenario_report(report_path, report)
        try:
            yield report, nodes, trials, inventory
        finally:
            # leave the shared testbed as the next module expects it: the scenario's pods
            # each request a whole node, and with two of them left running kube-scheduler
            # finds one node that fits and scores none (the pull-secrets module's pods
            # were bound unscored, or its warm-up pod could not start on a full node)
            with _driver(report, inventory) as (driver, _images):
                driver.reset()


# ----------------------------------------------------- estimate and explain (issue 25)
# Both read the cluster as a user would, through the CLI, right after the scenario: before
# the tests below, which disturb the cluster (images removed, an agent killed, the API
# server restarted). Their own trials and pods change nothing those read.
#: estimate's P1-again avoidable bytes and layer-locality's measured saving agree this well.
ESTIMATE_TOLERANCE = 0.10
#: An image-locality trial puts P1-again on P2's node half the time (a tie): then nothing
#: was avoidable and the agreement is 0 = 0. Up to this many more trials are run, through
#: the scenario's own driver, until one puts it on a node without L1+L2.
MAX_EXTRA_TRIALS = 6
#: A CLI run reads a handful of objects and resolves two images.
CLI_TIMEOUT_S = 120
TERMINAL_COLUMNS = 80
SCENARIO_POD = "layersched-scenario/p1-again"


def _cli(inventory: TestbedState, *argv: str) -> str:
    """``layersched ARGV`` against the testbed as a user runs it (80 columns); its output."""
    cmd = [sys.executable, "-m", "layersched.cli.main", *argv]
    cmd += ["--kubeconfig", inventory.cluster.kubeconfig]
    env = {**os.environ, "COLUMNS": str(TERMINAL_COLUMNS)}
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)} failed: {done.stderr}"
    return done.stdout


def _estimate(inventory: TestbedState, *extra: str) -> str:
    registry = inventory.registry.host
    return _cli(inventory, "estimate", "--insecure-registry", registry, *extra)


def _explain(inventory: TestbedState, *extra: str) -> str:
    url = inventory.cluster.extender.url
    return _cli(inventory, "explain", "pod", SCENARIO_POD, "--extender-url", url, *extra)


@contextlib.contextmanager
def _driver(
    report: dict[str, Any], inventory: TestbedState
) -> Iterator[tuple[ClusterDriver, ScenarioImages]]:
    """The scenario's own driver on the testbed, and the report's images."""
    images = ScenarioImages(
        report["images"]["Img1"],
        report["images"]["Img2"],
        {label: (layer["digest"], layer["size"]) for label, layer in report["layers"].items()},
    )
    backend = LocalBackend(inventory)
    try:
        yield (
            ClusterDriver(inventory.cluster.kubeconfig, backend, (images.img1, images.img2)),
            images,
        )
    finally:
        backend.close()


def _trial(report: dict[str, Any], inventory: TestbedState, strategy: str) -> dict[str, Any]:
    """One more trial of ``strategy`` through the scenario's own driver, as a report's."""
    with _driver(report, inventory) as (driver, images):
        return asdict(run_trial(driver, images, strategy))


def _spread_score(report: dict[str, Any], l3_holders: int, other_holds: int) -> tuple[int, int]:
    """The extender's 0..10 scores (layer-locality with spread, three nodes) of P1-again's
    two candidates, the chosen node holding all of Img1: L3 is on ``l3_holders``
    nodes, L1 and L2 on P1's node, the chosen one and the other when it holds
    ``other_holds`` > 0 bytes (L1+L2)."""
    nodes = 3
    l12, l3 = checks.layer_bytes(report, "L1", "L2"), checks.layer_bytes(report, "L3")
    total = l12 + l3
    l12_holders = 3 if other_holds else 2
    chosen = l12 * l12_holders / nodes + l3 * l3_holders / nodes
    other = l12 * l12_holders / nodes if other_holds else 0.0
    return int(100 * chosen / total) // 10, int(100 * other / total) // 10


def _fits(output: str, what: str, results: Path) -> None:
    """``output`` is within the terminal; it is printed and kept beside the report."""
    print(f"\n$ layersched {what}\n{output}")
    (results / f"{what.split()[0]}.txt").write_text(output)
    width = max(len(line) for line in output.splitlines())
    assert width <= TERMINAL_COLUMNS, f"{what}: {width} columns"


def test_estimate_agrees_with_what_layer_locality_saved(
    scenario_run: Run, scenario_report_dir: Path
) -> None:
    report, _, _, inventory = scenario_run
    # the cluster as the scenario's last trial left it (its P1 and P1-again still run),
    # when that was an image-locality trial; else, and while it tied to P2's node, more
    last = list(report["strategies"])[-1]
    trial = report["strategies"][last]["trials"][-1] if last == checks.IMAGE_LOCALITY else None
    extra = 0
    while extra < MAX_EXTRA_TRIALS and (
        trial is None or trial["placements"][P1_AGAIN] == trial["placements"][P2]
    ):
        trial = _trial(report, inventory, checks.IMAGE_LOCALITY)
        extra += 1
    assert trial is not None
    output = _estimate(inventory, "--namespace", "layersched-scenario", "-o", "json")
    pods = {pod["pod"]: pod for pod in json.loads(output)["pods"]}
    again = pods[SCENARIO_POD]
    assert again["node"] == trial["placements"][P1_AGAIN], (again, trial)
    # what layer-locality measurably saved: P1-again's bytes here against its bytes
    # under layer-locality (the registry's access log, every trial of the report)
    layer_locality = [
        checks.pull(t, P1_AGAIN)["bytes"]
        for t in report["strategies"][checks.LAYER_LOCALITY]["trials"]
    ]
    saved = checks.pull(trial, P1_AGAIN)["bytes"] - sum(layer_locality) / len(layer_locality)
    print(
        f"P1-again: estimate {again['avoidable_bytes']} B avoidable, layer-locality saved "
        f"{saved:.0f} B ({extra} extra image-locality trials)"
    )
    if trial["placements"][P1_AGAIN] == trial["placements"][P2]:
        # every extra trial tied towards P2's node (1 in 2**MAX_EXTRA_TRIALS): nothing to save
        assert again["avoidable_bytes"] == 0 and abs(saved) <= checks.METADATA_ALLOWANCE_BYTES
    else:
        assert again["best_node"] == trial["placements"][P2]
        assert abs(again["avoidable_bytes"] - saved) <= ESTIMATE_TOLERANCE * saved
    _fits(_estimate(inventory), "estimate", scenario_report_dir)


def test_explain_tells_who_placed_p1_again_and_why(
    scenario_run: Run, scenario_report_dir: Path
) -> None:
    report, _, _, inventory = scenario_run
    # image-locality placed the P1-again running now: not us, and explain says so
    explained = json.loads(_explain(inventory, "-o", "json"))
    assert explained["scheduler"] == checks.IMAGE_LOCALITY and explained["verdict"] == "not_ours"
    assert explained["scheduled_by"] == checks.IMAGE_LOCALITY
    ran = explained["node"]  # it pulled all of Img1 there
    # P1-again again, through layer-locality (a pod, not a trial: seconds, not minutes):
    # P1's node is full; the extender scores the node holding all of Img1 (where it ran)
    # against P2's (L1+L2) or an empty one, and explain names the node it is bound to
    with _driver(report, inventory) as (driver, images):
        driver.delete(P1_AGAIN)
        placed = driver.schedule(P1_AGAIN, images.img1, checks.LAYER_LOCALITY)
    explained = json.loads(_explain(inventory, "-o", "json"))
    assert explained["verdict"] == "scored", explained
    assert explained["node"] == placed.node
    img1 = checks.layer_bytes(report, *checks.IMG1_LAYERS)
    (holder,) = [node for node in explained["nodes"] if node["node"] == ran]
    assert (holder["present_bytes"], holder["missing_bytes"], holder["total_bytes"]) == (
        img1,
        0,
        img1,
    )
    (other,) = [node for node in explained["nodes"] if node["node"] != ran]
    assert other["present_bytes"] in (checks.layer_bytes(report, "L1", "L2"), 0), other
    assert other["missing_bytes"] == img1 - other["present_bytes"]
    # the extender's scores are the spread formula's (on, as installed): when the other
    # node holds L1+L2 (41.96 of Img1's 46.15 MB) and L3 sits on two of the three nodes
    # (P1's and the holder), the holder weighs 97% and the other 91%: both 9 on the
    # extender's 0..10 scale; when the other is empty, 6 against 0
    expected = _spread_score(report, l3_holders=2, other_holds=other["present_bytes"])
    assert (holder["score"], other["score"]) == expected, (holder, other)
    # where kube-scheduler bound it is its sum with the default plugins (spread keeps the
    # extender's margin small on three nodes: 2026-11-29, 3acd426, the pod went to the
    # other node once); explain says which it was
    placed_score = holder["score"] if placed.node == ran else other["score"]
    if placed_score < max(expected):
        assert "other scores outweighed it" in explained["why"], explained
    else:
        assert "had its highest score" in explained["why"], explained
    _fits(_explain(inventory), "explain pod", scenario_report_dir)


#: The service account an exec credential plugin speaks for (a cloud's IAM user, here).
EXEC_USER_ACCOUNT = "layersched-e2e-estimator"
EXEC_USER_NAMESPACE = "default"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
#: What estimate and explain pod read: nothing more (deploy render auto is refused).
EXEC_USER_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "pods", "events"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create"]},
]
CREDENTIAL_PLUGIN = """#!/bin/sh
# a credential plugin as kubectl runs one: an ExecCredential on stdout
printf '%s\\n' "$KUBERNETES_EXEC_INFO" >> {calls}
printf '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
printf '"status":{{"token":"%s"}}}}\\n' "$(cat {token})"
"""


def _exec_user(inventory: TestbedState, directory: Path) -> Path:
    """A kubeconfig file that adds, to the testbed's, a context ``exec-user`` whose user
    authenticates with an exec plugin returning a service account's token (bound to
    :data:`EXEC_USER_RULES`), in namespace layersched-scenario."""
    account = f"/api/v1/namespaces/{EXEC_USER_NAMESPACE}/serviceaccounts"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": EXEC_USER_ACCOUNT}}
    with _admin(inventory) as kube:
        kube.apply(
            f"{account}/{EXEC_USER_ACCOUNT}",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": EXEC_USER_ACCOUNT}},
            "layersched-e2e",
        )
        kube.apply(
            f"{RBAC}/clusterroles/{EXEC_USER_ACCOUNT}",
            {**role, "kind": "ClusterRole", "rules": EXEC_USER_RULES},
            "layersched-e2e",
        )
        subject = {"kind": "ServiceAccount", "name": EXEC_USER_ACCOUNT}
        kube.apply(
            f"{RBAC}/clusterrolebindings/{EXEC_USER_ACCOUNT}",
            {
                **role,
                "kind": "ClusterRoleBinding",
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
                | {"name": EXEC_USER_ACCOUNT},
                "subjects": [subject | {"namespace": EXEC_USER_NAMESPACE}],
            },
            "layersched-e2e",
        )
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
        answer = kube.create(
            f"{account}/{EXEC_USER_ACCOUNT}/token", request | {"spec": {"expirationSeconds": 600}}
        )
    token = directory / "token"
    token.write_text(answer["status"]["token"])
    plugin = directory / "credential-plugin"
    plugin.write_text(CREDENTIAL_PLUGIN.format(calls=directory / "calls", token=token))
    plugin.chmod(0o700)
    testbed = yaml.safe_load(Path(inventory.cluster.kubeconfig).read_text())
    current = next(c for c in testbed["contexts"] if c["name"] == testbed["current-context"])
    exec_user = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "exec-user",  # the first file's current-context wins, as kubectl's
        "contexts": [
            {
                "name": "exec-user",
                "context": {
                    "cluster": current["context"]["cluster"],
                    "user": "exec-user",
                    "namespace": "layersched-scenario",
                },
            }
        ],
        "users": [
            {
                "name": "exec-user",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": str(plugin),
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
    }
    path = directory / "exec-user.kubeconfig"
    path.write_text(yaml.safe_dump(exec_user))
    return path


def _as_user(kubeconfig: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``layersched ARGV`` with ``$KUBECONFIG`` (no --kubeconfig), as a user's shell runs it."""
    env = {**os.environ, "KUBECONFIG": kubeconfig, "COLUMNS": str(TERMINAL_COLUMNS)}
    cmd = [sys.executable, "-m", "layersched.cli.main", *argv]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env, check=False
    )


def test_estimate_and_explain_as_an_exec_plugin_user(scenario_run: Run, tmp_path: Path) -> None:
    _, _, _, inventory = scenario_run
    exec_user = _exec_user(inventory, tmp_path)
    merged = f"{inventory.cluster.kubeconfig}{os.pathsep}{exec_user}"
    registry = ("--insecure-registry", inventory.registry.host)
    try:
        # the current context (the first file's): the testbed's admin, no plugin run
        done = _as_user(merged, "estimate", *registry, "-n", "layersched-scenario", "-o", "json")
        assert done.returncode == 0, done.stderr
        assert not (tmp_path / "calls").exists()
        # --context exec-user: the plugin runs (told its API version), its token is used
        done = _as_user(merged, "estimate", "--context", "exec-user", *registry, "-o", "yaml")
        assert done.returncode == 0, done.stderr
        assert "layersched-scenario/p1-again" in done.stdout and "complete: true" in done.stdout
        info = json.loads((tmp_path / "calls").read_text().splitlines()[0])
        assert info["apiVersion"] == "client.authentication.k8s.io/v1"
        # explain: the bare name is in the context's namespace
        url = inventory.cluster.extender.url
        explain = ("explain", "pod", "p1-again", "--context", "exec-user", "--extender-url", url)
        done = _as_user(merged, *explain, "-o", "json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["pod"] == SCENARIO_POD
        # the identity is the plugin's: what its role does not grant is refused, by name
        render = ("deploy", "render", "--kubernetes-version", "auto", "--context", "exec-user")
        done = _as_user(merged, *render, "--dir", str(tmp_path / "install"))
        account = f"system:serviceaccount:{EXEC_USER_NAMESPACE}:{EXEC_USER_ACCOUNT}"
        assert done.returncode == 1 and account in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    finally:
        with _admin(inventory) as kube:
            for path in (
                f"{RBAC}/clusterrolebindings/{EXEC_USER_ACCOUNT}",
                f"{RBAC}/clusterroles/{EXEC_USER_ACCOUNT}",
                f"/api/v1/namespaces/{EXEC_USER_NAMESPACE}/serviceaccounts/{EXEC_USER_ACCOUNT}",
            ):
                kube.delete(path)


def test_report_has_every_trial(scenario_run: Run) -> None:
    report, nodes, trials, _ = scenario_run
    check_report(report, "local", trials, nodes, LOCAL_STRATEGIES)


def test_the_real_schedulers_and_kubelets_ran_it(scenario_run: Run) -> None:
    report, _, _, inventory = scenario_run
    cluster = inventory.cluster
    schedulers = {strategy: s.name for strategy, s in cluster.schedulers.items()}
    check_real_cluster(report, schedulers, cluster.kubernetes_version)


def test_pull_times_agree_with_the_registry_bytes(scenario_run: Run) -> None:
    check_pull_times_against_the_link(scenario_run[0])


def test_layer_locality_reuses_p2s_node_every_trial(
    scenario_run: Run,
) -> None:
    check_layer_locality(scenario_run[0])


def test_the_plugin_reuses_p2s_node_every_trial(scenario_run: Run) -> None:
    # the same checks as the extender's column, on the LayerLocality plugin's scheduler
    check_layer_locality(scenario_run[0], LAYER_LOCALITY_PLUGIN)


def test_the_plugins_real_scores_are_the_python_cores(scenario_run: Run) -> None:
    check_plugin_scores_are_the_cores(scenario_run[0])


def test_the_plugin_indexed_every_nodes_inventory(scenario_run: Run) -> None:
    _report, nodes, _, inventory = scenario_run
    cluster = inventory.cluster
    daemon = next(d for d in cluster.control_plane if d.name == "scheduler-layer-locality-plugin")
    context = ssl.create_default_context(cafile=cluster.ca_file)
    context.load_cert_chain(cluster.admin_cert, cluster.admin_key)
    metrics = httpx.get(
        daemon.health_url.replace("/healthz", "/metrics"), verify=context, timeout=API_TIMEOUT_S
    ).text
    # every node's agent published, the plugin watched them all, and never scored a node
    # without one (the metric is registered only once the plugin starts: 0.0 if absent)
    assert _metric(metrics, "layersched_layer_locality_inventory_nodes") == len(nodes)
    assert _metric(metrics, "layersched_layer_locality_nodes_without_inventory_total") == 0
    assert _metric(metrics, "layersched_layer_locality_invalid_inventories_total") == 0


def _scheduler_metrics(inventory: TestbedState, daemon_name: str) -> str:
    """A testbed scheduler's /metrics, read with the admin's certificate."""
    cluster = inventory.cluster
    daemon = next(d for d in cluster.control_plane if d.name == daemon_name)
    context = ssl.create_default_context(cafile=cluster.ca_file)
    context.load_cert_chain(cluster.admin_cert, cluster.admin_key)
    url = daemon.health_url.replace("/healthz", "/metrics")
    return httpx.get(url, verify=context, timeout=API_TIMEOUT_S).text


def _batch_attempts(metrics: str, profile: str) -> dict[str, float]:
    """scheduler_batch_attempts_total of ``profile``, by result: ``no_hint``, or, where the
    profile signs pods and the previous pod of the same signature left scores to reuse,
    ``hint_used`` / ``hint_not_used``."""
    pattern = re.compile(
        r'^scheduler_batch_attempts_total\{profile="'
        + re.escape(profile)
        + r'",result="([^"]+)"\} (\S+)$',
        re.M,
    )
    return {result: float(value) for result, value in pattern.findall(metrics)}


#: Where the batch pods run.
NAMESPACE = "default"
#: Pods that fit one per node (each takes the same host port, and asks nothing else: the
#: scenario's pods may still hold the nodes' CPU), so that after one is bound to the best
#: node the next can reuse the rest of the ranking (KEP-5598's condition).
BATCH_PODS = 3
BATCH_HOST_PORT = 29_999
BATCH_TIMEOUT_S = 60.0


def _schedule_alike_pods(inventory: TestbedState, scheduler: str) -> None:
    """BATCH_PODS pods of one signature (the sandbox image every node holds) through
    ``scheduler``, created at once; returns once all are bound, and deletes them."""
    names = [f"batch-{scheduler}-{i}" for i in range(BATCH_PODS)]
    with _admin(inventory) as kube:
        for name in names:
            kube.create(
                pods_path(NAMESPACE),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {
                        "schedulerName": scheduler,
                        "terminationGracePeriodSeconds": 0,
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "c",
                                "image": DEFAULT_PAUSE_IMAGE,
                                "imagePullPolicy": "Never",
                                "ports": [
                                    {"containerPort": BATCH_HOST_PORT, "hostPort": BATCH_HOST_PORT}
                                ],
                            }
                        ],
                    },
                },
            )
        try:

            @tenacity.retry(
                stop=tenacity.stop_after_delay(BATCH_TIMEOUT_S),
                wait=tenacity.wait_fixed(0.5),
                reraise=True,
            )
            def bound() -> None:
                for name in names:
                    assert kube.get(pod_path(NAMESPACE, name))["spec"].get("nodeName"), name

            bound()
        finally:
            for name in names:
                kube.delete(pod_path(NAMESPACE, name), grace_period_s=0)


def test_batching_stays_on_with_the_plugin(scenario_run: Run) -> None:
    # Opportunistic batching (KEP-5598, on by default from 1.35) reuses a pod's ranking
    # for the next pod of the same signature, but only in a profile whose every Filter
    # and Score plugin signs pods. LayerLocality signs them: its profile gives hints. The
    # extender's profile, which batching does not serve, gives none (the control)
    _report, _, _, inventory = scenario_run
    counted = {}
    for daemon, profile in (
        ("scheduler-layer-locality-plugin", LAYER_LOCALITY_PLUGIN),
        ("scheduler-layer-locality", LAYER_LOCALITY),
    ):
        before = _batch_attempts(_scheduler_metrics(inventory, daemon), profile)
        _schedule_alike_pods(inventory, profile)
        after = _batch_attempts(_scheduler_metrics(inventory, daemon), profile)
        counted[profile] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    print(f"batch attempts per profile: {counted}")
    plugin, extender = counted[LAYER_LOCALITY_PLUGIN], counted[LAYER_LOCALITY]
    assert plugin.get("hint_used", 0) + plugin.get("hint_not_used", 0) > 0, plugin
    assert extender.get("hint_used", 0) + extender.get("hint_not_used", 0) == 0, extender
    # and the framework never said it turned signing off for the plugin's profile
    log = Path(inventory.cluster.schedulers[LAYER_LOCALITY_PLUGIN].log).read_text()
    profile = f'profile="{LAYER_LOCALITY_PLUGIN}"'
    disabled = [line for line in log.splitlines() if "Disabling signatures" in line]
    assert not [line for line in disabled if profile in line], disabled


def test_image_locality_ties_p2s_node_and_the_empty_one(
    scenario_run: Run,
) -> None:
    check_image_locality_tie(scenario_run[0])


def test_pulls_transfer_exactly_the_missing_layers(
    scenario_run: Run,
) -> None:
    check_pull_bytes(scenario_run[0])


# ---------------------------------------------------------------- the live inventory
# layer-locality runs in NodeNames mode: kube-scheduler sends names only, and the
# extender scores from what the node agents published (NodeLayerInventory), watched.
#: A pull or removal reaches the extender's inventory within this (agent: containerd event,
#: 0.2 s debounce, one apply; extender: one watch event). The kubelet's status.images
#: lags by up to its sync period plus a status post.
INVENTORY_LAG_BOUND_S = 10.0
#: The API server restarts in seconds; its watchers reconnect with back-off.
RESYNC_TIMEOUT_S = 90.0
LIVE_POLL_S = 0.2
API_TIMEOUT_S = 10.0


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples in a Prometheus text page (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


def _extender_get(inventory: TestbedState, path: str, **params: str) -> httpx.Response:
    return httpx.get(
        f"{inventory.cluster.extender.url}{path}", params=params, timeout=API_TIMEOUT_S
    )


def _admin(inventory: TestbedState) -> KubeClient:
    return KubeClient(load_kubeconfig(inventory.cluster.kubeconfig))


def _held(inventory: TestbedState, node: str) -> list[str]:
    response = _extender_get(inventory, "/debug/inventory", node=node)
    assert response.status_code == httpx.codes.OK, response.text
    images: list[str] = response.json()["images"]
    return images


def _wait(check: Callable[[], None], timeout_s: float, poll_s: float = LIVE_POLL_S) -> None:
    tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(poll_s),
        retry=tenacity.retry_if_exception_type(AssertionError),
        reraise=True,
    )(check)()


def test_layer_locality_ran_on_node_names_fed_by_agents(scenario_run: Run) -> None:
    _report, nodes, _trials, inventory = scenario_run
    config_path = Path(inventory.state_dir) / "control-plane" / "scheduler-layer-locality.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert [e["nodeCacheCapable"] for e in config["extenders"]] == [True]
    metrics = _extender_get(inventory, "/metrics").text
    # every node's layers came from its agent: not one node image went to a registry
    assert _metric(metrics, "layersched_extender_watch_nodes_with_layers") == len(nodes)
    assert _metric(metrics, "layersched_extender_watch_node_image_resolutions_total") == 0
    # P1-again's image is on one node (P1's) when it is scored: under the image quorum
    # (--image-quorum 2, docs/inventory.md "Trust model") one node's word does not make a
    # pod image's layers, so the registry resolves it, and the inventory answers only once
    # two nodes agree (an image-locality trial may have pulled Img1 to a second node): how
    # often it did is not fixed, so no count of pod_images_from_inventory is asserted
    with _admin(inventory) as kube:
        published, _ = kube.list(NODE_LAYERS_PATH)
    assert sorted(o["metadata"]["name"] for o in published) == sorted(nodes)
    # each agent read its own runtime's store: containerd's content store, or CRI-O's
    # containers/storage on a CRI-O node (LAYERSCHED_TESTBED_RUNTIMES)
    sources = {"containerd": "content-store", "crio": "crio-storage"}
    assert {o["metadata"]["name"]: o["source"] for o in published} == {
        node.name: sources[node.runtime] for node in inventory.nodes
    }
    assert {o["metadata"]["ownerReferences"][0]["kind"] for o in published} == {"Node"}


def test_the_inventory_is_fresher_than_node_status(scenario_run: Run) -> None:
    report = scenario_run[0]
    trials = scenario_run[2]
    inventory_lag = report["inventory_lag_s"]
    status_lag = report["status_images_lag_s"]
    # one measurement per trial of every strategy: P2's pull
    assert inventory_lag["count"] == len(report["strategies"]) * trials
    assert inventory_lag["max"] <= INVENTORY_LAG_BOUND_S
    assert inventory_lag["mean"] < status_lag["mean"]


def test_an_image_removed_leaves_the_inventory_promptly(scenario_run: Run) -> None:
    report, _, _, inventory = scenario_run
    node = inventory.nodes[0]
    image = report["images"]["Img2"]
    with CRIClient(node.cri_endpoint, pull_timeout_s=600) as cri:
        cri.pull_image(image)
        pulled = time.monotonic()
        _wait(lambda: _assert_held(inventory, node.name, image, True), INVENTORY_LAG_BOUND_S)
        listed_s = time.monotonic() - pulled
        cri.remove_image(image)
        removed = time.monotonic()
        _wait(lambda: _assert_held(inventory, node.name, image, False), INVENTORY_LAG_BOUND_S)
        gone_s = time.monotonic() - removed
    print(f"inventory: listed {listed_s:.2f} s after the pull, gone {gone_s:.2f} s after removal")


def _assert_held(inventory: TestbedState, node: str, image: str, held: bool) -> None:
    assert (image in _held(inventory, node)) is held


def test_a_restarted_agent_republishes_without_duplicates(scenario_run: Run) -> None:
    _, nodes, _, inventory = scenario_run
    agent = inventory.cluster.agents[0]
    with _admin(inventory) as kube:
        before = kube.get(node_layers_path(agent.node))
        pid = int(Path(agent.pidfile).read_text())
        os.kill(pid, signal.SIGKILL)
        assert kube.delete(node_layers_path(agent.node)) is True
        # the testbed's bring-up is the DaemonSet: it starts what is not running
        result = up(testbed_settings(Path(inventory.state_dir)))
        assert result.ok, f"testbed up failed: see {result.log_path}"
        after = kube.get(node_layers_path(agent.node))
        published, _ = kube.list(NODE_LAYERS_PATH)
    assert sorted(o["metadata"]["name"] for o in published) == sorted(nodes)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    assert after["images"] == before["images"] and after["layers"] == before["layers"]


def test_a_malformed_object_is_refused_or_ignored(scenario_run: Run) -> None:
    _, nodes, _, inventory = scenario_run
    victim, other = sorted(nodes)[:2]
    others_before = _held(inventory, other)
    with _admin(inventory) as kube:
        good = kube.get(node_layers_path(victim))
        # the schema refuses a negative size, naming the field
        bad_size = {k: good[k] for k in ("apiVersion", "kind", "layers", "images")}
        bad_size["metadata"] = {"name": victim}
        bad_size["layers"] = [dict(good["layers"][0], sizeBytes=-1), *good["layers"][1:]]
        with pytest.raises(KubeError, match="sizeBytes"):
            kube.apply(node_layers_path(victim), bad_size, "e2e-tamper")
        # an index the schema cannot check: stored, then ignored for that node only
        broken = dict(bad_size, layers=good["layers"])
        broken["images"] = [dict(good["images"][0], layers=[len(good["layers"]) + 5])]
        kube.apply(node_layers_path(victim), broken, "e2e-tamper")
        log = Path(inventory.cluster.extender.log)
        _wait(
            lambda: _assert_in(log, f"ignoring the layers published for node {victim}"),
            INVENTORY_LAG_BOUND_S,
        )
        assert _held(inventory, other) == others_before  # the other nodes are untouched
        # the agent's watch sees another writer's object and republishes its own at once
        # (timed below, in test_an_object_changed_behind_its_agents_back_is_repaired);
        # the test restores the object too, not to depend on that here
        kube.apply(
            node_layers_path(victim), {**good, "metadata": {"name": victim}}, "layersched-agent"
        )


def _assert_in(path: Path, text: str) -> None:
    assert text in path.read_text(errors="replace")


# ------------------------------------------- the per-node guard and repairs (issue 35)
# The testbed runs install/kustomize/'s per-node guard (the ValidatingAdmissionPolicy, generated for
# the host agents' namespace) and its agents authenticate with tokens bound to their Node
# (docs/testbed-local.md). These need the cluster, not the scenario's report: run alone,
# on a testbed that is up, they bring nothing up.
#: An agent republishes an object another writer changed within this (issue 35's bound;
#: measured: well under a second).
REPAIR_BOUND_S = 10.0
#: Tampering rounds, the three causes in turn (stale, changed, deleted).
REPAIR_ROUNDS = 6
REPAIR_POLL_S = 0.02
STALE_STAMP = "2020-01-01T00:00:00Z"
#: The agents' identity on the testbed (the k8s_control_plane role's defaults).
AGENT_NAMESPACE = "layersched-testbed"
AGENT_ACCOUNT = "layersched-agent"
AGENT_TOKEN_LIFE_S = 3600
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
SELF_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SELF_REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


@pytest.fixture(scope="module")
def live_testbed() -> Iterator[TestbedState]:
    """The testbed as it is (brought up, and down after, only when it is not up)."""
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    with testbed_up(testbed_settings(), refresh=False) as inventory:
        yield inventory


def _agent_config(inventory: TestbedState, node: str) -> KubeConfig:
    [agent] = [a for a in inventory.cluster.agents if a.node == node]
    assert agent.kubeconfig, "the inventory names no agent credentials: re-run testbed up"
    return load_kubeconfig(agent.kubeconfig)


#: The uid a Node that does not exist is claimed with.
GHOST_UID = "00000000-0000-0000-0000-000000000000"


def _written_by_another(
    source: dict[str, Any], name: str, node_uids: dict[str, str]
) -> dict[str, Any]:
    """``source`` (a node's object) rewritten as ``name``'s, owned by Node ``name`` (its
    uid read from the API: an earlier test may have left ``source`` with no owner)."""
    owner = {"apiVersion": "v1", "kind": "Node", "name": name}
    owner["uid"] = node_uids.get(name, GHOST_UID)
    body = {k: v for k, v in source.items() if k not in ("metadata", "status")}
    return {**body, "metadata": {"name": name, "ownerReferences": [owner]}}


def test_an_agents_token_is_refused_other_nodes_objects(live_testbed: TestbedState) -> None:
    # Issue 35's attack with node n1's real agent credentials: the token its agent runs
    # with. The API server knows it as the agents' account on node n1 (the Node the token
    # is bound to), and the policy refuses it n2's object and one for a node that does not
    # exist; n1's own object it may write (so the refusals are the guard's, not RBAC's).
    inventory = live_testbed
    first, second = sorted(node.name for node in inventory.nodes)[:2]
    with _admin(inventory) as admin:
        own = admin.get(node_layers_path(first))
        other_before = admin.get(node_layers_path(second))
        node_uids = {
            n: str(admin.get(f"/api/v1/nodes/{n}")["metadata"]["uid"]) for n in (first, second)
        }
    config = _agent_config(inventory, first)
    with KubeClient(config) as kube:
        review = kube.create(SELF_REVIEW_PATH, SELF_REVIEW)
        user = review["status"]["userInfo"]
        assert user["username"] == f"system:serviceaccount:{AGENT_NAMESPACE}:{AGENT_ACCOUNT}"
        assert user["extra"][NODE_NAME_EXTRA] == [first]
        for target in (second, "ghost"):
            with pytest.raises(KubeError) as refused:
                kube.apply(
                    node_layers_path(target),
                    _written_by_another(own, target, node_uids),
                    "layersched-agent",
                )
            assert refused.value.status == 403, str(refused.value)
            assert (
                f"on node {first} may write only its own node's NodeLayerInventory, not {target}"
                in str(refused.value)
            )
        kube.apply(
            node_layers_path(first), _written_by_another(own, first, node_uids), "layersched-agent"
        )
    with _admin(inventory) as admin:
        assert admin.get(node_layers_path(second))["layers"] == other_before["layers"]
        with pytest.raises(KubeError) as absent:
            admin.get(node_layers_path("ghost"))
        assert absent.value.status == 404
    # nor can a token be had for a Node that does not exist (the issuer's own right)
    issuer_file = Path(inventory.state_dir, "control-plane", "agent-token-issuer.kubeconfig")
    issuer = load_kubeconfig(str(issuer_file))
    with KubeClient(issuer) as kube, pytest.raises(KubeError) as unissued:
        kube.create(token_request_path(AGENT_NAMESPACE, AGENT_ACCOUNT), token_request("ghost", 600))
    assert unissued.value.status == 404
    # the token the agent holds is an hour's, alive, kept by the refresher
    assert config.token_file is not None
    lifetime = token_lifetime(Path(config.token_file).read_text())
    assert lifetime is not None
    issued, expires = lifetime
    assert expires - issued == AGENT_TOKEN_LIFE_S and expires > time.time()


def _pod(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "repair-probe", "namespace": "default", "uid": "repair-probe"},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }


def _scores(inventory: TestbedState, nodes: list[str]) -> dict[str, int]:
    """What the extender's /prioritize answers for a pod of the image every node holds."""
    body = {"Pod": _pod(DEFAULT_PAUSE_IMAGE), "Nodes": None, "NodeNames": nodes}
    response = httpx.post(
        f"{inventory.cluster.extender.url}/prioritize", json=body, timeout=API_TIMEOUT_S
    )
    assert response.status_code == httpx.codes.OK, response.text
    return {entry["Host"]: entry["Score"] for entry in response.json()}


def _tamper(kube: KubeClient, path: str, cause: str) -> None:
    if cause == "stale":
        kube.patch(path, {"observedAt": STALE_STAMP})
    elif cause == "changed":
        kube.patch(path, {"images": [], "layers": []})
    else:
        assert kube.delete(path)


def test_an_object_changed_behind_its_agents_back_is_repaired(
    live_testbed: TestbedState, scenario_report_dir: Path
) -> None:
    # An admin sets a node's object stale, empties it, or deletes it: its agent's watch
    # sees the write and republishes the truth, and the extender scores the node again
    # for an image it holds (the pause image: every node holds it). Each repair is timed
    # from just before the write.
    inventory = live_testbed
    nodes = sorted(node.name for node in inventory.nodes)
    victim = nodes[1]
    path = node_layers_path(victim)
    baseline = _scores(inventory, nodes)
    assert baseline[victim] > 0 and baseline[victim] == max(baseline.values()), baseline
    [agent] = [a for a in inventory.cluster.agents if a.node == victim]
    log = Path(agent.log)
    logged_before = log.read_text(errors="replace").count("behind the agent's back")
    rounds: list[dict[str, Any]] = []
    with _admin(inventory) as admin:
        truth = admin.get(path)
        # the control: with the agent paused, the stale object costs the node its score
        # (issue 35's n1 10, n2 0, n3 10); resumed, the agent puts it back
        pid = int(Path(agent.pidfile).read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            _tamper(admin, path, "stale")
            _wait(lambda: _assert_score(inventory, nodes, victim, 0), REPAIR_BOUND_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait(lambda: _assert_score(inventory, nodes, victim, baseline[victim]), REPAIR_BOUND_S)
        for n in range(REPAIR_ROUNDS):
            cause = ("stale", "changed", "deleted")[n % 3]
            started = time.monotonic()
            _tamper(admin, path, cause)

            def repaired() -> None:
                try:
                    current = admin.get(path)
                except KubeError as err:
                    raise AssertionError(f"not there: {err}") from err
                assert current["observedAt"] != STALE_STAMP
                assert current["layers"] == truth["layers"]
                assert current["images"] == truth["images"]

            _wait(repaired, REPAIR_BOUND_S, REPAIR_POLL_S)
            repair_s = time.monotonic() - started
            _wait(lambda: _assert_score(inventory, nodes, victim, baseline[victim]), REPAIR_BOUND_S)
            rounds.append(
                {
                    "cause": cause,
                    "repair_s": round(repair_s, 3),
                    "score_back_s": round(time.monotonic() - started, 3),
                }
            )
    repairs = sorted(r["repair_s"] for r in rounds)
    print(f"\nrepairs of {victim}'s object: {rounds}")
    median = repairs[len(repairs) // 2]
    print(
        f"repair latency: min {repairs[0]:.3f} s, median {median:.3f} s, "
        f"max {repairs[-1]:.3f} s over {len(repairs)} rounds"
    )
    (scenario_report_dir / "repairs.json").write_text(json.dumps(rounds, indent=2) + "\n")
    assert repairs[-1] <= REPAIR_BOUND_S
    # each repair logged by the victim's agent, naming the cause
    _wait(
        lambda: _assert_logged(log, logged_before + 1 + REPAIR_ROUNDS, victim),
        INVENTORY_LAG_BOUND_S,
    )


def _assert_score(inventory: TestbedState, nodes: list[str], node: str, score: int) -> None:
    assert _scores(inventory, nodes)[node] == score


def _assert_logged(log: Path, count: int, node: str) -> None:
    text = log.read_text(errors="replace")
    assert text.count("behind the agent's back") == count
    for cause in ("set stale by", "changed by", "deleted behind"):
        assert f"node {node}: its NodeLayerInventory was {cause}" in text, cause


def test_an_api_server_restart_is_ridden_out(scenario_run: Run) -> None:
    _report, nodes, _, inventory = scenario_run
    apiserver = next(d for d in inventory.cluster.control_plane if d.name == "kube-apiserver")
    held_before = {node: _held(inventory, node) for node in nodes}
    os.kill(int(Path(apiserver.pidfile).read_text()), signal.SIGTERM)

    def stale() -> None:
        response = _extender_get(inventory, "/readyz")
        assert response.status_code == httpx.codes.OK  # still serving its inventory
        assert "re-syncing" in response.text

    _wait(stale, RESYNC_TIMEOUT_S)
    # it keeps answering NodeNames requests from what it holds
    assert {node: _held(inventory, node) for node in nodes} == held_before
    result = up(testbed_settings(Path(inventory.state_dir)))
    assert result.ok, f"testbed up failed: see {result.log_path}"

    def watching() -> None:
        response = _extender_get(inventory, "/readyz")
        assert response.status_code == httpx.codes.OK
        assert response.text.count("watching at resourceVersion") == 2, response.text

    _wait(watching, RESYNC_TIMEOUT_S)
