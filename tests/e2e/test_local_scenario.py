"""The seed's two-image, three-node scenario on the local testbed's real cluster.

Real registry, real containerd nodes behind rate-limited links, a real Kubernetes
v1.20.2 control plane (three kube-schedulers: upstream image-locality, the default
plugins plus the layersched extender, and the default plugins plus layersched's
LayerLocality score plugin) and real kubelets; nothing is simulated. Needs
root on Linux, else it skips with the reason. ``LAYERSCHED_E2E_TRIALS`` sets the trials
per strategy (default 5). The report and plot go to a temp dir (see conftest.py), never
over the committed ``reports/``; the table is printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity
import yaml

from layersched.core.errors import KubeError, TestbedError
from layersched.cri import CRIClient
from layersched.kube import NODE_LAYERS_PATH, KubeClient, load_kubeconfig, node_layers_path
from layersched.testbed.local import (
    TestbedInventory,
    TestbedSettings,
    default_state_dir,
    require_root,
    up,
)
from tests.e2e._checks import (
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
from tests.fixtures.testbed import testbed_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: (report, the testbed's node names, trials per strategy, inventory)
Run = tuple[dict[str, Any], set[str], int, TestbedInventory]

#: The scenario runs K trials x 3 strategies, each pulling ~100 MiB at 20 Mbit/s.
SCENARIO_TIMEOUT_S = 40 * 60


@pytest.fixture(scope="module")
def scenario_run(
    scenario_report_dir: Path,
    record_scenario_report: Callable[[Path, Mapping[str, Any]], None],
) -> Iterator[tuple[dict[str, Any], set[str], int, TestbedInventory]]:
    """(report, the testbed's node names, trials per strategy, inventory) of one run."""
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    trials = trials_from_env()
    report_path = scenario_report_dir / "scenario.json"
    with testbed_up(TestbedSettings(state_dir=default_state_dir())) as inventory:
        nodes = {node.name for node in inventory.nodes}
        cmd = [sys.executable, "-m", "layersched.cli.main", "scenario"]
        cmd += ["--trials", str(trials), "--report", str(report_path)]
        done = subprocess.run(cmd, timeout=SCENARIO_TIMEOUT_S, check=False)
        assert done.returncode == 0, "layersched scenario failed (its output is above)"
        report = json.loads(report_path.read_text())
        record_scenario_report(report_path, report)
        yield report, nodes, trials, inventory


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


def _extender_get(inventory: TestbedInventory, path: str, **params: str) -> httpx.Response:
    return httpx.get(
        f"{inventory.cluster.extender.url}{path}", params=params, timeout=API_TIMEOUT_S
    )


def _admin(inventory: TestbedInventory) -> KubeClient:
    return KubeClient(load_kubeconfig(inventory.cluster.kubeconfig))


def _held(inventory: TestbedInventory, node: str) -> list[str]:
    response = _extender_get(inventory, "/debug/inventory", node=node)
    assert response.status_code == httpx.codes.OK, response.text
    images: list[str] = response.json()["images"]
    return images


def _wait(check: Callable[[], None], timeout_s: float) -> None:
    tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(LIVE_POLL_S),
        retry=tenacity.retry_if_exception_type(AssertionError),
        reraise=True,
    )(check)()


def test_layer_locality_ran_on_node_names_fed_by_agents(scenario_run: Run) -> None:
    _report, nodes, trials, inventory = scenario_run
    config_path = Path(inventory.state_dir) / "control-plane" / "scheduler-layer-locality.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert [e["nodeCacheCapable"] for e in config["extenders"]] == [True]
    metrics = _extender_get(inventory, "/metrics").text
    # every node's layers came from its agent: not one node image went to a registry
    assert _metric(metrics, "layersched_extender_watch_nodes_with_layers") == len(nodes)
    assert _metric(metrics, "layersched_extender_watch_node_image_resolutions_total") == 0
    # P1-again's image was on P1's node: resolved from the inventory, every trial
    assert _metric(metrics, "layersched_extender_pod_images_from_inventory_total") >= trials
    with _admin(inventory) as kube:
        published, _ = kube.list(NODE_LAYERS_PATH)
    assert sorted(o["metadata"]["name"] for o in published) == sorted(nodes)
    assert {o["source"] for o in published} == {"content-store"}
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


def _assert_held(inventory: TestbedInventory, node: str, image: str, held: bool) -> None:
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
        result = up(TestbedSettings(state_dir=Path(inventory.state_dir)))
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
        # the agent's next resync (60 s) notices the object is not what it applied and
        # puts it right; the test does not wait: it restores the object itself
        kube.apply(
            node_layers_path(victim), {**good, "metadata": {"name": victim}}, "layersched-agent"
        )


def _assert_in(path: Path, text: str) -> None:
    assert text in path.read_text(errors="replace")


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
    result = up(TestbedSettings(state_dir=Path(inventory.state_dir)))
    assert result.ok, f"testbed up failed: see {result.log_path}"

    def watching() -> None:
        response = _extender_get(inventory, "/readyz")
        assert response.status_code == httpx.codes.OK
        assert response.text.count("watching at resourceVersion") == 2, response.text

    _wait(watching, RESYNC_TIMEOUT_S)
