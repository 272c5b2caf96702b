"""``layersched inventory``: the live layer inventory's objects.

* ``manifests``: the CRD and the least-privilege RBAC of the agent and the extender, as
  YAML for ``kubectl apply -f -``;
* ``show``: every node's published NodeLayerInventory, one line each (images, distinct
  layers, their bytes, the object's size, its source and age).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

import yaml

from layersched.core.errors import InputError
from layersched.core.nodelayers import parse_document
from layersched.kube import (
    NODE_LAYERS_PATH,
    KubeClient,
    load_config,
    node_layers_crd,
    parse_subject,
    rbac_objects,
)

DEFAULT_AGENT_SUBJECT = "ServiceAccount:layersched-system/layersched-agent"
DEFAULT_EXTENDER_SUBJECT = "ServiceAccount:layersched-system/layersched-extender"
MIB = 1024 * 1024


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
    m.add_argument("--no-crd", action="store_true", help="RBAC only")
    m.set_defaults(handler=run_manifests)
    s = verbs.add_parser("show", help="one line per node's NodeLayerInventory")
    s.add_argument("--kubeconfig", metavar="FILE", help="API credentials (default: in-cluster)")
    s.add_argument("--json", action="store_true", help="JSON instead of a table")
    s.set_defaults(handler=run_show)


def run_manifests(args: argparse.Namespace) -> int:
    agents = [parse_subject(s) for s in args.agent_subject or [DEFAULT_AGENT_SUBJECT]]
    extenders = [parse_subject(s) for s in args.extender_subject or [DEFAULT_EXTENDER_SUBJECT]]
    objects = ([] if args.no_crd else [node_layers_crd()]) + rbac_objects(agents, extenders)
    print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    return 0


def _age(observed_at: str, now: datetime) -> str:
    try:
        moment = datetime.strptime(observed_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "?"
    return f"{(now - moment).total_seconds():.0f}s"


def run_show(args: argparse.Namespace) -> int:
    with KubeClient(load_config(args.kubeconfig)) as kube:
        items, _ = kube.list(NODE_LAYERS_PATH)
    rows = []
    now = datetime.now(UTC)
    for item in items:
        try:
            parsed = parse_document(item, "the API")
        except InputError as err:
            rows.append({"node": item.get("metadata", {}).get("name", "?"), "error": str(err)})
            continue
        layers = {layer.digest: layer.size_bytes for i in parsed.images for layer in i.layers}
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
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'NODE':<24} {'IMAGES':>6} {'LAYERS':>6} {'LAYER MiB':>9} {'OBJ KiB':>8}  SOURCE  AGE")
    for row in rows:
        if "error" in row:
            print(f"{row['node']:<24} malformed: {row['error']}")
            continue
        print(
            f"{row['node']:<24} {row['images']:>6} {row['layers']:>6} "
            f"{row['layer_bytes'] / MIB:>9.1f} {row['object_bytes'] / 1024:>8.1f}  "
            f"{row['source']}{' (truncated)' if row['truncated'] else ''}  {row['age']}"
        )
    return 0
