"""``layersched agent --publish``: the node agent that keeps a node's NodeLayerInventory.

This module parses the flags and wires the objects: what to read (the agent's
:class:`~layersched.agent.NodeImagesReader`), where to publish
(:class:`~layersched.agent.Publisher`), the change signal, the watch of the node's own
object that keeps it true (:func:`~layersched.agent.watch_own_object`, on a connection of
its own), and the health server (with the agent's metrics).
"""

from __future__ import annotations

import argparse
import logging
import signal as signals
import threading
from pathlib import Path
from types import FrameType

from layersched.agent import (
    BACKOFF_MAX_S,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_POLL_S,
    DEFAULT_RESYNC_S,
    AgentHealth,
    AgentMetrics,
    ChangeSignal,
    CrioStorageReader,
    HealthServer,
    ImageReader,
    NodeImagesReader,
    Publisher,
    publish_loop,
    watch_events,
    watch_own_object,
)
from layersched.cli._sources import add_layer_source_options, open_layer_source
from layersched.containerd import CRI_NAMESPACE, ContainerdClient, ContentStoreReader
from layersched.core.errors import InputError, LayerschedError
from layersched.core.manifest import Platform
from layersched.core.nodelayers import DEFAULT_MAX_OBJECT_BYTES
from layersched.cri import CRIClient
from layersched.kube import KubeClient, load_config

log = logging.getLogger(__name__)

#: TCP ports run from 1 to 65535.
PORT_LIMIT = 65536
#: Smallest periods accepted, so a typo cannot turn the agent into a busy loop.
MIN_PERIOD_S = 0.1
#: Below this an object cannot hold even one image of a few layers.
MIN_OBJECT_BYTES = 4096
#: The registry fallback's limits: an agent is not in a hurry.
AGENT_REGISTRY_TIMEOUT_S = 10.0
AGENT_REGISTRY_RETRIES = 2
AGENT_REGISTRY_DEADLINE_S = 30.0
#: Where the health endpoint listens once --health-port is given (the deployment passes
#: the pod's IP, which the kubelet probes).
DEFAULT_HEALTH_HOST = "127.0.0.1"
#: /livez fails when the loop has not gone round for its longest wait (a resync period,
#: or the longest back-off) plus this: every call it makes has a deadline of seconds
#: (containerd and the CRI 10 s, the API 30 s), so five minutes more is a hang.
LIVE_GRACE_S = 300.0
#: /readyz fails when nothing was published for a resync period plus this: a healthy
#: loop succeeds at least every resync period.
READY_GRACE_S = 60.0


def add_publish_options(p: argparse.ArgumentParser) -> None:
    """The ``--publish`` mode's options."""
    g = p.add_argument_group("publishing (--publish)")
    g.add_argument(
        "--publish",
        action="store_true",
        help="apply the node's NodeLayerInventory to the API whenever its layers change",
    )
    g.add_argument("--kubeconfig", metavar="FILE", help="API credentials (default: in-cluster)")
    g.add_argument(
        "--containerd",
        metavar="ADDRESS",
        help="read layers from containerd's content store at this socket "
        "(e.g. /run/containerd/containerd.sock); image events trigger a read at once",
    )
    g.add_argument(
        "--containerd-namespace",
        default=CRI_NAMESPACE,
        help="containerd namespace of the node's images (default: %(default)s, the CRI's)",
    )
    g.add_argument(
        "--crio-storage",
        metavar="DIR",
        type=Path,
        help="read layers from CRI-O's containers/storage root (e.g. /var/lib/containers/storage)",
    )
    g.add_argument(
        "--registry-fallback",
        action="store_true",
        help="resolve CRI images nothing else explains through their registry (needs --cri)",
    )
    g.add_argument(
        "--poll-s",
        type=float,
        default=DEFAULT_POLL_S,
        help="read period when runtime events are unavailable (default: %(default)s)",
    )
    g.add_argument(
        "--resync-s",
        type=float,
        default=DEFAULT_RESYNC_S,
        help="read and compare at least this often (default: %(default)s)",
    )
    g.add_argument(
        "--heartbeat-s",
        type=float,
        default=DEFAULT_HEARTBEAT_S,
        help="re-apply an unchanged object this often, refreshing observedAt "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--max-object-bytes",
        type=int,
        default=DEFAULT_MAX_OBJECT_BYTES,
        help="size budget of the object; past it the smallest images are left out "
        "(default: %(default)s, under etcd's 1.5 MiB request limit)",
    )
    g.add_argument(
        "--health-port",
        type=int,
        metavar="PORT",
        help="serve /livez, /readyz and /metrics on this port (default: no health server)",
    )
    g.add_argument(
        "--health-host",
        default=DEFAULT_HEALTH_HOST,
        metavar="ADDRESS",
        help="address of the health server (default: %(default)s; in a pod, its IP: "
        "--health-host $(POD_IP) from the downward API)",
    )
    add_layer_source_options(
        p,
        registry_timeout_s=AGENT_REGISTRY_TIMEOUT_S,
        registry_retries=AGENT_REGISTRY_RETRIES,
        registry_deadline_s=AGENT_REGISTRY_DEADLINE_S,
    )


def _check(args: argparse.Namespace) -> None:
    for name in ("poll_s", "resync_s", "heartbeat_s"):
        if not getattr(args, name) >= MIN_PERIOD_S:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} {getattr(args, name):g}: use at least {MIN_PERIOD_S} s")
    if args.max_object_bytes < MIN_OBJECT_BYTES:
        raise InputError(f"--max-object-bytes {args.max_object_bytes}: use >= {MIN_OBJECT_BYTES}")
    if args.health_port is not None and not 0 < args.health_port < PORT_LIMIT:
        raise InputError(f"--health-port {args.health_port}: use a port from 1 to {PORT_LIMIT - 1}")


def _runtime_name(cri: CRIClient | None, args: argparse.Namespace) -> str:
    if cri is not None:
        try:
            version = cri.version()
            return f"{version.runtime_name}://{version.runtime_version}"
        except LayerschedError as err:
            log.warning("asking the runtime for its version: %s", err)
    return "containerd" if args.containerd else "cri-o" if args.crio_storage else "cri"


def _health(
    args: argparse.Namespace, publisher: Publisher
) -> tuple[AgentHealth, HealthServer | None]:
    health = AgentHealth(
        live_bound_s=max(args.resync_s, args.poll_s, BACKOFF_MAX_S) + LIVE_GRACE_S,
        ready_bound_s=args.resync_s + READY_GRACE_S,
    )
    if args.health_port is None:
        return health, None
    metrics = AgentMetrics(publisher.stats)
    server = HealthServer(health, args.health_host, args.health_port, metrics=metrics.render)
    return health, server.start()


def run_publish(args: argparse.Namespace) -> int:
    """Publish until SIGTERM/SIGINT (or once, with ``--once``)."""
    _check(args)
    containerd = (
        ContainerdClient(args.containerd, args.containerd_namespace, args.timeout_s)
        if args.containerd
        else None
    )
    stores: list[ImageReader] = []
    if containerd is not None:
        stores.append(ContentStoreReader(containerd, Platform.parse(args.platform)))
    if args.crio_storage is not None:
        stores.append(CrioStorageReader(args.crio_storage))
    cri = CRIClient(args.cri, timeout_s=args.timeout_s) if args.cri else None
    fallback = open_layer_source(args, cached=True) if args.registry_fallback else None
    reader = NodeImagesReader(stores, cri, fallback)
    config = load_config(args.kubeconfig)
    kube = KubeClient(config)
    publisher = Publisher(
        kube,
        args.node_name,
        runtime=_runtime_name(cri, args),
        heartbeat_s=args.heartbeat_s,
        max_object_bytes=args.max_object_bytes,
    )
    signal = ChangeSignal()

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        signal.stopped.set()
        signal.set()

    health: AgentHealth | None = None
    server: HealthServer | None = None
    try:
        if not args.once:
            health, server = _health(args, publisher)
        publisher.adopt_published()
        if not args.once:
            signals.signal(signals.SIGTERM, stop)
            signals.signal(signals.SIGINT, stop)
            # the watch holds its connection open for minutes: a client of its own (left
            # to the process's end, as the thread is: closing it would fail its read)
            threading.Thread(
                target=watch_own_object,
                args=(KubeClient(config), publisher, signal),
                name="own-object",
                daemon=True,
            ).start()
            if containerd is not None:
                events = ContainerdClient(args.containerd, args.containerd_namespace)
                threading.Thread(
                    target=watch_events,
                    args=(events.events, signal, args.poll_s),
                    name="runtime-events",
                    daemon=True,
                ).start()
            else:
                threading.Thread(
                    target=_poll, args=(signal, args.poll_s), name="poll", daemon=True
                ).start()
        publish_loop(
            reader.read, publisher, signal, resync_s=args.resync_s, once=args.once, health=health
        )
    finally:
        if server is not None:
            server.close()
        for client in (kube, containerd, cri):
            if client is not None:
                client.close()
    log.info(
        "agent for %s stopped: %d reads, %d applies, %d repairs",
        args.node_name,
        publisher.stats.reads,
        publisher.stats.applies,
        sum(publisher.stats.repairs.values()),
    )
    return 0


def _poll(signal: ChangeSignal, poll_s: float) -> None:
    while not signal.stopped.wait(poll_s):
        signal.set()
