"""The image-locality port against the real thing: the testbed kube-scheduler's ImageLocality
(the release ``make kubernetes`` builds).

A one-node testbed of its own (prefix ``ldif``, 10.250.52.0/24) runs the built
kube-scheduler with an ``image-locality`` profile at ``-v=10``, which logs every score:
``Plugin ImageLocality scores on default/NAME => [{f00 0} {f01 5}]``. The test adds fake
Nodes through the API (no kubelet behind them) with random ``status.images``, then random
pods pinned to them by a label, and compares each logged score with
``ImageLocality(kubernetes_minor=<the build's minor>)`` on the same Node list, every node the API
holds (the real ``n1`` and earlier batches too: upstream's total counts the whole
snapshot). The candidates are the nodes the scheduler scored.

What the fake nodes need:

* The scheduler cache computes a node's image counts (``NumNodes``) when *that* node is
  added or updated, so every node is updated once after the last one is added
  (CONTEXT.md §2). Updates after that (the controller-manager's) only refresh them.
* Without a kubelet they never heartbeat: the admission plugin taints them not-ready at
  creation and the node lifecycle controller taints them unreachable after its grace
  period. The pods tolerate every taint, so the filters keep every fake node either way.
* Scheduling skips scoring when one node is feasible: every batch has at least two.

The last case is one upstream arithmetic decides: 3 of 11 nodes hold a 238683863-byte
image, and Go's ``size * (3/11)`` scores 3 where ``size * 3 / 11`` would score 4. Pods
with init containers show the version setting matters: from 1.30 they count, and the
1.29-mode port (init containers ignored) disagrees with the real scheduler on them.

The counts are printed, and written with their provenance to the test's own temporary
directory. The committed ``harness/results/image-locality-differential.json`` is rewritten only
when asked (``LAYERSCHED_RESULTS=commit``, from a clean tree): a test run never changes a
committed file.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tenacity

from layersched.core.errors import InputError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.layerindex import LayerIndex
from layersched.core.nodeindexing import node_info
from layersched.core.objects import nodes_from_document
from layersched.core.pod import PodImages
from layersched.core.strategies.args import ImageLocalityArgs
from layersched.core.strategies.image_locality import ImageLocality
from layersched.kube import (
    NODES_PATH,
    KubeClient,
    load_kubeconfig,
    node_path,
    pod_path,
    pods_path,
)
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json
from layersched_harness.testbed.builds import kubernetes_build
from layersched_harness.testbed.cluster._measure import plugin_scores
from layersched_harness.testbed.local import (
    TestbedSettings,
    TestbedState,
    down,
    load_state,
    up,
)
from layersched_harness.testbed.local._cluster import file_end, lines_since
from tests.fixtures import prereq
from tests.fixtures.testbed import testbed_skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Our own prefix and /24, distinct from `make testbed` (lstb) and test_testbed_local (lsit).
PREFIX = "ldif"
NET_BASE = "10.250.52"
SEED = 20_261_122
MB = 1024 * 1024
#: The minor the testbed's kube-scheduler is (the release src/kube-scheduler/go.mod pins).
MINOR_UNDER_TEST = kubernetes_build().minor
#: The mode that differs: init containers count from 1.30, not in 1.29.
INIT_IGNORING_MINOR = (1, 29)
NAMESPACE = "default"
SCHEDULER = "image-locality"
PLUGIN = "ImageLocality"
FAKE_LABEL = "layersched.io/fake"
BATCH_LABEL = "layersched.io/fake-batch"
#: Set once on every fake node after the last is added, to update each one.
REFRESH_ANNOTATION = "layersched.io/refreshed"
REGISTRY = "reg.ldif.test"
#: Fake node counts per batch; nodes accumulate, so the totals are 11, 16, 36, 86 with n1
#: (under kube-scheduler's 100-node floor, below which every feasible node is scored).
BATCH_NODES = (10, 5, 20, 50)
PODS_PER_BATCH = 30
#: An image whose spread-scaled size sits on a score boundary when 3 of 11 nodes hold it.
BOUNDARY_SIZE_BYTES = 238_683_863
BOUNDARY_HOLDERS = 3
#: How long the scheduler may take to log every pod of a batch (2 cores, -v=10).
SCORES_TIMEOUT_S = 120.0
#: How long until the scheduler's snapshot holds a batch's nodes as last patched.
SETTLE_TIMEOUT_S = 30.0
POLL_S = 0.5
#: The committed report (rewritten with LAYERSCHED_RESULTS=commit only).
REPORT = "harness/results/image-locality-differential.json"
#: Generous capacity: the pods request nothing, but a node needs allocatable pods.
CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "250"}


def _skip_reason() -> str | None:
    try:
        kubernetes_build().require(
            "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet"
        )
    except InputError as err:
        return str(err)
    return testbed_skip_reason()


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestbedState]:
    prereq.require(_skip_reason())
    settings = TestbedSettings(
        state_dir=tmp_path_factory.mktemp("difftest") / "state",
        node_count=1,
        prefix=PREFIX,
        net_base=NET_BASE,
    )
    try:
        up(settings)
        yield load_state(settings.state_dir)
    finally:
        down(settings.state_dir, PREFIX)


@pytest.fixture(scope="module")
def core(testbed: TestbedState) -> Iterator[KubeClient]:
    with KubeClient(load_kubeconfig(testbed.cluster.kubeconfig)) as kube:
        yield kube


# ---------------------------------------------------------------------------- generating
@dataclass(frozen=True, slots=True)
class FakeImage:
    """One ``status.images`` entry: its names as a kubelet reports them, and its size."""

    names: tuple[str, ...]
    size_bytes: int

    def as_status(self) -> dict[str, Any]:
        return {"names": list(self.names), "sizeBytes": self.size_bytes}


@dataclass(slots=True)
class Batch:
    """Fake nodes sharing a batch label, and the pods pinned to them."""

    index: int
    nodes: dict[str, list[FakeImage]] = field(default_factory=dict)
    pods: dict[str, PodImages] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"b{self.index}"


def _image_pool(rng: random.Random, batch: int) -> list[FakeImage]:
    """Images a batch's nodes draw from: tagged, ``:latest``, some with a digest name too."""
    pool = []
    for j in range(rng.randint(6, 14)):
        repo = f"{REGISTRY}/b{batch}/img{j}"
        tag = rng.choice(("latest", "latest", f"v{rng.randint(1, 3)}"))
        names = [f"{repo}:{tag}"]
        if rng.random() < 0.3:
            names.insert(0, f"{repo}@sha256:{rng.getrandbits(256):064x}")
        pool.append(FakeImage(tuple(names), rng.randint(1 * MB, 1500 * MB)))
    return pool


def _pod_reference(rng: random.Random, pool: list[FakeImage]) -> str:
    """A reference to a pool image (``:latest`` written or implied), or one nobody holds."""
    roll = rng.random()
    if roll < 0.15:
        return f"{REGISTRY}/absent/img{rng.randint(0, 9)}" + rng.choice(("", ":v1"))
    name = next(n for n in rng.choice(pool).names if "@" not in n)
    if name.endswith(":latest") and rng.random() < 0.5:
        return name.removesuffix(":latest")  # normalised back to :latest upstream
    if roll < 0.22:
        return name.rsplit(":", 1)[0] + ":other"  # same repository, another tag: no match
    return name


def _random_batch(rng: random.Random, index: int, node_count: int) -> Batch:
    batch = Batch(index)
    pool = _image_pool(rng, index)
    for k in range(node_count):
        held = rng.sample(pool, rng.randint(0, min(len(pool), 8)))
        batch.nodes[f"f{index}-{k:02d}"] = sorted(held, key=lambda i: -i.size_bytes)
    for p in range(PODS_PER_BATCH):
        containers = tuple(_pod_reference(rng, pool) for _ in range(rng.randint(1, 3)))
        init: tuple[str, ...] = ()
        if rng.random() < 0.35:
            init = tuple(_pod_reference(rng, pool) for _ in range(rng.randint(1, 2)))
        name = f"d{index}-{p:02d}"
        batch.pods[name] = PodImages(name, init, containers)
    return batch


def _boundary_case(batch: Batch) -> None:
    """3 of the 11 nodes (n1 and 10 fakes) hold an image whose score upstream's order decides."""
    image = FakeImage((f"{REGISTRY}/boundary:v1",), BOUNDARY_SIZE_BYTES)
    for name in list(batch.nodes)[:BOUNDARY_HOLDERS]:
        batch.nodes[name] = [image, *batch.nodes[name]]
    batch.pods["d0-boundary"] = PodImages.of(image.names[0], name="d0-boundary")


# ----------------------------------------------------------------------------- the API
def _ready(now: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "fake node (layersched differential test)",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _status(images: list[FakeImage]) -> dict[str, Any]:
    return {
        "capacity": CAPACITY,
        "allocatable": CAPACITY,
        "conditions": [_ready(_now())],
        "images": [i.as_status() for i in images],
    }


def _create_nodes(core: KubeClient, batch: Batch) -> None:
    for name, images in batch.nodes.items():
        labels = {FAKE_LABEL: "true", BATCH_LABEL: batch.label}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "status": _status(images),
        }
        core.create(NODES_PATH, body)
    # the NumNodes quirk: update every node once the last one is in. The update must
    # change something (an identical status is no update, and no event reaches the cache)
    for name in batch.nodes:
        core.patch(node_path(name), {"metadata": {"annotations": {REFRESH_ANNOTATION: "1"}}})


def _pod_body(batch: Batch, pod: PodImages) -> dict[str, Any]:
    def containers(prefix: str, images: tuple[str, ...]) -> list[dict[str, str]]:
        return [{"name": f"{prefix}{i}", "image": image} for i, image in enumerate(images)]

    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "nodeSelector": {BATCH_LABEL: batch.label},
        # not-ready at creation, unreachable later: fake nodes have no kubelet
        "tolerations": [{"operator": "Exists"}],
        "automountServiceAccountToken": False,
        "containers": containers("c", pod.containers),
    }
    if pod.init_containers:
        spec["initContainers"] = containers("i", pod.init_containers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod.name}, "spec": spec}


def _node_list(core: KubeClient) -> LayerIndex:
    # the NodeList document itself, as the API sends it (one unpaged GET)
    origin = f"GET {NODES_PATH}"
    return build_layer_index(
        node_info(node, origin) for node in nodes_from_document(core.get(NODES_PATH), origin)
    )


def _wait_for_scores(log: Path, offset: int, pods: list[str]) -> dict[str, dict[str, int]]:
    @tenacity.retry(
        stop=tenacity.stop_after_delay(SCORES_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def all_logged() -> dict[str, dict[str, int]]:
        lines = lines_since(log, offset)
        found = {p: plugin_scores(lines, PLUGIN, f"{NAMESPACE}/{p}") for p in pods}
        missing = sorted(p for p, s in found.items() if s is None)
        assert not missing, f"{log}: no {PLUGIN} scores yet for {', '.join(missing)}"
        return {p: s for p, s in found.items() if s is not None}

    return all_logged()


def _score_pods(
    core: KubeClient, log: Path, batch: Batch, pods: list[PodImages]
) -> dict[str, dict[str, int]]:
    """Create ``pods``, read the scores kube-scheduler logged for each, delete them."""
    offset = file_end(log)
    try:
        for pod in pods:
            core.create(pods_path(NAMESPACE), _pod_body(batch, pod))
        return _wait_for_scores(log, offset, [p.name for p in pods])
    finally:
        for pod in pods:
            core.delete(pod_path(NAMESPACE, pod.name), grace_period_s=0)


def _port(
    minor: tuple[int, int], pod: PodImages, index: LayerIndex, nodes: list[str]
) -> dict[str, int]:
    candidates, missing = index.indices_of(nodes)
    assert not missing, f"the scheduler scored nodes the API does not list: {missing}"
    strategy = ImageLocality(ImageLocalityArgs(kubernetes_minor=minor))
    return strategy.score(pod, (), index, candidates).as_dict(index)


def _settle(core: KubeClient, log: Path, batch: Batch) -> int:
    """Wait until the scheduler's snapshot holds the batch as last patched; count the tries.

    A canary pod (the batch's three most widespread images, whose counts a stale node
    would get wrong) is scored until the scheduler scores every node of the batch and
    agrees with the port: node updates travel on another watch than pods. Canaries are
    not counted as cases.
    """
    holders: dict[str, int] = {}
    for images in batch.nodes.values():
        for image in images:
            holders[image.names[-1]] = holders.get(image.names[-1], 0) + 1
    widespread = tuple(sorted(holders, key=lambda n: (-holders[n], n))[:3]) or (
        f"{REGISTRY}/none:v1",
    )
    tries = 0

    @tenacity.retry(
        stop=tenacity.stop_after_delay(SETTLE_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def canary_agrees() -> None:
        nonlocal tries
        tries += 1
        canary = PodImages(f"canary-{batch.label}-{tries}", (), widespread)
        actual = _score_pods(core, log, batch, [canary])[canary.name]
        assert sorted(actual) == sorted(batch.nodes), f"scored {sorted(actual)}"
        expected = _port(MINOR_UNDER_TEST, canary, _node_list(core), list(actual))
        assert actual == expected, f"canary: scheduler {actual} != port {expected}"

    canary_agrees()
    return tries


# ----------------------------------------------------------------------------- the test
def test_port_matches_the_live_kube_scheduler(
    testbed: TestbedState, core: KubeClient, tmp_path: Path
) -> None:
    started = time.monotonic()
    # the testbed's daemons name its state directory: the test's own, not other processes
    record = provenance.start(testbed.cluster.kubernetes_version, own_commands=[testbed.state_dir])
    rng = random.Random(SEED)
    log = Path(testbed.cluster.schedulers[SCHEDULER].log)
    batches = [_random_batch(rng, b, count) for b, count in enumerate(BATCH_NODES)]
    _boundary_case(batches[0])
    cases = matched = node_scores = init_pods = init_differs = canary_tries = 0
    mismatches: list[str] = []
    boundary: dict[str, int] = {}
    for batch in batches:
        _create_nodes(core, batch)
        canary_tries += _settle(core, log, batch)
        inventory = _node_list(core)
        actual_by_pod = _score_pods(core, log, batch, list(batch.pods.values()))
        for name, pod in batch.pods.items():
            actual = actual_by_pod[name]
            expected = _port(MINOR_UNDER_TEST, pod, inventory, list(actual))
            cases += 1
            node_scores += len(actual)
            if actual == expected:
                matched += 1
            else:
                mismatches.append(f"{name} {pod}: scheduler {actual} != port {expected}")
            if pod.init_containers:
                init_pods += 1
                if _port(INIT_IGNORING_MINOR, pod, inventory, list(actual)) != actual:
                    init_differs += 1
            if name == "d0-boundary":
                boundary = actual
    runtime_s = time.monotonic() - started
    report = {
        "kubernetes_version": testbed.cluster.kubernetes_version,
        "port_minor": ".".join(map(str, MINOR_UNDER_TEST)),
        "seed": SEED,
        "batches_fake_nodes": list(BATCH_NODES),
        "cases": cases,
        "matched": matched,
        "node_scores_compared": node_scores,
        "pods_with_init_containers": init_pods,
        "init_pods_where_1_29_mode_disagrees": init_differs,
        "boundary_case_scores": boundary,
        "canary_pods_scored": canary_tries,
        "runtime_s": round(runtime_s, 1),
        "mismatches": mismatches,
        "provenance": provenance.finish(record),
    }
    target = None if provenance.committing() else tmp_path / Path(REPORT).name
    target = write_json(REPORT, report, output=target)
    print(f"image-locality differential: {matched} of {cases} matched ({target})")
    assert mismatches == []
    # the boundary case: 3 holders score 3 (quotient first), 4 would be size * 3 / 11
    assert sorted(boundary.values()).count(3) == BOUNDARY_HOLDERS
    # the version setting matters: ignoring init containers disagrees with it somewhere
    assert init_differs > 0
