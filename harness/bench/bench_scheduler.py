"""Scheduler throughput with the real kube-scheduler: what layer-awareness costs a cluster.

In the spirit of upstream's scheduler_perf (issues 12 and 24). The testbed's control plane
(``harness/playbooks/bench-control-plane.yml``: etcd and kube-apiserver from the same role and
PKI, nothing else) runs with **no kubelets**: N fake nodes are created through the API
(Ready, large allocatable, ``status.images`` with 50 images of the benchmark corpus,
as kubelets publish them, and each node's NodeLayerInventory), and for each
configuration a fresh kube-scheduler (plus the extender where the configuration has one)
places

* a **drain**: every pod is created and queued *before* kube-scheduler starts, so the
  creating client cannot cap the rate; throughput is the rate between the first and the
  last binding, from the ``eventTime`` of kube-scheduler's ``Scheduled`` events (its own
  clock, in microseconds), cross-checked by a watch; then
* a **steady** stream of pods at a fixed rate (latency: what a pod waits, creation to
  binding, while the scheduler keeps up).

Also measured: kube-scheduler's ``/metrics`` (``scheduler_scheduling_algorithm_duration_
seconds``, the extension points) and the extender's (its request histogram), and
``/proc`` (CPU seconds and peak RSS of every process). Nothing runs the pods; they are
deleted between phases. Decision quality: the bytes each pod would pull on the node it
was bound to, from that node's inventory (static here: nothing pulls). With
``--profile``, one more drain per node count runs with py-spy attached to the extender;
its top frames go to the results and ``docs/bench-scheduler.md``.

Configurations (``scheduler_report.CONFIGURATIONS``): ``default`` (the default profile,
ImageLocality included), ``plugin`` (the LayerLocality Score plugin built into
kube-scheduler, with the profile the deploy generator renders), ``plugin-no-image-locality``
(the same with upstream's ImageLocality disabled, issue 43), ``extender-node-names``
(+ the extender in ``NodeNames`` mode fed by its live watch), ``extender-noop`` (+ an
extender answering zeros at once, ``harness/bench/noop_extender.py``: the hop without our work),
``extender-nodes`` (+ the extender, full ``Nodes``). Results: ``scheduler.json`` and
``scheduler.png`` under this run's directory (``runs/<UTC time>/harness/results/``), or over
``harness/results/`` with ``LAYERSCHED_RESULTS=commit``; ``make figures`` renders the README
block and the profile block of ``docs/bench-scheduler.md`` from the committed file. Run:
``make bench-scheduler`` (root: the control plane gets its own bridge).

Rounds (issue 43): 5 at 500 nodes and 3 at 5,000 by default (``--rounds 500=5,5000=3``; a
plain number gives every node count that many). kube-scheduler's CPU per pod is taken
over the drain's span, from the first binding to the last (its start-up, listing nodes and
inventories, is not the drain's), as the CPU seconds it used over the pods bound after the
first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import tenacity
import yaml
from rich.console import Console
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scheduler_report as report
from corpus import Workload, workload

from layersched.builds import REPO_ROOT
from layersched.core.errors import KubeError, LayerschedError
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayersbuilder import build_document
from layersched.core.reference import ImageReference
from layersched.core.strategies.args import InFlightArgs
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.deploy import (
    DEFAULT_SCHEDULER,
    PLUGIN_KEEPS_IMAGE_LOCALITY,
    ExtenderSpec,
    LeaderElectionSpec,
    PluginArgs,
    StackSpec,
    default_scheduler_config,
    extender_scheduler_config,
    plugin_scheduler_config,
    scheduler_api_version_for,
)
from layersched.kube import NODE_LAYERS_PATH, KubeClient, extender_rules, load_kubeconfig
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import destination, write_json
from layersched_harness.testbed.builds import FALLBACK_GO, kubernetes_build
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import PLAYBOOKS_DIR, down, require_root, run_playbook
from layersched_harness.testbed.scheduler_configs import (
    batchable,
    for_process,
    score_plugin_scheduler_config,
)

ROOT = REPO_ROOT
#: The committed results file (a run writes it under its run directory unless committing).
RESULTS = "harness/results/scheduler.json"
PLAYBOOK = PLAYBOOKS_DIR / "bench-control-plane.yml"
NOOP_EXTENDER = Path(__file__).resolve().parent / "noop_extender.py"

#: The benchmark's own testbed name, /24 and state dir (never the main testbeds').
DEFAULT_PREFIX, DEFAULT_NET_BASE = "lsbn", "10.250.63"
#: In memory when the machine has a tmpfs (``provenance.memory_backed``): etcd, whose
#: data lives there, then never waits on a disk's fsync (issue 43's third round: every
#: binding is an etcd write, and the shared disk's write latency moved the default
#: profile's own drain rate between rounds).
DEFAULT_STATE_DIR = provenance.memory_backed("lsbn-state")
DEFAULT_LOG_DIR = Path("/tmp/lsbn-logs")
#: Ports on the benchmark bridge address for the scheduler's metrics and the extender.
SCHEDULER_METRICS_PORT, EXTENDER_PORT = 10451, 10452
#: The corpus and node shape of ``make bench`` (issue 12: 50 images per node).
IMAGES, IMAGES_PER_NODE = 2000, 50
#: Fake node capacity: large, so that resources never decide (110 pods would).
NODE_CPU, NODE_MEMORY, NODE_PODS = "64", "256Gi", "1000"
#: Small requests, so that NodeResourcesFit/BalancedAllocation do their usual work.
POD_CPU, POD_MEMORY = "10m", "16Mi"
NAMESPACE = "bench"
#: kube-scheduler's client rate limit (the default, 50 qps, would cap binding at ~50 pods/s
#: for every configuration alike); scheduler_perf raises it the same way.
SCHEDULER_CLIENT_QPS = 5000
#: As the testbed deploys the extender (k8s_control_plane_extender_timeout).
EXTENDER_HTTP_TIMEOUT_S = 5.0
#: kube-scheduler (1.25+) serves health, metrics and pprof on its secure port only; the
#: benchmark reads them anonymously, so these paths skip authorization (with no
#: authentication kubeconfig, a request is anonymous and only such paths are allowed).
SCHEDULER_OPEN_PATHS = "/healthz,/readyz,/livez,/metrics,/debug/pprof/*"
#: TLS verification of the benchmark's reads of its own processes: kube-scheduler serves
#: a certificate it signed itself at start-up (no CA to check it against), on the
#: benchmark's own bridge; what is read is metrics and profiles, nothing is sent.
SELF_SIGNED = False
#: Rounds per configuration at each node count, alternating (every configuration once per
#: round); a node count not named here gets MIN_ROUNDS (issue 43: 5 at 500 nodes, 3 at
#: 5,000).
DEFAULT_ROUNDS = {500: 5, 5000: 3}
PLUGIN_NAME = report.PLUGIN_NAME


@dataclass(frozen=True)
class PluginRow:
    """How one configuration's kube-scheduler carries LayerLocality."""

    #: Whether upstream's ImageLocality stays enabled beside it.
    image_locality: bool
    #: Whether LayerLocality scores with ``strategy: in-flight`` (else layer-locality).
    in_flight: bool = False


#: The configurations of the kube-scheduler carrying LayerLocality: ``plugin`` keeps
#: ImageLocality (the install's profile until issue 43 replaced it; committed results
#: label their rows by these keys), ``plugin-no-image-locality`` does not, and
#: ``plugin-in-flight`` scores with the in-flight strategy, ImageLocality disabled.
#: Nothing runs on the benchmark's nodes, so every pod bound stays a pull in flight for
#: the in-flight row: it scores against a queue that grows through the drain.
PLUGIN_CONFIGURATIONS = {
    "plugin": PluginRow(image_locality=True),
    "plugin-no-image-locality": PluginRow(image_locality=False),
    "plugin-in-flight": PluginRow(image_locality=False, in_flight=True),
}
#: The row that is the install's profile (:data:`PLUGIN_KEEPS_IMAGE_LOCALITY` and the
#: install's strategy).
INSTALLED_PLUGIN_CONFIGURATION = next(
    c
    for c, row in PLUGIN_CONFIGURATIONS.items()
    if row == PluginRow(PLUGIN_KEEPS_IMAGE_LOCALITY, StackSpec().strategy == IN_FLIGHT_STRATEGY)
)
#: The configurations whose processes need the NodeLayerInventory objects.
INVENTORY_CONFIGURATIONS = (*PLUGIN_CONFIGURATIONS, "extender-node-names")
#: The ClusterRole (and binding) letting kube-scheduler's identity read the inventories
#: for the plugin's informer: the extender's rules, given to ``system:kube-scheduler``.
PLUGIN_READER = "layersched-bench-plugin-inventory-reader"
SCHEDULER_USER = "system:kube-scheduler"
#: A drain rate spans the first and the last binding: it needs two pods.
MIN_DRAIN_PODS = 2
#: The drain's pods.
DRAIN_PODS = 2000
#: Pods placed and deleted before the steady phase: informers settled after the drain's
#: deletions, caches warm.
WARMUP_PODS = 20
#: Client threads creating nodes, inventories and the drain's pods.
CLIENT_THREADS = 8
HTTP_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 180.0
#: The extender's --watch lists 5,000 nodes and their inventories (~40 kB each) first.
EXTENDER_READY_TIMEOUT_S = 600.0
#: Deleting a drain's pods and seeing the list empty.
DELETE_TIMEOUT_S = 300.0
#: kube-scheduler posts its events asynchronously after each binding: how long the last
#: ones may take to be listed once every pod is seen bound.
EVENTS_TIMEOUT_S = 60.0
KIB = 1024
#: Broken watch connections tolerated per configuration before giving up.
MAX_WATCH_RESTARTS = 20
#: Seconds each pod watch lasts before the server ends it and the next one starts.
WATCH_PERIOD_S = 5
#: py-spy's sampling rate, and the configurations profiled by default. The extender runs
#: Python a few percent of a NodeNames drain (its answer takes ~0.3 ms at 500 nodes), so
#: py-spy's default 100 Hz would leave ~100 samples for 2,000 pods; the profiled drain is
#: not a measured row, so the pauses of a higher rate cost nothing but its speed.
PROFILE_RATE_HZ = 250
PROFILED_CONFIGURATIONS = ("extender-node-names", "plugin")
#: How long py-spy may take to write its profile after SIGINT.
PROFILER_STOP_TIMEOUT_S = 60.0
#: Functions ``go tool pprof -top`` lists at most: more than a profile has above its
#: cut-off, so that every stage it has is found.
PPROF_NODES = 5000
#: Seconds kube-scheduler's CPU profile covers at least (it starts at the first binding
#: and runs as long as the measured row's drain took, plus this much).
PPROF_MIN_S = 3


class BenchError(TestbedError):
    """The benchmark could not set something up or measure it."""


class ProcessExited(Exception):
    """A process the benchmark started exited before it was ready."""


# ---------------------------------------------------------------- the API


@dataclass(frozen=True)
class ControlPlane:
    """What ``harness/playbooks/bench-control-plane.yml`` recorded (control-plane.json)."""

    address: str
    api_server: str
    kubeconfig: Path
    scheduler_kubeconfig: Path
    #: The extender's own least-privilege identity (list/watch Nodes and inventories).
    extender_kubeconfig: Path
    ca_file: Path
    admin_cert: Path
    admin_key: Path
    bin_dir: Path
    pidfiles: Mapping[str, Path]

    @classmethod
    def load(cls, state_dir: Path) -> ControlPlane:
        doc = json.loads((state_dir / "control-plane.json").read_text())
        return cls(
            address=doc["address"],
            api_server=doc["api_server"],
            kubeconfig=Path(doc["kubeconfig"]),
            scheduler_kubeconfig=Path(doc["scheduler_kubeconfig"]),
            extender_kubeconfig=Path(doc["extender_kubeconfig"]),
            ca_file=Path(doc["ca_file"]),
            admin_cert=Path(doc["admin_cert"]),
            admin_key=Path(doc["admin_key"]),
            bin_dir=Path(doc["bin_dir"]),
            pidfiles={k: Path(v) for k, v in doc["pidfiles"].items()},
        )

    def kube(self) -> KubeClient:
        """layersched's own API client, as the admin."""
        return KubeClient(load_kubeconfig(str(self.kubeconfig)), timeout_s=HTTP_TIMEOUT_S)

    def client(self, timeout: httpx.Timeout | float = HTTP_TIMEOUT_S) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_server,
            verify=load_kubeconfig(str(self.kubeconfig)).ssl_context(),
            timeout=timeout,
            limits=httpx.Limits(max_connections=CLIENT_THREADS * 2),
        )


def _check(response: httpx.Response, doing: str, ok_conflict: bool = False) -> None:
    if response.is_success or (ok_conflict and response.status_code == httpx.codes.CONFLICT):
        return
    raise BenchError(f"{doing}: HTTP {response.status_code}: {response.text[:300]}")


def _post(client: httpx.Client, path: str, body: Mapping[str, Any], doing: str) -> None:
    _check(client.post(path, content=msgspec.json.encode(body)), doing, ok_conflict=True)


def _parallel_post(
    api: httpx.Client,
    path: str,
    bodies: Sequence[Mapping[str, Any]],
    label: str,
    progress: Progress,
    after: Callable[[Mapping[str, Any]], None] | None = None,
) -> None:
    """POST ``bodies`` to ``path`` on parallel connections; ``after`` each one."""
    task = progress.add_task(label, total=len(bodies))

    def one(body: Mapping[str, Any]) -> None:
        _post(api, path, body, f"creating {path} {body['metadata']['name']}")
        if after is not None:
            after(body)
        progress.advance(task)

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        list(pool.map(one, bodies))


# ---------------------------------------------------------------- nodes and pods


def fake_node(item: Mapping[str, Any]) -> dict[str, Any]:
    """A Ready v1 Node as a kubelet would publish it, from a corpus NodeList item."""
    resources = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS}
    name = item["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**item["metadata"]["labels"], "kubernetes.io/hostname": name},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "images": item["status"]["images"],
        },
    }


def untaint(api: httpx.Client, node: Mapping[str, Any]) -> None:
    """Lift the ``not-ready`` taint admission puts on every new node.

    The TaintNodesByCondition admission plugin adds it at creation and the
    controller-manager's node lifecycle controller lifts it once the kubelet reports
    Ready; neither a kubelet nor that controller runs here, so the benchmark does it.
    """
    name = node["metadata"]["name"]
    response = api.patch(
        f"/api/v1/nodes/{name}",
        content=b'{"spec":{"taints":null}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    _check(response, f"lifting the not-ready taint of node {name}")


#: What the fake nodes' inventories say they came from (the agent names a real runtime).
INVENTORY_RUNTIME, INVENTORY_SOURCE = "bench://corpus", "registry"


def inventory_document(load: Workload, item: Mapping[str, Any]) -> dict[str, Any]:
    """The node's NodeLayerInventory, as an agent would publish it for the same images."""
    layers = load.corpus.layers_by_image()
    held = [
        NodeImage.held(
            names=tuple(image["names"]),
            digest=ImageReference.parse(image["names"][0]).digest or "",
            layers=layers[image["names"][-1]],
        )
        for image in item["status"]["images"]
    ]
    return build_document(
        item["metadata"]["name"], held, runtime=INVENTORY_RUNTIME, source=INVENTORY_SOURCE
    )


def node_layers(load: Workload, item: Mapping[str, Any]) -> dict[str, int]:
    """The node's distinct layers (digest -> size) from its ``status.images`` names."""
    by_name = load.layers_document()
    held: dict[str, int] = {}
    for image in item["status"]["images"]:
        for layer in by_name[image["names"][-1]]:
            held[layer["digest"]] = layer["size"]
    return held


def pod_layers(load: Workload, pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's distinct layers (digest -> size) over all its containers."""
    by_name = load.layers_document()
    wanted: dict[str, int] = {}
    for container in pod["spec"]["containers"]:
        for layer in by_name[container["image"]]:
            wanted.setdefault(layer["digest"], layer["size"])
    return wanted


def bench_pods(load: Workload, count: int, prefix: str, seed: int) -> list[dict[str, Any]]:
    """``count`` pods with corpus images, named ``prefix-i``; nobody runs them."""
    pods = []
    for i, pod in enumerate(load.pods(count, seed=seed)):
        containers = [
            {**c, "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}}}
            for c in pod["spec"]["containers"]
        ]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{prefix}-{i}", "namespace": NAMESPACE},
                "spec": {
                    "containers": containers,
                    # no token Secret exists without the controller-manager
                    "automountServiceAccountToken": False,
                },
            }
        )
    return pods


# ---------------------------------------------------------------- the watch


@dataclass
class BindWatch:
    """A watch on the namespace's pods: when each was first seen bound, and where."""

    api: ControlPlane
    bound_at: dict[str, float] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    restarts: int = 0

    def start(self) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        with self.api.kube() as kube:
            _, version = kube.list(path)
        self._thread = threading.Thread(target=self._run, args=(path, version), daemon=True)
        self._thread.start()

    def _run(self, path: str, version: str) -> None:
        """Follow the pods from ``version`` in short watches (the server ends each after
        :data:`WATCH_PERIOD_S`), each picking up where the last event left off, as an
        informer does; a broken connection is counted and picked up the same way. The
        thread alone closes its client: closing it from another thread while a read is
        blocked would let that read land on whatever connection reuses the descriptor."""
        kube = self.api.kube()
        try:
            while not self._stop.is_set():
                try:
                    for event in kube.watch(path, version, timeout_s=WATCH_PERIOD_S):
                        now = time.perf_counter()
                        version = event.resource_version or version
                        pod = event.object
                        name = pod.get("metadata", {}).get("name")
                        node = pod.get("spec", {}).get("nodeName")
                        if node and name not in self.bound_at:
                            self.bound_at[name] = now
                            self.node_of[name] = node
                except KubeError as err:
                    self.restarts += 1
                    if self.restarts > MAX_WATCH_RESTARTS:
                        self.error = f"pod watch failed {self.restarts} times, last: {err}"
                        return
        finally:
            kube.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WATCH_PERIOD_S + HTTP_TIMEOUT_S)

    def bound(self, names: Sequence[str]) -> int:
        return sum(1 for n in names if n in self.bound_at)


def wait_bound(
    watch: BindWatch, names: Sequence[str], timeout_s: float, at_least: int | None = None
) -> bool:
    """Wait until every pod of ``names`` (or ``at_least`` of them) is bound; False when
    ``timeout_s`` ran out."""
    wanted = len(names) if at_least is None else at_least

    @tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s), wait=tenacity.wait_fixed(0.1), reraise=True
    )
    def all_bound() -> None:
        assert watch.error is None, watch.error
        assert watch.bound(names) >= wanted

    try:
        all_bound()
    except AssertionError:
        if watch.error:
            raise BenchError(watch.error) from None
        return False
    return True


def delete_pods(api: httpx.Client) -> None:
    """Delete every pod of the namespace at once (grace 0: no kubelet confirms)."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    body = msgspec.json.encode({"kind": "DeleteOptions", "gracePeriodSeconds": 0})
    _check(api.request("DELETE", path, content=body), "deleting the benchmark pods")

    @tenacity.retry(
        stop=tenacity.stop_after_delay(DELETE_TIMEOUT_S), wait=tenacity.wait_fixed(0.5),
        reraise=True,
    )  # fmt: skip
    def empty() -> None:
        response = api.get(path, params={"limit": 1})
        _check(response, "listing the benchmark pods")
        assert not response.json()["items"], "pods still listed after deletion"

    empty()


# ---------------------------------------------------------------- processes


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / KIB, 1)
    return 0.0


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (``clear_refs`` 5)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


class Usage:
    """CPU seconds and peak RSS of named processes over one measured span."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        for pid in self.pids.values():
            reset_peak(pid)
        self.start = {name: cpu_s(pid) for name, pid in self.pids.items()}
        self.started_s = time.perf_counter()

    def add_started(self, name: str, pid: int) -> None:
        """Count a process started since the span began: all its CPU is the span's."""
        self.pids[name] = pid
        self.start[name] = 0.0

    def result(self) -> dict[str, dict[str, float]]:
        wall_s = time.perf_counter() - self.started_s
        out = {}
        for name, pid in self.pids.items():
            used = cpu_s(pid) - self.start[name]
            out[name] = {
                "cpu_s": round(used, 2),
                "cpu_share_of_wall": round(used / wall_s, 2),
                "peak_rss_mb": peak_rss_mb(pid),
            }
        return out


def _pid(path: Path) -> int:
    return int(path.read_text().split()[0])


#: kube-scheduler/klog lines that say why a process stopped (its last error wins).
_ERROR_MARKERS = ("error", "Error", "failed", "invalid", "not found", "does not exist")


def _last_line(log: Path) -> str:
    """The last line of ``log`` that says what went wrong (else the last line), trimmed."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log"
    lines = [line for line in lines if line]
    errors = [line for line in lines if any(marker in line for marker in _ERROR_MARKERS)]
    chosen = (errors or lines or ["empty log"])[-1]
    return chosen[:300]


@contextlib.contextmanager
def _process(
    argv: Sequence[str], log: Path, ready: str, name: str, timeout_s: float = READY_TIMEOUT_S
) -> Iterator[int]:
    """Run ``argv`` (log to ``log``) until the block ends; wait for GET ``ready`` == 200."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    # a process that exited will not become ready: no retry then (a wait for nothing)
    @tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s), wait=tenacity.wait_fixed(0.3),
        retry=tenacity.retry_if_exception_type(AssertionError), reraise=True,
    )  # fmt: skip
    def is_ready() -> None:
        if proc.poll() is not None:
            raise ProcessExited(
                f"{name} exited with {proc.returncode} ({_last_line(log)}); see {log}"
            )
        try:
            # kube-scheduler's certificate is its own self-signed one (SELF_SIGNED)
            response = httpx.get(ready, timeout=5.0, verify=SELF_SIGNED)
            assert response.status_code == httpx.codes.OK
        except httpx.HTTPError as err:
            raise AssertionError(f"{name} not ready at {ready}: {err}") from err

    try:
        try:
            is_ready()
        except ProcessExited as err:
            raise BenchError(str(err)) from err
        except AssertionError as err:
            raise BenchError(f"{name} did not become ready within {timeout_s:g} s: {err}") from err
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: The configurations whose kube-scheduler calls an extender, and in which mode.
EXTENDER_NODE_CACHE_CAPABLE = {
    "extender-nodes": False,
    "extender-node-names": True,
    # the same request as extender-node-names: the difference is the answer's work
    "extender-noop": True,
}


#: The plugin's staleness bound in the benchmark: its inventories are created once and never
#: refreshed (nothing pulls), so a bound the run cannot reach keeps the plugin's age check
#: running without ever dropping a node (the default, 30 min, is within a slow run's reach).
PLUGIN_INVENTORY_MAX_AGE_S = 24 * 3600
#: How long the plugin may take to list the inventories at start-up: 5,000 of them are
#: ~200 MB of JSON (the extender's --watch gets EXTENDER_READY_TIMEOUT_S for the same
#: list). Start-up is outside the drain's span, so waiting costs the rate nothing.
PLUGIN_INVENTORY_SYNC_TIMEOUT_S = 600


class PluginUnavailable(BenchError):
    """The plugin row cannot be configured from what this checkout has."""


def plugin_config(
    plane: ControlPlane, plugin_name: str = PLUGIN_NAME, row: PluginRow = PluginRow(True)
) -> dict[str, Any]:
    """A plugin row's configuration, under the default scheduler's name (the benchmark's
    pods name no scheduler), from the generator; without ``row.image_locality``,
    upstream's ImageLocality disabled; with ``row.in_flight``, the in-flight strategy (the
    kubelet's default serial pulls).

    LayerLocality's is what the deploy generator renders for the plugin-built scheduler
    (``layersched.deploy.plugin_scheduler_config``, issue 24: the default plugins plus
    LayerLocality at preScore and score, with its args), watching the inventories with the
    scheduler's own kubeconfig. A stand-in plugin (``--plugin-name``) is the default
    plugins plus that one at score
    (``layersched_harness.testbed.scheduler_configs.score_plugin_scheduler_config``)."""
    version = kubernetes_build().version
    api_version = scheduler_api_version_for(version)
    if plugin_name != PLUGIN_NAME:
        return score_plugin_scheduler_config(
            plugin_name, DEFAULT_SCHEDULER, api_version=api_version
        )
    args = PluginArgs(
        kubeconfig=str(plane.scheduler_kubeconfig),
        inventory_max_age_s=PLUGIN_INVENTORY_MAX_AGE_S,
        inventory_sync_timeout_s=PLUGIN_INVENTORY_SYNC_TIMEOUT_S,
        in_flight=InFlightArgs() if row.in_flight else None,
    )
    return plugin_scheduler_config(
        args,
        scheduler_name=DEFAULT_SCHEDULER,
        api_version=api_version,
        kubernetes_version=version,
        image_locality=row.image_locality,
    )


# ---------------------------------------------------------------- the held start
#: How a drain starts (``--start``). ``held``: kube-scheduler starts while the benchmark
#: holds its Lease, so it lists the nodes, the pods and (the plugin) the inventories but
#: binds nothing; once its CPU and the API server's have settled, the benchmark releases
#: the Lease and the drain is the scheduling alone, as on a cluster whose scheduler has
#: been up for a while. ``cold``: the drain starts with the process (the results before
#: issue 43's third round), its start-up's after-effects inside the drain.
HELD_START, COLD_START = "held", "cold"
STARTS = (HELD_START, COLD_START)
#: The Lease kube-scheduler elects its leader on: upstream's default name, which the
#: built-in system:kube-scheduler role may get and update.
LEASE_NAMESPACE, LEASE_NAME = "kube-system", "kube-scheduler"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
#: The holder the benchmark writes, with a duration no drain's start-up reaches.
LEASE_HOLDER, LEASE_HELD_S = "layersched-bench-hold", 3600
#: The leader election kube-scheduler runs under a held start: it takes the released
#: Lease within a retry period (client-go jitters it by up to 1.2x).
HELD_LEADER_ELECTION = LeaderElectionSpec(
    LEASE_NAME, LEASE_NAMESPACE, lease_duration_s=15.0, renew_deadline_s=10.0, retry_period_s=0.5
)
#: Settled: over SETTLE_WINDOW_S, kube-scheduler and kube-apiserver each used less than
#: SETTLE_MAX_CORES; checked every SETTLE_POLL_S, for at most SETTLE_TIMEOUT_S (then the
#: drain starts anyway and the row says it had not settled).
SETTLE_WINDOW_S, SETTLE_MAX_CORES, SETTLE_POLL_S, SETTLE_TIMEOUT_S = 2.0, 0.1, 0.25, 240.0
SETTLE_WATCHED = ("kube-scheduler", "kube-apiserver")


def _micro_time(at: float) -> str:
    """A ``MicroTime`` (the Lease's times) for the Unix time ``at``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}Z"


def hold_leadership(api: httpx.Client, now: float | None = None) -> None:
    """Write kube-scheduler's Lease as held by the benchmark (replacing the one a stopped
    scheduler left): a scheduler started now waits, not leading, until it is released."""
    release_leadership(api)
    at = _micro_time(time.time() if now is None else now)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": LEASE_HOLDER,
            "leaseDurationSeconds": LEASE_HELD_S,
            "acquireTime": at,
            "renewTime": at,
        },
    }
    _check(
        api.post(LEASE_PATH, content=msgspec.json.encode(lease)), "holding kube-scheduler's Lease"
    )


def release_leadership(api: httpx.Client) -> None:
    """Delete kube-scheduler's Lease (none there is fine): a waiting scheduler takes it."""
    response = api.delete(f"{LEASE_PATH}/{LEASE_NAME}")
    if response.status_code != httpx.codes.NOT_FOUND:
        _check(response, "releasing kube-scheduler's Lease")


def settle(
    pids: Mapping[str, int],
    timeout_s: float = SETTLE_TIMEOUT_S,
    read_cpu_s: Callable[[int], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Wait until each of :data:`SETTLE_WATCHED` used less than :data:`SETTLE_MAX_CORES`
    over the last :data:`SETTLE_WINDOW_S`, or ``timeout_s``: whether it settled, and how
    long it took (the start-up's CPU is the caller's ``Usage``)."""
    read = read_cpu_s or cpu_s
    watched = {name: pids[name] for name in SETTLE_WATCHED if name in pids}
    began = clock()
    first = {name: read(pid) for name, pid in watched.items()}
    samples: list[tuple[float, dict[str, float]]] = [(began, first)]
    settled = False
    while True:
        now = clock()
        used = {name: read(pid) for name, pid in watched.items()}
        samples.append((now, used))
        # the newest sample at least a window old
        old = [sample for sample in samples if now - sample[0] >= SETTLE_WINDOW_S]
        if old:
            at, then = old[-1]
            samples = samples[samples.index(old[-1]) :]
            if all((used[k] - then[k]) / (now - at) < SETTLE_MAX_CORES for k in watched):
                settled = True
                break
        if now - began >= timeout_s:
            break
        sleep(SETTLE_POLL_S)
    return {"settled": settled, "s": round(now - began, 2)}


def scheduler_config(
    plane: ControlPlane, config: str, plugin_name: str = PLUGIN_NAME, start: str = COLD_START
) -> dict[str, Any]:
    """The KubeSchedulerConfiguration of one configuration, from layersched's generator
    (``layersched.deploy``): upstream's default profile, the plugin's profile or the
    extender's, under the default scheduler's name, for a process (its kubeconfig and
    client rate: ``layersched_harness.testbed.scheduler_configs.for_process``). Every row's profile
    has PodTopologySpread's system default constraints off (``batchable``, upstream's
    batching configuration): with them, 1.35+ signs no pod and opportunistic batching
    (KEP-5598) never runs, in any row. A ``held`` start elects the leader on upstream's
    Lease (:data:`HELD_LEADER_ELECTION`), which the benchmark holds until the drain."""
    version = kubernetes_build().version
    api_version = scheduler_api_version_for(version)
    if config in PLUGIN_CONFIGURATIONS:
        doc = plugin_config(plane, plugin_name, PLUGIN_CONFIGURATIONS[config])
    elif config in EXTENDER_NODE_CACHE_CAPABLE:
        extender = ExtenderSpec(
            f"http://{plane.address}:{EXTENDER_PORT}",
            http_timeout_s=EXTENDER_HTTP_TIMEOUT_S,
            node_cache_capable=EXTENDER_NODE_CACHE_CAPABLE[config],
        )
        doc = extender_scheduler_config(extender, DEFAULT_SCHEDULER, api_version)
    else:
        doc = default_scheduler_config(DEFAULT_SCHEDULER, api_version)
    doc = for_process(
        batchable(doc), str(plane.scheduler_kubeconfig), client_qps=SCHEDULER_CLIENT_QPS
    )
    if start == HELD_START:
        doc["leaderElection"] = HELD_LEADER_ELECTION.to_config()
    return doc


def scheduler_argv(
    binary: Path, config_path: Path, plane: ControlPlane, cert_dir: Path
) -> list[str]:
    """kube-scheduler serving health, metrics and pprof on the benchmark's port (HTTPS,
    its own self-signed certificate in ``cert_dir``; the open paths need no credentials)."""
    return [
        str(binary),
        f"--config={config_path}",
        f"--bind-address={plane.address}",
        f"--secure-port={SCHEDULER_METRICS_PORT}",
        f"--cert-dir={cert_dir}",
        f"--authorization-always-allow-paths={SCHEDULER_OPEN_PATHS}",
        "--v=1",
    ]


def extender_argv(plane: ControlPlane, config: str, layers_path: Path) -> list[str]:
    """The extender process of an ``extender-*`` configuration."""
    if config == "extender-noop":
        return [
            sys.executable, str(NOOP_EXTENDER),
            "--host", plane.address, "--port", str(EXTENDER_PORT),
        ]  # fmt: skip
    argv = [
        sys.executable, "-m", "layersched.cli.main", "extender",
        "--host", plane.address, "--port", str(EXTENDER_PORT),
        "--strategy", "layer-locality", "--layers", str(layers_path),
    ]  # fmt: skip
    if config == "extender-node-names":
        argv += ["--watch", "--kubeconfig", str(plane.extender_kubeconfig)]
    return argv


def plugin_absent(binary: Path, plugin_name: str = PLUGIN_NAME, what: str = "") -> str | None:
    """Why ``binary`` cannot run the ``plugin`` row, or None when it registers the plugin.

    A Go binary carries its registered plugins' names as string constants: a build
    without the plugin lacks the name entirely. (A build with it is then started; a
    profile it rejects ends the row with kube-scheduler's own error.) ``what`` names the
    binary in the reason (default: its path; the results and README must not spell the
    build cache's path, which ``layersched.builds`` alone derives)."""
    what = what or str(binary)
    if not binary.is_file():
        return f"{what} does not exist: build it with `make kubernetes`"
    needle = plugin_name.encode()
    with binary.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(needle) >= 0:
            return None
    return (
        f"{what} has no {plugin_name} Score plugin (the name is nowhere in the binary): "
        "issue 24's Go plugin builds it into the Kubernetes build's kube-scheduler "
        "(`make kubernetes` once it has landed); --plugin-kube-scheduler runs another binary"
    )


def scrape(url: str) -> str:
    response = httpx.get(url, timeout=HTTP_TIMEOUT_S, verify=SELF_SIGNED)
    _check(response, f"scraping {url}")
    return response.text


# ---------------------------------------------------------------- one configuration


@dataclass
class Phase:
    """One measured phase: pods created, when, and whether the watch saw them all bound."""

    names: list[str]
    created_at: dict[str, float]
    complete: bool


def _create_steady(
    api: httpx.Client, pods: Sequence[Mapping[str, Any]], rate: float, created: dict[str, float]
) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    start = time.perf_counter()
    for i, pod in enumerate(pods):
        # pacing, not waiting for a condition: pod i goes out at start + i / rate
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        created[pod["metadata"]["name"]] = time.perf_counter()
        _check(api.post(path, content=msgspec.json.encode(pod)), "creating a pod")


def queue_pods(
    api: httpx.Client, pods: Sequence[Mapping[str, Any]], progress: Progress, label: str
) -> dict[str, float]:
    """Create ``pods`` on parallel connections while no scheduler runs: they wait, pending,
    in the API until kube-scheduler starts and lists them into its queue."""
    created: dict[str, float] = {}

    def stamp(pod: Mapping[str, Any]) -> None:
        created[pod["metadata"]["name"]] = time.perf_counter()

    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    _parallel_post(api, path, pods, label, progress, after=stamp)
    return created


def run_steady(
    api: httpx.Client,
    watch: BindWatch,
    pods: Sequence[Mapping[str, Any]],
    rate: float,
    timeout_s: float,
) -> Phase:
    created: dict[str, float] = {}
    _create_steady(api, pods, rate, created)
    names = [p["metadata"]["name"] for p in pods]
    return Phase(names, created, wait_bound(watch, names, timeout_s))


def steady_result(phase: Phase, watch: BindWatch) -> dict[str, Any]:
    """The steady phase's latency: creation to the watch seeing the binding."""
    bound = [n for n in phase.names if n in watch.bound_at]
    return {
        "pods": len(phase.names),
        "bound": len(bound),
        "complete": phase.complete,
        "latency": report.latency_stats([watch.bound_at[n] - phase.created_at[n] for n in bound]),
    }


def list_events(plane: ControlPlane) -> list[dict[str, Any]]:
    """Every event of the benchmark's namespace, as ``events.k8s.io/v1`` serves them."""
    with plane.kube() as kube:
        items, _ = kube.list(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    return items


def binding_events(plane: ControlPlane, bound: Sequence[str]) -> dict[str, float]:
    """The ``Scheduled`` event time of each pod of ``bound``; kube-scheduler posts them
    asynchronously, so wait (up to :data:`EVENTS_TIMEOUT_S`) until all are listed, and
    return what there is when some never come."""
    times: dict[str, float] = {}

    @tenacity.retry(
        stop=tenacity.stop_after_delay(EVENTS_TIMEOUT_S), wait=tenacity.wait_fixed(1.0),
        reraise=True,
    )  # fmt: skip
    def all_listed() -> None:
        times.clear()
        times.update(report.binding_times_s(list_events(plane), bound))
        assert len(times) == len(bound), f"{len(times)} of {len(bound)} Scheduled events"

    with contextlib.suppress(AssertionError):
        all_listed()
    return times


def delete_events(api: httpx.Client) -> None:
    """Remove the namespace's events, so that each configuration lists only its own."""
    _check(api.delete(f"/api/v1/namespaces/{NAMESPACE}/events"), "deleting the events")


def drain_result(
    phase: Phase, watch: BindWatch, event_times_s: Mapping[str, float], started_at_s: float
) -> dict[str, Any]:
    """The drain's rate between the first and the last binding.

    From kube-scheduler's ``Scheduled`` events when there is one for every bound pod (its
    own clock); otherwise from the watch (when the benchmark saw each binding), which
    also stands beside it as a cross-check. ``started_at_s``: when kube-scheduler was
    started (epoch seconds), for the start-up time before the first binding."""
    bound = [n for n in phase.names if n in watch.bound_at]
    watch_times = [watch.bound_at[n] for n in bound]
    from_events = report.drain_rate(event_times_s.values())
    from_watch = report.drain_rate(watch_times)
    use_events = from_events is not None and len(event_times_s) == len(bound)
    times = list(event_times_s.values()) if use_events else watch_times
    rate = from_events if use_events else from_watch
    first_event = min(event_times_s.values(), default=None)
    return {
        "pods": len(phase.names),
        # every pod was created before kube-scheduler started: this no longer caps the rate
        "created_in_s": round(max(phase.created_at.values()) - min(phase.created_at.values()), 2),
        "bound": len(bound),
        "complete": phase.complete,
        "events": len(event_times_s),
        "binding_source": "events" if use_events else "watch",
        "span_s": round(max(times) - min(times), 3) if times else None,
        "pods_per_s": round(rate, 1) if rate else None,
        "pods_per_s_watch": round(from_watch, 1) if from_watch else None,
        "start_to_first_binding_s": (
            round(first_event - started_at_s, 2) if first_event is not None else None
        ),
    }


class PySpy:
    """``py-spy record`` attached to one process until stopped; the profile it wrote.

    Started before kube-scheduler, stopped (SIGINT, as py-spy expects) after the last
    binding. ``--gil`` keeps only the samples of the thread holding the GIL, i.e. running
    Python: a thread blocked on a socket (the watches' reads, the event loop's poll) is
    not counted even when an overloaded machine leaves it runnable, which py-spy's own
    idle detection counts as busy. ``--nonblocking`` reads the stacks without pausing the
    extender: paused at each sample (py-spy's default), it drained at half the measured
    row's rate in a development run, kube-scheduler waiting on its answers; a stack read
    while it changes is dropped, and py-spy counts it as an error."""

    def __init__(self, pid: int, output: Path, log: Path, rate_hz: int = PROFILE_RATE_HZ) -> None:
        self.output, self.log, self.rate_hz = output, log, rate_hz
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(binary).is_file():
            raise BenchError(
                "py-spy is not installed: `make venv` installs it (the dev extra), or "
                "run without --profile"
            )
        argv = [
            binary, "record", "--pid", str(pid), "--rate", str(rate_hz), "--format", "raw",
            "--function", "--threads", "--gil", "--nonblocking", "--output", str(output),
        ]  # fmt: skip
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.started_s = time.perf_counter()
        self.sampled_s = 0.0

    def close(self) -> None:
        """Stop py-spy (SIGINT: it writes what it has) and wait for it; safe to call twice."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=PROFILER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> report.Profile:
        """Stop sampling and read the profile (a BenchError saying why when there is none)."""
        self.sampled_s = time.perf_counter() - self.started_s
        self.close()
        if not self.output.is_file():
            raise BenchError(
                f"py-spy wrote no profile (exit {self.proc.returncode}: "
                f"{_last_line(self.log)}); see {self.log}"
            )
        try:
            return report.collapsed_profile(self.output.read_text())
        except ValueError as err:
            raise BenchError(f"reading py-spy's profile {self.output}: {err}") from err

    def errors(self) -> int | None:
        """The samples py-spy could not take (its log's last ``Errors: N``), if it said."""
        counts = report.py_spy_counts(self.log.read_text(errors="replace"))
        return counts[1] if counts else None


class GoProfile:
    """kube-scheduler's CPU profile over the drain: ``/debug/pprof/profile`` on its metrics
    port (``enableProfiling`` is on by default), fetched in the background for
    ``seconds``, then summarised by ``go tool pprof -top`` (Go profiles carry their
    symbols: the binary is not needed)."""

    def __init__(self, url: str, seconds: int, output: Path) -> None:
        self.url, self.seconds, self.output = url, seconds, output
        self.error: str | None = None
        self._thread = threading.Thread(target=self._fetch, daemon=True)
        self._thread.start()

    def _fetch(self) -> None:
        try:
            response = httpx.get(
                self.url,
                params={"seconds": self.seconds},
                timeout=self.seconds + HTTP_TIMEOUT_S,
                verify=SELF_SIGNED,
            )
            response.raise_for_status()
            self.output.write_bytes(response.content)
        except (httpx.HTTPError, OSError) as err:
            self.error = f"fetching {self.url}: {err}"

    def result(self) -> dict[str, Any]:
        """pprof's top functions by flat and by cumulative time, or why there are none."""
        self._thread.join(timeout=self.seconds + 2 * HTTP_TIMEOUT_S)
        go = shutil.which("go") or (str(FALLBACK_GO) if FALLBACK_GO.is_file() else None)
        if self.error or go is None:
            return {
                "skipped": self.error
                or f"no `go` on PATH nor at {FALLBACK_GO} (the Go `make kubernetes` builds with)"
            }
        # every node above pprof's default cut-off (0.5% of the samples), by cumulative time
        argv = [go, "tool", "pprof", "-top", "-cum", f"-nodecount={PPROF_NODES}", str(self.output)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return {"skipped": f"go tool pprof failed: {done.stderr.strip()[-300:]}"}
        return {
            "seconds": self.seconds,
            "summary": report.go_profile_summary(report.pprof_top(done.stdout)),
        }


@dataclass
class Context:
    """What every configuration shares."""

    plane: ControlPlane
    api: httpx.Client
    load: Workload
    layers_path: Path
    log_dir: Path
    #: Each node's distinct layer digests, and how many nodes hold each layer.
    node_sets: dict[str, set[str]]
    layer_node_counts: dict[str, int]
    drain_pods: int
    steady_pods: int
    steady_rate: float
    phase_timeout_s: float
    console: Console
    progress: Progress
    #: The kube-scheduler of the ``plugin`` row, and the plugin's registered name.
    plugin_binary: Path
    plugin_name: str = PLUGIN_NAME
    #: The drain's start: ``held`` (kube-scheduler starts without the leadership, settles,
    #: then gets it) or ``cold`` (it schedules as soon as its informers have synced).
    start: str = HELD_START


@dataclass
class Scrapes:
    """``/metrics`` text of kube-scheduler and the extender at the phases' edges."""

    scheduler: dict[str, str] = field(default_factory=dict)
    extender: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """One configuration's run: at ``n`` nodes, with the pods of ``seed``, in round
    ``round_``; with ``profile``, the profiled drain (kube-scheduler's profile lasting
    ``profile_s`` seconds)."""

    n: int
    config: str
    seed: int
    round_: int = 0
    profile: bool = False
    profile_s: int = 0


def measure(ctx: Context, run: Run) -> dict[str, Any]:
    """Start the configuration's extender, queue the drain's pods, start kube-scheduler,
    drain, then run the steady phase on the same scheduler; stop them.

    With ``profile``, py-spy samples the extender during the drain, kube-scheduler
    profiles itself for ``profile_s`` seconds from its start, and the steady phase is
    skipped: the result is the profiles and the (perturbed) drain."""
    plane = ctx.plane
    n, config, seed, profile, profile_s = run.n, run.config, run.seed, run.profile, run.profile_s
    tag = f"{config}-{n}-r{run.round_}" + ("-profiled" if profile else "")
    config_path = ctx.log_dir / f"scheduler-{tag}.yaml"
    config_path.write_text(
        yaml.safe_dump(scheduler_config(plane, config, ctx.plugin_name, ctx.start), sort_keys=False)
    )
    plugin = config in PLUGIN_CONFIGURATIONS
    binary = ctx.plugin_binary if plugin else plane.bin_dir / "kube-scheduler"
    scheduler_url = f"https://{plane.address}:{SCHEDULER_METRICS_PORT}"
    metrics_url = f"{scheduler_url}/metrics"
    extender_url = f"http://{plane.address}:{EXTENDER_PORT}"
    has_extender = config in EXTENDER_NODE_CACHE_CAPABLE
    scrapes = Scrapes()

    def scrape_all(edge: str) -> None:
        scrapes.scheduler[edge] = scrape(metrics_url)
        if has_extender:
            scrapes.extender[edge] = scrape(extender_url + "/metrics")

    with contextlib.ExitStack() as stack:
        pids = {name: _pid(path) for name, path in plane.pidfiles.items()}
        if has_extender:
            ready = "/readyz" if config == "extender-node-names" else "/healthz"
            pids["extender"] = stack.enter_context(
                _process(
                    extender_argv(plane, config, ctx.layers_path),
                    ctx.log_dir / f"extender-{tag}.log",
                    extender_url + ready,
                    "extender",
                    EXTENDER_READY_TIMEOUT_S,
                )
            )
        watch = BindWatch(plane)
        watch.start()
        stack.callback(watch.stop)

        # the drain: every pod waits in the API before kube-scheduler starts
        pods = bench_pods(ctx.load, ctx.drain_pods, f"drain-{tag}", seed=seed)
        all_pods = {p["metadata"]["name"]: p for p in pods}
        created = queue_pods(ctx.api, pods, ctx.progress, f"{n} nodes, {config}: queueing")
        extender_before = scrape(extender_url + "/metrics") if has_extender else ""
        # py-spy samples the extender; a configuration without one is profiled in Go only
        profiler = (
            PySpy(
                pids["extender"],
                ctx.log_dir / f"py-spy-{tag}.txt",
                ctx.log_dir / f"py-spy-{tag}.log",
            )
            if profile and has_extender
            else None
        )
        if profiler is not None:
            stack.callback(profiler.close)  # also when kube-scheduler fails to start
        ctx.console.log(f"{n} nodes, {config}: draining {len(pods)} queued pods")
        pids["bench-client"] = os.getpid()
        held = ctx.start == HELD_START
        if held:
            hold_leadership(ctx.api)
        # from kube-scheduler's start (its informers' sync included) to the last binding;
        # under a held start, the start-up's own, then the drain's from the release
        usage = Usage(pids)
        started_at_s = time.time()
        rejected_before = rejected_requests(ctx.api)
        pids["kube-scheduler"] = stack.enter_context(
            _process(
                scheduler_argv(binary, config_path, plane, ctx.log_dir / "scheduler-certs"),
                ctx.log_dir / f"kube-scheduler-{tag}.log",
                f"{scheduler_url}/healthz",
                "kube-scheduler",
            )
        )
        usage.add_started("kube-scheduler", pids["kube-scheduler"])
        start_up: dict[str, Any] | None = None
        if held:
            ctx.console.log(f"{n} nodes, {config}: started, not leading; waiting to settle")
            settled = settle(pids)
            start_up = {
                "settled": settled["settled"],
                "s": round(time.time() - started_at_s, 2),
                "resources": usage.result(),
            }
            if not settled["settled"]:
                ctx.console.log(
                    f"[yellow]{n} nodes, {config}: not settled after {settled['s']:g} s; "
                    "draining anyway (the row says so)[/yellow]"
                )
            usage = Usage(pids)
            started_at_s = time.time()
            release_leadership(ctx.api)
        names = list(all_pods)
        go_profile = None
        # from the first binding: its start-up (listing 5,000 nodes) is not the drain
        wait_bound(watch, names, ctx.phase_timeout_s, at_least=1)
        first_bound, scheduler_cpu_s = watch.bound(names), cpu_s(pids["kube-scheduler"])
        if profile:
            go_profile = GoProfile(
                f"{scheduler_url}/debug/pprof/profile",
                profile_s,
                ctx.log_dir / f"kube-scheduler-{tag}.pprof",
            )
        drain = Phase(names, created, wait_bound(watch, names, ctx.phase_timeout_s))
        drain_usage = usage.result()
        scheduler_cpu_s = cpu_s(pids["kube-scheduler"]) - scheduler_cpu_s
        after_first = watch.bound(names) - first_bound
        sampled = profiler.stop() if profiler else None
        scrape_all("drain")
        if has_extender:
            scrapes.extender["before"] = extender_before
        bound = [name for name in names if name in watch.bound_at]
        result: dict[str, Any] = {
            "drain": drain_result(drain, watch, binding_events(plane, bound), started_at_s),
            "scheduler_cpu": {
                "cpu_s": round(scheduler_cpu_s, 2),
                "pods": after_first,
                "ms_per_pod": (
                    round(scheduler_cpu_s * report.MS_PER_S / after_first, 3)
                    if after_first > 0
                    else None
                ),
            },
        }
        if start_up is not None:
            result["start_up"] = start_up
        # from the start: the start-up's lists are kube-scheduler's requests too
        result["rejected_429"] = rejected_requests(ctx.api) - rejected_before
        delete_pods(ctx.api)
        delete_events(ctx.api)
        if go_profile is not None:
            profiled: dict[str, Any] = {
                "drain": result["drain"],
                "kube_scheduler": go_profile.result(),
            }
            if profiler is not None and sampled is not None:
                profiled |= {
                    "sampled_s": round(profiler.sampled_s, 1),
                    "rate_hz": profiler.rate_hz,
                    "sample_errors": profiler.errors(),
                    "extender": report.profile_summary(sampled),
                }
            return profiled

        warm = bench_pods(ctx.load, WARMUP_PODS, f"warm-{tag}", seed=seed + 100)
        if not run_steady(ctx.api, watch, warm, ctx.steady_rate, READY_TIMEOUT_S).complete:
            raise BenchError(f"{tag}: the warm-up pods were not all bound; see {ctx.log_dir}")
        delete_pods(ctx.api)
        scrape_all("warm")
        usage = Usage(pids)
        pods = bench_pods(ctx.load, ctx.steady_pods, f"steady-{tag}", seed=seed + 1)
        all_pods |= {p["metadata"]["name"]: p for p in pods}
        ctx.console.log(f"{n} nodes, {config}: steady phase, {len(pods)} pods")
        steady = run_steady(ctx.api, watch, pods, ctx.steady_rate, ctx.phase_timeout_s)
        steady_usage = usage.result()
        scrape_all("steady")
        delete_pods(ctx.api)
        delete_events(ctx.api)

    result["steady"] = steady_result(steady, watch)
    result["watch_restarts"] = watch.restarts
    result["pods_per_s"] = result["drain"]["pods_per_s"]
    result["p50_ms"] = result["steady"]["latency"]["p50_ms"]
    result["p99_ms"] = result["steady"]["latency"]["p99_ms"]
    result["scheduler_cpu_ms_per_pod"] = result["scheduler_cpu"]["ms_per_pod"]
    result["resources"] = {"drain": drain_usage, "steady": steady_usage}
    result["scheduler_metrics"] = {
        # a fresh kube-scheduler: everything it observed until the drain's end is the drain's
        "drain": scheduler_metrics("", scrapes.scheduler["drain"]),
        "steady": scheduler_metrics(scrapes.scheduler["warm"], scrapes.scheduler["steady"]),
    }
    if has_extender:
        result["extender_metrics"] = {
            "drain": extender_metrics(scrapes.extender["before"], scrapes.extender["drain"]),
            "steady": extender_metrics(scrapes.extender["warm"], scrapes.extender["steady"]),
        }
    if plugin:
        result["plugin_name"] = ctx.plugin_name
    result["decision"] = decision_quality(ctx, all_pods, watch)
    return result


def scheduler_metrics(before: str, after: str) -> dict[str, Any]:
    """kube-scheduler's own histograms over the measured phases."""
    out: dict[str, Any] = {}
    e2e = report.series_delta(
        report.histograms(after, "scheduler_e2e_scheduling_duration_seconds"),
        report.histograms(before, "scheduler_e2e_scheduling_duration_seconds"),
    )
    out["e2e_scheduling"] = {
        dict(k).get("result", "all"): h.summary_ms() for k, h in e2e.items() if h.count
    }
    algorithm = report.series_delta(
        report.histograms(after, "scheduler_scheduling_algorithm_duration_seconds"),
        report.histograms(before, "scheduler_scheduling_algorithm_duration_seconds"),
    )
    out["scheduling_algorithm"] = [h.summary_ms() for h in algorithm.values() if h.count]
    points = report.series_delta(
        report.histograms(after, "scheduler_framework_extension_point_duration_seconds"),
        report.histograms(before, "scheduler_framework_extension_point_duration_seconds"),
    )
    out["extension_points"] = {
        dict(k)["extension_point"]: h.summary_ms()
        for k, h in sorted(points.items())
        if h.count and dict(k).get("status") == "Success"
    }
    return out


def extender_metrics(before: str, after: str) -> dict[str, Any]:
    """The extender's request histogram and neutral answers over the measured phases."""
    name = "layersched_extender_request_duration_seconds"
    requests = report.series_delta(report.histograms(after, name), report.histograms(before, name))
    neutral_after = report.counters(after, "layersched_extender_neutral_answers")
    neutral_before = report.counters(before, "layersched_extender_neutral_answers")
    return {
        "requests": {dict(k)["verb"]: h.summary_ms() for k, h in requests.items() if h.count},
        "neutral_answers": {
            dict(k).get("reason", "?"): int(v - neutral_before.get(k, 0.0))
            for k, v in neutral_after.items()
            if v - neutral_before.get(k, 0.0)
        },
    }


def decision_quality(
    ctx: Context, pods: Mapping[str, Mapping[str, Any]], watch: BindWatch
) -> dict[str, Any]:
    """Bytes each bound pod would pull on its node, against random placement."""
    pulls, randoms, totals = [], [], []
    node_count = len(ctx.node_sets)
    for name, pod in pods.items():
        node = watch.node_of.get(name)
        if node is None:
            continue
        wanted = pod_layers(ctx.load, pod)
        pulls.append(report.pull_bytes(wanted, ctx.node_sets[node]))
        totals.append(sum(wanted.values()))
        # expected bytes on a node drawn at random: a layer is missing on the nodes
        # that do not hold it
        randoms.append(
            sum(
                size * (1 - ctx.layer_node_counts.get(d, 0) / node_count)
                for d, size in wanted.items()
            )
        )
    return {
        "pods": len(pulls),
        "mean_pull_mib": _mean_mib(pulls),
        "mean_image_mib": _mean_mib(totals),
        "mean_pull_random_placement_mib": _mean_mib(randoms),
        "pods_pulling_nothing": sum(1 for b in pulls if b == 0),
        "total_pull_gib": round(sum(pulls) / report.MIB / KIB, 2),
    }


def _mean_mib(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values) / report.MIB, 1) if values else None


# ---------------------------------------------------------------- the run


def control_plane_up(args: argparse.Namespace, console: Console) -> ControlPlane:
    """The testbed's etcd + kube-apiserver only (same role and PKI), on our own /24."""
    console.log(f"control plane up ({args.prefix}, {args.net_base}.0/24, {args.state_dir})")
    run_playbook(
        PLAYBOOK,
        {
            "testbed_state_dir": str(args.state_dir),
            "testbed_prefix": args.prefix,
            "testbed_net_base": args.net_base,
        }
        | ({"kubernetes_bin_dir": str(args.kubernetes_bin_dir)} if args.kubernetes_bin_dir else {}),
        args.log_dir / "ansible-up.log",
        title="bench control plane up",
        console=console,
    )
    return ControlPlane.load(args.state_dir)


def prepare_namespace(api: httpx.Client) -> None:
    _post(api, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, "creating the namespace")
    # the ServiceAccount admission plugin wants it; the controller-manager is not running
    _post(
        api,
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"metadata": {"name": "default"}},
        "creating the default ServiceAccount",
    )


def grant_plugin_inventory_read(api: httpx.Client) -> None:
    """Let kube-scheduler's identity list and watch NodeLayerInventory objects (and Nodes),
    as the plugin's informer does: the extender's own rules, bound to the scheduler user."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    _post(
        api,
        f"{rbac}/clusterroles",
        {"metadata": {"name": PLUGIN_READER}, "rules": extender_rules()},
        "creating the plugin's ClusterRole",
    )
    _post(
        api,
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": PLUGIN_READER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": PLUGIN_READER,
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SCHEDULER_USER}
            ],
        },
        "binding the plugin's ClusterRole to kube-scheduler",
    )


#: The FlowSchema that exempts kube-scheduler's requests from API Priority and Fairness
#: (issue 43's third round). Without it, the benchmark's API server put the scheduler in
#: the built-in ``workload-high`` priority level, whose queues filled during a drain: it
#: rejected bindings and events with 429, client-go retried them after the server's
#: Retry-After (a second), and the drain rate measured those queues, not the scheduling
#: (the default profile's own moved by a factor of three between rounds). Every
#: configuration runs with it; the rejections left are counted per drain.
SCHEDULER_FLOW_SCHEMA = "layersched-bench-kube-scheduler"
FLOW_SCHEMAS_PATH = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"
#: Ahead of every built-in schema but ``exempt`` (1) and ``probes`` (2).
SCHEDULER_FLOW_PRECEDENCE = 50


def exempt_scheduler_from_flow_control(api: httpx.Client) -> None:
    """Put kube-scheduler's identity in the ``exempt`` priority level (see
    :data:`SCHEDULER_FLOW_SCHEMA`)."""
    everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
    _post(
        api,
        FLOW_SCHEMAS_PATH,
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": SCHEDULER_FLOW_SCHEMA},
            "spec": {
                "matchingPrecedence": SCHEDULER_FLOW_PRECEDENCE,
                "priorityLevelConfiguration": {"name": "exempt"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": SCHEDULER_USER}}],
                        "resourceRules": [everything | {"clusterScope": True, "namespaces": ["*"]}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        },
        "exempting kube-scheduler from API Priority and Fairness",
    )


def rejected_requests(api: httpx.Client) -> int:
    """Requests the API server has answered 429 (too many) so far, from its /metrics."""
    response = api.get("/metrics")
    _check(response, "reading the API server's metrics")
    series = report.counters(response.text, "apiserver_request")
    return int(sum(value for labels, value in series.items() if ("code", "429") in labels))


def _csv(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes", default="500,5000", help="comma-separated node counts (default: 500,5000)"
    )
    parser.add_argument(
        "--configurations",
        default=",".join(report.CONFIGURATIONS),
        help=f"comma-separated, from {', '.join(report.CONFIGURATIONS)}",
    )
    parser.add_argument(
        "--drain-pods",
        type=int,
        default=DRAIN_PODS,
        help="pods queued before kube-scheduler starts, then drained (throughput; "
        "default: %(default)s)",
    )
    parser.add_argument("--steady-pods", type=int, default=500, help="pods at --steady-rate")
    parser.add_argument(
        "--start",
        choices=STARTS,
        default=HELD_START,
        help="held: kube-scheduler starts without its Lease and drains once it and the API "
        "server have settled (its start-up measured apart); cold: it drains as soon as its "
        "informers have synced, the start-up's after-effects inside the drain "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        default=",".join(f"{n}={r}" for n, r in DEFAULT_ROUNDS.items()),
        help="alternating rounds (every configuration once per round): a number for every "
        "node count, or N=ROUNDS,... (a node count not named gets "
        f"{report.MIN_ROUNDS}); a verdict needs {report.MIN_ROUNDS} (default: %(default)s)",
    )
    parser.add_argument(
        "--steady-rate", type=float, default=20.0, help="pods/s of the steady phase (latency)"
    )
    parser.add_argument(
        "--phase-timeout-s",
        type=float,
        default=400.0,
        help="stop waiting for a phase's bindings after this; the row says how many were bound",
    )
    parser.add_argument(
        "--profile",
        default=",".join(PROFILED_CONFIGURATIONS),
        help="configurations profiled in one more drain per node count: kube-scheduler's "
        "Go CPU profile, and py-spy on the extender where there is one ('' for none; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--plugin-kube-scheduler",
        type=Path,
        help="the kube-scheduler carrying the plugin (default: the Kubernetes build's)",
    )
    parser.add_argument(
        "--plugin-name",
        default=PLUGIN_NAME,
        help="the Score plugin the plugin row enables (default: %(default)s; another name "
        "only to check the row's machinery: the README then names it)",
    )
    parser.add_argument(
        "--development",
        metavar="NOTE",
        help="mark the results a development run (short, or on a loaded machine): NOTE says "
        "how, and the README block and plot say it is not the final table",
    )
    parser.add_argument("--prefix", default=DEFAULT_PREFIX)
    parser.add_argument("--net-base", default=DEFAULT_NET_BASE)
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="the control plane's state, etcd's data included (default: %(default)s: in "
        "memory when /dev/shm is a tmpfs, so that no binding waits on a disk)",
    )
    parser.add_argument(
        "--log-dir", type=Path, default=DEFAULT_LOG_DIR, help="scheduler/extender logs (kept)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"results file (default: {RESULTS} under this run's directory, runs/<UTC "
        f"time>/, or {RESULTS} itself with LAYERSCHED_RESULTS=commit; with --render-only: "
        f"{RESULTS})",
    )
    parser.add_argument("--plot", type=Path, help="the plot (default: beside --output, .png)")
    parser.add_argument(
        "--kubernetes-bin-dir",
        type=Path,
        help="Kubernetes binaries to run instead of the build cache's (same layout, with "
        "its .stamp)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the control plane up")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="run nothing: write the plot from the results at --output and print the README "
        "block (after a change to how they are rendered; make figures writes the blocks)",
    )
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    if args.output is None:
        args.output = ROOT / RESULTS if args.render_only else destination(RESULTS)
    if args.plot is None:
        args.plot = args.output.with_suffix(".png")
    if args.render_only:
        try:
            results = json.loads(args.output.read_text())
        except (OSError, ValueError) as err:
            parser.error(f"--render-only: reading the results {args.output}: {err}")
        return render(results, args, console)
    try:
        node_counts = sorted(int(n) for n in _csv(args.nodes))
    except ValueError:
        parser.error(f"--nodes {args.nodes!r}: expected comma-separated integers, e.g. 500,5000")
    configs = [c for c in report.CONFIGURATIONS if c in _csv(args.configurations)]
    unknown = sorted(set(_csv(args.configurations)) - set(report.CONFIGURATIONS))
    unknown += sorted(set(_csv(args.profile)) - set(report.CONFIGURATIONS))
    if unknown:
        parser.error(
            f"--configurations/--profile: unknown {', '.join(unknown)} (choose from "
            f"{', '.join(report.CONFIGURATIONS)})"
        )
    try:
        args.rounds = rounds_by_nodes(args.rounds, node_counts)
    except ValueError as err:
        parser.error(f"--rounds {args.rounds!r}: {err}")
    if args.drain_pods < MIN_DRAIN_PODS or args.steady_pods < 1:
        parser.error(
            f"--drain-pods needs at least {MIN_DRAIN_PODS} pods (a rate spans two bindings) "
            "and --steady-pods at least 1"
        )
    try:
        require_root()
        results = run(args, node_counts, configs, console)
    except TestbedError as err:
        console.print(f"[red]bench-scheduler: {err}[/red]")
        return 1
    except httpx.HTTPError as err:
        console.print(
            f"[red]bench-scheduler: the API server or a scheduler stopped answering ({err}); "
            f"logs in {args.log_dir}[/red]"
        )
        return 1
    write_json(RESULTS, results, output=args.output)
    return render(results, args, console)


def rounds_by_nodes(text: str, node_counts: Sequence[int]) -> dict[int, int]:
    """``--rounds``: a number for every node count, or ``N=ROUNDS,...`` (a node count not
    named gets :data:`report.MIN_ROUNDS`); ValueError saying what is wrong."""
    if text.strip().isdigit():
        every = int(text)
        if every < 1:
            raise ValueError("at least 1 round")
        return dict.fromkeys(node_counts, every)
    named: dict[int, int] = {}
    for item in _csv(text):
        nodes, _, rounds = item.partition("=")
        if not (nodes.strip().isdigit() and rounds.strip().isdigit()) or int(rounds) < 1:
            raise ValueError(f"{item!r} is not NODES=ROUNDS with at least 1 round (e.g. 500=5)")
        named[int(nodes)] = int(rounds)
    return {n: named.get(n, report.MIN_ROUNDS) for n in node_counts}


def render(results: Mapping[str, Any], args: argparse.Namespace, console: Console) -> int:
    """The plot from ``results``, and the README block printed (``make figures`` writes the
    blocks, from the committed results)."""
    try:
        report.plot(results, args.plot)
    except LayerschedError as err:
        console.print(f"[red]bench-scheduler: {err} (the results are in {args.output})[/red]")
        return 1
    except (KeyError, TypeError) as err:
        console.print(
            f"[red]bench-scheduler: {args.output} is not a results file of this benchmark "
            f"(missing or malformed {err}): run the benchmark to write one[/red]"
        )
        return 1
    console.print(report.markdown(results))
    console.print(
        f"results: {args.output}, plot: {args.plot} (committed results: make figures rewrites "
        "the README and docs blocks)"
    )
    return 0


def run(
    args: argparse.Namespace, node_counts: Sequence[int], configs: Sequence[str], console: Console
) -> dict[str, Any]:
    started = time.perf_counter()
    args.state_dir = args.state_dir.resolve()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    load = workload(IMAGES)
    items = load.node_list(max(node_counts), IMAGES_PER_NODE, seed=1)["items"]
    layers_path = args.log_dir / "layers.json"
    layers_path.write_bytes(msgspec.json.encode(load.layers_document()))
    profiled = [c for c in _csv(args.profile) if c in configs]
    # etcd and kube-apiserver are left to init by the playbook: every one names the state dir
    record = provenance.start(kubernetes_build().version, own_commands=[str(args.state_dir)])
    results: dict[str, Any] = {
        "provenance": record,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "settings": {
            "kubernetes_version": kubernetes_build().version,
            "rounds": {str(n): args.rounds[n] for n in node_counts},
            "configurations": list(configs),
            "images": len(load.corpus.images),
            "images_per_node": IMAGES_PER_NODE,
            "drain_pods": args.drain_pods,
            "start": args.start,
            "etcd_filesystem": provenance.filesystem_of(args.state_dir.parent),
            "steady_pods": args.steady_pods,
            "steady_rate_pods_per_s": args.steady_rate,
            "warmup_pods": WARMUP_PODS,
            "scheduler_client_qps": SCHEDULER_CLIENT_QPS,
            "extender_http_timeout_s": EXTENDER_HTTP_TIMEOUT_S,
            "pod_requests": {"cpu": POD_CPU, "memory": POD_MEMORY},
            "phase_timeout_s": args.phase_timeout_s,
            "profile_rate_hz": PROFILE_RATE_HZ,
            "profiled": profiled,
            "development": args.development,
        },
        "node_counts": list(node_counts),
        "profiles": {},
    }
    try:
        plane = control_plane_up(args, console)
        plugin_binary = args.plugin_kube_scheduler or plane.bin_dir / "kube-scheduler"
        what = (
            str(args.plugin_kube_scheduler)
            if args.plugin_kube_scheduler
            else f"the Kubernetes build's kube-scheduler {kubernetes_build().version}"
        )
        plugins = set(PLUGIN_CONFIGURATIONS) & set(configs)
        absent = plugin_absent(plugin_binary, args.plugin_name, what) if plugins else None
        if plugins and not absent:
            try:
                plugin_config(plane, args.plugin_name)
            except LayerschedError as err:  # no generator yet, or args it refuses
                absent = f"the {args.plugin_name} configuration cannot be rendered: {err}"
        with plane.client() as api, Progress(console=console) as progress:
            prepare_namespace(api)
            exempt_scheduler_from_flow_control(api)
            if plugins:
                grant_plugin_inventory_read(api)
            created = 0
            for i, n in enumerate(node_counts):
                _parallel_post(
                    api,
                    "/api/v1/nodes",
                    [fake_node(item) for item in items[created:n]],
                    f"nodes {created + 1}-{n}",
                    progress,
                    after=lambda node: untaint(api, node),
                )
                if set(INVENTORY_CONFIGURATIONS) & set(configs):
                    _parallel_post(
                        api,
                        NODE_LAYERS_PATH,
                        [inventory_document(load, item) for item in items[created:n]],
                        f"NodeLayerInventory objects {created + 1}-{n}",
                        progress,
                    )
                created = n
                node_sets = {
                    item["metadata"]["name"]: set(node_layers(load, item)) for item in items[:n]
                }
                counts: dict[str, int] = {}
                for held in node_sets.values():
                    for digest in held:
                        counts[digest] = counts.get(digest, 0) + 1
                ctx = Context(
                    plane, api, load, layers_path, args.log_dir, node_sets, counts,
                    args.drain_pods, args.steady_pods, args.steady_rate, args.phase_timeout_s,
                    console, progress, plugin_binary, args.plugin_name, args.start,
                )  # fmt: skip
                seed = 10 * (i + 1)  # the same pods for every configuration at one N
                measured: dict[str, list[dict[str, Any]]] = {config: [] for config in configs}
                for r in range(args.rounds[n]):
                    # every configuration once per round, the order rotated each round
                    shift = r % len(configs)
                    for config in [*configs[shift:], *configs[:shift]]:
                        if config in PLUGIN_CONFIGURATIONS and absent:
                            console.log(f"[yellow]{n} nodes, {config}: not run: {absent}[/yellow]")
                            measured[config].append({"round": r, "skipped": absent})
                            continue
                        load_before = provenance.sample_load(record)
                        row = _row(ctx, Run(n, config, seed, round_=r))
                        row["round"] = r
                        row["load_average_1m"] = [load_before, provenance.sample_load(record)]
                        measured[config].append(row)
                        if not row.get("skipped"):
                            console.log(
                                f"{n} nodes, round {r + 1}, {config}: drain {row['pods_per_s']} "
                                f"pods/s, steady p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms"
                            )
                    # after every round: an interrupted run keeps the rounds it completed
                    results[str(n)] = {
                        config: report.summarise_rounds(measured[config]) for config in configs
                    }
                    results["rounds_completed"] = {
                        **results.get("rounds_completed", {}),
                        str(n): r + 1,
                    }
                    write_partial(results, record, node_counts[: i + 1], started, args.output)
                rows = results[str(n)]
                results["profiles"][str(n)] = {
                    config: _row(
                        ctx, Run(n, config, seed, profile=True, profile_s=_profile_s(rows[config]))
                    )
                    for config in profiled
                }
    finally:
        if not args.keep:
            _export_logs(args)
            down(args.state_dir, args.prefix, console=console)
    results["provenance"] = provenance.finish(record)
    busy = report.overloaded_by(results["provenance"])
    results["targets"] = {
        str(n): report.target_verdicts(results[str(n)], busy) for n in node_counts
    }
    results["run_time_s"] = round(time.perf_counter() - started, 1)
    return results


def write_partial(
    results: dict[str, Any],
    record: dict[str, Any],
    node_counts: Sequence[int],
    started: float,
    output: Path,
) -> None:
    """The results so far, as a complete results file of the node counts measured (their
    rounds so far), with the load up to now."""
    partial = dict(results)
    partial["node_counts"] = list(node_counts)
    partial["provenance"] = provenance.finish(dict(record))
    busy = report.overloaded_by(partial["provenance"])
    partial["targets"] = {
        str(n): report.target_verdicts(partial[str(n)], busy) for n in node_counts
    }
    partial["run_time_s"] = round(time.perf_counter() - started, 1)
    write_json(RESULTS, partial, output=output)


def _profile_s(row: Mapping[str, Any] | None) -> int:
    """How long kube-scheduler's profile should run from the first binding: the drain as
    the measured row took it, and a margin (the profiled drain is slower, since py-spy
    pauses the extender at each sample: at worst the profile covers the drain's first
    part)."""
    span_s = ((row or {}).get("drain") or {}).get("span_s") or 0
    return math.ceil(span_s) + PPROF_MIN_S


def _row(ctx: Context, run: Run) -> dict[str, Any]:
    """One configuration measured (or profiled); a failure leaves the others' rows standing."""
    try:
        return measure(ctx, run)
    except (LayerschedError, httpx.HTTPError) as err:
        what = "profile" if run.profile else f"round {run.round_ + 1}"
        ctx.console.log(f"[red]{run.n} nodes, {run.config} ({what}): {err}[/red]")
        delete_pods(ctx.api)
        delete_events(ctx.api)
        return {"skipped": str(err)}


def _export_logs(args: argparse.Namespace) -> None:
    """Keep the control plane's logs before teardown removes the state dir."""
    source = args.state_dir / "control-plane"
    for log in source.glob("*.log") if source.is_dir() else ():
        shutil.copy2(log, args.log_dir / log.name)


if __name__ == "__main__":
    sys.exit(main())
