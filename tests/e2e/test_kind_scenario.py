"""The seed's scenario on the kind + CRI-O testbed, through the Kubernetes API.

Same steps, assertions and ``harness/results/scenario.json`` schema as the local
driver, with ``"driver": "kind"``: here kube-scheduler (default vs.
``layer-locality`` with the layersched extender) really schedules and CRI-O
really pulls through the rate-limited registry.

Needs Docker, kind, kubectl and the pulumi CLI (a Docker+internet machine).
Without them it skips, saying which are missing. The testbed comes from the
Pulumi stack ``$LAYERSCHED_KIND_STACK`` (default ``dev``); if that stack is not
up, the test provisions it with ``harness/infra/kind/kind.sh provision`` and tears it down
afterwards (logs exported first) unless ``LAYERSCHED_KEEP_TESTBED=1``. The test
never creates a cluster by itself: when the stack has outputs but its kind cluster
is gone, it fails saying how to recover.

The assertions are the local driver's (``tests/e2e/_checks.py``), with
``LAYERSCHED_E2E_TRIALS`` trials per strategy (default 5). The report and plot go
to a temp dir or ``$LAYERSCHED_E2E_REPORT_DIR`` (see conftest.py; harness/infra/kind/kind.sh up
points it at harness/results/).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from layersched_harness.testbed.scenario import ScenarioImages, report, run_scenario
from tests.e2e._checks import (
    STRATEGIES,
    check_image_locality_tie,
    check_layer_locality,
    check_pull_bytes,
    check_report,
    trials_from_env,
)
from tests.fixtures import prereq

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

REPO = Path(__file__).resolve().parents[2]
PROGRAM_DIR = REPO / "harness" / "infra" / "kind"
#: pulumi up of the whole testbed (node image build, cluster, deploy) on a laptop.
PROVISION_TIMEOUT_S = 45 * 60
#: Short CLI calls (docker info, pulumi stack output).
CLI_TIMEOUT_S = 120
TOOLS = ("docker", "kind", "kubectl", "pulumi")


def _tools() -> dict[str, Path]:
    found = {tool: shutil.which(tool) for tool in TOOLS}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        prereq.unavailable(
            f"docker/kind/pulumi not found on PATH (missing: {', '.join(missing)}): the kind "
            "testbed runs on a machine with Docker, kind, kubectl and the pulumi CLI; "
            "see docs/kind.md"
        )
    tools = {tool: Path(path).resolve() for tool, path in found.items() if path}
    info = subprocess.run(
        [str(tools["docker"]), "info"], capture_output=True, timeout=CLI_TIMEOUT_S, check=False
    )
    if info.returncode != 0:
        prereq.unavailable("docker daemon not reachable (docker info failed): start Docker first")
    return tools


def _stack_outputs(pulumi: Path, stack: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(pulumi), "stack", "output", "--json", "--stack", stack],
        cwd=PROGRAM_DIR,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    outputs: dict[str, Any] = json.loads(done.stdout) if done.returncode == 0 else {}
    return outputs


@pytest.fixture(scope="module")
def testbed() -> Iterator[tuple[dict[str, Path], dict[str, Any]]]:
    tools = _tools()
    stack = os.environ.get("LAYERSCHED_KIND_STACK", "dev")
    outputs = _stack_outputs(tools["pulumi"], stack)
    created = False
    if not outputs.get("kubeconfig_path"):
        subprocess.run(
            [str(REPO / "harness" / "infra" / "kind" / "kind.sh"), "provision"],
            cwd=REPO,
            check=True,
            timeout=PROVISION_TIMEOUT_S,
        )
        created = True
        outputs = _stack_outputs(tools["pulumi"], stack)
    try:
        _require_cluster(tools, stack, outputs)
        yield tools, outputs
    finally:
        # Evidence first, always (also when the cluster check failed); deletion only of
        # what this test created.
        if outputs.get("cluster_name"):
            subprocess.run(
                [
                    str(tools["kind"]),
                    "export",
                    "logs",
                    str(REPO / "harness" / "results" / "kind-logs"),
                    "--name",
                    outputs["cluster_name"],
                ],
                check=False,
                timeout=CLI_TIMEOUT_S,
            )
        if created and os.environ.get("LAYERSCHED_KEEP_TESTBED") != "1":
            subprocess.run(
                [str(REPO / "harness" / "infra" / "kind" / "kind.sh"), "down"],
                cwd=REPO,
                check=False,
            )


def _require_cluster(tools: dict[str, Path], stack: str, outputs: dict[str, Any]) -> None:
    """Fail (never create a cluster) when the stack's kind cluster is gone or mute."""
    from pytest_kind import KindCluster

    name = outputs["cluster_name"]
    listed = subprocess.run(
        [str(tools["kind"]), "get", "clusters"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    if name not in listed.stdout.split():
        pytest.fail(
            f"Pulumi stack {stack!r} describes kind cluster {name!r}, but `kind get clusters` "
            "does not list it: the stack is stale. Run `harness/infra/kind/kind.sh down` and then "
            "`make testbed DRIVER=kind` (this test never creates a cluster itself).",
            pytrace=False,
        )
    # Absolute binaries: pytest-kind never downloads; only kubectl is used, never create().
    cluster = KindCluster(
        name,
        kubeconfig=Path(outputs["kubeconfig_path"]),
        kind_path=tools["kind"],
        kubectl_path=tools["kubectl"],
    )
    try:
        cluster.kubectl("get", "nodes", "-o", "name", timeout=CLI_TIMEOUT_S)
    except (subprocess.SubprocessError, OSError) as err:
        pytest.fail(
            f"kind cluster {name!r} does not answer kubectl ({err}); see "
            f"{outputs['kubeconfig_path']} and docs/kind.md",
            pytrace=False,
        )


def _in_cluster(images: ScenarioImages, host: str, cluster: str) -> ScenarioImages:
    """The pushed references (host port) as the nodes pull them (registry on the kind network)."""
    return dataclasses.replace(
        images,
        img1=images.img1.replace(host, cluster, 1),
        img2=images.img2.replace(host, cluster, 1),
    )


@pytest.fixture(scope="module")
def kind_run(
    testbed: tuple[dict[str, Path], dict[str, Any]],
    scenario_report_dir: Path,
    record_scenario_report: Callable[[Path, Mapping[str, Any]], None],
) -> tuple[dict[str, Any], int]:
    """(report, trials per strategy) of the scenario run through the Kubernetes API."""
    from layersched_harness.testbed.kind.driver import SCORE_SOURCES, KindTestbed, kind_driver
    from layersched_harness.testbed.report import plot
    from layersched_harness.testbed.scenario_images import build_and_push_scenario

    tools, outputs = testbed
    trials = trials_from_env()
    pushed = build_and_push_scenario(outputs["registry_host_address"])
    images = _in_cluster(pushed, outputs["registry_host_address"], outputs["registry_address"])
    driver = kind_driver(
        KindTestbed(
            kubeconfig=Path(outputs["kubeconfig_path"]),
            registry_container=outputs["registry_container"],
            docker=tools["docker"],
            scenario_images=(images.img1, images.img2),
        )
    )
    results = run_scenario(driver, images, STRATEGIES, trials)
    document = report(
        "kind",
        int(outputs["link_rate_bits_per_s"]),
        images,
        results,
        components=driver.components(),
        score_sources=SCORE_SOURCES,
    )
    report_path = scenario_report_dir / "scenario.json"
    report_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    plot(document, report_path.with_suffix(".png"))
    record_scenario_report(report_path, document)
    return document, trials


def test_report_has_every_trial(kind_run: tuple[dict[str, Any], int]) -> None:
    document, trials = kind_run
    check_report(document, "kind", trials, nodes=None)


def test_layer_locality_reuses_p2s_node_every_trial(kind_run: tuple[dict[str, Any], int]) -> None:
    check_layer_locality(kind_run[0])


def test_image_locality_ties_p2s_node_and_the_empty_one(
    kind_run: tuple[dict[str, Any], int],
) -> None:
    check_image_locality_tie(kind_run[0])


def test_pulls_transfer_exactly_the_missing_layers(kind_run: tuple[dict[str, Any], int]) -> None:
    check_pull_bytes(kind_run[0])
