"""``layersched inventory``: the live layer inventory's objects.

* ``manifests``: the CRD and the least-privilege RBAC of the agent and the extender, as
  YAML for ``kubectl apply -f -`` (``-o json``: a List);
* ``show``: every node's published NodeLayerInventory, one line each (images, distinct
  layers, their bytes, the object's size, its source and age; ``-o json|yaml|wide``).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

import yaml

from layersched.cli._kube import add_cluster_options, open_client
from layersched.cli._output import JSON, WIDE, YAML, add_output_option, is_document, print_document
from layersched.cli._tables import console, size, table, table_width
from layersched.core.errors import InputError
from layersched.core.nodelayers import parse_document
from layersched.kube import (
    NODE_LAYERS_PATH,
    node_layers_crd,
    parse_subject,
    rbac_objects,
)

DEFAULT_AGENT_SUBJECT = "ServiceAccount:layersched-system/layersched-agent"
DEFAULT_EXTENDER_SUBJECT = "ServiceAccount:layersched-system/layersched-extender"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``inventory`` subcommand."""
    p = sub.add_parser(
        "inventory",
        help="the live layer inventory: CRD/RBAC manifests, and what the agents published",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    m = verbs.add_parser("manifests", help="print the CRD and RBAC as YAML (kubectl apply -f -)")
    m.add_argument(
        "--agent-subject",
        action="append",
        metavar="KIND:NAME",
        help=f"who runs the agent (repeatable; default {DEFAULT_AGENT_SUBJECT})",
    )
    m.add_argument(
        "--extender-subject",
        action="append",
        metavar="KIND:NAME",
        help=f"who runs the extender (repeatable; default {DEFAULT_EXTENDER_SUBJECT})",
    )
    m.add_argument(
        "--in-flight",
        action="store_true",
        help="the extender subjects may also list and watch pods (an extender that scores "
        "in flight, --strategy in-flight)",
    )
    m.add_argument("--no-crd", action="store_true", help="RBAC only")
    add_output_option(m, outputs=(YAML, JSON))
    m.set_defaults(handler=run_manifests)
    s = verbs.add_parser("show", help="one line per node's NodeLayerInventory")
    add_cluster_options(
        s, namespace_help="accepted for kubectl's sake and unused: the objects are cluster-scoped"
    )
    add_output_option(s, old="--json")
    s.set_defaults(handler=run_show)


def run_manifests(args: argparse.Namespace) -> int:
    agents = [parse_subject(s) for s in args.agent_subject or [DEFAULT_AGENT_SUBJECT]]
    extenders = [parse_subject(s) for s in args.extender_subject or [DEFAULT_EXTENDER_SUBJECT]]
    rbac = rbac_objects(agents, extenders, in_flight=args.in_flight)
    objects = ([] if args.no_crd else [node_layers_crd()]) + rbac
    if args.output == JSON:
        print_document({"apiVersion": "v1", "kind": "List", "items": objects}, JSON)
    else:
        print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    return 0


def _age(observed_at: str, now: datetime) -> str:
    try:
        moment = datetime.strptime(observed_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "?"
    return f"{(now - moment).total_seconds():.0f}s"


def run_show(args: argparse.Namespace) -> int:
    with open_client(args) as kube:
        items, _ = kube.list(NODE_LAYERS_PATH)
    rows = []
    now = datetime.now(UTC)
    for item in items:
        try:
            parsed = parse_document(item, "the API")
        except InputError as err:
            rows.append({"node": item.get("metadata", {}).get("name", "?"), "error": str(err)})
            continue
        layers = {layer.digest: layer.size_bytes for i in parsed.images for layer in i.known_layers}
        rows.append(
            {
                "node": parsed.node,
                "images": len(parsed.images),
                "layers": len(layers),
                "layer_bytes": sum(layers.values()),
                "object_bytes": len(json.dumps(item, separators=(",", ":")).encode()),
                "source": parsed.source,
                "truncated": parsed.truncated,
                "age": _age(parsed.observed_at, now),
            }
        )
    if is_document(args.output):
        print_document(rows, args.output)
        return 0
    headers = ("node", "images", "layers", "layer bytes", "object bytes", "source", "age")
    cells = [
        (
            row["node"],
            str(row["images"]),
            str(row["layers"]),
            size(row["layer_bytes"]),
            size(row["object_bytes"]),
            f"{row['source']}{' (truncated)' if row['truncated'] else ''}",
            row["age"],
        )
        if "error" not in row
        else (row["node"], "-", "-", "-", "-", f"malformed: {row['error']}", "-")
        for row in rows
    ]
    out = console(wide=args.output == WIDE)
    width = table_width(out, args.output)
    title = "NodeLayerInventory objects"
    out.print(table(title, headers, cells, width, shrink=(0, 5), left=(0, 5), drop=(4, 2, 6)))
    return 0
