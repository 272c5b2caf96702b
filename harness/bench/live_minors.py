"""make live-minors: the LayerLocality plugin live on the older supported minors.

For each older minor with a module under ``src/kube-scheduler/minors`` (1.35, 1.36):

1. build etcd, kube-apiserver and kube-scheduler (LayerLocality registered) from that
   minor's module (``harness/scripts/kubernetes_build.py --minor``; cached by build ID beside the
   main build; etcd is the server that minor's release requires); kubectl is the main
   build's (1.37: its calls here are plain REST);
2. bring up the scheduler benchmark's control plane (``harness/playbooks/bench-control-plane.yml``:
   the testbed's PKI, etcd and kube-apiserver role) on the loopback address with ports of
   its own, and the plugin's kube-scheduler with the configuration the generator renders
   for that minor;
3. server-side apply the install ``layersched deploy render --kubernetes-version <minor>``
   writes (CRD, RBAC, admission policy, Deployments and DaemonSet): every object must be
   accepted; no kubelet runs, so nothing starts;
4. run the seed scenario on three fake Ready nodes created through the API (as
   ``harness/bench/bench_scheduler.py`` makes them), each trial on nodes of its own: P1 and P2 fill
   a node each; each node's NodeLayerInventory then says what it pulled (what the agent
   would publish); P2 is deleted and P1' must land on P2's node, which keeps L1 and L2;
5. schedule three pods alike through the plugin's profile and read
   ``scheduler_batch_attempts_total``: hints taken means batching stayed on;
6. tear the control plane down.

Writes ``live-minors.json`` (versions, placements, batching, and its provenance: commit,
date, machine, load, other processes' cores) under this run's directory
(``runs/<UTC time>/harness/results/``), or ``harness/results/live-minors.json`` with
``LAYERSCHED_RESULTS=commit``; ``make figures`` rewrites the block of
``docs/kube-scheduler-plugin.md`` from the committed file. Needs no root and no bridge;
listens on 127.0.0.1:26xxx only.
"""

from __future__ import annotations

import argparse
import json
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import tenacity
import yaml
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
import live_minors_report as report
from bench_scheduler import ControlPlane, fake_node, untaint

from layersched.builds import REPO_ROOT, KubernetesBuild
from layersched.core.errors import KubeError, LayerschedError
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayersbuilder import build_document
from layersched.deploy import LAYER_LOCALITY_PLUGIN
from layersched.kube import KubeClient, node_layers_path, node_path, pod_path, pods_path
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json
from layersched_harness.testbed.builds import kubernetes_build, minor_builds
from layersched_harness.testbed.cluster import plugin_scores
from layersched_harness.testbed.deploy_stack import Kubectl
from layersched_harness.testbed.local import PLAYBOOKS_DIR, down, run_playbook

PLAYBOOK = PLAYBOOKS_DIR / "bench-control-plane.yml"
BUILDER = REPO_ROOT / "harness" / "scripts" / "kubernetes_build.py"
#: The name prefix the bring-up records (no bridge is made: nothing carries it).
PREFIX = "lsmin"
DEFAULT_STATE_DIR = Path("/tmp/layersched-live-minors")
LOOPBACK = "127.0.0.1"
#: Ports of its own on loopback (the testbeds use 6443, 2379 ... on their bridges).
PORTS = {
    "testbed_apiserver_port": 26443,
    "testbed_etcd_client_port": 26379,
    "testbed_etcd_peer_port": 26380,
    "testbed_controller_manager_port": 26257,
    "testbed_scheduler_image_locality_port": 26259,
    "testbed_scheduler_layer_locality_port": 26260,
    "testbed_scheduler_layer_locality_plugin_port": 26261,
}
#: The daemon the role names the plugin's kube-scheduler, and the profile it serves.
PLUGIN_DAEMON = "scheduler-layer-locality-plugin"
PROFILE = "layer-locality-plugin"
NAMESPACE = "live"
FIELD_MANAGER = "layersched-live-minors"
TRIALS = 3
NODES_PER_TRIAL = 3
#: Each scenario pod asks a whole node's CPU, so one fits per node (the seed scenario).
NODE_CPU, NODE_MEMORY, NODE_PODS = "2", "8Gi", "110"
#: Batch pods: one per node by a host port, asking nothing else.
BATCH_PODS = 3
BATCH_HOST_PORT = 29_999
MIB = 1024 * 1024
#: The seed scenario's images: Img1 = L1 L2 L3, Img2 = L1 L2 L4 (sizes ours).
LAYERS = {
    "L1": Layer("sha256:" + "1" * 64, 40 * MIB),
    "L2": Layer("sha256:" + "2" * 64, 30 * MIB),
    "L3": Layer("sha256:" + "3" * 64, 10 * MIB),
    "L4": Layer("sha256:" + "4" * 64, 12 * MIB),
}
IMAGES = {
    "img1": NodeImage.held(
        names=("reg.test/live/img1:v1",),
        digest="sha256:" + "a" * 64,
        layers=(LAYERS["L1"], LAYERS["L2"], LAYERS["L3"]),
    ),
    "img2": NodeImage.held(
        names=("reg.test/live/img2:v1",),
        digest="sha256:" + "b" * 64,
        layers=(LAYERS["L1"], LAYERS["L2"], LAYERS["L4"]),
    ),
}
BIND_TIMEOUT_S = 60.0
#: The plugin's informer holds every node's inventory within this.
INVENTORY_TIMEOUT_S = 30.0
#: A watch event on loopback reaches the informers in milliseconds; this margin lets P2's
#: deletion and its node's new inventory reach the scheduler before P1' is created.
INFORMER_MARGIN_S = 2.0
HTTP_TIMEOUT_S = 30.0
_BATCH = re.compile(
    r'^scheduler_batch_attempts_total\{profile="(?P<profile>[^"]+)",result="(?P<result>[^"]+)"\}'
    r" (?P<value>\S+)$",
    re.MULTILINE,
)
_INVENTORY_NODES = re.compile(r"^layersched_layer_locality_inventory_nodes (?P<value>\S+)$", re.M)


# ------------------------------------------------------------------ pure parts
def playbook_vars(build: KubernetesBuild, state_dir: Path) -> dict[str, Any]:
    """The bench control plane's variables for ``build`` on loopback: the minor's binaries
    and release (the scheduler configuration is rendered for it), no bridge, our ports,
    and only the plugin's kube-scheduler started."""
    return {
        "testbed_state_dir": str(state_dir),
        "testbed_prefix": PREFIX,
        "testbed_net_base": LOOPBACK.rsplit(".", 1)[0],
        "testbed_registry_address": LOOPBACK,
        "bench_control_plane_bridge": False,
        "kubernetes_bin_dir": str(build.bin_dir()),
        "kubernetes_binaries": list(build.binaries),
        "kubernetes_build_id": build.build_id,
        "kubernetes_version": build.version,
        "k8s_control_plane_kubectl": str(kubectl_binary()),
        "k8s_control_plane_components": [PLUGIN_DAEMON],
        # the lease reconciler refuses to advertise a loopback address
        "k8s_control_plane_endpoint_reconciler": "none",
        **PORTS,
    }


def kubectl_binary() -> Path:
    """The main build's kubectl: its calls (get --raw, apply, wait, kustomize) are plain
    REST, and the minors' builds leave kubectl out (minutes of compiling each)."""
    return kubernetes_build().binary("kubectl")


def node_names(trial: int) -> list[str]:
    return [f"t{trial}-n{k}" for k in range(1, NODES_PER_TRIAL + 1)]


def scenario_pod(name: str, image: str, scheduler: str = PROFILE) -> dict[str, Any]:
    """A pod that asks a whole fake node's CPU: one fits per node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "c", "image": image, "resources": {"requests": {"cpu": NODE_CPU}}}
            ],
        },
    }


def batch_pod(name: str) -> dict[str, Any]:
    """One of pods alike (one signature): only a host port keeps them one per node."""
    pod = scenario_pod(name, IMAGES["img1"].names[0])
    pod["spec"]["containers"][0] = {
        "name": "c",
        "image": IMAGES["img1"].names[0],
        "ports": [{"containerPort": BATCH_HOST_PORT, "hostPort": BATCH_HOST_PORT}],
    }
    return pod


def batch_attempts(metrics: str, profile: str = PROFILE) -> dict[str, float]:
    """``scheduler_batch_attempts_total`` of ``profile``, by result (empty: no such
    metric, a release without opportunistic batching)."""
    return {
        m["result"]: float(m["value"]) for m in _BATCH.finditer(metrics) if m["profile"] == profile
    }


def inventory(node: str, images: Sequence[str]) -> dict[str, Any]:
    """The node's NodeLayerInventory, as its agent would publish it once it holds
    ``images``."""
    return build_document(
        node, [IMAGES[i] for i in images], runtime="live-minors://fake", source="registry"
    )


def yaml_objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


# ------------------------------------------------------------------ the cluster
@dataclass
class Live:
    """One minor's running control plane."""

    build: KubernetesBuild
    plane: ControlPlane
    kube: KubeClient
    kubectl: Kubectl
    state_dir: Path

    @property
    def scheduler_log(self) -> Path:
        return self.state_dir / "control-plane" / f"{PLUGIN_DAEMON}.log"

    def metrics(self) -> str:
        context = ssl.create_default_context(cafile=str(self.plane.ca_file))
        context.load_cert_chain(str(self.plane.admin_cert), str(self.plane.admin_key))
        port = PORTS["testbed_scheduler_layer_locality_plugin_port"]
        url = f"https://{LOOPBACK}:{port}/metrics"
        return httpx.get(url, verify=context, timeout=HTTP_TIMEOUT_S).text


@contextmanager
def control_plane(build: KubernetesBuild, state_dir: Path, console: Console) -> Iterator[Live]:
    log_dir = state_dir.parent / f"{state_dir.name}-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        run_playbook(
            PLAYBOOK,
            playbook_vars(build, state_dir),
            log_dir / "ansible-up.log",
            title=f"{build.version} control plane up",
            console=console,
        )
        plane = ControlPlane.load(state_dir)
        kube = KubeClient(plane.kube().config, timeout_s=HTTP_TIMEOUT_S)
        kubectl = Kubectl(str(kubectl_binary()), str(plane.kubeconfig))
        yield Live(build, plane, kube, kubectl, state_dir)
    finally:
        # the logs first: a failed run leaves evidence
        for name in (PLUGIN_DAEMON, "kube-apiserver", "etcd"):
            source = state_dir / "control-plane" / f"{name}.log"
            if source.is_file():
                (log_dir / source.name).write_bytes(source.read_bytes())
        down(state_dir, PREFIX, console=console)


def versions(live: Live) -> dict[str, str]:
    def first_line(*argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        return (done.stdout or done.stderr).strip().splitlines()[0]

    bin_dir = live.build.bin_dir()
    etcd = first_line(str(bin_dir / "etcd"), "--version")  # "etcd Version: 3.6.5"
    return {
        "kube-apiserver": str(live.kube.get("/version")["gitVersion"]),
        "kube-scheduler": first_line(str(bin_dir / "kube-scheduler"), "--version").split()[-1],
        "kubectl": json.loads(live.kubectl.run("version", "--client", "-o", "json"))[
            "clientVersion"
        ]["gitVersion"],
        "etcd": "v" + etcd.split()[-1],
    }


def apply_render(live: Live, work: Path) -> dict[str, Any]:
    """Server-side apply of what ``layersched deploy render`` writes for this minor."""
    tree = work / f"deploy-{live.build.version}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "layersched.cli.main",
            "deploy",
            "render",
            "--kubernetes-version",
            live.build.version.lstrip("v"),
            "--dir",
            str(tree),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    built = live.kubectl.run("kustomize", str(tree))
    objects = yaml_objects(built)
    applied = live.kubectl.run(
        "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-", stdin=built
    )
    lines = [line for line in applied.splitlines() if line.strip()]
    accepted = [line for line in lines if line.endswith(" serverside-applied")]
    return {
        "objects": len(objects),
        "accepted": len(accepted),
        "refused": len(objects) - len(accepted),
        "kinds": sorted({f"{o['apiVersion']} {o['kind']}" for o in objects}),
    }


@tenacity.retry(
    stop=tenacity.stop_after_delay(BIND_TIMEOUT_S), wait=tenacity.wait_fixed(0.3), reraise=True
)
def _bound(kube: KubeClient, name: str) -> str:
    node = kube.get(pod_path(NAMESPACE, name))["spec"].get("nodeName")
    assert node, f"pod {name} not bound within {BIND_TIMEOUT_S:g} s"
    return str(node)


def _plugin_holds(live: Live, nodes: int) -> None:
    @tenacity.retry(
        stop=tenacity.stop_after_delay(INVENTORY_TIMEOUT_S),
        wait=tenacity.wait_fixed(0.3),
        reraise=True,
    )
    def held() -> None:
        found = _INVENTORY_NODES.search(live.metrics())
        assert found and float(found["value"]) == nodes, f"the plugin holds {found}, not {nodes}"

    held()


def publish(live: Live, node: str, images: Sequence[str]) -> None:
    live.kube.apply(node_layers_path(node), inventory(node, images), FIELD_MANAGER)


def create_nodes(live: Live, held: Mapping[str, Sequence[str]]) -> None:
    """Fake Ready nodes (``bench_scheduler.fake_node``, with room for one scenario pod
    each), untainted, each with the NodeLayerInventory of the images ``held`` names."""
    resources = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS}
    with live.plane.client() as api:
        for name, images in held.items():
            node = fake_node({"metadata": {"name": name, "labels": {}}, "status": {"images": []}})
            node["status"]["capacity"] = node["status"]["allocatable"] = resources
            live.kube.create("/api/v1/nodes", node)
            untaint(api, node)
            publish(live, name, images)


def remove(live: Live, pods: Sequence[str], nodes: Sequence[str]) -> None:
    for pod in pods:
        live.kube.delete(pod_path(NAMESPACE, pod), grace_period_s=0)
    for name in nodes:
        live.kube.delete(node_layers_path(name))
        live.kube.delete(node_path(name))


def run_trial(live: Live, trial: int) -> dict[str, Any]:
    names = node_names(trial)
    create_nodes(live, {name: [] for name in names})
    _plugin_holds(live, len(names))
    pods = {report.P1: f"t{trial}-p1", report.P2: f"t{trial}-p2", report.P1_AGAIN: f"t{trial}-p1b"}
    placed: dict[str, str | None] = {}
    try:
        live.kube.create(
            pods_path(NAMESPACE), scenario_pod(pods[report.P1], "reg.test/live/img1:v1")
        )
        placed[report.P1] = _bound(live.kube, pods[report.P1])
        publish(live, placed[report.P1], ["img1"])
        live.kube.create(
            pods_path(NAMESPACE), scenario_pod(pods[report.P2], "reg.test/live/img2:v1")
        )
        placed[report.P2] = _bound(live.kube, pods[report.P2])
        publish(live, placed[report.P2], ["img2"])
        live.kube.delete(pod_path(NAMESPACE, pods[report.P2]), grace_period_s=0)
        # not a poll: the plugin exports no per-update signal; its logged scores of P1'
        # show whether it had seen P2's node's layers (the verdict requires it)
        time.sleep(INFORMER_MARGIN_S)
        live.kube.create(
            pods_path(NAMESPACE), scenario_pod(pods[report.P1_AGAIN], "reg.test/live/img1:v1")
        )
        placed[report.P1_AGAIN] = _bound(live.kube, pods[report.P1_AGAIN])
    except (AssertionError, KubeError) as err:
        print(f"trial {trial}: {err}", file=sys.stderr)
    log = live.scheduler_log.read_text(errors="replace").splitlines()
    scores = plugin_scores(log, LAYER_LOCALITY_PLUGIN, f"{NAMESPACE}/{pods[report.P1_AGAIN]}")
    remove(live, list(pods.values()), names)
    return {
        "nodes": names,
        "placed": placed,
        "p1_again_scores": scores,
        "verdict": report.trial_verdict(placed, scores),
    }


def check_batching(live: Live) -> dict[str, Any]:
    names = node_names(0)
    # alike pods need nodes the plugin scores apart (a ranking to reuse): one holds Img1
    create_nodes(live, {name: ["img1"] if name == names[0] else [] for name in names})
    _plugin_holds(live, len(names))
    before = batch_attempts(live.metrics())
    pods = [f"batch-{i}" for i in range(BATCH_PODS)]
    for pod in pods:
        live.kube.create(pods_path(NAMESPACE), batch_pod(pod))
    placed = {pod: _bound(live.kube, pod) for pod in pods}
    after = batch_attempts(live.metrics())
    log = live.scheduler_log.read_text(errors="replace")
    disabled = [
        line for line in log.splitlines() if "Disabling signatures" in line and PROFILE in line
    ]
    remove(live, pods, names)
    hints = report.batch_hints(before, after)
    return {
        "metric": bool(after),
        "hints": hints,
        "on": report.batching_on(hints) and not disabled,
        "signatures_disabled_lines": disabled[:3],
        "placed": placed,
    }


def build(minor: KubernetesBuild, console: Console) -> dict[str, Any]:
    state = "cached" if not minor.missing() else "built"
    started = time.monotonic()
    minor_name = minor.version.lstrip("v").rsplit(".", 1)[0]
    console.log(f"{minor.version}: {state if state == 'cached' else 'building'} {minor.build_id}")
    subprocess.run([sys.executable, str(BUILDER), "--minor", minor_name], check=True)
    return {"build_id": minor.build_id, "seconds": time.monotonic() - started, "state": state}


def run_minor(minor: KubernetesBuild, state_root: Path, console: Console) -> dict[str, Any]:
    built = build(minor, console)
    state_dir = state_root / minor.version
    with control_plane(minor, state_dir, console) as live:
        with live.plane.client() as api:
            # the namespace and its ServiceAccount (no controller-manager makes it)
            for path, body in (
                ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
                (
                    f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
                    {"metadata": {"name": "default"}},
                ),
            ):
                api.post(path, json=body).raise_for_status()
        found = versions(live)
        console.log(f"{minor.version}: running {found}")
        applied = apply_render(live, state_root)
        console.log(f"{minor.version}: deploy render tree: {applied}")
        trials = [run_trial(live, t) for t in range(1, TRIALS + 1)]
        for t, trial in enumerate(trials, 1):
            console.log(f"{minor.version} trial {t}: {trial['placed']} {trial['verdict'] or 'ok'}")
        batching = check_batching(live)
        console.log(f"{minor.version}: batching {batching}")
    return {
        "minor": minor.version.lstrip("v").rsplit(".", 1)[0],
        "build": built,
        "versions": found,
        "apply": applied,
        "trials": trials,
        "batching": batching,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minor", action="append", help="only this minor (1.35); repeatable")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument(
        "--output",
        type=Path,
        help=f"results file (default: {report.DEFAULT_REPORT} under this run's directory, "
        f"runs/<UTC time>/, or itself with LAYERSCHED_RESULTS=commit)",
    )
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    minors = [
        m
        for m in minor_builds()
        if not args.minor or m.version.lstrip("v").rsplit(".", 1)[0] in args.minor
    ]
    started = time.monotonic()
    # each minor's etcd, kube-apiserver and kube-scheduler name the state directory
    record = provenance.start(
        kubernetes_build().version, own_commands=[str(args.state_dir.resolve())]
    )
    results: dict[str, Any] = {
        "provenance": record,
        "main_build": kubernetes_build().version,
        "minors": [],
    }
    try:
        # the main build's kubectl drives every minor's control plane: say to build it
        kubernetes_build().require("kubectl")
        for minor in minors:
            results["minors"].append(run_minor(minor, args.state_dir.resolve(), console))
    except (LayerschedError, subprocess.CalledProcessError, httpx.HTTPError) as err:
        console.print(f"[red]make live-minors: {err}")
        return 1
    results["provenance"] = provenance.finish(record)
    results["run_time_s"] = round(time.monotonic() - started, 1)
    written = write_json(report.DEFAULT_REPORT, results, output=args.output)
    console.print(report.markdown(results))
    console.print(f"results: {written} (committed results: make figures rewrites the block)")
    failed = any(t["verdict"] for m in results["minors"] for t in m["trials"])
    return 1 if failed or not all(m["batching"]["on"] for m in results["minors"]) else 0


if __name__ == "__main__":
    sys.exit(main())
