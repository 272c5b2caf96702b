"""A testbed on other machines, reached over SSH: the cloud's VMs (``DRIVER=cloud``).

``harness/playbooks/testbed-cloud.yml`` writes ``STATE/remote-testbed.json`` (a
:class:`RemoteTestbed`): how to log in to the control-plane host and to each node, where
the registry's access log, the schedulers' logs and the extender's log are **on the
control-plane host**, where each node's containerd socket is **on the node**, and the
operator's kubeconfig on this machine. :func:`remote_backend` turns it into the cluster
driver's backend: the local testbed's
:class:`~layersched_harness.testbed.local._cluster.FileBackend` with every file, socket and
port reached through :class:`~layersched_harness.testbed.hosts.SSHHost`.
:func:`push_scenario_images` pushes the scenario images to the control-plane host's
registry through an SSH tunnel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
from rich.console import Console

from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.hosts import SSHHost, SSHTarget
from layersched_harness.testbed.local._cluster import FileBackend, NodeAccess
from layersched_harness.testbed.scenario import ScenarioImages
from layersched_harness.testbed.scenario_images import ScenarioSpec, build_and_push_scenario
from layersched_harness.testbed.scheduler_configs import (
    LAYER_LOCALITY_PLUGIN_SCHEDULER as LAYER_LOCALITY_PLUGIN,
)

#: The file inside the state dir, and the layout this code reads.
REMOTE_TESTBED_FILE = "remote-testbed.json"
REMOTE_TESTBED_VERSION = 1
DRIVER_NAME = "cloud"


class RemoteScheduler(msgspec.Struct, frozen=True, kw_only=True):
    """A kube-scheduler profile pods select with ``spec.schedulerName``, and its log."""

    name: str
    #: On the control-plane host.
    log: str


class RemoteNode(msgspec.Struct, frozen=True, kw_only=True):
    """One node: how to log in to it, and where its containerd listens on it."""

    name: str
    #: The address the cluster (and the registry's access log) knows the node by.
    address: str
    ssh: SSHTarget
    cri_socket: str
    #: The node's link rate when it is shaped; None when only the machine limits it.
    link_rate_bits_per_s: int | None = None


class RemoteTestbed(msgspec.Struct, frozen=True, kw_only=True):
    """What ``remote-testbed.json`` describes."""

    version: int
    driver: str = DRIVER_NAME
    #: On this machine: the operator's admin kubeconfig.
    kubeconfig: str
    kubernetes_version: str
    control_plane: SSHTarget
    #: ``ADDRESS:PORT`` of the registry as the nodes (and the control-plane host) reach it.
    registry: str
    #: On the control-plane host: one line per registry request, with the bytes sent.
    access_log: str
    #: The extender's URL as the control-plane host reaches it, and its decision log there.
    extender_url: str
    extender_log: str
    #: strategy -> scheduler.
    schedulers: dict[str, RemoteScheduler]
    nodes: tuple[RemoteNode, ...]


def remote_testbed_path(state_dir: Path) -> Path:
    """Where the remote testbed of ``state_dir`` is described."""
    return state_dir / REMOTE_TESTBED_FILE


def load_remote_testbed(state_dir: Path) -> RemoteTestbed:
    """The remote testbed described in ``state_dir``, checked."""
    path = remote_testbed_path(state_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TestbedError(
            f"{path}: no remote testbed: bring it up first (make testbed DRIVER=cloud; "
            "harness/playbooks/testbed-cloud.yml writes this file)"
        ) from None
    except OSError as err:
        raise TestbedError(f"{path}: unreadable remote testbed ({err})") from err
    try:
        testbed = msgspec.json.decode(raw, type=RemoteTestbed)
    except msgspec.DecodeError as err:
        raise TestbedError(
            f"{path}: malformed remote testbed ({err}); re-run harness/playbooks/testbed-cloud.yml"
        ) from err
    if testbed.version != REMOTE_TESTBED_VERSION:
        raise TestbedError(
            f"{path}: remote testbed version {testbed.version}, expected "
            f"{REMOTE_TESTBED_VERSION}: re-run harness/playbooks/testbed-cloud.yml"
        )
    missing = {LAYER_LOCALITY, IMAGE_LOCALITY} - set(testbed.schedulers)
    if missing:
        raise TestbedError(f"{path}: schedulers lacks {', '.join(sorted(missing))}")
    if not testbed.nodes:
        raise TestbedError(f"{path}: nodes is empty: the scenario needs at least two")
    return testbed


def remote_backend(testbed: RemoteTestbed) -> FileBackend:
    """The cluster driver's backend for ``testbed``: logs read on the control-plane host,
    node caches emptied through each node's containerd, all over SSH. Close it when done
    (it ends its ssh processes)."""
    control_plane = SSHHost(testbed.control_plane)
    nodes = {n.name: NodeAccess(SSHHost(n.ssh), n.cri_socket) for n in testbed.nodes}
    return FileBackend(
        testbed.driver,
        schedulers={strategy: s.name for strategy, s in testbed.schedulers.items()},
        control_plane=control_plane,
        access_log=testbed.access_log,
        score_logs={
            LAYER_LOCALITY: testbed.extender_log,
            IMAGE_LOCALITY: testbed.schedulers[IMAGE_LOCALITY].log,
            # the plugin's scores are in its kube-scheduler's log (a cluster built with it)
            **{
                strategy: s.log
                for strategy, s in testbed.schedulers.items()
                if strategy == LAYER_LOCALITY_PLUGIN
            },
        },
        extender_url=testbed.extender_url,
        nodes=nodes,
    )


def push_scenario_images(
    testbed: RemoteTestbed,
    backend: FileBackend,
    sizes: Mapping[str, int] | None = None,
    *,
    spec: ScenarioSpec | None = None,
    console: Console | None = None,
    tags: Sequence[str] = (),
) -> ScenarioImages:
    """Build the scenario images and push them to the control-plane host's registry
    through an SSH tunnel (also tagged ``tags``); the references name the registry as the
    nodes reach it."""
    address, _, port = testbed.registry.rpartition(":")
    if not address or not port.isdigit():
        raise TestbedError(f"remote testbed: registry {testbed.registry!r} is not ADDRESS:PORT")
    tunnel = backend.control_plane.tcp(address, int(port))
    return build_and_push_scenario(
        testbed.registry, sizes, spec=spec, console=console, push_address=tunnel, tags=tags
    )


def node_rates(testbed: RemoteTestbed) -> dict[str, int]:
    """Each shaped node's link rate (the report's ``node_rates_bits_per_s``)."""
    return {n.name: n.link_rate_bits_per_s for n in testbed.nodes if n.link_rate_bits_per_s}
