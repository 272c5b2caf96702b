"""Health of a running local testbed, and the link counters pulls are measured with."""

from __future__ import annotations

import json
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from layersched import __version__
from layersched.core.errors import CRIError, KubeError
from layersched.cri import CRIClient
from layersched.kube import NODE_LAYERS_PATH, NODES_PATH, KubeClient, load_kubeconfig
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local._state import ClusterInfo, TestbedNode, TestbedState

#: A healthy local daemon answers in milliseconds; don't hang a status call on a dead one.
PROBE_TIMEOUT_S = 3.0
BITS_PER_BYTE = 8
#: /proc/PID/stat states of a process that has exited but was not reaped.
_DEAD_STATES = ("Z", "X")


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    """One daemon: is its process alive, does it answer, and what it said."""

    name: str
    pid: int | None
    answers: bool
    detail: str

    @property
    def healthy(self) -> bool:
        return self.pid is not None and self.answers


@dataclass(frozen=True, slots=True)
class VersionedStatus:
    """A cluster component: its status and the version it reports."""

    status: ComponentStatus
    version: str

    @property
    def healthy(self) -> bool:
        return self.status.healthy


@dataclass(frozen=True, slots=True)
class TestbedNodeStatus:
    """A node's daemon plus its link: shaped rate and bytes sent to it so far."""

    __test__ = False  # not a pytest test class, whatever its name says

    daemon: ComponentStatus
    address: str
    tbf_rate_bits_per_s: int | None
    link_rate_bits_per_s: int
    tx_bytes: int | None

    @property
    def healthy(self) -> bool:
        return self.daemon.healthy and self.tbf_rate_bits_per_s is not None


@dataclass(frozen=True, slots=True)
class TestbedStatus:
    """The registry and every node."""

    __test__ = False  # not a pytest test class, whatever its name says

    registry: ComponentStatus
    nodes: tuple[TestbedNodeStatus, ...]
    #: etcd, kube-apiserver, kube-controller-manager, the schedulers, the extender.
    control_plane: tuple[VersionedStatus, ...] = ()
    #: One kubelet per node: its process, and whether its Node is Ready.
    kubelets: tuple[VersionedStatus, ...] = ()
    #: One layersched agent per node: its process, and its published NodeLayerInventory.
    agents: tuple[VersionedStatus, ...] = ()

    @property
    def healthy(self) -> bool:
        return (
            self.registry.healthy
            and all(n.healthy for n in self.nodes)
            and all(c.healthy for c in (*self.control_plane, *self.kubelets, *self.agents))
        )


def pid_alive(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` if that process is running (not a zombie), else None."""
    try:
        pid = int(pidfile.read_text(encoding="utf-8").strip())
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    state = stat.rsplit(")", 1)[1].split()[0]
    return None if state in _DEAD_STATES else pid


def link_tx_bytes(host_veth: str) -> int:
    """Bytes the host has sent down ``host_veth`` (registry to node), from sysfs.

    Read before and after a pull: the difference is what crossed the node's link,
    headers and retransmissions included.
    """
    path = Path("/sys/class/net") / host_veth / "statistics" / "tx_bytes"
    try:
        return int(path.read_text(encoding="ascii"))
    except (OSError, ValueError) as err:
        raise TestbedError(
            f"reading {path}: {err}; is the testbed up (`layersched testbed status`)?"
        ) from err


def tbf_rate_bits_per_s(dev: str) -> int | None:
    """The rate of the root tbf qdisc on ``dev``, or None when there is none.

    Raises :class:`TestbedError` when ``tc`` cannot be run or answers nonsense.
    """
    argv = ["tc", "-j", "qdisc", "show", "dev", dev]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as err:
        raise TestbedError(
            f"running `{' '.join(argv)}` to read the link rate: {err.strerror or err}; "
            "install iproute2 (apt-get install iproute2)"
        ) from err
    if done.returncode != 0 or not done.stdout.strip():
        return None
    try:
        for qdisc in json.loads(done.stdout):
            if qdisc.get("kind") == "tbf" and qdisc.get("root"):
                # tc reports rates in bytes per second.
                return int(qdisc["options"]["rate"]) * BITS_PER_BYTE
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise TestbedError(
            f"`{' '.join(argv)}` printed unexpected JSON ({err}); "
            "is iproute2 recent enough for -j (json) output?"
        ) from err
    return None


def _registry_status(inventory: TestbedState) -> ComponentStatus:
    registry = inventory.registry
    pid = pid_alive(Path(registry.pidfile))
    try:
        response = httpx.get(f"{registry.url}/v2/", timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as err:
        return ComponentStatus("registry", pid, False, f"{registry.url}/v2/: {err}")
    ok = response.status_code == httpx.codes.OK
    return ComponentStatus("registry", pid, ok, f"{registry.url}/v2/ -> {response.status_code}")


def _node_status(node: TestbedNode) -> TestbedNodeStatus:
    pid = pid_alive(Path(node.pidfile))
    try:
        with CRIClient(node.cri_endpoint, timeout_s=PROBE_TIMEOUT_S) as cri:
            version = cri.version()
        daemon = ComponentStatus(
            node.name, pid, True, f"{version.runtime_name} {version.runtime_version}"
        )
    except CRIError as err:
        daemon = ComponentStatus(node.name, pid, False, str(err))
    try:
        tx_bytes: int | None = link_tx_bytes(node.host_veth)
    except TestbedError:
        tx_bytes = None
    return TestbedNodeStatus(
        daemon=daemon,
        address=node.address,
        tbf_rate_bits_per_s=tbf_rate_bits_per_s(node.host_veth),
        link_rate_bits_per_s=node.link_rate_bits_per_s,
        tx_bytes=tx_bytes,
    )


def probe(inventory: TestbedState) -> TestbedStatus:
    """Ask every daemon of the testbed whether it is there and answering."""
    return TestbedStatus(
        registry=_registry_status(inventory),
        nodes=tuple(_node_status(n) for n in inventory.nodes),
        control_plane=tuple(_control_plane_status(inventory.cluster)),
        kubelets=tuple(_kubelet_status(inventory)),
        agents=tuple(_agent_status(inventory.cluster)),
    )


def _binary_version(path: str) -> str:
    """``Kubernetes v1.20.2`` -> ``v1.20.2``, from the binary itself."""
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    words = (done.stdout or done.stderr).split()
    return words[-1] if words else "?"


def _https(cluster: ClusterInfo, url: str) -> httpx.Response:
    """GET a daemon's health ``url`` verified against the testbed CA, as the testbed's
    admin (the API itself is read through :func:`_api_objects`)."""
    context = ssl.create_default_context(cafile=cluster.ca_file)
    context.load_cert_chain(cluster.admin_cert, cluster.admin_key)
    return httpx.get(url, verify=context, timeout=PROBE_TIMEOUT_S)


def _control_plane_status(cluster: ClusterInfo) -> list[VersionedStatus]:
    found = []
    # every scheduler-* process is the one kube-scheduler binary (the fourth, pull-time, too)
    binaries = {
        "kube-apiserver": "kube-apiserver",
        "kube-controller-manager": "kube-controller-manager",
    }
    for daemon in cluster.control_plane:
        pid = pid_alive(Path(daemon.pidfile))
        try:
            response = _https(cluster, daemon.health_url)
            ok = response.status_code == httpx.codes.OK
            detail = f"{daemon.health_url} -> {response.status_code}"
        except (httpx.HTTPError, OSError) as err:
            ok, detail = False, f"{daemon.health_url}: {err}"
        if daemon.name == "etcd":
            try:
                version = str(
                    _https(cluster, daemon.health_url.replace("/health", "/version")).json()[
                        "etcdserver"
                    ]
                )
            except (httpx.HTTPError, OSError, ValueError, KeyError, TypeError):
                version = "?"
        else:
            binary = binaries.get(daemon.name, "kube-scheduler")
            version = _binary_version(f"{cluster.bin_dir}/{binary}")
        found.append(VersionedStatus(ComponentStatus(daemon.name, pid, ok, detail), version))
    extenders = (cluster.extender, cluster.pull_time_extender, cluster.inflight_extender)
    for extender in (e for e in extenders if e is not None):
        pid = pid_alive(Path(extender.pidfile))
        try:
            response = httpx.get(f"{extender.url}/healthz", timeout=PROBE_TIMEOUT_S)
            ok, detail = response.status_code == httpx.codes.OK, f"{extender.url}/healthz"
            detail += f" -> {response.status_code}"
        except httpx.HTTPError as err:
            ok, detail = False, f"{extender.url}/healthz: {err}"
        name = f"layersched extender ({extender.strategy})"
        found.append(VersionedStatus(ComponentStatus(name, pid, ok, detail), __version__))
    return found


#: The CRI relay's socket and pidfile in a node's directory (the testbed_relay role).
RELAY_SOCKET = "relay.sock"
RELAY_PIDFILE = "relay.pid"
_ENDPOINT_FLAG = "--container-runtime-endpoint="


def kubelet_cri_path(node: TestbedNode, kubelet_pid: int | None) -> tuple[str, bool]:
    """How a node's kubelet reaches its runtime, from the kubelet's command line:
    ``"CRI via relay (pid N)"`` or ``"CRI direct"``; False when the relay it uses is down."""
    if kubelet_pid is None:
        return "CRI unknown (kubelet not running)", True
    try:
        argv = Path(f"/proc/{kubelet_pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return "CRI unknown", True
    endpoint = next(
        (a.removeprefix(_ENDPOINT_FLAG) for a in argv if a.startswith(_ENDPOINT_FLAG)), ""
    )
    node_dir = Path(node.kubelet_pidfile).parent
    if endpoint.removeprefix("unix://") != str(node_dir / RELAY_SOCKET):
        return "CRI direct", True
    relay_pid = pid_alive(node_dir / RELAY_PIDFILE)
    if relay_pid is None:
        return "CRI via relay (relay DOWN)", False
    return f"CRI via relay (pid {relay_pid})", True


def _api_objects(cluster: ClusterInfo, path: str) -> tuple[dict[str, dict[str, object]], str]:
    """The objects of the collection ``path`` by name (read as the testbed's admin) and
    no error; or none and the error, which names the call."""
    try:
        with KubeClient(load_kubeconfig(cluster.kubeconfig), timeout_s=PROBE_TIMEOUT_S) as kube:
            items, _ = kube.list(path)
        return {str(item["metadata"]["name"]): item for item in items}, ""
    except KubeError as err:
        return {}, str(err)
    except (KeyError, TypeError) as err:
        return {}, f"listing {path}: an object without metadata.name ({err!r})"


def _kubelet_status(inventory: TestbedState) -> list[VersionedStatus]:
    nodes, error = _api_objects(inventory.cluster, NODES_PATH)
    found = []
    for node in inventory.nodes:
        pid = pid_alive(Path(node.kubelet_pidfile))
        document = nodes.get(node.name)
        status: dict[str, object] = {}
        if isinstance(document, dict):
            status = document.get("status") or {}  # type: ignore[assignment]
        ready = [
            c
            for c in status.get("conditions") or []  # type: ignore[attr-defined]
            if c.get("type") == "Ready"
        ]
        ok = bool(ready) and ready[0].get("status") == "True"
        detail = error or (f"Ready={ready[0].get('status')}" if ready else "not registered")
        cri, relay_ok = kubelet_cri_path(node, pid)
        ok = ok and relay_ok
        detail = f"{detail}; {cri}"
        info = status.get("nodeInfo") or {}
        version = str(info.get("kubeletVersion", "?")) if isinstance(info, dict) else "?"
        found.append(
            VersionedStatus(ComponentStatus(f"kubelet {node.name}", pid, ok, detail), version)
        )
    return found


def _agent_status(cluster: ClusterInfo) -> list[VersionedStatus]:
    """Each node agent: alive, and what its NodeLayerInventory says (images, layers, age)."""
    published, error = _api_objects(cluster, NODE_LAYERS_PATH)
    found = []
    for agent in cluster.agents:
        pid = pid_alive(Path(agent.pidfile))
        item = published.get(agent.node)
        if item is None:
            ok, detail = False, error or "nothing published"
        else:
            images, layers = item.get("images") or [], item.get("layers") or []
            ok = True
            detail = (
                f"{len(images)} images, {len(layers)} layers from {item.get('source')}, "  # type: ignore[arg-type]
                f"observed {item.get('observedAt')}"
            )
        found.append(
            VersionedStatus(ComponentStatus(f"agent {agent.node}", pid, ok, detail), __version__)
        )
    return found
