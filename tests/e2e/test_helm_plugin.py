"""install/charts/layersched in plugin mode on the local testbed's real Kubernetes 1.37, the way a
release installs: the images built and pushed as ``make images`` does (the layersched
index; layersched's kube-scheduler 1.37 index, of the binary ``make kubernetes`` built:
CI cross-compiles nothing), their record written, the chart pinned to it with ``layersched
deploy chart --images`` (the release workflow's step), then ``helm install --set
scheduler=plugin`` and nothing about images: the chart picks the kube-scheduler of the
cluster's minor (helm's ``.Capabilities``) by digest. Then the seed scenario through it
(placements, and the plugin's scores held to the Python core's layer-locality: the
release says ``strategy: layer-locality``, the chart's default, by name, as the scores
checked are that strategy's), ``helm upgrade`` of the
weight alone, which rolls the scheduler by itself (its pod template hashes the config),
and ``helm uninstall``, which leaves nothing.

The testbed's nodes are network namespaces on one host: a post-renderer applies its
overlay's patches, and raises kube-scheduler's ``--v`` to 10, where it logs each plugin's
scores (how they are read). ``imageQuorum: 1``: in the seed scenario Img1 is on one node
when P1-again is scheduled (the testbed's own plugin scheduler runs 1 for that reason).
The testbed's own host-side ``layer-locality`` scheduler is paused while the chart's
serves that name. ``LAYERSCHED_E2E_HELM_TRIALS`` sets the scenario's trials (default 1).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tenacity
import yaml

from layersched import __version__
from layersched.cli.main import main as layersched_main
from layersched.core.errors import InputError
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.deploy import (
    AGENT_NAME,
    CONFIG_CHECKSUM_ANNOTATION,
    LAYER_LOCALITY_PLUGIN,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    SCHEDULER_CONFIG_FILE,
    SCHEDULER_PLUGIN,
    StackSpec,
    write_published_images,
)
from layersched.images.build import build_layersched_index, image_size_bytes
from layersched.images.push import PushedImage, PushedStack
from layersched.images.release import (
    ReleaseImage,
    kube_scheduler_release,
    published_record,
    push_release,
)
from layersched_harness.testbed.builds import kubernetes_build
from layersched_harness.testbed.deploy_stack import (
    Kubectl,
    write_helm_post_renderer,
)
from layersched_harness.testbed.scheduler_configs import (
    LAYER_LOCALITY_PLUGIN_SCHEDULER as PLUGIN_STRATEGY,
)
from tests.e2e._checks import check_layer_locality, check_plugin_scores_are_the_cores
from tests.e2e.test_deploy_stack import _deployed_scenario, _scheduler_pods
from tests.e2e.test_helm_install import (
    HELM_TIMEOUT,
    RELEASE,
    Installed,
    _rolled_out,
    check_uninstall_leaves_nothing,
    helm_release,
    helm_testbed,
)
from tests.fixtures import prereq

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRIALS_ENV = "LAYERSCHED_E2E_HELM_TRIALS"
#: The testbed's registry holds the images under this prefix, as ghcr.io/layersched does.
REPOSITORY_PREFIX = "layersched"
#: kube-scheduler logs each plugin's scores at 10.
SCORES_VERBOSITY = 10
#: What the upgrade changes: the weight alone (the ConfigMap, nothing of the Deployment).
UPGRADED_WEIGHT = 5
ROLL_TIMEOUT_S = 300.0
POLL_S = 2.0


def _trials() -> int:
    return int(os.environ.get(TRIALS_ENV, "1"))


def _pushed(image: ReleaseImage) -> PushedImage:
    [one] = image.index.images
    return PushedImage(
        image.published().ref, image_size_bytes(one), tuple(x.size_bytes for x in one.layers), 0.0
    )


def _release(registry: str, work: Path) -> tuple[list[ReleaseImage], Path]:
    """The layersched and kube-scheduler 1.37 indexes for amd64 (the testbed's nodes),
    pushed to the testbed's registry, and their record."""
    build = kubernetes_build()
    try:
        binary = build.require("kube-scheduler") / "kube-scheduler"
    except InputError as err:
        prereq.missing(str(err))
    prefix = f"{registry}/{REPOSITORY_PREFIX}"
    scheduler = kube_scheduler_release(
        build, ("amd64",), prefix, __version__, binaries={"amd64": binary}
    )
    layersched = ReleaseImage(
        f"{prefix}/layersched", __version__, build_layersched_index(("amd64",))
    )
    images = [layersched, scheduler]
    pushed = push_release(images, insecure=True)
    for image in images:
        assert pushed[f"{image.repository}:{image.tag}"] == image.index.digest
    record = work / "images.json"
    write_published_images(record, published_record(images))
    return images, record


def _scheduler_state(kubectl: Kubectl) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scheduler's KubeSchedulerConfiguration and its Deployment."""
    config = json.loads(
        kubectl.run(
            "-n", NAMESPACE, "get", "configmap", f"{LAYER_LOCALITY_SCHEDULER}-config", "-o", "json"
        )
    )
    deployment = json.loads(
        kubectl.run("-n", NAMESPACE, "get", "deployment", LAYER_LOCALITY_SCHEDULER, "-o", "json")
    )
    return config, deployment


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("helm-plugin")
    with contextlib.ExitStack() as undo:
        bed = undo.enter_context(helm_testbed(work))
        started = time.monotonic()
        (layersched, scheduler), record = _release(bed.registry, work)
        measurements: dict[str, Any] = {
            "images_build_and_push_s": round(time.monotonic() - started, 1),
            "images": {
                image.name: {"ref": image.published().ref.reference, **image.platforms()}
                for image in (layersched, scheduler)
            },
        }
        # the release workflow's step: the chart pinned to what was pushed
        chart = work / "chart"
        pin = ["deploy", "chart", "--images", str(record), "--out", str(chart)]
        assert layersched_main(pin) == 0
        post_renderer = write_helm_post_renderer(
            work / "post-render",
            bed.inventory,
            PushedStack(_pushed(layersched), _pushed(scheduler)),
            StackSpec(scheduler=SCHEDULER_PLUGIN, strategy=LAYER_LOCALITY),
            scheduler_verbosity=SCORES_VERBOSITY,
        )
        values = work / "values.json"
        # nothing about images: the chart's own (the record's digests) for the cluster's minor
        values.write_text(
            json.dumps({"strategy": LAYER_LOCALITY, "imageQuorum": 1, "crd": {"install": False}})
        )
        args = ["--set", "scheduler=plugin", "-f", str(values)]
        measurements["kube_scheduler"] = scheduler.published().ref.reference
        yield undo.enter_context(
            helm_release(bed, chart, [*args, "--post-renderer", str(post_renderer)],
                         measurements, "helm plugin")
        )  # fmt: skip


def test_install_runs_the_plugin_build_of_the_clusters_minor_by_digest(
    installed: Installed,
) -> None:
    status = json.loads(installed.helm.run("status", RELEASE, "-o", "json"))
    assert status["info"]["status"] == "deployed" and status["version"] == 1
    pods = _scheduler_pods(installed.kubectl)
    assert len(pods) == 2
    image = installed.measurements["kube_scheduler"]
    for pod in pods:
        # one container: kube-scheduler with the plugin, no extender sidecar
        [container] = pod["spec"]["containers"]
        assert container["image"] == image, pod["metadata"]["name"]
        [ready] = pod["status"]["containerStatuses"]
        assert ready["ready"], pod["metadata"]["name"]
        # the node pulled it by the index's digest (its runtime chose the amd64 manifest)
        assert ready["imageID"] == image
    config, deployment = _scheduler_state(installed.kubectl)
    text = config["data"][SCHEDULER_CONFIG_FILE]
    [profile] = yaml.safe_load(text)["profiles"]
    assert [p["name"] for p in profile["plugins"]["score"]["enabled"]] == [LAYER_LOCALITY_PLUGIN]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[CONFIG_CHECKSUM_ANNOTATION] == hashlib.sha256(text.encode()).hexdigest()
    agents = json.loads(
        installed.kubectl.run("-n", NAMESPACE, "get", "daemonset", AGENT_NAME, "-o", "json")
    )
    assert agents["status"]["numberReady"] == len(installed.inventory.nodes)


def test_the_scenarios_placements_and_scores_through_the_plugin(installed: Installed) -> None:
    trials = _trials()
    doc = _deployed_scenario(installed.inventory, installed.kubectl, trials, plugin=True)
    runs = doc["strategies"][PLUGIN_STRATEGY]["trials"]
    installed.measurements["scenario"] = {
        "trials": trials,
        "layers": doc["layers"],
        "placements": [t["placements"] for t in runs],
        "scores_t3": [t["scores_t3"] for t in runs],
    }
    assert len(runs) == trials
    for i, t in enumerate(runs):
        # the chart's scheduler bound every pod
        assert set(t["scheduler"].values()) == {LAYER_LOCALITY_SCHEDULER}, f"trial {i}"
    check_layer_locality(doc, PLUGIN_STRATEGY)
    # the chart's plugin runs with spread (the default): the core's spread scores
    check_plugin_scores_are_the_cores(doc, PLUGIN_STRATEGY)


def test_a_weight_change_rolls_the_scheduler_by_itself(installed: Installed) -> None:
    helm, kubectl = installed.helm, installed.kubectl
    config, deployment = _scheduler_state(kubectl)
    before = {p["metadata"]["name"] for p in _scheduler_pods(kubectl)}
    checksum = deployment["spec"]["template"]["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION]
    helm.run("upgrade", RELEASE, str(installed.chart), *installed.install_args,
             "--set", f"weight={UPGRADED_WEIGHT}",
             "--wait", "--timeout", HELM_TIMEOUT)  # fmt: skip
    started = time.monotonic()

    # no rollout restart: the template's checksum changed, so the Deployment rolls
    @tenacity.retry(
        stop=tenacity.stop_after_delay(ROLL_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def replaced() -> set[str]:
        pods = _scheduler_pods(kubectl)
        names = {p["metadata"]["name"] for p in pods}
        assert len(pods) == 2 and not names & before, f"still running: {names & before}"
        assert all(c["ready"] for p in pods for c in p["status"]["containerStatuses"]), names
        return names

    after = replaced()
    _rolled_out(kubectl)
    installed.measurements["weight_roll_s"] = round(time.monotonic() - started, 1)
    config, deployment = _scheduler_state(kubectl)
    [profile] = yaml.safe_load(config["data"][SCHEDULER_CONFIG_FILE])["profiles"]
    [score] = profile["plugins"]["score"]["enabled"]
    assert score["weight"] == UPGRADED_WEIGHT
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION] != checksum
    # what changed in the template is the checksum alone: the image stays the digest
    assert template["spec"]["containers"][0]["image"] == installed.measurements["kube_scheduler"]
    installed.measurements["pods"] = {"before": sorted(before), "after": sorted(after)}


def test_uninstall_leaves_nothing(installed: Installed) -> None:
    check_uninstall_leaves_nothing(installed)
