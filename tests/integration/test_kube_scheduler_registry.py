"""The LayerLocality plugin resolving a pod image no node publishes from a REAL
docker-registry, inside the REAL kube-scheduler it is built into (``make kubernetes``'s
release).

A loopback control plane of its own (``harness/playbooks/bench-control-plane.yml``: etcd,
kube-apiserver and the plugin's kube-scheduler at ``-v=10``, which logs every node's
score), its scheduler configuration rendered by layersched's generator for the testbed,
with the test's docker-registry as the one registry the plugin may contact
(``layersched testbed scheduler-configs --plugin-registry``). Three fake Ready nodes
(no kubelet) publish NodeLayerInventory objects: ``a`` holds another image sharing two of
the pod image's three layers, ``b`` and ``c`` nothing of it.

The pod image, a two-platform index pushed by the test, is published by no node, so:

* the first pod's cycle queues the image and waits for the answer, at most
  ``registry.resolveWaitMilliseconds`` (issue 42; the metrics count one wait): answered
  within it, the pod gets its layer score; bounded out (the metrics say so), 0 everywhere;
* once the plugin's metrics count the resolution, the next pod of the image gets its
  layer score without waiting: the linux/amd64 manifest's layers (the nodes say no
  platform), equal to what layersched's Python core scores with the layers the Python
  registry client resolves.
"""

from __future__ import annotations

import re
import shutil
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tenacity
from rich.console import Console

from layersched.core.indexbuilder import build_layer_index
from layersched.core.manifest import Platform
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.nodelayers import parse_document
from layersched.core.nodelayersbuilder import build_document
from layersched.core.pod import PodImages
from layersched.core.reference import ImageName
from layersched.core.strategies.args import LayerLocalityArgs
from layersched.core.strategies.base import resolve_pod_layers
from layersched.core.strategies.layer_locality import LayerLocality
from layersched.deploy import LAYER_LOCALITY_PLUGIN
from layersched.images.oci import build_image, build_index, layer_bytes, push_image
from layersched.kube import KubeClient, node_layers_path, pod_path, pods_path
from layersched.registry import RegistryClient, RegistryLayerSource
from layersched_harness.testbed.builds import kubernetes_build
from layersched_harness.testbed.cluster import plugin_scores
from layersched_harness.testbed.local import PLAYBOOKS_DIR, down, run_playbook
from tests.fixtures import prereq
from tests.fixtures.registry import RegistryProcess

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))
from bench_scheduler import ControlPlane, fake_node, untaint  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAYBOOK = PLAYBOOKS_DIR / "bench-control-plane.yml"
#: The bring-up's name prefix (no bridge is made: nothing carries it) and its own ports on
#: loopback (make live-minors uses 26xxx, the testbeds their bridges).
PREFIX = "lsrgi"
LOOPBACK = "127.0.0.1"
PORTS = {
    "testbed_apiserver_port": 28443,
    "testbed_etcd_client_port": 28379,
    "testbed_etcd_peer_port": 28380,
    "testbed_controller_manager_port": 28257,
    "testbed_scheduler_image_locality_port": 28259,
    "testbed_scheduler_layer_locality_port": 28260,
    "testbed_scheduler_layer_locality_plugin_port": 28261,
}
PLUGIN_DAEMON = "scheduler-layer-locality-plugin"
PROFILE = "layer-locality-plugin"
NAMESPACE = "default"
FIELD_MANAGER = "layersched-registry-test"
NODES = ("a", "b", "c")
KIB = 1024
#: The pod image's layers (L1 L2 L3) and node a's other image (L1 L2 L4), amd64; the
#: arm64 entry of the index has a layer of its own, which no score may count.
L1, L2, L3, L4, ARM = (layer_bytes(i, size * KIB) for i, size in enumerate((40, 30, 10, 12, 50)))
POD_IMAGE = build_image([L1, L2, L3])
OTHER_IMAGE = build_image([L1, L2, L4])
INDEX = build_index([build_image([ARM], platform=Platform.parse("linux/arm64")), POD_IMAGE])
#: The plugin queues, resolves (a token-less plain-HTTP registry on loopback: two
#: manifest GETs) and counts the answer well within this on a loaded 2-core machine.
RESOLVED_TIMEOUT_S = 60.0
BIND_TIMEOUT_S = 60.0
INVENTORY_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 30.0
_RESOLVED = re.compile(
    r'^layersched_layer_locality_registry_resolutions_total\{outcome="resolved"\} (?P<value>\S+)$',
    re.M,
)
#: The first pod's bounded wait for the registry (issue 42), and those that ran out.
_WAITS = re.compile(r"^layersched_layer_locality_registry_waits_total (?P<value>\S+)$", re.M)
_WAITS_BOUNDED = re.compile(
    r"^layersched_layer_locality_registry_waits_bounded_total (?P<value>\S+)$", re.M
)
_INVENTORY_NODES = re.compile(r"^layersched_layer_locality_inventory_nodes (?P<value>\S+)$", re.M)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, Path, str]]:
    """The control plane, the plugin's log, and the registry's host (the registry runs for
    the module, started before the scheduler's configuration names it)."""
    if shutil.which("docker-registry") is None:
        prereq.missing("docker-registry not found on PATH (apt install docker-registry)")
    if not Path(sys.executable).with_name("ansible-playbook").exists():
        prereq.missing("ansible-playbook not in the venv (install the infra extras)")
    work = tmp_path_factory.mktemp("registry-plugin")
    state_dir = work / "state"
    console = Console(stderr=True)
    with RegistryProcess(work / "registry") as registry:
        pusher = RegistryClient(auth_files=())
        push_image(pusher, f"{registry.host}/team/app:v1", INDEX)
        push_image(pusher, f"{registry.host}/team/other:v1", OTHER_IMAGE)
        build = kubernetes_build()
        variables: dict[str, Any] = {
            "testbed_state_dir": str(state_dir),
            "testbed_prefix": PREFIX,
            "testbed_net_base": LOOPBACK.rsplit(".", 1)[0],
            "testbed_registry_address": LOOPBACK,
            # the plugin's one registry (allowRegistries and insecureRegistries)
            "testbed_registry_host": registry.host,
            "bench_control_plane_bridge": False,
            "kubernetes_bin_dir": str(build.bin_dir()),
            "kubernetes_binaries": list(build.binaries),
            "kubernetes_build_id": build.build_id,
            "kubernetes_version": build.version,
            "k8s_control_plane_kubectl": str(build.binary("kubectl")),
            "k8s_control_plane_components": [PLUGIN_DAEMON],
            "k8s_control_plane_endpoint_reconciler": "none",
            **PORTS,
        }
        try:
            run_playbook(
                PLAYBOOK,
                variables,
                work / "ansible-up.log",
                title="control plane up",
                console=console,
            )
            yield (
                ControlPlane.load(state_dir),
                state_dir / "control-plane" / f"{PLUGIN_DAEMON}.log",
                registry.host,
            )
        finally:
            log = state_dir / "control-plane" / f"{PLUGIN_DAEMON}.log"
            if log.is_file():  # evidence first: the plugin's own lines and its scores
                lines = log.read_text(errors="replace").splitlines(keepends=True)
                print("".join(line for line in lines if "LayerLocality" in line)[-20_000:])
            down(state_dir, PREFIX, console=console)


def _metrics(plane: ControlPlane) -> str:
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    context.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))
    port = PORTS["testbed_scheduler_layer_locality_plugin_port"]
    return httpx.get(
        f"https://{LOOPBACK}:{port}/metrics", verify=context, timeout=HTTP_TIMEOUT_S
    ).text


def _node_image(names: tuple[str, ...], image: Any) -> NodeImage:
    return NodeImage.held(names=names, digest=image.digest, layers=image.layers)


def _pod(name: str, image: str, cpu: str) -> dict[str, Any]:
    """A pod of ``image`` asking ``cpu``: pods asking differently sign differently, so
    opportunistic batching (KEP-5598) never answers one with another's cached scores."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": PROFILE,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": cpu}}}],
        },
    }


@tenacity.retry(
    stop=tenacity.stop_after_delay(BIND_TIMEOUT_S), wait=tenacity.wait_fixed(0.3), reraise=True
)
def _bound(kube: KubeClient, name: str) -> str:
    node = kube.get(pod_path(NAMESPACE, name))["spec"].get("nodeName")
    assert node, f"pod {name} not bound within {BIND_TIMEOUT_S:g} s"
    return str(node)


@tenacity.retry(
    stop=tenacity.stop_after_delay(INVENTORY_TIMEOUT_S), wait=tenacity.wait_fixed(0.3), reraise=True
)
def _holds_inventories(plane: ControlPlane, nodes: int) -> None:
    found = _INVENTORY_NODES.search(_metrics(plane))
    assert found and float(found["value"]) == nodes, (
        f"the plugin holds {found}, not {nodes} inventories"
    )


@tenacity.retry(
    stop=tenacity.stop_after_delay(RESOLVED_TIMEOUT_S), wait=tenacity.wait_fixed(0.3), reraise=True
)
def _resolved(plane: ControlPlane) -> None:
    found = _RESOLVED.search(_metrics(plane))
    assert found and float(found["value"]) >= 1, (
        "the plugin counted no resolution from the registry"
    )


def _counter(pattern: re.Pattern[str], metrics: str) -> float:
    """A counter's value in kube-scheduler's ``/metrics`` (absent: never incremented)."""
    found = pattern.search(metrics)
    return float(found["value"]) if found else 0.0


def _python_scores(documents: list[dict[str, Any]], image: str, registry: str) -> dict[str, int]:
    """What layersched's Python core scores for a pod of ``image`` on the nodes, with the
    layers the Python registry client resolves (linux/amd64, as the plugin's default)."""
    parsed = {d.node: d for d in (parse_document(doc, "test") for doc in documents)}
    inventory = build_layer_index(NodeInfo(name=n, images=parsed[n].node_images()) for n in NODES)
    source = RegistryLayerSource(RegistryClient(insecure_hosts=(registry,), auth_files=()))
    pod = PodImages(name="p", init_containers=(), containers=(ImageName(image),))
    candidates = np.arange(len(NODES), dtype=np.int64)
    # spread on, as the testbed's plugin runs it (as installed)
    result = LayerLocality(LayerLocalityArgs(spread=True)).score(
        pod, resolve_pod_layers(pod, source), inventory, candidates
    )
    return {node: int(score) for node, score in result.as_dict(inventory).items()}


def test_an_unpublished_image_scores_once_the_registry_answered(
    plane: tuple[ControlPlane, Path, str],
) -> None:
    control, log, registry = plane
    kube = KubeClient(control.kube().config, timeout_s=HTTP_TIMEOUT_S)
    image = f"{registry}/team/app:v1"
    held = {"a": [_node_image((f"{registry}/team/other:v1",), OTHER_IMAGE)], "b": [], "c": []}
    documents = [
        build_document(node, images, runtime="registry-test://fake", source="registry")
        for node, images in held.items()
    ]
    with control.client() as api:
        # the default namespace's ServiceAccount (no controller-manager makes it)
        kube.create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "default"}}
        )
        for node, document in zip(NODES, documents, strict=True):
            created = fake_node(
                {"metadata": {"name": node, "labels": {}}, "status": {"images": []}}
            )
            kube.create("/api/v1/nodes", created)
            untaint(api, created)
            kube.apply(node_layers_path(node), document, FIELD_MANAGER)
    _holds_inventories(control, len(NODES))

    kube.create(pods_path(NAMESPACE), _pod("first", image, "10m"))
    _bound(kube, "first")
    first = plugin_scores(
        log.read_text(errors="replace").splitlines(), LAYER_LOCALITY_PLUGIN, f"{NAMESPACE}/first"
    )
    # no node publishes the image: its cycle waited once for the registry, and scored with
    # the answer unless the wait ran out (then 0 everywhere, and the metrics say so)
    metrics = _metrics(control)
    waits, bounded = (_counter(pattern, metrics) for pattern in (_WAITS, _WAITS_BOUNDED))
    assert waits == 1, f"the first pod's cycle waited {waits} times for the registry"
    _resolved(control)
    expected = _python_scores(documents, image, registry)
    assert first == (dict.fromkeys(NODES, 0) if bounded else expected), (first, bounded)

    kube.create(pods_path(NAMESPACE), _pod("next", image, "20m"))
    _bound(kube, "next")
    scores = plugin_scores(
        log.read_text(errors="replace").splitlines(), LAYER_LOCALITY_PLUGIN, f"{NAMESPACE}/next"
    )
    # a holds L1 + L2 of the amd64 manifest's L1 L2 L3 (about 70 of 80 KiB compressed),
    # each held by 1 of the 3 nodes (spread): floor(100 * 70 / 3 / 80) = 29 or so; b and c
    # nothing; the arm64 entry's layer counts nowhere
    assert 25 <= expected["a"] < 34 and expected["b"] == expected["c"] == 0, expected
    assert scores == expected, (scores, expected)
    # the next pod found the answer: no second wait
    assert _counter(_WAITS, _metrics(control)) == 1
    print(f"first pod {first}; next pod {scores}; the Python core {expected}")
