"""``layersched agent``: a node's images and layers, for the scheduler.

Two modes:

* ``--publish``: the node agent proper. It reads the node's layers from the runtime
  (containerd's content store, or CRI-O's storage), and applies the node's
  ``NodeLayerInventory`` to the API whenever they change (docs/inventory.md).
* otherwise: print (or write) the v1 Node object a kubelet would publish, with
  ``status.images`` as kubelet builds it (an offline input for ``score``/``extender``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layersched.agent import DEFAULT_MAX_IMAGES, build_node
from layersched.cli._agent_publish import add_publish_options, run_publish
from layersched.core.errors import InputError
from layersched.cri import DEFAULT_ENDPOINT, DEFAULT_TIMEOUT_S, CRIClient

#: kubelet refreshes its image list about every 30 s; the agent does the same.
DEFAULT_INTERVAL_S = 30.0
#: Smallest refresh period accepted, so a typo cannot turn the agent into a busy loop.
MIN_INTERVAL_S = 0.1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``agent`` subcommand."""
    p = sub.add_parser(
        "agent",
        help="publish a node's layers to the API (--publish), or print its v1 Node",
        description=(
            "With --publish: read the node's layers from the runtime (--containerd's "
            "content store or --crio-storage) and apply its NodeLayerInventory to the API "
            "whenever they change. Without: read the images of the CRI runtime at --cri and "
            "print (or write to --output) the v1 Node object a kubelet would publish: "
            "status.images with digests then tags (at most 5 names), largest first, capped "
            "at --max-images."
        ),
    )
    p.add_argument(
        "--cri",
        default=None,
        metavar="ENDPOINT",
        help=f"CRI socket (default {DEFAULT_ENDPOINT}; with --publish, read only when given: "
        "images the runtime's own store does not explain, by annotations or the registry)",
    )
    p.add_argument("--node-name", required=True, metavar="NAME")
    p.add_argument(
        "--max-images",
        type=int,
        default=DEFAULT_MAX_IMAGES,
        metavar="N",
        help=f"kubelet's nodeStatusMaxImages (default {DEFAULT_MAX_IMAGES}; -1 = no cap)",
    )
    p.add_argument(
        "--allocatable",
        default="",
        metavar="cpu=2,memory=4Gi",
        help="allocatable (and capacity) resources, comma-separated NAME=QUANTITY",
    )
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra node label (repeatable)",
    )
    p.add_argument("--output", metavar="FILE", help="write the Node JSON here (atomically)")
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="CRI call deadline")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="publish once and exit")
    when.add_argument(
        "--interval-s",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"refresh period when running continuously (default {DEFAULT_INTERVAL_S:g})",
    )
    add_publish_options(p)
    p.set_defaults(handler=run)


def parse_pairs(text: str, what: str, example: str) -> dict[str, str]:
    """``a=1,b=2`` (or a list of ``a=1`` items) as a dict, with a helpful error."""
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(f"{what}: {item!r} is not NAME=VALUE (example: {example})")
        pairs[key.strip()] = value.strip()
    return pairs


def _labels(items: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        labels.update(parse_pairs(item, "--label", "--label topology.kubernetes.io/zone=edge-1"))
    return labels


def _write(document: dict[str, Any], output: str | None) -> None:
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if output is None:
        print(text, end="", flush=True)
        return
    path = Path(output)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as err:
        raise InputError(
            f"writing the Node JSON to {output}: {err.strerror}: check the directory exists "
            "and is writable"
        ) from err


def run(args: argparse.Namespace) -> int:
    """Publish once, or every ``--interval-s`` until interrupted."""
    if args.publish:
        return run_publish(args)
    allocatable = parse_pairs(args.allocatable, "--allocatable", "cpu=2,memory=4Gi")
    labels = _labels(args.label)
    if not args.once and args.interval_s < MIN_INTERVAL_S:
        raise InputError(f"--interval-s {args.interval_s:g} is too small: use >= {MIN_INTERVAL_S}")
    with CRIClient(args.cri or DEFAULT_ENDPOINT, timeout_s=args.timeout_s) as client:
        while True:
            node = build_node(
                args.node_name,
                client.list_images(),
                allocatable,
                labels=labels,
                max_images=args.max_images,
            )
            _write(node, args.output)
            if args.once:
                return 0
            time.sleep(args.interval_s)
