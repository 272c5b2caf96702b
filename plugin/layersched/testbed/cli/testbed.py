"""``layersched testbed``: bring the local testbed up/down, check it, build its images.

``images`` pushes the scenario images to the registry; ``pause-image`` writes
the sandbox image as an OCI archive for ``ctr images import`` on each node; ``overlay``
builds and pushes the install's images to the testbed's registry and writes the testbed's
overlay of ``deploy/`` (docs/deploy.md); ``agent-tokens`` issues and refreshes the host
agents' node-bound tokens (the kubelet's part for a pod: docs/testbed-local.md).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from rich.console import Console

from layersched.cli._tables import size, table, terminal_width
from layersched.cli.deploy import add_image_options as add_push_options
from layersched.cli.deploy import print_install, print_pushed, push_images
from layersched.core.errors import InputError
from layersched.core.manifest import DEFAULT_PLATFORM, Platform
from layersched.core.quantity import parse_quantity
from layersched.kube import KubeClient, load_kubeconfig
from layersched.testbed.deploy_stack import write_local_overlay
from layersched.testbed.local import (
    DEFAULT_NET_BASE,
    DEFAULT_NODE_COUNT,
    DEFAULT_PREFIX,
    DEFAULT_RATE_BITS_PER_S,
    NET_BASE_ENV,
    PREFIX_ENV,
    STATE_DIR_ENV,
    TestbedInventory,
    TestbedSettings,
    default_net_base,
    default_prefix,
    default_state_dir,
    down,
    load_inventory,
    probe,
    up,
)
from layersched.testbed.local._agent_tokens import (
    DEFAULT_EXPIRATION_S,
    AgentTokens,
    parse_node_tokens,
)
from layersched.testbed.pause_image import DEFAULT_PAUSE_IMAGE, write_pause_archive
from layersched.testbed.scenario_images import DEFAULT_SPEC_PATH, build_and_push_scenario, load_spec

#: The CLI takes link rates in Mbit/s (decimal, as tc and link vendors count).
BITS_PER_MBIT = 1_000_000
EXIT_OK = 0
EXIT_UNHEALTHY = 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``testbed`` subcommand and its actions."""
    p = sub.add_parser(
        "testbed",
        help="the local testbed: real registry + containerd nodes in network namespaces",
        description=(
            "Provision (Ansible), inspect and tear down the Docker-free local testbed, and "
            "push the seed scenario's images to its registry. Needs root on Linux."
        ),
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    state_help = f"state dir (default ${STATE_DIR_ENV} or .testbed/ at the repository root)"

    p_up = actions.add_parser("up", help="bring the testbed up (idempotent)")
    p_up.add_argument("--state-dir", type=Path, help=state_help)
    p_up.add_argument("--nodes", type=int, default=DEFAULT_NODE_COUNT, help="number of nodes")
    p_up.add_argument(
        "--rate-mbit",
        type=float,
        default=DEFAULT_RATE_BITS_PER_S / BITS_PER_MBIT,
        help="registry-to-node link rate of every node, Mbit/s",
    )
    p_up.add_argument(
        "--node-rate",
        action="append",
        default=[],
        metavar="NODE=MBIT",
        help="per-node link rate, Mbit/s (repeatable), e.g. n3=5",
    )
    p_up.add_argument(
        "--prefix",
        default=default_prefix(),
        help=f"name prefix of the netns and links (default ${PREFIX_ENV} or {DEFAULT_PREFIX})",
    )
    p_up.add_argument(
        "--net-base",
        default=default_net_base(),
        help=f"first three octets of the testbed /24 (default ${NET_BASE_ENV} or "
        f"{DEFAULT_NET_BASE})",
    )
    p_up.set_defaults(handler=run_up)

    p_down = actions.add_parser("down", help="remove everything the testbed made (safe twice)")
    p_down.add_argument("--state-dir", type=Path, help=state_help)
    p_down.add_argument(
        "--prefix",
        help="netns/link name prefix, used only when the state dir has no record of it "
        "(default: lstb for the default state dir, else leave the network alone)",
    )
    p_down.set_defaults(handler=run_down)

    p_status = actions.add_parser("status", help="is every daemon alive and answering?")
    p_status.add_argument("--state-dir", type=Path, help=state_help)
    p_status.add_argument("--format", choices=("table", "json"), default="table")
    p_status.set_defaults(handler=run_status)

    p_images = actions.add_parser("images", help="build and push the scenario images")
    p_images.add_argument("--state-dir", type=Path, help=state_help)
    p_images.add_argument(
        "--registry", metavar="HOST:PORT", help="push here instead of the testbed's registry"
    )
    add_image_options(p_images)
    p_images.add_argument("--format", choices=("table", "json"), default="table")
    p_images.set_defaults(handler=run_images)

    p_overlay = actions.add_parser(
        "overlay",
        help="push the install's images to the testbed's registry and write its deploy/ overlay",
        description=(
            "Build the layersched and kube-scheduler images (no Docker), push them to the "
            "testbed's registry, and write an overlay of deploy/ with the testbed's patches "
            "(host network, its API server and runtime sockets): kubectl apply -k DIR."
        ),
    )
    p_overlay.add_argument("--state-dir", type=Path, help=state_help)
    p_overlay.add_argument("--out", type=Path, required=True, help="the overlay's directory")
    add_push_options(p_overlay)
    p_overlay.set_defaults(handler=run_overlay)

    p_pause = actions.add_parser(
        "pause-image",
        help="write the pod sandbox (pause) image as an OCI archive for `ctr images import`",
        description=(
            "Wrap a static pause binary in a reproducible one-layer image (/pause, its "
            "entrypoint) and write it as an OCI archive; `ctr -n k8s.io images import TAR` "
            "then lists it as exactly NAME. Prints 'unchanged' when TAR already held it."
        ),
    )
    p_pause.add_argument(
        "--binary", type=Path, required=True, help="static pause binary (gcc -static pause.c)"
    )
    p_pause.add_argument(
        "--name", default=DEFAULT_PAUSE_IMAGE, help="full image name (default: %(default)s)"
    )
    p_pause.add_argument("--output", type=Path, required=True, metavar="TAR", help="archive path")
    p_pause.add_argument(
        "--platform",
        type=_platform,
        default=DEFAULT_PLATFORM,
        help="os/architecture of the binary (default: linux/amd64)",
    )
    p_pause.set_defaults(handler=run_pause_image)

    p_tokens = actions.add_parser(
        "agent-tokens",
        help="issue the host agents' tokens bound to their Nodes, and refresh them",
        description=(
            "For each --token NODE=FILE, keep FILE holding a token of the agents' service "
            "account bound to Node NODE (TokenRequest, boundObjectRef kind Node), replaced at "
            "80%% of its life, as a kubelet does for a pod's projected token. With --once, "
            "issue what is missing or due and print what changed (JSON), else run until "
            "SIGTERM."
        ),
    )
    p_tokens.add_argument(
        "--kubeconfig", required=True, help="an identity that may create the account's tokens"
    )
    p_tokens.add_argument("--namespace", required=True, help="the agents' service account's")
    p_tokens.add_argument("--service-account", required=True, help="the agents' account")
    p_tokens.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="NODE=FILE",
        help="a node and where its agent reads its token (repeatable)",
    )
    p_tokens.add_argument(
        "--expiration-s",
        type=int,
        default=DEFAULT_EXPIRATION_S,
        help="each token's life (default: %(default)s; the API's minimum is 600)",
    )
    p_tokens.add_argument("--once", action="store_true", help="issue what is due, then exit")
    p_tokens.set_defaults(handler=run_agent_tokens)


def add_image_options(p: argparse.ArgumentParser) -> None:
    """``--spec`` and ``--size``: which scenario images to build (testbed images, scenario)."""
    p.add_argument("--spec", type=Path, default=DEFAULT_SPEC_PATH, help="scenario spec")
    p.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="LAYER=QUANTITY",
        help="override a layer's content size (repeatable), e.g. L1=8Mi",
    )


def _pairs(items: Sequence[str], option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"{option} {item!r}: expected NAME=VALUE")
        pairs[key] = value
    return pairs


def layer_sizes(items: Sequence[str]) -> dict[str, int]:
    """``--size LAYER=QUANTITY`` options as content sizes in bytes, by layer label."""
    return {
        label: int(parse_quantity(text, f"--size {label}"))
        for label, text in _pairs(items, "--size").items()
    }


def _platform(text: str) -> Platform:
    try:
        return Platform.parse(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _mbit_to_bits(text: str, where: str) -> int:
    try:
        mbit = float(text)
    except ValueError:
        raise InputError(f"{where}: {text!r} is not a number of Mbit/s") from None
    if mbit <= 0:
        raise InputError(f"{where}: link rate must be positive, got {text}")
    return round(mbit * BITS_PER_MBIT)


def run_up(args: argparse.Namespace) -> int:
    """Provision the testbed and print what is there."""
    settings = TestbedSettings(
        state_dir=args.state_dir or default_state_dir(),
        node_count=args.nodes,
        rate_bits_per_s=_mbit_to_bits(str(args.rate_mbit), "--rate-mbit"),
        node_rate_bits_per_s={
            node: _mbit_to_bits(mbit, f"--node-rate {node}")
            for node, mbit in _pairs(args.node_rate, "--node-rate").items()
        },
        prefix=args.prefix,
        net_base=args.net_base,
    )
    console = Console(width=terminal_width())
    result = up(settings, console=Console(stderr=True))
    _print_inventory(console, load_inventory(settings.state_dir))
    console.print(
        f"testbed up: {result.changed} change(s); ansible log {result.log_path}; "
        "tear down with `make testbed-down`"
    )
    return EXIT_OK


def run_down(args: argparse.Namespace) -> int:
    """Tear the testbed down."""
    result = down(args.state_dir, args.prefix, console=Console(stderr=True))
    Console().print(f"testbed down: {result.changed} change(s); ansible log {result.log_path}")
    return EXIT_OK


def _print_inventory(console: Console, inventory: TestbedInventory) -> None:
    registry = inventory.registry
    console.print(f"registry {registry.url} (access log {registry.access_log})")
    cluster = inventory.cluster
    console.print(
        f"Kubernetes {cluster.kubernetes_version} at {cluster.api_server}: "
        f"{cluster.kubectl} --kubeconfig {cluster.kubeconfig} get nodes,pods -A"
    )
    state = f"{inventory.state_dir}/"
    rows = [
        (
            node.name,
            node.address,
            node.netns,
            f"{node.link_rate_bits_per_s / BITS_PER_MBIT:g}",
            node.cri_endpoint.removeprefix("unix://").removeprefix(state),
        )
        for node in inventory.nodes
    ]
    headers = ("node", "address", "netns", "Mbit/s", "CRI socket (in the state dir)")
    title = f"local testbed nodes (state dir {inventory.state_dir})"
    console.print(table(title, headers, rows, console.width, shrink=(4,), left=(0, 1, 2, 4)))


def run_status(args: argparse.Namespace) -> int:
    """Probe every daemon; exit 1 when any is down."""
    inventory = load_inventory(args.state_dir)
    status = probe(inventory)
    if args.format == "json":
        doc = {
            "healthy": status.healthy,
            "registry": {
                "pid": status.registry.pid,
                "answers": status.registry.answers,
                "detail": status.registry.detail,
            },
            "nodes": {
                n.daemon.name: {
                    "pid": n.daemon.pid,
                    "answers": n.daemon.answers,
                    "detail": n.daemon.detail,
                    "tbf_rate_bits_per_s": n.tbf_rate_bits_per_s,
                    "tx_bytes": n.tx_bytes,
                }
                for n in status.nodes
            },
            "cluster": {
                c.status.name: {
                    "pid": c.status.pid,
                    "answers": c.status.answers,
                    "version": c.version,
                    "detail": c.status.detail,
                }
                for c in (*status.control_plane, *status.kubelets, *status.agents)
            },
        }
        print(json.dumps(doc))
        return EXIT_OK if status.healthy else EXIT_UNHEALTHY
    reg = status.registry
    rows = [("registry", "", str(reg.pid or "-"), _yes(reg.answers), "", "", reg.detail)]
    for node in status.nodes:
        rate = node.tbf_rate_bits_per_s
        rows.append(
            (
                f"containerd {node.daemon.name}",
                "",
                str(node.daemon.pid or "-"),
                _yes(node.daemon.answers),
                "missing" if rate is None else f"{rate / BITS_PER_MBIT:g}",
                "-" if node.tx_bytes is None else size(node.tx_bytes),
                node.daemon.detail,
            )
        )
    for component in (*status.control_plane, *status.kubelets, *status.agents):
        c = component.status
        rows.append(
            (c.name, component.version, str(c.pid or "-"), _yes(c.answers), "", "", c.detail)
        )
    console = Console(width=terminal_width())
    headers = ("component", "version", "pid", "up", "Mbit/s", "sent", "detail")
    title = f"local testbed status (state dir {inventory.state_dir})"
    console.print(table(title, headers, rows, console.width, shrink=(0, 6), left=(0, 1, 3, 6)))
    console.print("healthy" if status.healthy else "[red]unhealthy[/red]")
    return EXIT_OK if status.healthy else EXIT_UNHEALTHY


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def run_images(args: argparse.Namespace) -> int:
    """Build Img1/Img2 and push them; print their references and layers."""
    registry = args.registry or load_inventory(args.state_dir).registry.host
    sizes = layer_sizes(args.size)
    images = build_and_push_scenario(
        registry, sizes, spec=load_spec(args.spec), console=Console(stderr=True)
    )
    if args.format == "json":
        doc = {
            "images": {"Img1": images.img1, "Img2": images.img2},
            "layers": {
                label: {"digest": digest, "size": size}
                for label, (digest, size) in sorted(images.layers.items())
            },
        }
        print(json.dumps(doc))
        return EXIT_OK
    console = Console(width=terminal_width())
    console.print(f"Img1 = {images.img1}\nImg2 = {images.img2}")
    rows = [(label, digest, size(blob)) for label, (digest, blob) in sorted(images.layers.items())]
    headers = ("layer", "digest (full: --format json)", "blob size")
    console.print(table("scenario layers", headers, rows, console.width, shrink=(1,), left=(0, 1)))
    return EXIT_OK


def run_pause_image(args: argparse.Namespace) -> int:
    """Write the pause image archive; one line says what happened (Ansible reads it)."""
    result = write_pause_archive(args.binary, args.name, args.output, args.platform)
    state = "written" if result.changed else "unchanged"
    print(f"{result.name} {result.image.digest} {result.path} {state}")
    return EXIT_OK


def run_agent_tokens(args: argparse.Namespace) -> int:
    """Issue (``--once``) or keep issuing the agents' node-bound tokens."""
    tokens = parse_node_tokens(args.token)
    with KubeClient(load_kubeconfig(args.kubeconfig)) as kube:
        issuer = AgentTokens(
            kube, args.namespace, args.service_account, tokens, expiration_s=args.expiration_s
        )
        if args.once:
            refreshed = issuer.refresh()
            print(json.dumps({"changed": bool(refreshed), "refreshed": refreshed}))
            return EXIT_OK
        stopped = threading.Event()

        def stop(_signum: int, _frame: FrameType | None) -> None:
            stopped.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        issuer.run(stopped)
    return EXIT_OK


def run_overlay(args: argparse.Namespace) -> int:
    """Push the install's images to the testbed's registry; write its deploy/ overlay."""
    inventory = load_inventory(args.state_dir)
    pushed = push_images(args, f"{inventory.registry.address}:{inventory.registry.port}")
    write_local_overlay(args.out, inventory, pushed)
    print_pushed(args, pushed)
    print_install(args.out)
    return EXIT_OK
