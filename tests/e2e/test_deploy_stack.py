"""install/kustomize/ on the local testbed's real cluster: install, the seed scenario, failover,
removal.

Seed 003's "install, health-check and remove cleanly", through the exact commands of
docs/deploy.md: ``layersched testbed overlay --out DIR`` (builds the
images without Docker, pushes them, writes the overlay), ``kubectl apply -k DIR``,
``kubectl rollout status``, then ``kubectl delete -k DIR``. Needs root on Linux, else
it skips with the reason. Uses the testbed at ``$LAYERSCHED_TESTBED_DIR`` (default
``.testbed/``), bringing it up (and down again) when it is not up.

The testbed's own host-side ``layer-locality`` kube-scheduler serves the same scheduler
name, so it is paused (SIGSTOP) while the deployed one is installed, and resumed after.
``LAYERSCHED_E2E_DEPLOY_TRIALS`` sets the scenario's trials (default 2).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from layersched.core.errors import KubeError
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.deploy import (
    AGENT_NAME,
    EXTENDER_HEALTH_PORT,
    EXTENDER_PORT,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    SERVICE_ACCOUNT_VOLUME,
    WEBHOOK_SERVICE,
    uses_policy,
)
from layersched.kube import (
    NODE_LAYERS_PATH,
    KubeClient,
    KubeConfig,
    load_kubeconfig,
    node_layers_path,
    pod_path,
)
from layersched_harness.testbed.cluster.driver import ClusterDriver
from layersched_harness.testbed.deploy_stack import (
    DEPLOYED_PLUGIN_SCORE_SOURCE,
    DEPLOYED_SCORE_SOURCE,
    DeployedBackend,
    DeployedPluginBackend,
    Kubectl,
    install,
    uninstall,
    wait_rollout,
)
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import (
    TestbedSettings,
    TestbedState,
    require_root,
)
from layersched_harness.testbed.local._cluster import extender_requests
from layersched_harness.testbed.pause_image import DEFAULT_PAUSE_IMAGE
from layersched_harness.testbed.scenario import report, run_scenario
from layersched_harness.testbed.scenario_images import build_and_push_scenario
from layersched_harness.testbed.scheduler_configs import LAYER_LOCALITY_PLUGIN_SCHEDULER
from tests.e2e._checks import check_layer_locality
from tests.fixtures import prereq
from tests.fixtures.testbed import NOTHING_LEFT, leftovers, testbed_settings, testbed_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRIALS_ENV = "LAYERSCHED_E2E_DEPLOY_TRIALS"
DEFAULT_TRIALS = 2
PART_OF = "app.kubernetes.io/part-of=layersched"
#: Cluster-scoped kinds and the kube-system RoleBinding the install creates.
CLUSTER_KINDS = (
    "namespace,customresourcedefinition,clusterrole,clusterrolebinding,"
    "validatingwebhookconfiguration"
)
HOST_SCHEDULER = "scheduler-layer-locality"
#: kube-scheduler 1.20's plain-HTTP metrics (in the node's network: hostNetwork).
#: What client-go's elector logs when it takes the Lease (both its log formats).
_ACQUIRED = re.compile(r"successfully acquired lease", re.I)
_NEUTRAL = re.compile(r"^layersched_extender_neutral_answers_total\{[^}]*\} (?P<value>\S+)$", re.M)
HA_NAMESPACE = "layersched-ha"
HA_PODS = 30
HA_POD_INTERVAL_S = 0.5
HA_KILL_AFTER_PODS = 8
#: The extender restart: pods streamed, and after how many the sidecar is killed.
RESTART_PODS = 30
RESTART_KILL_AFTER_PODS = 6
#: The kubelet restarts a crashed container at once (back-off starts at the second
#: crash); the new extender imports, lists the inventory, and turns ready.
RESTART_TIMEOUT_S = 90.0
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

    inventory: TestbedState
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


def _host_scheduler_pid(inventory: TestbedState) -> int:
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


def _is_leader(kubectl: Kubectl, pod: dict[str, Any]) -> bool:
    """Whether the pod's running kube-scheduler holds the Lease: it logged acquiring it
    (client-go's elector; a replica that loses the lease exits, so its next container's
    log starts afresh). The Lease's holder names the host, which the replicas share on
    the testbed (its pods use the node's network), and kube-scheduler 1.22+ serves its
    election metric only on its authenticated port."""
    log = kubectl.run(
        "logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "kube-scheduler", check=False
    )
    return _ACQUIRED.search(log) is not None


def _the_leader(kubectl: Kubectl) -> dict[str, Any]:
    """The one scheduler pod that holds the Lease, once one does (after a rollout the new
    replicas may wait out an earlier holder's lease)."""

    @tenacity.retry(
        stop=tenacity.stop_after_delay(FAILOVER_TIMEOUT_S),
        wait=tenacity.wait_fixed(1),
        reraise=True,
    )
    def one() -> dict[str, Any]:
        leaders = [p for p in _scheduler_pods(kubectl) if _is_leader(kubectl, p)]
        assert len(leaders) == 1, f"leaders: {[p['metadata']['name'] for p in leaders]}"
        return leaders[0]

    return one()


def _extender_url(pod: dict[str, Any]) -> str:
    """The sidecar's health port (probes and /metrics, on the pod's IP: the node's, under
    hostNetwork); its verbs and /debug answer on the pod's loopback only."""
    return f"http://{pod['status']['podIP']}:{EXTENDER_HEALTH_PORT}"


def _write_measurements(measurements: dict[str, Any], fallback: Path) -> None:
    if not measurements:  # nothing was measured (the setup failed at once)
        return
    out = Path(os.environ.get("LAYERSCHED_E2E_REPORT_DIR") or fallback)
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_NAME).write_text(json.dumps(measurements, indent=2) + "\n")
    print(f"\ndeploy measurements ({out / REPORT_NAME}):\n{json.dumps(measurements, indent=2)}")


@contextlib.contextmanager
def deployed_stack(
    settings: TestbedSettings,
    work_dir: Path,
    overlay_args: tuple[str, ...] = (),
    *,
    share_testbed: bool = False,
) -> Iterator[Stack]:
    """install/kustomize/ installed on the testbed of ``settings`` (brought up unless it is up).

    Every step's undo is registered the moment the step has happened, so whatever fails
    and wherever (the overlay's build, the install, the rollout, a test) the host
    scheduler is resumed, the install removed, the measurements written and a testbed
    this brought up torn down (with ``share_testbed``: at the session's end, for the next
    module). ``overlay_args`` go to ``layersched deploy overlay``.
    """
    with contextlib.ExitStack() as undo:
        measurements: dict[str, Any] = {}
        undo.callback(_write_measurements, measurements, work_dir / "report")
        inventory = undo.enter_context(testbed_up(settings, refresh=False, shared=share_testbed))
        kubectl = Kubectl(inventory.cluster.kubectl, inventory.cluster.kubeconfig)
        # the testbed's own layersched objects (its CRD, agents' RBAC and objects) stay
        ours_before = set(_ours(kubectl))
        assert f"namespace/{NAMESPACE}" not in ours_before, "a previous install is still there"
        overlay = work_dir / "overlay"
        started = time.monotonic()
        # the documented install: build and push the images, write the overlay
        cmd = [sys.executable, "-m", "layersched.cli.main", "testbed", "overlay"]
        cmd += ["--state-dir", str(settings.state_dir), "--out", str(overlay), "--json"]
        cmd += overlay_args
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        assert done.returncode == 0, done.stderr
        measurements["images"] = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
        measurements["images_build_and_push_s"] = round(time.monotonic() - started, 1)
        stack = Stack(inventory, kubectl, overlay, _node_state(kubectl), ours_before, measurements)
        host_scheduler = _host_scheduler_pid(inventory)
        os.kill(host_scheduler, signal.SIGSTOP)
        undo.callback(os.kill, host_scheduler, signal.SIGCONT)

        def remove() -> None:
            if not stack.removed:
                uninstall(kubectl, overlay)

        undo.callback(remove)  # before the install: a half-applied one is removed too
        measurements["install_s"] = round(install(kubectl, overlay), 2)
        measurements["rollout_s"] = round(
            wait_rollout(
                kubectl,
                NAMESPACE,
                [
                    # the webhook before 1.30; from 1.30 the policy, which runs nothing
                    *(
                        []
                        if uses_policy(inventory.cluster.kubernetes_version)
                        else [f"deployment/{WEBHOOK_SERVICE}"]
                    ),
                    f"deployment/{LAYER_LOCALITY_SCHEDULER}",
                    f"daemonset/{AGENT_NAME}",
                ],
            ),
            1,
        )
        yield stack


#: A testbed of its own for the failure test: another prefix, /24 and state dir.
FAILURE_PREFIX = "lsfx"
#: (10.250.61 is the SSH roles test's: a /24 no other test uses)
FAILURE_NET_BASE = "10.250.62"


def test_a_failed_setup_leaves_nothing_behind(tmp_path: Path) -> None:
    # The deploy e2e once asserted its first step before registering any cleanup: when
    # the step failed, a whole cluster outlived CI. Here the overlay's step fails on
    # purpose (a kube-scheduler binary that does not exist) on a testbed the setup
    # brings up itself: afterwards nothing of it may remain.
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    # a short state dir: pytest's tmp_path for this test is so long that the kubelet's
    # pod-resources socket path passed sun_path's 107 bytes (the kubelet exited at start)
    short = Path(tempfile.mkdtemp(prefix="lsfx-", dir="/tmp"))
    settings = TestbedSettings(
        state_dir=short / "state",
        node_count=1,
        prefix=FAILURE_PREFIX,
        net_base=FAILURE_NET_BASE,
    )
    missing = tmp_path / "nowhere" / "kube-scheduler"
    try:
        with (
            pytest.raises(AssertionError, match="--kube-scheduler-bin"),
            deployed_stack(settings, tmp_path, ("--kube-scheduler-bin", str(missing))),
        ):
            pytest.fail("the setup must fail before yielding")
        assert leftovers(settings.state_dir.resolve(), FAILURE_PREFIX) == NOTHING_LEFT
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    settings = testbed_settings()
    # the next module (the Helm chart's) installs on the same testbed
    with deployed_stack(settings, tmp_path_factory.mktemp("deploy"), share_testbed=True) as stack:
        yield stack


def test_rolled_out_with_one_leader(stack: Stack) -> None:
    pods = _scheduler_pods(stack.kubectl)
    assert len(pods) == 2
    for pod in pods:
        ready = {c["name"]: c["ready"] for c in pod["status"]["containerStatuses"]}
        assert ready == {"kube-scheduler": True, "extender": True}, pod["metadata"]["name"]

    # exactly one replica holds the Lease (within FAILOVER_TIMEOUT_S of the rollout)
    _the_leader(stack.kubectl)
    lease = _get(stack.kubectl, "-n", NAMESPACE, "lease", LAYER_LOCALITY_SCHEDULER)
    assert lease["spec"]["holderIdentity"]
    # the default scheduler's lease is not ours to touch
    agents = _get(stack.kubectl, "-n", NAMESPACE, "daemonset", AGENT_NAME)["status"]
    assert agents["numberReady"] == len(stack.inventory.nodes)


def test_the_extenders_verbs_and_debug_stay_inside_its_pod(stack: Stack) -> None:
    # the sidecar's health port answers the kubelet's probes and /metrics on the pod's IP;
    # its verbs (kube-scheduler calls them over loopback) and /debug are not reachable
    # from outside the pod, only through a port-forward (explain's test below)
    for pod in _scheduler_pods(stack.kubectl):
        health = _extender_url(pod)
        assert httpx.get(f"{health}/readyz", timeout=5.0).status_code == httpx.codes.OK
        assert "layersched_extender" in httpx.get(f"{health}/metrics", timeout=5.0).text
        assert httpx.get(f"{health}/debug/decisions", timeout=5.0).status_code in {403, 404}
        verbs = f"http://{pod['status']['podIP']}:{EXTENDER_PORT}"
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"{verbs}/prioritize", content=b"{}", timeout=5.0)


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


#: The service accounts of the scheduler pod's two containers, as the API names them.
SCHEDULER_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{LAYER_LOCALITY_SCHEDULER}"
EXTENDER_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{LAYER_LOCALITY_SCHEDULER}-extender"
EXTENDER_TOKEN_SECRET = f"{LAYER_LOCALITY_SCHEDULER}-extender-token"


def _can(kubectl: Kubectl, account: str, *request: str) -> bool:
    """``kubectl auth can-i`` as ``account``: the API server's SubjectAccessReview."""
    answer = kubectl.run("auth", "can-i", *request, "--as", account, check=False).strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


@pytest.mark.parametrize(
    ("request_", "extender", "scheduler"),
    [
        # what kube-scheduler needs and the extender must never hold
        (("create", "pods", "--subresource=binding", "-n", "default"), False, True),
        (("delete", "pods", "-n", "default"), False, True),
        (("create", "bindings", "-n", "default"), False, True),
        (("get", "secrets", "-n", NAMESPACE), False, False),
        # what the extender's --watch needs, and kube-scheduler no longer gets
        (("list", "nodelayerinventories.layersched.io"), True, False),
        (("watch", "nodes"), True, True),
    ],
    ids=["bind", "delete-pod", "binding", "secrets", "inventories", "nodes"],
)
def test_each_account_holds_only_its_rights(
    stack: Stack, request_: tuple[str, ...], extender: bool, scheduler: bool
) -> None:
    assert _can(stack.kubectl, EXTENDER_ACCOUNT, *request_) is extender
    assert _can(stack.kubectl, SCHEDULER_ACCOUNT, *request_) is scheduler


def test_the_extenders_token_is_refused_a_pod_deletion(stack: Stack) -> None:
    # the token the extender's container mounts (the Secret the token controller filled),
    # used for real: reading inventories works, deleting a pod is refused (403 before any
    # lookup: the pod need not exist). The token is never printed.
    secret = _get(stack.kubectl, "-n", NAMESPACE, "secret", EXTENDER_TOKEN_SECRET)
    token = base64.b64decode(secret["data"]["token"]).decode()
    cluster = stack.inventory.cluster
    config = KubeConfig(cluster.api_server, ca_file=cluster.ca_file, token=token, origin="extender")
    with KubeClient(config) as kube:
        assert isinstance(kube.get(NODE_LAYERS_PATH).get("items"), list)
        with pytest.raises(KubeError) as refused:
            kube.delete(pod_path("default", "layersched-no-such-pod"))
    assert refused.value.status == 403


def test_the_extender_runs_on_its_own_token(stack: Stack) -> None:
    # the scheduler's account may not list inventories (above), yet each extender listed
    # them to turn ready: it reads with the extender's token, not the pod's
    assert not _can(stack.kubectl, SCHEDULER_ACCOUNT, "list", "nodelayerinventories.layersched.io")
    for pod in _scheduler_pods(stack.kubectl):
        ready = {c["name"]: c["ready"] for c in pod["status"]["containerStatuses"]}
        assert ready["extender"], pod["metadata"]["name"]
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        mounts = {
            c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            for c in spec["containers"]
        }
        path = "/var/run/secrets/kubernetes.io/serviceaccount"
        assert mounts["kube-scheduler"][path] != mounts["extender"][path]


# --------------------------------------------------------------------- per-node authority
#: What the webhook (before 1.30) answers n1's agent for n2's object (the API's 403
#: carries it).
OTHER_NODE_REFUSAL = (
    'admission webhook "agent-node.layersched.io" denied the request: the layersched agent '
    "on node 'n1' may write only its own node's NodeLayerInventory ('n1'), not 'n2'"
)
#: What the ValidatingAdmissionPolicy (1.30 and later) answers: its message names the
#: identity (and, for a token, the node its pod runs on) before this.
POLICY_OTHER_NODE_REFUSAL = "may write only its own node's NodeLayerInventory, not n2"
#: How long the garbage collector may take to delete an object whose owner Node is absent.
ORPHAN_GC_TIMEOUT_S = 90.0
#: A layer as large as the CRD admits (2^40 bytes): the poison of issue 23, within schema.
POISON_SIZE_BYTES = 2**40


def _agent_token_file(stack: Stack, node: str) -> Path:
    """The DaemonSet agent's projected token on ``node``, where its kubelet mounted it."""
    [pod] = _get(
        stack.kubectl, "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={AGENT_NAME}",
        "--field-selector", f"spec.nodeName={node}",
    )["items"]  # fmt: skip
    [info] = [n for n in stack.inventory.nodes if n.name == node]
    volume = f"volumes/kubernetes.io~projected/{SERVICE_ACCOUNT_VOLUME}/token"
    return Path(info.kubelet_root_dir) / "pods" / pod["metadata"]["uid"] / volume


def _legacy_agent_token(stack: Stack) -> str:
    """A token of the agents' service account bound to no pod: the account's legacy Secret
    (1.20 makes one; a later release makes one when asked, by a Secret of that type
    naming the account, which the token controller fills)."""

    def secrets() -> list[dict[str, Any]]:
        return [
            s for s in _get(stack.kubectl, "secrets", "-n", NAMESPACE)["items"]
            if s["type"] == "kubernetes.io/service-account-token"
            and s["metadata"]["annotations"]["kubernetes.io/service-account.name"] == AGENT_NAME
        ]  # fmt: skip

    if not secrets():
        stack.kubectl.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": f"{AGENT_NAME}-legacy-token",
                    "namespace": NAMESPACE,
                    "annotations": {"kubernetes.io/service-account.name": AGENT_NAME},
                },
            }
        )

    @tenacity.retry(stop=tenacity.stop_after_delay(30), wait=tenacity.wait_fixed(1), reraise=True)
    def filled() -> str:
        [secret] = secrets()
        assert secret.get("data", {}).get("token"), "the token controller has not filled it"
        return str(secret["data"]["token"])

    return base64.b64decode(filled()).decode()


def _client_certificate_for(stack: Stack, user: str, group: str, directory: Path) -> KubeConfig:
    """A client certificate for ``user`` in ``group`` from the testbed's CA (real
    credentials the API server authenticates, as the testbed issues its agents')."""
    pki = Path(stack.inventory.cluster.ca_file).parent
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
        x509.NameAttribute(NameOID.COMMON_NAME, user),
    ])  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    cert_file, key_file = directory / "client.crt", directory / "client.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return KubeConfig(
        server=stack.inventory.cluster.api_server,
        ca_file=stack.inventory.cluster.ca_file,
        cert_file=str(cert_file),
        key_file=str(key_file),
        origin=f"test certificate of {user}",
    )


def _poisoned(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a node's published object) claiming nginx:1.25 as one huge layer."""
    digest = "sha256:" + "e" * 64
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            "name": obj["metadata"]["name"],
            "ownerReferences": obj["metadata"].get("ownerReferences", []),
        },
        "layers": [{"digest": digest, "sizeBytes": POISON_SIZE_BYTES}],
        "images": [{"names": ["nginx:1.25"], "digest": digest, "layers": [0]}],
    }


def _own(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as its agent applies it (what the agent publishes, unchanged)."""
    keep = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    meta = obj["metadata"]
    return {**keep, "metadata": {"name": meta["name"], "ownerReferences": meta["ownerReferences"]}}


def _refused(kube: KubeClient, document: dict[str, Any]) -> KubeError:
    name = document["metadata"]["name"]
    with pytest.raises(KubeError) as refused:
        kube.apply(node_layers_path(name), document, "layersched-agent")
    return refused.value


def test_an_agent_may_write_only_its_own_nodes_inventory(stack: Stack, tmp_path: Path) -> None:
    # Issue 23's attack on the real API server, with node n1's real credentials: the
    # DaemonSet agent's projected token (bound to its pod on n1), the testbed's host-side
    # agent token (bound to Node n1, judged by the testbed's own policy, generated for its
    # namespace) and a node-scoped agent certificate (layersched:agent:n1, as the cloud
    # testbed's remote agents hold). Each may apply n1's object and is refused n2's, with
    # the webhook's message (before 1.30) or the policy's; the agents' legacy token (bound
    # to no pod) is refused even its own node's, and a certificate for a node that does
    # not exist is refused for that node.
    objects = {
        i["metadata"]["name"]: i
        for i in _get(stack.kubectl, "nodelayerinventories.layersched.io")["items"]
    }
    assert {"n1", "n2"} <= set(objects)
    n2_before = objects["n2"]
    api, ca = stack.inventory.cluster.api_server, stack.inventory.cluster.ca_file
    token_file = _agent_token_file(stack, "n1")
    n1_cert_dir = tmp_path / "n1"
    n1_cert_dir.mkdir()
    n1_credentials = {
        "daemonset-token": KubeConfig(
            server=api, ca_file=ca, token_file=str(token_file), origin="n1's agent pod"
        ),
        "host-agent-token": load_kubeconfig(
            str(Path(stack.inventory.state_dir) / "control-plane" / "agent-n1.kubeconfig")
        ),
        "agent-certificate": _client_certificate_for(
            stack, "layersched:agent:n1", "layersched:agents", n1_cert_dir
        ),
    }
    policy = uses_policy(stack.inventory.cluster.kubernetes_version)
    for what, config in n1_credentials.items():
        with KubeClient(config) as kube:
            refusal = _refused(kube, _poisoned(objects["n2"]))
            assert refusal.status == 403, (what, str(refusal))
            expected = POLICY_OTHER_NODE_REFUSAL if policy else OTHER_NODE_REFUSAL
            assert expected in str(refusal), (what, str(refusal))
            if policy and what in ("daemonset-token", "host-agent-token"):
                # the node is the token's own claim (its pod's, or its Node's), not the
                # caller's word
                assert "on node n1 may write" in str(refusal), str(refusal)
            kube.apply(node_layers_path("n1"), _own(objects["n1"]), "layersched-agent")
    with KubeClient(KubeConfig(server=api, ca_file=ca, token=_legacy_agent_token(stack))) as kube:
        refusal = _refused(kube, _own(objects["n1"]))
        bound = "names no node" if policy else "not bound to a pod"
        assert refusal.status == 403 and bound in str(refusal), str(refusal)
    ghost = _client_certificate_for(stack, "layersched:agent:ghost", "layersched:agents", tmp_path)
    with KubeClient(ghost) as kube:
        document = _poisoned(objects["n1"])
        document["metadata"] = {
            "name": "ghost",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "ghost", "uid": "x"}],
        }
        if not policy:
            refusal = _refused(kube, document)
            assert refusal.status == 403 and "Node 'ghost' does not exist" in str(refusal)
        else:
            # CEL reads no other object: the policy admits the name's own object, owned by
            # its Node, and the garbage collector deletes it, that Node being absent
            kube.apply(node_layers_path("ghost"), document, "layersched-agent")

            @tenacity.retry(
                stop=tenacity.stop_after_delay(ORPHAN_GC_TIMEOUT_S),
                wait=tenacity.wait_fixed(2),
                reraise=True,
            )
            def collected() -> None:
                names = stack.kubectl.run("get", "nodelayerinventories.layersched.io", "-o", "name")
                assert "ghost" not in names, "the ghost node's object outlives its absent owner"

            collected()
    # n2's object is as n2's agent wrote it
    after = _get(stack.kubectl, "nodelayerinventories.layersched.io", "n2")
    assert after["layers"] == n2_before["layers"]
    assert "ghost" not in stack.kubectl.run(
        "get", "nodelayerinventories.layersched.io", "-o", "name"
    )


def _deployed_scenario(
    inventory: TestbedState, kubectl: Kubectl, trials: int, plugin: bool = False
) -> Any:
    """The seed scenario's report, layer-locality served by the installed stack's pods
    (this install's, or the Helm chart's: tests/e2e/test_helm_install.py); with ``plugin``,
    the chart's plugin mode (layer-locality-plugin: tests/e2e/test_helm_plugin.py)."""
    images = build_and_push_scenario(inventory.registry.host)

    def pods() -> list[str]:
        return [p["metadata"]["name"] for p in _scheduler_pods(kubectl)]

    backend: DeployedBackend | DeployedPluginBackend
    if plugin:
        backend = DeployedPluginBackend(inventory, kubectl, pods)
        strategy, source = LAYER_LOCALITY_PLUGIN_SCHEDULER, DEPLOYED_PLUGIN_SCORE_SOURCE
    else:
        backend = DeployedBackend(inventory, pods)
        strategy, source = LAYER_LOCALITY, DEPLOYED_SCORE_SOURCE
    driver = ClusterDriver(inventory.cluster.kubeconfig, backend, (images.img1, images.img2))
    results = run_scenario(driver, images, [strategy], trials)
    rates = {n.name: n.link_rate_bits_per_s for n in inventory.nodes}
    return report(
        backend.name,
        min(rates.values()),
        images,
        results,
        rates,
        components=driver.components(),
        score_sources={strategy: source},
    )


def test_seed_scenario_through_the_deployed_stack(stack: Stack) -> None:
    trials = _trials()
    doc = _deployed_scenario(stack.inventory, stack.kubectl, trials)
    stack.measurements["scenario"] = {
        "layers": doc["layers"],
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


#: explain reads a pod, its events, the install's pods, and asks each scheduler pod's
#: extender through a port-forward of its own.
EXPLAIN_TIMEOUT_S = 120


def test_explain_reaches_the_deployed_extender_through_port_forward(stack: Stack) -> None:
    # the last trial's P1-again, scored by the deployed sidecar; explain finds the scheduler
    # pods and asks each through kubectl port-forward (the cluster's own kubectl)
    inventory = stack.inventory
    cmd = [sys.executable, "-m", "layersched.cli.main", "explain", "pod"]
    cmd += ["layersched-scenario/p1-again", "--kubeconfig", inventory.cluster.kubeconfig]
    cmd += ["--kubectl", inventory.cluster.kubectl, "-o", "json"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=EXPLAIN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    explained = json.loads(done.stdout)
    assert explained["verdict"] == "scored", explained
    pods = {p["metadata"]["name"] for p in _scheduler_pods(stack.kubectl)}
    namespace, answered_by = explained["extender"].split("/", 1)
    assert namespace == NAMESPACE and answered_by in pods
    chosen = next(node for node in explained["nodes"] if node["chosen"])
    layers = stack.measurements["scenario"]["layers"]
    assert chosen["missing_bytes"] == layers["L3"]["size"]
    assert chosen["present_bytes"] == layers["L1"]["size"] + layers["L2"]["size"]
    print(f"explain through the port-forward: {explained['extender']}: {chosen}")


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
                    "image": DEFAULT_PAUSE_IMAGE,
                    "imagePullPolicy": "Never",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


class PodStream:
    """``count`` pods for the deployed scheduler, created every ``HA_POD_INTERVAL_S`` on a
    thread; ``reached`` is set once ``mark_after`` of them exist."""

    def __init__(self, kubectl: Kubectl, prefix: str, count: int, mark_after: int) -> None:
        self.kubectl = kubectl
        self.names = [f"{prefix}-{i:03d}" for i in range(count)]
        self.mark_after = mark_after
        self.reached = threading.Event()
        self._thread = threading.Thread(target=self._create, name=f"stream-{prefix}")

    def _create(self) -> None:
        for i, name in enumerate(self.names):
            self.kubectl.create(_ha_pod(name))
            if i + 1 == self.mark_after:
                self.reached.set()
            time.sleep(HA_POD_INTERVAL_S)  # the stream's pace, not a wait

    def start(self) -> None:
        self._thread.start()
        assert self.reached.wait(timeout=120), "the stream did not start"

    def join(self) -> None:
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the stream did not finish"

    def all_bound_once(self) -> list[dict[str, Any]]:
        """Wait until every pod is bound; check each was bound exactly once."""

        @tenacity.retry(
            stop=tenacity.stop_after_delay(BIND_TIMEOUT_S),
            wait=tenacity.wait_fixed(1),
            reraise=True,
        )
        def all_bound() -> list[dict[str, Any]]:
            items = _get(self.kubectl, "-n", HA_NAMESPACE, "pods")["items"]
            ours = [p for p in items if p["metadata"]["name"] in self.names]
            unbound = [p["metadata"]["name"] for p in ours if not p["spec"].get("nodeName")]
            assert len(ours) == len(self.names) and not unbound, (
                f"{len(ours)} pods, unbound {unbound}"
            )
            return ours

        items = all_bound()
        events = _get(self.kubectl, "-n", HA_NAMESPACE, "events")["items"]
        scheduled: dict[str, list[str]] = {}
        for event in events:
            if event.get("reason") == "Scheduled":
                uid = event["involvedObject"]["uid"]
                scheduled.setdefault(uid, []).append(event.get("reportingComponent") or "")
        for pod in items:
            # bound exactly once, by the deployed scheduler (events name the profile)
            assert len(scheduled.get(pod["metadata"]["uid"], [])) == 1, pod["metadata"]["name"]
        return items


@contextlib.contextmanager
def _ha_namespace(kubectl: Kubectl) -> Iterator[None]:
    kubectl.run("create", "namespace", HA_NAMESPACE)
    try:
        yield
    finally:
        kubectl.run(
            "delete",
            "namespace",
            HA_NAMESPACE,
            "--wait=true",
            timeout_s=UNINSTALL_TIMEOUT_S,
            check=False,
        )


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    [status] = [c for c in pod["status"]["containerStatuses"] if c["name"] == name]
    return dict(status)


def _container_pids(container_id: str) -> list[int]:
    """Processes of a container, found by its id in their cgroup (every node of the local
    testbed is on this host, so its containers' processes are ours to see)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if container_id in (proc / "cgroup").read_text():
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return pids


def _neutral_and_answered(url: str) -> tuple[int, int]:
    """The extender's 200 answers to /prioritize, and how many of them were all zeros."""
    text = httpx.get(f"{url}/metrics", timeout=5.0).text
    neutral = sum(float(m["value"]) for m in _NEUTRAL.finditer(text))
    return extender_requests(url), int(neutral)


def test_extender_restart_mid_stream(stack: Stack) -> None:
    """The extender holds nothing but caches: SIGKILL the leader's sidecar during a stream
    of pods, and kube-scheduler keeps binding (the extender is ignorable) while the
    kubelet restarts it; the new one lists the inventory again and scores the rest."""
    kubectl = stack.kubectl
    with _ha_namespace(kubectl):
        leader = _the_leader(kubectl)
        url = _extender_url(leader)
        before = _container(leader, "extender")
        container_id = before["containerID"].partition("://")[2]
        answered_before, neutral_before = _neutral_and_answered(url)
        stream = PodStream(kubectl, "restart", RESTART_PODS, RESTART_KILL_AFTER_PODS)
        stream.start()
        answered_at_kill, neutral_at_kill = _neutral_and_answered(url)
        pids = _container_pids(container_id)
        assert pids, f"no process of the extender container {container_id} on this host"
        killed_at = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)

        @tenacity.retry(
            stop=tenacity.stop_after_delay(RESTART_TIMEOUT_S),
            wait=tenacity.wait_fixed(POLL_S),
            reraise=True,
        )
        def restarted_and_ready() -> None:
            pod = _get(kubectl, "-n", NAMESPACE, "pod", leader["metadata"]["name"])
            now = _container(pod, "extender")
            assert now["restartCount"] > before["restartCount"], "not restarted yet"
            assert now["ready"], "restarted, not ready yet"

        restarted_and_ready()
        ready_s = time.monotonic() - killed_at
        stream.join()
        items = stream.all_bound_once()
        # the same leader bound them all: only its extender restarted
        assert _is_leader(kubectl, leader), (
            "the leader changed: this test restarts the extender only"
        )
        answered_after, neutral_after = _neutral_and_answered(url)
        # the restarted extender scored pods of the stream, with inventory, not only zeros
        assert answered_after - neutral_after > 0, (answered_after, neutral_after)
        answered = (answered_at_kill - answered_before) + answered_after
        neutral = (neutral_at_kill - neutral_before) + neutral_after
        stack.measurements["extender_restart"] = {
            "pods": RESTART_PODS,
            "pods_bound": len(items),
            "killed_after_pods": RESTART_KILL_AFTER_PODS,
            "restart_to_ready_s": round(ready_s, 2),
            "prioritize_answered": answered,
            "neutral_answers": neutral,
            "pods_without_extender_scores": max(0, RESTART_PODS - answered),
        }
        print(f"\nextender restart: {stack.measurements['extender_restart']}")


def test_leader_failover_during_a_stream_of_pods(stack: Stack) -> None:
    """Force-delete the leader during a stream of pods: once its lease expires, a
    surviving replica leads (the standby, or the Deployment's replacement for the killed
    pod: whichever retries first after the expiry wins, as client-go's election does) and
    every pod is bound exactly once."""
    kubectl = stack.kubectl
    with _ha_namespace(kubectl):
        leader = _the_leader(kubectl)
        pods = _scheduler_pods(kubectl)
        [standby] = [p for p in pods if p["metadata"]["name"] != leader["metadata"]["name"]]
        killed = leader["metadata"]["name"]
        killed_containers = [
            c["containerID"].partition("://")[2] for c in leader["status"]["containerStatuses"]
        ]
        ok_before = extender_requests(_extender_url(leader))
        ok_start = {standby["metadata"]["name"]: extender_requests(_extender_url(standby))}
        stream = PodStream(kubectl, "ha", HA_PODS, HA_KILL_AFTER_PODS)
        stream.start()
        ok_at_kill = extender_requests(_extender_url(leader))
        killed_at = time.monotonic()
        kubectl.run("-n", NAMESPACE, "delete", "pod", killed, "--grace-period=0", "--force")

        @tenacity.retry(
            stop=tenacity.stop_after_delay(FAILOVER_TIMEOUT_S),
            wait=tenacity.wait_fixed(POLL_S),
            reraise=True,
        )
        def a_survivor_leads() -> dict[str, Any]:
            # the deleted pod's processes must be gone first: until the kubelet kills
            # them the old leader renews its lease, and its node's metrics port (the
            # pods use the node's network) would answer for a replacement there
            running = [c for c in killed_containers if _container_pids(c)]
            assert not running, f"the deleted leader's containers still run: {running}"
            survivors = [p for p in _scheduler_pods(kubectl) if p["metadata"]["name"] != killed]
            leaders = [p for p in survivors if _is_leader(kubectl, p)]
            lease = _get(kubectl, "-n", NAMESPACE, "lease", LAYER_LOCALITY_SCHEDULER)
            assert len(leaders) == 1, (
                f"no surviving leader yet among {[p['metadata']['name'] for p in survivors]}; "
                f"lease holder {lease['spec'].get('holderIdentity')!r}"
            )
            return leaders[0]

        new_leader = a_survivor_leads()
        failover_s = time.monotonic() - killed_at
        stream.join()
        items = stream.all_bound_once()
        survivors = [p for p in _scheduler_pods(kubectl) if p["metadata"]["name"] != killed]
        scored = ok_at_kill - ok_before
        for pod in survivors:  # the standby's answers, and the replacement's once it serves
            with contextlib.suppress(TestbedError):
                scored += extender_requests(_extender_url(pod)) - ok_start.get(
                    pod["metadata"]["name"], 0
                )
        stack.measurements["failover"] = {
            "pods": HA_PODS,
            "pods_bound": len(items),
            "failover_s": round(failover_s, 2),
            "new_leader": (
                "standby"
                if new_leader["metadata"]["name"] == standby["metadata"]["name"]
                else "replacement"
            ),
            "prioritize_answered": int(scored),
            "pods_without_extender_scores": max(0, HA_PODS - int(scored)),
        }
        assert failover_s < FAILOVER_TIMEOUT_S
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
