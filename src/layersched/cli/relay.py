"""``layersched relay``: a CRI proxy between the kubelet and its runtime (docs/relay.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from layersched.agent import CrioStorageReader
from layersched.cli._io import read_document
from layersched.containerd import CRI_NAMESPACE, ContainerdClient, ContentStoreReader
from layersched.core.errors import InputError
from layersched.core.layers import StaticLayerSource
from layersched.cri import DEFAULT_ENDPOINT
from layersched.kube import KubeClient, load_config
from layersched.relay import (
    DEFAULT_CONFIG_INTERVAL_S,
    DEFAULT_CONFIG_NAMESPACE,
    DEFAULT_DUMP_BACKUPS,
    DEFAULT_DUMP_MAX_BYTES,
    DEFAULT_DUMP_MESSAGE_MAX_BYTES,
    Annotator,
    ConfigPoller,
    ContentStoreLayers,
    DumpFile,
    ImageLayers,
    KubeConfigSource,
    LayeredConfig,
    LayersByName,
    LiveSettings,
    Relay,
    RelayMetrics,
    RelayResources,
    options_for,
    parse_selectors,
    serve,
    warn_held_back,
)

#: Reading the ConfigMaps more often than this only loads the API server.
MIN_CONFIG_INTERVAL_S = 1.0
#: Where the relay listens unless told otherwise (next to containerd's socket).
DEFAULT_LISTEN = "/run/layersched/relay.sock"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``relay`` subcommand."""
    p = sub.add_parser(
        "relay",
        help="CRI proxy between kubelet and its runtime: dump, pull telemetry, layer annotations",
        description=(
            "Listen on a unix socket (--listen) and forward every CRI call (runtime.v1alpha2 "
            "and runtime.v1, and any method it does not know) to the runtime (--runtime). "
            "Point the kubelet's --container-runtime-endpoint and --image-service-endpoint "
            "at --listen. See docs/relay.md."
        ),
    )
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="SOCKET", help="relay socket path")
    p.add_argument(
        "--runtime", default=DEFAULT_ENDPOINT, metavar="ENDPOINT", help="the runtime's CRI socket"
    )
    p.add_argument("--node-name", default="", metavar="NAME", help="node name for pull log lines")
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve /metrics and /healthz here (default: no HTTP server)",
    )
    dump = p.add_argument_group("dump")
    dump.add_argument(
        "--dump",
        default="",
        metavar="SELECTORS",
        help="which calls to dump: comma-separated LEVEL:GLOB or 'reset', LEVEL off|name|full, "
        "GLOB a method name with * and ? as wildcards (not a regular expression), last match "
        "wins (example: 'reset,name:*,full:PullImage')",
    )
    dump.add_argument(
        "--allow-sensitive-dumps",
        action="store_true",
        help="let calls that carry secrets (PullImage, CreateContainer, ContainerStatus, "
        "ExecSync, Exec, Attach, PortForward, and methods the relay does not know) be dumped "
        "in full; without it they are dumped at level name whatever --dump or a ConfigMap "
        "says. Credentials (registry auth, environment values, streaming URLs) are redacted "
        "even then",
    )
    dump.add_argument(
        "--dump-file",
        metavar="FILE",
        help="JSON-lines dump file, mode 0600 (needs --dump); missing directories are made 0700",
    )
    dump.add_argument(
        "--dump-max-bytes",
        type=int,
        default=DEFAULT_DUMP_MAX_BYTES,
        metavar="N",
        help="rotate the dump file at this size (default %(default)s)",
    )
    dump.add_argument(
        "--dump-backups",
        type=int,
        default=DEFAULT_DUMP_BACKUPS,
        metavar="N",
        help="rotated dump files kept (default %(default)s)",
    )
    dump.add_argument(
        "--dump-message-max-bytes",
        type=int,
        default=DEFAULT_DUMP_MESSAGE_MAX_BYTES,
        metavar="N",
        help="truncate a decoded message longer than this (default %(default)s)",
    )
    p.add_argument(
        "--log-pulls",
        action="store_true",
        help="log one line per PullImage: image, node, result, duration, size",
    )
    inject = p.add_argument_group("annotation injection (off unless a layer source is given)")
    inject.add_argument(
        "--inject-layers-from",
        metavar="FILE",
        help="add imageLayer.<digest> annotations from this layers JSON (image -> "
        '[{"digest", "size"}], as `layersched score --layers`)',
    )
    inject.add_argument(
        "--inject-layers-from-containerd",
        metavar="ADDRESS",
        help="add imageLayer.<digest> annotations from containerd's content store at this "
        "socket (e.g. /run/containerd/containerd.sock; the node's own manifests)",
    )
    inject.add_argument(
        "--inject-layers-from-crio-storage",
        metavar="DIR",
        help="add imageLayer.<digest> annotations from CRI-O's containers/storage at this "
        "root (e.g. /var/lib/containers/storage; its layers' compressed digests and sizes)",
    )
    inject.add_argument(
        "--containerd-namespace",
        default=CRI_NAMESPACE,
        help="containerd namespace of the CRI's images (default: %(default)s)",
    )
    config = p.add_argument_group(
        "layered configuration from ConfigMaps (docs/relay.md; the flags above are the fallback)"
    )
    config.add_argument(
        "--config-from-configmaps",
        action="store_true",
        help="apply layersched-config.node.<NODE>, else .group.<GROUP>, else .default "
        "(needs --node-name)",
    )
    config.add_argument(
        "--config-namespace",
        default=DEFAULT_CONFIG_NAMESPACE,
        help="namespace of those ConfigMaps (default %(default)s)",
    )
    config.add_argument(
        "--config-interval-s",
        type=float,
        default=DEFAULT_CONFIG_INTERVAL_S,
        help="how often they are read again (default %(default)s)",
    )
    config.add_argument(
        "--kubeconfig", metavar="FILE", help="API credentials (default: in-cluster service account)"
    )
    p.set_defaults(handler=run)


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"--metrics-address {text!r}: expected HOST:PORT (example 127.0.0.1:9465)")
    return host, int(port)


#: The layer sources of annotation injection: one at most.
_LAYER_SOURCES = (
    "inject_layers_from",
    "inject_layers_from_containerd",
    "inject_layers_from_crio_storage",
)


def _layers(args: argparse.Namespace) -> ImageLayers | None:
    given = [f"--{name.replace('_', '-')}" for name in _LAYER_SOURCES if getattr(args, name)]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)}: choose one layer source")
    if args.inject_layers_from_crio_storage:
        return ContentStoreLayers(CrioStorageReader(Path(args.inject_layers_from_crio_storage)))
    if args.inject_layers_from_containerd:
        client = ContainerdClient(args.inject_layers_from_containerd, args.containerd_namespace)
        return ContentStoreLayers(ContentStoreReader(client))
    if args.inject_layers_from:
        path = args.inject_layers_from
        return LayersByName(StaticLayerSource.from_json(read_document(path), path))
    return None


def build_relay(args: argparse.Namespace) -> tuple[Relay, RelayResources, LiveSettings]:
    """The relay the arguments describe (not started), what it can switch on, and the
    settings the flags give."""
    metrics = RelayMetrics()
    selector = parse_selectors(args.dump)
    if selector.enabled and not args.dump_file:
        raise InputError("--dump needs --dump-file FILE (where the JSON lines go)")
    if args.dump_file and not selector.enabled and not args.config_from_configmaps:
        raise InputError("--dump-file without --dump: add e.g. --dump 'name:*'")
    dump_file = None
    if args.dump_file:
        dump_file = DumpFile(Path(args.dump_file), args.dump_max_bytes, args.dump_backups)
    source = _layers(args)
    resources = RelayResources(
        dump_file=dump_file,
        annotator=Annotator(source, metrics) if source is not None else None,
        node_name=args.node_name,
        dump_message_max_bytes=args.dump_message_max_bytes,
        allow_sensitive_dumps=args.allow_sensitive_dumps,
    )
    settings = LiveSettings(selector, args.log_pulls, inject_layers=source is not None)
    warn_held_back(settings, resources.capabilities)
    relay = Relay(Path(args.listen), args.runtime, options_for(settings, resources), metrics)
    return relay, resources, settings


def _config_poller(
    args: argparse.Namespace, relay: Relay, resources: RelayResources, flags: LiveSettings
) -> ConfigPoller:
    if not args.node_name:
        raise InputError("--config-from-configmaps needs --node-name (the ConfigMaps name it)")
    if args.config_interval_s < MIN_CONFIG_INTERVAL_S:
        raise InputError(f"--config-interval-s: use at least {MIN_CONFIG_INTERVAL_S:g}")
    client = KubeClient(load_config(args.kubeconfig))

    def apply(settings: LiveSettings) -> None:
        relay.options = options_for(settings, resources)

    config = LayeredConfig(
        KubeConfigSource(client, args.node_name),
        args.node_name,
        args.config_namespace,
        flags,
        resources.capabilities,
        apply,
    )
    return ConfigPoller(config, args.config_interval_s)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT."""
    metrics_address = _address(args.metrics_address) if args.metrics_address else None
    relay, resources, flags = build_relay(args)
    poller = _config_poller(args, relay, resources, flags) if args.config_from_configmaps else None

    def ready(endpoint: str) -> None:
        print(f"layersched relay: {endpoint} -> {relay.runtime}", file=sys.stderr, flush=True)

    if poller is not None:
        # one line per ConfigMap read (3 every interval) would drown the relay's own log
        logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.root.level))
        poller.start()
    try:
        asyncio.run(serve(relay, metrics_address, ready))
    finally:
        if poller is not None:
            poller.stop()
        if resources.dump_file is not None:
            resources.dump_file.close()
    return 0
