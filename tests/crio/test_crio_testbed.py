"""The CRI-O node of a mixed local testbed, live (``make crio-live`` with
``LAYERSCHED_TESTBED_RUNTIMES`` naming ``crio``, e.g. ``containerd,containerd,crio``):

* the NodeLayerInventory the node's agent published to the testbed's API server, read back
  from the cluster, holds every layer of the seed's Img1 and Img2 as CRI-O pulled them
  over the node's link, with the pushed manifests' digests and sizes, byte for byte;
* the testbed's relay role (``playbooks/testbed-relay.yml``) puts the relay between that
  node's kubelet and CRI-O, with its dump and ``imageLayer.*`` annotations taken from
  CRI-O's storage, and takes it out again;
* a Guaranteed and a BestEffort pod reach Running on that node: CRI-O runs runc through
  our wrapper (``playbooks/tools/runc_wrapper.py``), which raises the Guaranteed
  container's ``oom_score_adj`` to its own and drops the hugepage limits this host has no
  hugetlb cgroup for, and says so in the node's ``runc-wrapper.log``.

A testbed that is up already (``layersched testbed up --runtimes ...``) is used as it
is; else one is brought up and taken down again. Without a CRI-O node in the runtimes,
every test here skips with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tenacity

from layersched.builds import crio_build
from layersched.core.nodelayers import parse_document
from layersched.cri import CRIClient
from layersched.images.oci import BuiltImage, push_image
from layersched.kube import KubeClient, load_kubeconfig, node_layers_path, pod_path, pods_path
from layersched.registry import RegistryClient
from layersched.testbed.local import TestbedState
from layersched.testbed.pause_image import DEFAULT_PAUSE_IMAGE
from tests.crio.test_crio_live import manifest_layers
from tests.fixtures import prereq
from tests.fixtures.crio import require_crio
from tests.fixtures.playbook_tools import load_tool
from tests.fixtures.testbed import testbed_settings, testbed_skip_reason, testbed_up
from tests.integration.test_cri import IMG1, IMG2

pytestmark = pytest.mark.crio

CRIO = "crio"
#: The agent publishes within a poll or two of a pull; the testbed's links are 20 Mbit/s.
PUBLISHED_TIMEOUT_S = 90.0
PULL_TIMEOUT_S = 180.0
#: The relay playbook restarts a kubelet and waits for every node to be Ready.
PLAYBOOK_TIMEOUT_S = 600
#: The pause image is in the node's storage already: creating and starting takes seconds.
RUNNING_TIMEOUT_S = 120.0
NAMESPACE = "default"
#: A Guaranteed pod: requests equal to limits (small: scenario pods may hold the rest).
GUARANTEED = {"cpu": "10m", "memory": "16Mi"}
#: What the kubelet asks for a Guaranteed pod's containers (its guaranteedOOMScoreAdj).
KUBELET_GUARANTEED_OOM_SCORE_ADJ = -997
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def testbed() -> Iterator[TestbedState]:
    """The mixed testbed: LAYERSCHED_TESTBED_RUNTIMES must name a CRI-O node."""
    settings = testbed_settings()
    if CRIO not in settings.runtimes:
        pytest.skip(
            "no CRI-O node in the testbed's runtimes (LAYERSCHED_TESTBED_RUNTIMES="
            f"{os.environ.get('LAYERSCHED_TESTBED_RUNTIMES', '')!r}): set e.g. "
            "containerd,containerd,crio to run the CRI-O testbed tests"
        )
    reason = testbed_skip_reason()
    if reason is not None:
        pytest.skip(f"local testbed unavailable: {reason}")
    require_crio()
    with testbed_up(settings, refresh=False) as state:
        yield state


@pytest.fixture(scope="module")
def crio_node(testbed: TestbedState) -> str:
    (name, *_others) = [n.name for n in testbed.nodes if n.runtime == CRIO]
    return name


@pytest.fixture(scope="module")
def pulled(testbed: TestbedState, crio_node: str) -> Iterator[dict[str, BuiltImage]]:
    """Img1 and Img2 pushed to the testbed's registry under a tag of this run and pulled
    by the CRI-O node over its link; removed again afterwards (the scenario's resets wait
    until no node lists a layer they do not know of)."""
    host = testbed.registry.host
    tag = time.strftime("t%Y%m%d%H%M%S", time.gmtime())
    images = {f"{host}/crio-testbed/img1:{tag}": IMG1, f"{host}/crio-testbed/img2:{tag}": IMG2}
    with RegistryClient(insecure_hosts=(host,)) as registry:
        for ref, image in images.items():
            assert push_image(registry, ref, image) == image.digest
    node = testbed.node(crio_node)
    with CRIClient(node.cri_endpoint, pull_timeout_s=PULL_TIMEOUT_S) as cri:
        try:
            for ref in images:
                cri.pull_image(ref)
            yield images
        finally:
            for ref in images:
                cri.remove_image(ref)


def _inventory(testbed: TestbedState, node: str) -> dict[str, object]:
    kube = KubeClient(load_kubeconfig(testbed.cluster.kubeconfig))
    try:
        return kube.get(node_layers_path(node))
    finally:
        kube.close()


def test_the_testbeds_object_matches_the_manifests_byte_for_byte(
    testbed: TestbedState, crio_node: str, pulled: dict[str, BuiltImage]
) -> None:
    @tenacity.retry(
        stop=tenacity.stop_after_delay(PUBLISHED_TIMEOUT_S),
        wait=tenacity.wait_fixed(1),
        reraise=True,
    )
    def published_both() -> dict[str, object]:
        document = _inventory(testbed, crio_node)
        names = {n for image in parse_document(document, crio_node).images for n in image.names}
        assert set(pulled) <= names, f"{crio_node}'s inventory lists {sorted(names)}"
        return document

    published = parse_document(published_both(), crio_node)
    assert published.source == "crio-storage"
    assert published.runtime == f"cri-o://{crio_build().version.lstrip('v')}"
    for ref, image in pulled.items():
        (found,) = [h for h in published.images if ref in h.names]
        # every layer, base first: the pushed manifest's descriptor digests and sizes
        assert found.layers == manifest_layers(image), ref
        assert found.digest == image.digest, ref


def _playbook(testbed: TestbedState, playbook: str, *extra: str) -> None:
    argv = [str(Path(sys.executable).with_name("ansible-playbook"))]
    argv += ["-i", str(REPO / "playbooks/inventory/local.yml"), str(REPO / "playbooks" / playbook)]
    argv += ["-e", f"testbed_state_dir={testbed.state_dir}", *extra]
    done = subprocess.run(argv, cwd=REPO, timeout=PLAYBOOK_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{playbook} failed (its output is above)"


def _kubelet_argv(testbed: TestbedState, node: str) -> list[str]:
    pid = Path(testbed.node(node).kubelet_pidfile).read_text().strip()
    return [a for a in Path(f"/proc/{pid}/cmdline").read_text().split("\0") if a]


def test_the_testbeds_relay_role_in_front_of_crio(
    testbed: TestbedState, crio_node: str, pulled: dict[str, BuiltImage]
) -> None:
    node = testbed.node(crio_node)
    relay_socket = f"{node.dir}/relay.sock"
    dump = Path(node.dir) / "relay-dump.jsonl"
    try:
        _playbook(testbed, "testbed-relay.yml", "-e", "testbed_relay_inject_layers=true")
        # kubelet -> relay -> CRI-O; the playbook waited for every node to be Ready again
        assert f"--container-runtime-endpoint=unix://{relay_socket}" in _kubelet_argv(
            testbed, crio_node
        )
        with CRIClient(f"unix://{relay_socket}") as via, CRIClient(node.cri_endpoint) as direct:
            assert via.version().runtime_name == "cri-o"
            annotated = {i.id: i.annotations for i in via.list_images()}
            for held in direct.list_images():
                ours = [ref for ref in pulled if ref in held.repo_tags]
                if not ours:
                    continue
                # CRI-O annotates nothing; the relay adds one entry per compressed layer,
                # read from CRI-O's storage on the node
                assert not any(k.startswith("imageLayer.") for k in held.annotations)
                injected = {
                    k: v for k, v in annotated[held.id].items() if k.startswith("imageLayer.")
                }
                expected = {
                    f"imageLayer.{layer.digest}": str(layer.size_bytes)
                    for layer in manifest_layers(pulled[ours[0]])
                }
                assert injected == expected, ours[0]

        @tenacity.retry(
            stop=tenacity.stop_after_delay(PUBLISHED_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            reraise=True,
        )
        def kubelet_calls_through_the_relay() -> set[str]:
            records = [json.loads(line) for line in dump.read_text().splitlines() if line]
            methods = {r["method"].rsplit("/", 1)[-1] for r in records}
            # the kubelet's own periodic calls: its pod and image lists
            assert {"ListPodSandbox", "ListImages"} <= methods, sorted(methods)
            return methods

        kubelet_calls_through_the_relay()
    finally:
        _playbook(testbed, "testbed-relay-remove.yml")
    assert f"--container-runtime-endpoint={node.cri_endpoint}" in _kubelet_argv(testbed, crio_node)


class _Rejected(Exception):
    """The kubelet refused the pod at admission for want of room (phase Failed, reason
    ``OutOf<resource>``: OutOfcpu, OutOfmemory, OutOfpods, ...)."""


class _PodFailed(Exception):
    """The pod failed for any other reason: what the test is there to catch."""


#: The reason prefix of the kubelet's admission refusals for want of a resource.
OUT_OF = "OutOf"


def _pod(name: str, node: str, resources: dict[str, dict[str, str]]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "crio-testbed"}},
        "spec": {
            # the runtime is under test, not the scheduler
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "pause",
                    "image": DEFAULT_PAUSE_IMAGE,
                    "imagePullPolicy": "Never",
                    "resources": resources,
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("qos", "resources"),
    [
        # the kubelet asks for oom_score_adj -997, which runc may not set here
        ("Guaranteed", {"requests": GUARANTEED, "limits": GUARANTEED}),
        # oom_score_adj 1000; it failed on the hugepage limits alone
        ("BestEffort", {}),
    ],
    ids=["guaranteed", "besteffort"],
)
def test_pods_run_on_the_crio_node(
    testbed: TestbedState, crio_node: str, qos: str, resources: dict[str, dict[str, str]]
) -> None:
    wrapper = load_tool("runc_wrapper")
    name = f"crio-{qos.lower()}-{time.strftime('%H%M%S', time.gmtime())}"
    kube = KubeClient(load_kubeconfig(testbed.cluster.kubeconfig))
    try:
        kube.create(pods_path(NAMESPACE), _pod(name, crio_node, resources))

        @tenacity.retry(
            stop=tenacity.stop_after_delay(RUNNING_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            retry=tenacity.retry_if_exception_type(AssertionError),
            reraise=True,
        )
        def running() -> dict[str, object]:
            pod = kube.get(pod_path(NAMESPACE, name))
            status = pod.get("status") or {}
            if status.get("phase") == "Failed":
                said = f"{status.get('reason')}: {status.get('message')}"
                if str(status.get("reason") or "").startswith(OUT_OF):
                    raise _Rejected(said)
                raise _PodFailed(said)
            (container,) = status.get("containerStatuses") or [{}]
            # CreateContainerError, with runc's message, when the wrapper is not there
            assert "running" in (container.get("state") or {}), container.get("state")
            assert status.get("phase") == "Running", status
            return dict(status)

        try:
            status = running()
        except _PodFailed as err:
            pytest.fail(f"{name} on {crio_node} failed: {err}", pytrace=False)
        except _Rejected as err:
            # the kubelet's admission (OutOfcpu, ...): the pods that hold the node are
            # someone else's, e.g. the last pods `layersched scenario` leaves behind
            prereq.missing(
                f"{crio_node} has no room for a {qos} pod ({err}): delete the pods that "
                f"hold it (kubectl get pods -A --field-selector spec.nodeName={crio_node})"
            )
        assert status["qosClass"] == qos
        (container,) = status["containerStatuses"]
        container_id = str(container["containerID"]).removeprefix("cri-o://")
        log = Path(testbed.node(crio_node).dir) / "runc-wrapper.log"
        said = [line for line in log.read_text().splitlines() if f" {container_id} " in line]
        hugepages = [line for line in said if "hugepageLimits" in line]
        if wrapper.host_hugetlb_present():
            assert hugepages == [], said
        else:
            assert len(hugepages) == 1, said
            assert "dropped: the host has no hugetlb cgroup" in hugepages[0]
        raised = [line for line in said if "oomScoreAdj" in line]
        # the wrapper runs as root under conmon, at this test's score on this host (0 here)
        own = wrapper.current_oom_score_adj()
        if qos == "Guaranteed" and own > KUBELET_GUARANTEED_OOM_SCORE_ADJ:
            assert len(raised) == 1, said
            assert f"oomScoreAdj {KUBELET_GUARANTEED_OOM_SCORE_ADJ} raised to {own}" in raised[0]
        elif qos == "BestEffort":
            assert raised == [], said
    finally:
        kube.delete(pod_path(NAMESPACE, name), grace_period_s=0)
        kube.close()
