"""Scheduler throughput with the real kube-scheduler: what layer-awareness costs a cluster.

In the spirit of upstream's scheduler_perf (issue 12). The testbed's control plane
(``playbooks/bench-control-plane.yml``: etcd and kube-apiserver from the same role and
PKI, nothing else) runs with **no kubelets**: N fake nodes are created through the API
(Ready, large allocatable, ``status.images`` with 50 images of the benchmark corpus,
as kubelets publish them), and for each configuration a fresh kube-scheduler (plus
the layersched extender where the configuration has one) places

* a **steady** stream of pods at a fixed rate (latency: what a pod waits while the
  scheduler keeps up), and
* a **burst** of pods created as fast as the client can (throughput).

Measured from the API (a watch on the pods: creation to ``spec.nodeName``), from
kube-scheduler's ``/metrics`` (``scheduler_e2e_scheduling_duration_seconds``, the
extension-point durations) and the extender's (its request histogram), and from
``/proc`` (CPU seconds and peak RSS of every process). Nothing runs the pods; they are
deleted between phases. Decision quality: the bytes each pod would pull on the node it
was bound to, from that node's inventory (static here: nothing pulls).

Configurations: ``default`` (the default profile, ImageLocality included),
``extender-nodes`` (+ the extender, full ``Nodes``), ``extender-node-names`` (+ the
extender in ``NodeNames`` mode fed by its live watch of Nodes and NodeLayerInventory
objects). Results: ``bench/results/scheduler.json``, ``scheduler.png``, and the README
block. Run: ``make bench-scheduler`` (root: the control plane gets its own bridge).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
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

from layersched import _generated as generated
from layersched.builds import kubernetes_build
from layersched.core.errors import KubeError, TestbedError
from layersched.core.nodelayers import HeldImage, build_document
from layersched.kube import NODE_LAYERS_PATH, KubeClient, load_kubeconfig
from layersched.testbed.local import down, require_root
from layersched.testbed.local._ansible import PLAYBOOKS_DIR, run_playbook

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "scheduler.json"
PLOT = ROOT / "bench" / "results" / "scheduler.png"
README = ROOT / "README.md"
PLAYBOOK = PLAYBOOKS_DIR / "bench-control-plane.yml"

#: The benchmark's own testbed name, /24 and state dir (never the main testbeds').
DEFAULT_PREFIX, DEFAULT_NET_BASE = "lsbn", "10.250.63"
DEFAULT_STATE_DIR = Path("/tmp/lsbn-state")
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
#: kube-scheduler's client rate limit (1.20 defaults to 50 qps, which would cap binding
#: at ~50 pods/s for every configuration alike); scheduler_perf raises it the same way.
SCHEDULER_CLIENT_QPS = 5000
#: As the testbed deploys the extender (k8s_control_plane_extender_timeout).
EXTENDER_HTTP_TIMEOUT = "5s"
#: Pods placed and deleted before measuring: informers synced, caches and JITs warm.
WARMUP_PODS = 20
#: Client threads creating nodes, inventories and burst pods.
CLIENT_THREADS = 8
HTTP_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 180.0
#: The extender's --watch lists 5,000 nodes and their inventories (~40 kB each) first.
EXTENDER_READY_TIMEOUT_S = 600.0
#: Deleting 1,000 pods and seeing the list empty.
DELETE_TIMEOUT_S = 300.0
KIB = 1024
#: Broken watch connections tolerated per configuration before giving up.
MAX_WATCH_RESTARTS = 20
#: Seconds each pod watch lasts before the server ends it and the next one starts.
WATCH_PERIOD_S = 5


class BenchError(TestbedError):
    """The benchmark could not set something up or measure it."""


# ---------------------------------------------------------------- the API


@dataclass(frozen=True)
class ControlPlane:
    """What ``playbooks/bench-control-plane.yml`` recorded (control-plane.json)."""

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
        HeldImage(
            names=tuple(image["names"]),
            digest=image["names"][0].split("@", 1)[1],
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


def wait_bound(watch: BindWatch, names: Sequence[str], timeout_s: float) -> bool:
    """Wait until every pod of ``names`` is bound; False when ``timeout_s`` ran out."""

    @tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s), wait=tenacity.wait_fixed(0.1), reraise=True
    )
    def all_bound() -> None:
        assert watch.error is None, watch.error
        assert watch.bound(names) == len(names)

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


@contextlib.contextmanager
def _process(
    argv: Sequence[str], log: Path, ready: str, name: str, timeout_s: float = READY_TIMEOUT_S
) -> Iterator[int]:
    """Run ``argv`` (log to ``log``) until the block ends; wait for GET ``ready`` == 200."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    @tenacity.retry(
        stop=tenacity.stop_after_delay(timeout_s), wait=tenacity.wait_fixed(0.3),
        reraise=True,
    )  # fmt: skip
    def is_ready() -> None:
        assert proc.poll() is None, f"{name} exited with {proc.returncode}; see {log}"
        try:
            assert httpx.get(ready, timeout=5.0).status_code == httpx.codes.OK
        except httpx.HTTPError as err:
            raise AssertionError(f"{name} not ready at {ready}: {err}") from err

    try:
        try:
            is_ready()
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


def scheduler_config(plane: ControlPlane, config: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration (v1beta1, as 1.20 reads) of one configuration."""
    doc: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(plane.scheduler_kubeconfig),
            "qps": SCHEDULER_CLIENT_QPS,
            "burst": SCHEDULER_CLIENT_QPS,
        },
        "leaderElection": {"leaderElect": False},
        "healthzBindAddress": f"{plane.address}:{SCHEDULER_METRICS_PORT}",
        "metricsBindAddress": f"{plane.address}:{SCHEDULER_METRICS_PORT}",
        "profiles": [{"schedulerName": "default-scheduler"}],
    }
    if config != "default":
        doc["extenders"] = [
            {
                "urlPrefix": f"http://{plane.address}:{EXTENDER_PORT}",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "nodeCacheCapable": config == "extender-node-names",
                "httpTimeout": EXTENDER_HTTP_TIMEOUT,
                "ignorable": True,
            }
        ]
    return doc


def extender_argv(plane: ControlPlane, config: str, layers_path: Path) -> list[str]:
    argv = [
        sys.executable, "-m", "layersched.cli.main", "extender",
        "--host", plane.address, "--port", str(EXTENDER_PORT),
        "--strategy", "layer-locality", "--layers", str(layers_path),
    ]  # fmt: skip
    if config == "extender-node-names":
        argv += ["--watch", "--kubeconfig", str(plane.extender_kubeconfig)]
    return argv


def scrape(url: str) -> str:
    response = httpx.get(url, timeout=HTTP_TIMEOUT_S)
    _check(response, f"scraping {url}")
    return response.text


# ---------------------------------------------------------------- one configuration


@dataclass
class Phase:
    """One measured phase: pods created, when, and what the watch saw."""

    names: list[str]
    created_at: dict[str, float]
    complete: bool
    started_s: float
    ended_s: float


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


def _create_burst(
    api: httpx.Client, pods: Sequence[Mapping[str, Any]], created: dict[str, float]
) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    def one(pod: Mapping[str, Any]) -> None:
        created[pod["metadata"]["name"]] = time.perf_counter()
        _check(api.post(path, content=msgspec.json.encode(pod)), "creating a pod")

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        list(pool.map(one, pods))


def run_phase(
    api: httpx.Client,
    watch: BindWatch,
    pods: Sequence[Mapping[str, Any]],
    rate: float | None,
    timeout_s: float,
) -> Phase:
    created: dict[str, float] = {}
    started = time.perf_counter()
    if rate is None:
        _create_burst(api, pods, created)
    else:
        _create_steady(api, pods, rate, created)
    names = [p["metadata"]["name"] for p in pods]
    complete = wait_bound(watch, names, timeout_s)
    return Phase(names, created, complete, started, time.perf_counter())


def phase_result(phase: Phase, watch: BindWatch) -> dict[str, Any]:
    bound = [n for n in phase.names if n in watch.bound_at]
    latencies = [watch.bound_at[n] - phase.created_at[n] for n in bound]
    first = min(phase.created_at.values())
    last = max((watch.bound_at[n] for n in bound), default=first)
    span_s = last - first
    return {
        "pods": len(phase.names),
        # when the client is slower than the scheduler, the burst measures the client
        "created_in_s": round(max(phase.created_at.values()) - first, 2),
        "bound": len(bound),
        "complete": phase.complete,
        "span_s": round(span_s, 2),
        "pods_per_s": round(len(bound) / span_s, 1) if span_s > 0 else None,
        "latency": report.latency_stats(latencies),
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
    steady_pods: int
    steady_rate: float
    burst_pods: int
    phase_timeout_s: float
    console: Console


def measure(ctx: Context, n: int, config: str, seed: int) -> dict[str, Any]:
    """Start the configuration's scheduler (and extender), run both phases, stop them."""
    plane = ctx.plane
    tag = f"{config}-{n}"
    config_path = ctx.log_dir / f"scheduler-{tag}.yaml"
    config_path.write_text(yaml.safe_dump(scheduler_config(plane, config), sort_keys=False))
    metrics_url = f"http://{plane.address}:{SCHEDULER_METRICS_PORT}/metrics"
    extender_url = f"http://{plane.address}:{EXTENDER_PORT}"
    with contextlib.ExitStack() as stack:
        pids = {name: _pid(path) for name, path in plane.pidfiles.items()}
        if config != "default":
            ready = "/readyz" if config == "extender-node-names" else "/healthz"
            pids["extender"] = stack.enter_context(
                _process(
                    extender_argv(plane, config, ctx.layers_path),
                    ctx.log_dir / f"extender-{tag}.log",
                    extender_url + ready,
                    "layersched extender",
                    EXTENDER_READY_TIMEOUT_S,
                )
            )
        pids["kube-scheduler"] = stack.enter_context(
            _process(
                [
                    str(plane.bin_dir / "kube-scheduler"),
                    f"--config={config_path}",
                    "--secure-port=0",
                    "--v=1",
                ],
                ctx.log_dir / f"kube-scheduler-{tag}.log",
                f"http://{plane.address}:{SCHEDULER_METRICS_PORT}/healthz",
                "kube-scheduler",
            )
        )
        pids["bench-client"] = os.getpid()
        watch = BindWatch(plane)
        watch.start()
        stack.callback(watch.stop)
        warm = bench_pods(ctx.load, WARMUP_PODS, f"warm-{tag}", seed=seed + 100)
        if not run_phase(ctx.api, watch, warm, None, READY_TIMEOUT_S).complete:
            raise BenchError(f"{tag}: the warm-up pods were not all bound; see {ctx.log_dir}")
        delete_pods(ctx.api)

        usage = Usage(pids)
        scheduler_before = scrape(metrics_url)
        extender_before = scrape(extender_url + "/metrics") if config != "default" else ""
        phases: dict[str, Phase] = {}
        all_pods: dict[str, Mapping[str, Any]] = {}
        for kind, count, rate in (
            ("steady", ctx.steady_pods, ctx.steady_rate),
            ("burst", ctx.burst_pods, None),
        ):
            pods = bench_pods(ctx.load, count, f"{kind}-{tag}", seed=seed + (kind == "burst"))
            all_pods |= {p["metadata"]["name"]: p for p in pods}
            ctx.console.log(f"{n} nodes, {config}: {kind} phase, {count} pods")
            phases[kind] = run_phase(ctx.api, watch, pods, rate, ctx.phase_timeout_s)
            delete_pods(ctx.api)
        resources = usage.result()
        scheduler_after = scrape(metrics_url)
        extender_after = scrape(extender_url + "/metrics") if config != "default" else ""

    result: dict[str, Any] = {kind: phase_result(p, watch) for kind, p in phases.items()}
    result["watch_restarts"] = watch.restarts
    result["pods_per_s"] = result["burst"]["pods_per_s"]
    result["p50_ms"] = result["steady"]["latency"]["p50_ms"]
    result["p99_ms"] = result["steady"]["latency"]["p99_ms"]
    result["resources"] = resources
    result["scheduler_metrics"] = scheduler_metrics(scheduler_before, scheduler_after)
    if config != "default":
        result["extender_metrics"] = extender_metrics(extender_before, extender_after)
    result["decision"] = decision_quality(ctx, all_pods, watch)
    partial = [
        f"{kind}: {r['bound']} of {r['pods']} pods bound within {ctx.phase_timeout_s:g} s"
        for kind, r in result.items()
        if isinstance(r, dict) and r.get("complete") is False
    ]
    if partial:
        result["partial"] = "; ".join(partial) + " (rates are over the bound pods)"
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
    parser.add_argument("--burst-pods", type=int, default=1000, help="pods created at once")
    parser.add_argument("--steady-pods", type=int, default=500, help="pods at --steady-rate")
    parser.add_argument(
        "--steady-rate", type=float, default=20.0, help="pods/s of the steady phase"
    )
    parser.add_argument(
        "--phase-timeout-s",
        type=float,
        default=240.0,
        help="stop waiting for a phase's bindings after this; the row says how many were bound",
    )
    parser.add_argument("--prefix", default=DEFAULT_PREFIX)
    parser.add_argument("--net-base", default=DEFAULT_NET_BASE)
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument(
        "--log-dir", type=Path, default=DEFAULT_LOG_DIR, help="scheduler/extender logs (kept)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--plot", type=Path, default=PLOT)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument(
        "--kubernetes-bin-dir",
        type=Path,
        help="Kubernetes binaries to run instead of the build cache's (same layout, with "
        "its .stamp)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the control plane up")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    try:
        node_counts = sorted(int(n) for n in args.nodes.split(","))
    except ValueError:
        parser.error(f"--nodes {args.nodes!r}: expected comma-separated integers, e.g. 500,5000")
    configs = [c for c in args.configurations.split(",") if c]
    unknown = sorted(set(configs) - set(report.CONFIGURATIONS))
    if unknown:
        parser.error(f"--configurations: unknown {', '.join(unknown)}")
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
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    report.plot(results, args.plot)
    generated.write_block(args.readme, report.BLOCK, report.markdown(results))
    console.print(report.markdown(results))
    console.print(f"results: {args.output}, plot: {args.plot}, README block updated")
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
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        },
        "settings": {
            "kubernetes_version": kubernetes_build().version,
            "images": len(load.corpus.images),
            "images_per_node": IMAGES_PER_NODE,
            "steady_pods": args.steady_pods,
            "steady_rate_pods_per_s": args.steady_rate,
            "burst_pods": args.burst_pods,
            "warmup_pods": WARMUP_PODS,
            "scheduler_client_qps": SCHEDULER_CLIENT_QPS,
            "extender_http_timeout": EXTENDER_HTTP_TIMEOUT,
            "pod_requests": {"cpu": POD_CPU, "memory": POD_MEMORY},
            "phase_timeout_s": args.phase_timeout_s,
        },
        "node_counts": list(node_counts),
    }
    try:
        plane = control_plane_up(args, console)
        with plane.client() as api, Progress(console=console) as progress:
            prepare_namespace(api)
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
                if "extender-node-names" in configs:
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
                    args.steady_pods, args.steady_rate, args.burst_pods, args.phase_timeout_s,
                    console,
                )  # fmt: skip
                rows: dict[str, Any] = {}
                for config in configs:
                    try:
                        rows[config] = measure(ctx, n, config, seed=10 * (i + 1))
                    except (BenchError, KubeError, httpx.HTTPError) as err:
                        # one configuration failing leaves the others' rows standing
                        console.log(f"[red]{n} nodes, {config}: {err}[/red]")
                        rows[config] = {"skipped": str(err)}
                        delete_pods(api)
                        continue
                    console.log(
                        f"{n} nodes, {config}: {rows[config]['pods_per_s']} pods/s, "
                        f"p50 {rows[config]['p50_ms']} ms, p99 {rows[config]['p99_ms']} ms"
                    )
                results[str(n)] = rows
    finally:
        if not args.keep:
            _export_logs(args)
            down(args.state_dir, args.prefix, console=console)
    results["targets"] = {
        str(n): verdict
        for n in node_counts
        if (verdict := report.target_verdict(results[str(n)])) is not None
    }
    results["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    results["run_time_s"] = round(time.perf_counter() - started, 1)
    return results


def _export_logs(args: argparse.Namespace) -> None:
    """Keep the control plane's logs before teardown removes the state dir."""
    source = args.state_dir / "control-plane"
    for log in source.glob("*.log") if source.is_dir() else ():
        shutil.copy2(log, args.log_dir / log.name)


if __name__ == "__main__":
    sys.exit(main())
