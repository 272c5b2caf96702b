"""The local testbed's state (``STATE_DIR/inventory.json``), typed: :class:`TestbedState`.

The file keeps its name, ``inventory.json``, which users and the playbooks know.

The playbook ``harness/playbooks/testbed-local.yml`` writes it; everything that drives the
testbed (the cluster driver, CLI, tests) reads it here instead of guessing paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from layersched.builds import REPO_ROOT
from layersched_harness.testbed.errors import TestbedError

#: Environment variable that moves the state dir (the playbooks read it too).
STATE_DIR_ENV = "LAYERSCHED_TESTBED_DIR"
#: Default state dir: ``.testbed/`` at the repository root (git-ignored).
DEFAULT_STATE_DIR = REPO_ROOT / ".testbed"
#: File name of the state inside the state dir.
STATE_FILE = "inventory.json"
#: The state file's layout this code reads; the playbook writes the same number.
STATE_VERSION = 2


class NetworkInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The host bridge all node links hang off, and the testbed's own subnet."""

    bridge: str
    gateway: str
    cidr: str


class RegistryInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The docker-registry daemon on the bridge's address."""

    address: str
    port: int
    url: str
    config: str
    storage_dir: str
    pidfile: str
    log: str
    #: One line per request, Apache combined format, with the bytes sent.
    access_log: str

    @property
    def host(self) -> str:
        """``address:port``, as image references name the registry."""
        return f"{self.address}:{self.port}"


class TestbedNode(msgspec.Struct, frozen=True, kw_only=True):
    """One node in its own network namespace, on containerd or CRI-O."""

    __test__ = False  # not a pytest test class, whatever its name says

    name: str
    #: ``containerd`` or ``crio``; the paths below are that runtime's (for CRI-O,
    #: ``root_dir`` is its containers/storage graph root, what the agent reads).
    runtime: str = "containerd"
    netns: str
    #: Host end of the node's veth; its egress (registry to node) carries the tbf limit.
    host_veth: str
    address: str
    link_rate_bits_per_s: int
    cri_socket: str
    cri_endpoint: str
    dir: str
    config: str
    root_dir: str
    state_dir: str
    pidfile: str
    log: str
    #: The node's kubelet (in the node's namespace, on this node's containerd).
    kubelet_pidfile: str
    kubelet_log: str
    kubelet_root_dir: str
    #: The kubelet's pull queue: 1 pulls one image at a time (``serializeImagePulls``,
    #: its default), more in parallel (``layersched testbed up --parallel-pulls``).
    max_parallel_image_pulls: int = 1


class DaemonInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A control-plane daemon: where its pid and its log are, and its health endpoint."""

    name: str
    pidfile: str
    log: str
    #: HTTPS, served with a certificate from the testbed CA; answers the admin client cert.
    health_url: str


class SchedulerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A kube-scheduler profile pods select with ``spec.schedulerName``, and its log."""

    name: str
    log: str


class ExtenderInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The layersched extender the layer-locality scheduler calls."""

    url: str
    strategy: str
    pidfile: str
    log: str


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A node's layersched agent (in the node's namespace, on the node's containerd)."""

    node: str
    pidfile: str
    log: str
    #: Its credentials: a token bound to its Node (local), or its node-scoped client
    #: certificate (a remote node); "" in an inventory written before they were recorded.
    kubeconfig: str = ""


class ClusterInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The real Kubernetes cluster on the testbed."""

    kubernetes_version: str
    #: Admin kubeconfig (client certificate from the testbed's CA).
    kubeconfig: str
    api_server: str
    ca_file: str
    #: The admin client certificate (system:masters), for health probes.
    admin_cert: str
    admin_key: str
    #: The built binaries (kubectl among them: the machine's may be out of skew).
    bin_dir: str
    control_plane: tuple[DaemonInfo, ...]
    #: strategy -> the scheduler that implements it.
    schedulers: dict[str, SchedulerInfo]
    extender: ExtenderInfo
    #: The pull-time scheduler's extender (``layersched testbed up --pull-time``), or None.
    pull_time_extender: ExtenderInfo | None = None
    #: The in-flight scheduler's extender (``layersched testbed up --replay-arms``), or None.
    inflight_extender: ExtenderInfo | None = None
    #: One node agent per node, publishing its NodeLayerInventory.
    agents: tuple[AgentInfo, ...] = ()

    @property
    def kubectl(self) -> str:
        """The kubectl built with the cluster (same version as the API server)."""
        return f"{self.bin_dir}/kubectl"


class TestbedState(msgspec.Struct, frozen=True, kw_only=True):
    """What ``inventory.json`` describes: network, registry and nodes."""

    __test__ = False  # not a pytest test class, whatever its name says

    version: int
    driver: str
    state_dir: str
    prefix: str
    network: NetworkInfo
    registry: RegistryInfo
    nodes: tuple[TestbedNode, ...]
    cluster: ClusterInfo

    def node(self, name: str) -> TestbedNode:
        """The node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise TestbedError(f"testbed has no node {name!r} (nodes: {known})")


def default_state_dir() -> Path:
    """``$LAYERSCHED_TESTBED_DIR`` if set, else ``.testbed/`` at the repository root."""
    configured = os.environ.get(STATE_DIR_ENV)
    return Path(configured).resolve() if configured else DEFAULT_STATE_DIR


def state_path(state_dir: Path) -> Path:
    """Where the state of the testbed in ``state_dir`` lives."""
    return state_dir / STATE_FILE


def parse_state(raw: bytes, where: str) -> TestbedState:
    """Decode and check a state document; ``where`` names it in errors."""
    try:
        inventory = msgspec.json.decode(raw, type=TestbedState)
    except msgspec.DecodeError as err:
        raise TestbedError(
            f"{where}: malformed testbed inventory ({err}); "
            "re-run `layersched testbed up` to rewrite it"
        ) from err
    if inventory.version != STATE_VERSION:
        raise TestbedError(
            f"{where}: inventory version {inventory.version}, expected {STATE_VERSION}: "
            "re-run `layersched testbed up` to rewrite it"
        )
    return inventory


def load_state(state_dir: Path | None = None) -> TestbedState:
    """The state of the testbed in ``state_dir`` (default: :func:`default_state_dir`)."""
    path = state_path(state_dir or default_state_dir())
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TestbedError(
            f"{path}: no testbed inventory: bring the testbed up first "
            "(`make testbed` or `layersched testbed up`)"
        ) from None
    except OSError as err:
        raise TestbedError(f"{path}: unreadable testbed inventory ({err})") from err
    return parse_state(raw, str(path))
