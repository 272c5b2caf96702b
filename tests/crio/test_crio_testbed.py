"""The CRI-O node of a mixed local testbed, live (``make crio-live`` with
``LAYERSCHED_TESTBED_RUNTIMES`` naming ``crio``, e.g. ``containerd,containerd,crio``):

* the NodeLayerInventory the node's agent published to the testbed's API server, read back
  from the cluster, holds every layer of the seed's Img1 and Img2 as CRI-O pulled them
  over the node's link, with the pushed manifests' digests and sizes, byte for byte;
* the testbed's relay role (``harness/playbooks/testbed-relay.yml``) puts the relay between that
  node's kubelet and CRI-O, with its dump and ``imageLayer.*`` annotations taken from
  CRI-O's storage, and takes it out again;
* a Guaranteed and a BestEffort pod reach Running on that node: CRI-O runs runc through
  our wrapper (``harness/playbooks/tools/runc_wrapper.py``), which raises the Guaranteed
  container's ``oom_score_adj`` to its own and drops the hugepage limits this host has no
  hugetlb cgroup for, and says so in the node's ``runc-wrapper.log``;
* the agent's storage mounts as the generator renders them for CRI-O keep every running
  container's root filesystem out of its reach (issue 44): a probe with those mounts
  writes nowhere, where with the whole storage mounted ``readOnly`` (as at 40ab284) it
  writes into a running container's rootfs.

A testbed that is up already (``layersched testbed up --runtimes ...``) is used as it
is; else one is brought up and taken down again. Without a CRI-O node in the runtimes,
every test here skips with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tenacity

from layersched.agent import DEFAULT_CRIO_STORAGE as CRIO_STORAGE_MOUNT
from layersched.core.nodelayers import parse_document
from layersched.cri import CRIClient
from layersched.deploy import RUNTIME_CRIO, agent_daemonset, stack_spec_for
from layersched.images.oci import (
    EXECUTABLE_MODE,
    BuiltImage,
    LayerFile,
    build_image,
    files_layer,
    push_image,
)
from layersched.kube import (
    KubeClient,
    load_kubeconfig,
    node_layers_path,
    pod_log_path,
    pod_path,
    pods_path,
)
from layersched.registry import RegistryClient
from layersched_harness.testbed.builds import crio_build, kubernetes_build
from layersched_harness.testbed.local import TestbedState
from layersched_harness.testbed.pause_image import DEFAULT_PAUSE_IMAGE
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
    argv += [
        "-i",
        str(REPO / "harness/playbooks/inventory/local.yml"),
        str(REPO / "harness" / "playbooks" / playbook),
    ]
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


# ------------------------------------------------------------------ the agent's mounts
#: The probe's source (built here with gcc -static into a one-file image).
WRITE_PROBE_SOURCE = Path(__file__).with_name("write_probe.c")
WRITE_PROBE_PATH = "/write-probe"
#: A pod that runs the probe once: created, pulled (a few hundred KB over the link) and run.
PROBE_TIMEOUT_S = 180.0


def _write_probe_image() -> BuiltImage:
    """The probe as an image: one static binary, its entrypoint."""
    gcc = shutil.which("gcc")
    if gcc is None:
        prereq.missing("gcc not found on PATH: the write probe is built with gcc -static")
    with tempfile.TemporaryDirectory(prefix="layersched-probe-") as scratch:
        binary = Path(scratch) / "write-probe"
        subprocess.run(
            [gcc, "-static", "-O2", "-o", str(binary), str(WRITE_PROBE_SOURCE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        layer = files_layer([LayerFile(WRITE_PROBE_PATH.lstrip("/"), binary.read_bytes(),
                                       EXECUTABLE_MODE)])  # fmt: skip
    return build_image([layer], entrypoint=[WRITE_PROBE_PATH], working_dir="/")


def _mounts_as_generated(
    storage: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The agent's CRI-O storage mounts and volumes (and its securityContext) as the
    generator renders them for this testbed's Kubernetes, its storage the node's."""
    spec = stack_spec_for(kubernetes_build().version, runtime=RUNTIME_CRIO, crio_storage=storage)
    pod = agent_daemonset(spec)["spec"]["template"]["spec"]
    volumes = [v for v in pod["volumes"] if "hostPath" in v]
    names = {v["name"] for v in volumes}
    [container] = pod["containers"]
    mounts = [m for m in container["volumeMounts"] if m["name"] in names]
    return mounts, volumes, container["securityContext"]


def _mounts_before(storage: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the generator rendered at 40ab284: the whole storage, ``readOnly`` alone."""
    mount = {"name": "crio-storage", "mountPath": CRIO_STORAGE_MOUNT, "readOnly": True}
    volume = {"name": "crio-storage", "hostPath": {"path": storage, "type": "Directory"}}
    return [mount], [volume]


def _probe_pod(
    name: str,
    node: str,
    image: str,
    mounts: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    security: dict[str, Any],
) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "crio-testbed"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "args": [CRIO_STORAGE_MOUNT],
                    "securityContext": security,
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }


def _run_probe(kube: KubeClient, pod: dict[str, object]) -> list[str]:
    """Create ``pod``, wait for it to finish, return its output's lines (the pod goes)."""
    name = str(pod["metadata"]["name"])  # type: ignore[index]
    kube.create(pods_path(NAMESPACE), pod)
    try:

        @tenacity.retry(
            stop=tenacity.stop_after_delay(PROBE_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            retry=tenacity.retry_if_exception_type(AssertionError),
            reraise=True,
        )
        def finished() -> None:
            status = kube.get(pod_path(NAMESPACE, name)).get("status") or {}
            (container,) = status.get("containerStatuses") or [{}]
            state = container.get("state") or {}
            waiting = state.get("waiting") or {}
            # the kubelet refusing a mount (recursiveReadOnly the runtime cannot do) says so
            assert waiting.get("reason") not in (
                "CreateContainerError",
                "CreateContainerConfigError",
            ), waiting
            assert status.get("phase") == "Succeeded", (status.get("phase"), state)

        finished()
        return kube.read_log(pod_log_path(NAMESPACE, name), container="probe").splitlines()
    finally:
        kube.delete(pod_path(NAMESPACE, name), grace_period_s=0)


@contextlib.contextmanager
def _shared(path: str) -> Iterator[bool]:
    """``path`` as a shared mount for the block, as it is on a systemd host (``/`` shared),
    when this VM's ``/`` is private: CRI-O mounts a host path holding its storage root
    with HostToContainer propagation (rslave), which needs a shared or slave mount, and
    refuses the pod otherwise. The testbed's own node directory only; undone after (the
    copy is lazily unmounted, the mounts beneath it stay CRI-O's). Yields whether it
    changed anything."""
    propagation = subprocess.run(
        ["findmnt", "--noheadings", "--output", "PROPAGATION", "--target", path],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if propagation and propagation[0] != "private":
        yield False
        return
    subprocess.run(["mount", "--rbind", path, path], check=True)
    try:
        subprocess.run(["mount", "--make-rshared", path], check=True)
        yield True
    finally:
        subprocess.run(["umount", "--lazy", path], check=True)


def test_the_agents_mounts_keep_every_containers_rootfs_out_of_reach(
    testbed: TestbedState, crio_node: str
) -> None:
    # issue 44, live: a pause pod runs on the CRI-O node (its root filesystem is a mount
    # under the storage's overlay/). A probe with the agent's mounts and securityContext
    # tries to write into every container's rootfs and into the two directories it reads.
    # As the generator mounts them now (the two directories, read-only, recursively on
    # 1.37) no rootfs is in view, the two directories refuse writes, and the two files the
    # agent reads are readable. As 40ab284 mounted the storage (all of it, readOnly
    # alone), with the storage a shared mount as on a systemd host, the probe writes into
    # the running containers' root filesystems: the hole
    if os.geteuid() != 0:
        prereq.missing("the probe's control makes the node's storage a shared mount: root only")
    storage = testbed.node(crio_node).root_dir
    host = testbed.registry.host
    image = f"{host}/crio-testbed/write-probe:{time.strftime('t%Y%m%d%H%M%S', time.gmtime())}"
    with RegistryClient(insecure_hosts=(host,)) as registry:
        push_image(registry, image, _write_probe_image())
    stamp = time.strftime("%H%M%S", time.gmtime())
    victim = f"crio-victim-{stamp}"
    kube = KubeClient(load_kubeconfig(testbed.cluster.kubeconfig))
    try:
        kube.create(pods_path(NAMESPACE), _pod(victim, crio_node, {}))

        @tenacity.retry(
            stop=tenacity.stop_after_delay(RUNNING_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            reraise=True,
        )
        def victim_running() -> None:
            status = kube.get(pod_path(NAMESPACE, victim)).get("status") or {}
            assert status.get("phase") == "Running", status

        victim_running()
        mounts, volumes, security = _mounts_as_generated(storage)
        assert all(m.get("recursiveReadOnly") == "Enabled" for m in mounts)  # 1.37
        now = _run_probe(
            kube, _probe_pod(f"probe-now-{stamp}", crio_node, image, mounts, volumes, security)
        )
        old_mounts, old_volumes = _mounts_before(storage)
        with _shared(storage) as made_shared:
            before = _run_probe(
                kube,
                _probe_pod(
                    f"probe-before-{stamp}", crio_node, image, old_mounts, old_volumes, security
                ),
            )
    finally:
        kube.delete(pod_path(NAMESPACE, victim), grace_period_s=0)
        kube.close()
    print("as the generator mounts it:", *now, sep="\n  ")
    print(f"as 40ab284 mounted it (storage made shared: {made_shared}):", *before, sep="\n  ")
    root = CRIO_STORAGE_MOUNT
    # now: the two files are read, nothing is written anywhere, no rootfs is in view
    assert f"READ {root}/overlay-images/images.json" in now
    assert f"READ {root}/overlay-layers/layers.json" in now
    assert not [line for line in now if line.startswith("WROTE")], now
    for directory in ("overlay-images", "overlay-layers"):
        path = f"{root}/{directory}/.layersched-write-probe"
        assert f"REFUSED {path} Read-only file system" in now, now
    assert any(line.startswith(f"NO-ROOTFS {root}/overlay ") for line in now), now
    # before: some running container's rootfs took a write through the agent's mount
    # (the storage's own directories refused it: readOnly holds for the top mount only)
    assert [line for line in before if line.startswith(f"WROTE {root}/overlay/")], before
    assert f"REFUSED {root}/overlay-images/.layersched-write-probe Read-only file system" in before
