"""``layersched agent --publish``: the node agent that keeps a node's NodeLayerInventory.

This module parses the flags and builds the clients: what to read (the agent's
:class:`~layersched.agent.NodeImagesReader`) and where to publish
(:class:`~layersched.agent.Publisher`); :func:`layersched.agent.run` runs the rest (the
threads that wake the publish loop, the health port, the stop on SIGTERM).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from layersched import agent
from layersched.agent import (
    DEFAULT_HEALTH_HOST,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_POLL_S,
    DEFAULT_RESYNC_S,
    CrioStorageReader,
    ImageReader,
    NodeImagesReader,
    Publisher,
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
    # the runtime's image events come on a connection of their own
    events = (
        ContainerdClient(args.containerd, args.containerd_namespace).events
        if containerd is not None and not args.once
        else None
    )
    try:
        agent.run(
            reader.read,
            publisher,
            lambda: KubeClient(config),
            events=events,
            poll_s=args.poll_s,
            resync_s=args.resync_s,
            health_host=args.health_host,
            health_port=args.health_port,
            once=args.once,
        )
    finally:
        for client in (kube, containerd, cri):
            if client is not None:
                client.close()
    return 0
